"""The distributed runner's command line against real redis-servers and real workers: Redis URLs with
passwords (in the query, with special characters, wrong), a worker started before Redis, and
``resume`` keeping the job's own queues."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from cli import main
from jobs.job import load_job
from tests.workers.conftest import CLI, RedisServer
from tests.workers.procs import free_port
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

#: A password with every character that breaks an unencoded URL: '#' starts a fragment, '/' a path.
PASSWORD = "Zq9#xK/7w"


def cli(*args, env=None):
    return CliRunner(env=env).invoke(main, [str(a) for a in args])


def one_error_line(res) -> str:
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def no_secret(text: str) -> None:
    for piece in (PASSWORD, "Zq9", "xK", "7w", quote(PASSWORD, safe="")):
        assert piece not in text, f"part of the password ({piece!r}) was shown:\n{text[-3000:]}"


@pytest.fixture
def locked_redis(tmp_path):
    """A redis-server of this test that requires PASSWORD."""
    import redis

    port = free_port()
    log = open(tmp_path / "redis-locked.log", "wb")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path), "--requirepass", PASSWORD],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(port=port, password=PASSWORD, socket_connect_timeout=0.5).ping()
            break
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError((tmp_path / "redis-locked.log").read_text()[-2000:])
            time.sleep(0.05)
    yield port
    proc.kill()
    proc.wait(timeout=10)


def test_password_in_the_query_works_and_is_never_shown(locked_redis, start_worker, short_book, tmp_path):
    """redis://host/0?password=P once printed P in the worker banner, then a kombu traceback."""
    url = f"redis://127.0.0.1:{locked_redis}/0?password={quote(PASSWORD, safe='')}"
    res = cli("status", env={"REDIS_URL": url})
    assert res.exit_code == 0 and "no jobs" in res.stdout, res.output
    w = start_worker(url, "qpw")  # ready: Celery connected with the password
    res = cli("submit", short_book, "-o", tmp_path / "out", "--max-batch", "4", "--wait", env={"REDIS_URL": url})
    assert res.exit_code == 0 and "done:" in res.stdout, res.output
    assert "redis://:***@127.0.0.1" in w.output()
    no_secret(w.output() + res.output)


@pytest.mark.parametrize("raw", [PASSWORD, "12#qz", "qz/vv", "qz?vv"], ids=["hash-and-slash", "digits-hash",
                                                                          "slash", "question-mark"])
def test_unencoded_special_characters_are_one_line_without_the_secret(locked_redis, raw):
    """An unencoded '#' or '/' in the password once gave a 42-line traceback quoting part of it."""
    url = f"redis://:{raw}@127.0.0.1:{locked_redis}/0"
    for args in (["status"], ["worker", "--engine", "fake", "--voice", ""]):
        res = cli(*args, "--redis-url", url)
        assert res.exit_code == 2, res.output
        line = one_error_line(res)
        assert "percent-encode" in line and "%23" in line and "%2F" in line
        for piece in raw.replace("#", " ").replace("/", " ").replace("?", " ").split():
            assert piece not in line.replace("%23", "").replace("%2F", "").replace("%3F", ""), line


def test_percent_encoded_password_with_special_characters_works(locked_redis):
    url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{locked_redis}/0"
    res = cli("status", "--redis-url", url)
    assert res.exit_code == 0 and "no jobs" in res.stdout, res.output


def test_wrong_or_missing_password_is_its_own_error(locked_redis, short_book, tmp_path):
    """A refused password is not 'cannot reach Redis ... start redis-server'."""
    wrong = f"redis://:not-it@127.0.0.1:{locked_redis}/0"
    for args in (["status"], ["submit", short_book, "-o", tmp_path / "o"],
                 ["worker", "--engine", "fake", "--voice", ""]):  # a worker does not wait for a refused password
        res = cli(*args, "--redis-url", wrong)
        assert res.exit_code == 5, res.output
        line = one_error_line(res)
        assert line.startswith(f"error: Redis at redis://:***@127.0.0.1:{locked_redis}/0 refused the password")
        assert "check REDIS_URL" in line and "cannot reach" not in line and "not-it" not in line
    res = cli("status", "--redis-url", f"redis://127.0.0.1:{locked_redis}/0")
    assert res.exit_code == 5 and "requires a password" in one_error_line(res)
    assert not (tmp_path / "o").exists()


def test_broker_errors_wrapping_a_refused_password_are_reported_as_such():
    """kombu wraps redis-py's errors (OperationalError): the command's error translation looks inside."""
    import redis
    from kombu.exceptions import OperationalError

    from commands.distributed import _broker_error

    try:
        try:
            raise redis.exceptions.AuthenticationError("invalid username-password pair or user is disabled.")
        except redis.exceptions.RedisError as inner:
            raise OperationalError(str(inner)) from inner
    except OperationalError as exc:
        err = _broker_error(exc, {"redis_url": "redis://:s3cret@127.0.0.1:1/0"})
    assert "refused the password" in str(err) and "s3cret" not in str(err) and "redis://:***@127.0.0.1:1/0" in str(err)


def test_worker_started_before_redis_waits_for_it(tmp_path, start_worker, short_book):
    """A worker started before Redis says once that it waits, then starts when Redis appears and runs a job."""
    server = RedisServer(tmp_path / "late-redis")  # a free port; nothing listens there yet
    url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
    w = start_worker(url, "early", ready=False)
    deadline = time.monotonic() + 60
    while "waiting for Redis at" not in w.output():
        assert w.proc.poll() is None, f"the worker exited:\n{w.output()[-3000:]}"
        assert time.monotonic() < deadline, w.output()[-3000:]
        time.sleep(0.1)
    time.sleep(2.5)  # a few retries
    assert w.proc.poll() is None, f"the worker gave up:\n{w.output()[-3000:]}"
    assert w.output().count("waiting for Redis at") == 1, "said once"
    assert f"waiting for Redis at redis://:***@127.0.0.1:{server.port}/0" in w.output()
    no_secret(w.output())
    server.proc = subprocess.Popen(
        ["redis-server", "--port", str(server.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(server.dir), "--requirepass", PASSWORD], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        w.wait_ready(timeout=60)
        res = cli("submit", short_book, "-o", tmp_path / "out", "--max-batch", "4", "--wait", "--redis-url", url)
        assert res.exit_code == 0 and "done:" in res.stdout, res.output
        no_secret(w.output())
    finally:
        server.kill()


def test_resume_keeps_the_queue_prefix_the_job_was_submitted_with(redis_url, start_worker, short_book, tmp_path):
    """`resume` once re-queued GPU work (--queue-prefix tts-gpu) on the CPU queues tts.*."""
    store = JobStore(redis_url)
    out = tmp_path / "gpu-job"
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--queue-prefix", "tts-gpu", "--redis-url",
              redis_url)
    assert res.exit_code == 0, res.output
    job_id = res.stdout.strip().splitlines()[0]
    n = store.get_job(job_id).batches
    assert store.get_job(job_id).queue == "tts-gpu.normal" and store.r.llen("tts-gpu.normal") == n
    # a new priority keeps the job's queue prefix
    res = cli("resume", job_id, "--priority", "high", "--redis-url", redis_url)
    assert res.exit_code == 0 and "queued on tts-gpu.high" in res.stdout, res.output
    assert store.r.llen("tts-gpu.high") == n and store.r.llen("tts.high") == 0
    # Redis lost everything: the job directory remembers its queue
    store.r.flushall()
    res = cli("resume", out, "--redis-url", redis_url)
    assert res.exit_code == 0 and "queued on tts-gpu.high" in res.stdout, res.output
    assert store.get_job(job_id).queue == "tts-gpu.high" and store.r.llen("tts-gpu.high") == n
    assert not any(store.r.llen(f"tts.{p}") for p in ("high", "normal", "low"))
    # --queue-prefix moves it
    res = cli("resume", job_id, "--queue-prefix", "tts-cpu", "--redis-url", redis_url)
    assert res.exit_code == 0 and "queued on tts-cpu.high" in res.stdout, res.output
    store.r.flushall()
    res = cli("resume", out, "--redis-url", redis_url)
    assert "queued on tts-cpu.high" in res.stdout, res.output
    # a worker of those queues alone finishes it
    start_worker(redis_url, "cpu-queues", args=["--queues", "tts-cpu.high,tts-cpu.normal,tts-cpu.low"])
    deadline = time.monotonic() + 60
    while (info := store.get_job(job_id)).status is not JobStatus.DONE:
        assert time.monotonic() < deadline, info
        time.sleep(0.1)
    assert load_job(out).finalized
