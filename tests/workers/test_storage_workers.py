"""Workers and the output filesystem: a full disk is retried (then the job completes once space is
freed), and a worker killed in the middle of a finalize leaves no temporary files behind once
another worker has finalized the job. Real redis-server, real `cli.py worker` processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from engines.fake import FakeEngine
from jobs.config import JobConfig
from core.errors import DiskFullError, StorageError
from core.files import TMP_NAME
from jobs.finalize import FINALIZE_DELAY_ENV
from jobs.prepare import prepare_job
from jobs.runner import run_local
from tests.smallfs import fill, small_tmpfs
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]


def submit(url: str, book: Path, out: Path, *opts: str) -> str:
    res = CliRunner().invoke(main, ["submit", str(book), "-o", str(out), "--redis-url", url, *opts])
    assert res.exit_code == 0, res.output
    return res.stdout.strip().splitlines()[0]


def wait_for(cond, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def rows(out: Path) -> list[tuple]:
    keys = ("book_index", "chapter_index", "utterance_index", "text", "chapter_path", "start_s", "duration_s")
    return [tuple(r[k] for k in keys) for r in pq.read_table(out / "manifest.parquet").to_pylist()]


def reference(book: Path, out: Path, voice, **config) -> list[tuple]:
    job = prepare_job([book], out, JobConfig(**config))
    run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
    return rows(out)


def temp_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if TMP_NAME.match(p.name))


def test_a_full_disk_is_retried_by_workers():
    from workers.tasks import RETRYABLE

    assert issubclass(DiskFullError, RETRYABLE) and issubclass(StorageError, RETRYABLE)


def test_worker_retries_a_full_disk_and_finishes_after_space_is_freed(redis_url, start_worker, short_book, tmp_path,
                                                                       voice):
    """The job directory on a 4 MiB tmpfs with ~100 KB free: a batch write fails with "no space
    left on device"; the worker's writer retries it with backoff (the audio is in memory) instead of failing
    the batch; space is
    freed; the job completes with the output of a run that never saw a full disk."""
    store = JobStore(redis_url)
    with small_tmpfs(tmp_path / "disk", 4096) as disk:
        out = disk / "job"
        job_id = submit(redis_url, short_book, out, "--max-batch", "2")  # queued; no worker yet
        filler = fill(disk, 100_000)
        # each attempt synthesizes for 0.3 s before it writes: the retry after freeing finds the space
        w = start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.3"})
        wait_for(lambda: "Retry in" in w.output(), 60, "a retry of the full-disk batch")
        filler.unlink()
        log = w.output()
        assert "DiskFullError" in log and "no space left on device" in log, log[-3000:]
        info = wait_for(lambda: (i := store.get_job(job_id)) and i.status.value in ("done", "failed") and i, 60,
                        "the job to end")
        assert info.status is JobStatus.DONE and info.failed == 0, store.failures(job_id)
        assert "write failed (DiskFullError" in log, log[-3000:]  # retried by the writer, not failed
        assert rows(out) == reference(short_book, tmp_path / "ref", voice, max_batch=2)
        assert temp_files(out) == []


def test_worker_killed_during_finalize_leaves_no_temp_files(redis_url, start_worker, short_book, tmp_path, voice):
    """A worker node is SIGKILLed while its finalize writes the chapter files (slowed down by the
    test knob): their temporary files stay behind; the finalize lease expires, another worker's
    reaper re-enqueues the finalize, and that finalize removes them before assembling the job."""
    store = JobStore(redis_url)
    # (no early chapter writes: the finalize writes both chapters)
    a = start_worker(redis_url, "a", env={FINALIZE_DELAY_ENV: "60"}, args=["--early-chapters", "0"])
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    wait_for(lambda: len([p for p in temp_files(out) if p.suffix == ".flac"]) == 2, 60, "finalize to start")
    assert store.get_job(job_id).status is JobStatus.FINALIZING
    a.kill_group()
    left = temp_files(out)
    assert len(left) == 2 and all(p.parent.name == "01-short" for p in left)
    b = start_worker(redis_url, "b")
    info = wait_for(lambda: (i := store.get_job(job_id)) and i.status.value in ("done", "failed") and i, 60,
                    "the job to end")
    assert info.status is JobStatus.DONE, info
    assert temp_files(out) == [], temp_files(out)
    assert "removed 2 temporary files" in b.output()
    assert rows(out) == reference(short_book, tmp_path / "ref", voice, max_batch=2)
