"""Fixtures for the distributed runner: a real redis-server and real Celery worker subprocesses.

Nothing here mocks Redis or Celery. Every redis-server and worker started here is killed
(SIGKILL of its whole process group) at teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.workers.procs import children_of, free_port

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cli.py"

HAVE_REDIS = shutil.which("redis-server") is not None
NO_REDIS = ("redis-server is not installed (apt-get install redis-server; .ci/run does): the distributed "
            "runner tests need a real one")


def skip_redis_tests_without_redis(items, here: Path) -> None:
    """Without a redis-server binary, skip the tests under ``here`` that need one, saying why (-rs
    shows it)."""
    if HAVE_REDIS:
        return
    for item in items:
        needs = {"redis_server", "redis_url", "own_redis", "start_worker"} & set(getattr(item, "fixturenames", ()))
        if here in Path(str(item.fspath)).parents and needs:
            item.add_marker(pytest.mark.skip(reason=NO_REDIS))


def pytest_collection_modifyitems(config, items):
    skip_redis_tests_without_redis(items, Path(__file__).parent)


class RedisServer:
    """A throwaway redis-server without persistence; kill/restart it to test broker loss."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart, on the same port) and wait until this server answers. A first start
        whose port another process took since free_port() chose it (another pytest-xdist process's
        server, say) starts again on another port; a restart keeps its port, which workers know."""
        for _ in range(1 if self.started else 5):
            log = open(self.dir / "redis.log", "ab")
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                 "no", "--dir", str(self.dir)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            if self.wait_up():
                self.started = True
                return
            if not self.started:
                self.port = free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}: "
                           f"{(self.dir / 'redis.log').read_text()[-2000:]}")

    def wait_up(self, timeout: float = 10) -> bool:
        """True once the server answering on the port is this one's process (its INFO names its pid);
        False if the process exited first (the port was taken: the answer came from someone else's)."""
        import redis

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                return False
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.5).info("server")["process_id"] == self.proc.pid:
                    return True
            except redis.exceptions.RedisError:  # not up yet (or someone else's, with a password)
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start: "
                                   f"{(self.dir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: everything in memory is lost (no persistence)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def shutdown_saving(self) -> None:
        """Stop after writing dump.rdb, so the next start loads the same data."""
        import redis

        try:
            redis.Redis(port=self.port).shutdown(save=True)
        except redis.exceptions.ConnectionError:
            pass
        if self.proc:
            self.proc.wait(timeout=10)

    def client(self):
        import redis

        return redis.Redis(port=self.port)


class WorkerProc:
    """``python cli.py worker`` in its own process group (so the whole node can be SIGKILLed)."""

    def __init__(self, name: str, url: str, logdir: Path, env: dict | None = None, args: list[str] | None = None,
                 lease_s: float = 3.0, engine: str = "fake") -> None:
        self.name = f"{name}@test"
        self.log = logdir / f"worker-{name}.log"
        cmd = [sys.executable, str(CLI), "worker", "--engine", engine, "--lease-seconds", str(lease_s),
               "--voice", "", "-n", self.name, "--redis-url", url, *(args or [])]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        full_env.pop("REDIS_URL", None)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> "WorkerProc":
        deadline = time.monotonic() + timeout
        while " ready." not in self.output():
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name} not ready after {timeout} s:\n{self.output()[-3000:]}")
            time.sleep(0.1)
        return self

    def children(self) -> list[int]:
        return children_of(self.pid)

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.kill()


@pytest.fixture
def redis_url(redis_server):
    """The shared server, emptied for this test."""
    if redis_server.proc.poll() is not None:
        redis_server.start()
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def own_redis(tmp_path):
    """A server of this test alone (for tests that kill or restart it)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def start_worker(tmp_path):
    """Factory: ``start_worker(url, name, env=..., args=..., lease_s=...)`` -> a ready WorkerProc."""
    started: list[WorkerProc] = []

    def start(url: str, name: str = "w1", ready: bool = True, **kw) -> WorkerProc:
        w = WorkerProc(name, url, tmp_path, **kw)
        started.append(w)
        return w.wait_ready() if ready else w

    yield start
    for w in started:
        w.kill_group()
