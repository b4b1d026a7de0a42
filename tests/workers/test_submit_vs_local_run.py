"""Issue 31: one output directory is synthesized by workers or by a local `cli.py run`, never by both.
A submit (or resume) leaves a mark on disk that a local run refuses (it may not reach Redis); a
submit or resume refuses a directory a live local run holds. Real redis-server, real `cli.py worker`
and `cli.py run` processes, fake engine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import claim as claims
from tests.test_cli import cli_proc, finish
from tests.workers.test_dir_claims import one_error_line
from tests.workers.test_distributed import cli, submit, wait_status
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
OPTS = ["--max-batch", "2"]


def local_run(book: Path, out: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BOOKTTS_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", str(book), "-o", str(out), "--engine", "fake",
                           *OPTS], capture_output=True, text=True, timeout=timeout, env=env)


def batch_files(out: Path) -> list[str]:
    d = out / ".work" / "batches"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_a_local_run_refuses_a_job_queued_on_workers_and_runs_it_once_they_are_done(redis_url, start_worker,
                                                                                      tmp_path, short_book):
    store = JobStore(redis_url)
    out = tmp_path / "D"
    job_id = submit(redis_url, short_book, out, *OPTS)  # no worker yet: queued
    assert store.get_job(job_id).status is JobStatus.QUEUED
    res = local_run(short_book, out)
    assert res.returncode == 4, res.stdout + res.stderr
    line = one_error_line(res)
    assert f"holds job {job_id}, which is queued on or being run by workers" in line
    assert f"cli.py cancel {job_id}" in line and str(claims.submit_mark_path(out)) in line
    assert batch_files(out) == [] and not (out / "manifest.parquet").exists()  # it synthesized nothing
    assert not claims.run_lock_path(out).exists()  # and let go of the run lock
    start_worker(redis_url, "w1")
    info = wait_status(store, job_id, timeout=120)
    assert info.status is JobStatus.DONE
    assert claims.submitted_to_workers(out) is None  # the workers' finalize took the mark away
    done = batch_files(out)
    res = local_run(short_book, out)
    assert res.returncode == 0, res.stderr
    assert "synthesized" not in res.stdout and batch_files(out) == done  # every batch was the workers'


def test_a_cancelled_job_may_be_run_locally(redis_url, tmp_path, short_book):
    out = tmp_path / "D"
    job_id = submit(redis_url, short_book, out, *OPTS)
    assert claims.submitted_to_workers(out)["job_id"] == job_id
    cli("cancel", job_id, "--redis-url", redis_url)
    assert claims.submitted_to_workers(out) is None
    res = local_run(short_book, out)
    assert res.returncode == 0, res.stderr
    assert (out / "manifest.parquet").exists()


def test_submit_and_resume_refuse_a_directory_a_local_run_is_synthesizing(redis_url, tmp_path, short_book):
    """A real local run (slowed down), not a lock file written by the test."""
    store = JobStore(redis_url)
    out = tmp_path / "D"
    proc = cli_proc("run", short_book, "-o", out, "--engine", "fake", *OPTS, env={"BOOKTTS_FAKE_DELAY_S": "0.3"})
    try:
        deadline = time.monotonic() + 60
        while not batch_files(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batch_files(out), "the local run wrote no batch"
        res = cli("submit", short_book, "-o", out, *OPTS, "--redis-url", redis_url, ok=False)
        assert res.exit_code == 4 and "being synthesized by another `cli.py run`" in one_error_line(res)
        res = cli("resume", out, "--redis-url", redis_url, ok=False)  # Redis does not know it: by directory
        assert res.exit_code == 4 and "being synthesized by another `cli.py run`" in one_error_line(res)
        assert store.r.dbsize() == 0
        assert claims.submitted_to_workers(out) is None  # neither left its mark behind
        assert proc.poll() is None
    finally:
        res = finish(proc, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (out / "manifest.parquet").exists()
