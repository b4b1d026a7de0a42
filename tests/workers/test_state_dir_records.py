"""The node's state-directory records are checked before a reaper rebuilds a job from them (issue 31,
finding 7). Real redis-server, real `cli.py worker` processes (whose reapers read the records), real
job directories and state directories:

- a record naming a job directory outside the worker's --allowed-root is dropped, nothing is written
  there, while a genuine record in the same directory is rebuilt;
- a record naming a copy of a job's directory (Redis restarted empty, the job's workers gone) does not
  make the job run in the copy;
- a FIFO (or a symlink, or an oversized file) among the records does not block or stop the reaper.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from jobs.config import JobConfig
from jobs.prepare import prepare_job
from tests.workers.test_trust import cli, tree, wait_for
from workers.celery_app import redact_url
from workers.node_state import MAX_RECORD_BYTES, BadRecord, read_record
from workers.state import JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

QUEUE = "tts.normal"
OTHER_BOOK = ("CHAPTER I.\nA Mad Tea-Party\n\nThere was a table set out under a tree in front of the house. "
              "The March Hare and the Hatter were having tea at it.\n")


def record(state_dir: Path, job_id: str, job_dir: Path, url: str, name: str | None = None) -> Path:
    """A record as a worker writes it (or as someone forging one would)."""
    jobs = state_dir / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    p = jobs / f"{name or job_id}.json"
    p.write_text(json.dumps({"job_id": job_id, "job_dir": str(job_dir), "queue": QUEUE, "broker": redact_url(url)}))
    return p


def test_record_outside_the_allowed_root_is_dropped(redis_url, start_worker, short_book, node_state_dir, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    evil = prepare_job([short_book], outside / "job", JobConfig(max_batch=2))
    book2 = tmp_path / "tea.txt"
    book2.write_text(OTHER_BOOK, encoding="utf-8")
    good = prepare_job([book2], root / "good", JobConfig(max_batch=2))
    evil_rec = record(node_state_dir, evil.job_id, outside / "job", redis_url)
    record(node_state_dir, good.job_id, root / "good", redis_url)
    before = tree(outside)
    w = start_worker(redis_url, "w1", lease_s=2.0, args=["--allowed-root", str(root)])
    store = JobStore(redis_url)
    wait_for(lambda: (root / "good" / "manifest.parquet").exists(), 60, "the genuine record's job rebuilt and done", w)
    wait_for(lambda: not evil_rec.exists(), 10, "the record outside the root dropped", w)
    assert store.get_job(evil.job_id) is None, "a job was rebuilt from a directory outside the root"
    assert tree(outside) == before, "something was written outside the allowed root"
    lines = [ln for ln in w.output().splitlines() if f"job {evil.job_id} is missing from Redis" in ln]
    assert lines and "outside the allowed roots" in lines[0], w.output()[-3000:]


def test_record_naming_a_copy_of_the_job_is_not_rebuilt(redis_url, start_worker, short_book, node_state_dir,
                                                        tmp_path):
    root = tmp_path / "root"
    orig, copy = root / "orig", root / "copy"
    jid = cli("submit", short_book, "-o", orig, "--max-batch", "2", "--redis-url",
              redis_url).stdout.splitlines()[0]
    # the job's workers died; someone copied its directory; Redis restarted empty; the record names the copy
    shutil.copytree(orig, copy, symlinks=True)
    store = JobStore(redis_url)
    store.r.flushall()
    rec = record(node_state_dir, jid, copy, redis_url)
    before = tree(copy)
    w = start_worker(redis_url, "w1", lease_s=2.0, args=["--allowed-root", str(root)])
    wait_for(lambda: not rec.exists(), 20, "the record of the copy dropped", w)
    time.sleep(1.5)  # a few more sweeps
    assert store.get_job(jid) is None, f"job rebuilt from {store.get_job(jid).out_dir}"
    assert tree(copy) == before and not (copy / "manifest.parquet").exists(), "the job ran in the copy"
    line = [ln for ln in w.output().splitlines() if f"job {jid} is missing from Redis" in ln]
    assert line and f"is a copy of the job's directory {orig.resolve()}" in line[0], w.output()[-3000:]
    # the original is still the job: `resume` of it finishes it
    cli("resume", orig, "--redis-url", redis_url)
    wait_for(lambda: (orig / "manifest.parquet").exists(), 60, "the original finished after resume", w)


def test_a_fifo_among_the_records_does_not_block_the_reaper(redis_url, start_worker, short_book, node_state_dir,
                                                           tmp_path):
    jobs = node_state_dir / "jobs"
    jobs.mkdir(parents=True)
    os.mkfifo(jobs / "0-fifo.json")  # sorted first: the old reader blocked on it for ever
    (jobs / "1-link.json").symlink_to(jobs / "0-fifo.json")
    job = prepare_job([short_book], tmp_path / "job", JobConfig(max_batch=2))
    record(node_state_dir, job.job_id, job.out_dir, redis_url)
    w = start_worker(redis_url, "w1", lease_s=2.0)
    wait_for(lambda: (job.out_dir / "manifest.parquet").exists(), 60, "the recorded job rebuilt and done", w)
    log = w.output()
    assert "0-fifo.json: not a regular file" in log and "1-link.json: cannot be opened as a plain file" in log, \
        log[-3000:]


def test_read_record_accepts_only_small_regular_files(tmp_path):
    ok = tmp_path / "ok.json"
    ok.write_text('{"job_id": "a"}')
    assert read_record(ok) == {"job_id": "a"}
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "link.json").symlink_to(ok)
    (tmp_path / "big.json").write_text(" " * (MAX_RECORD_BYTES + 1) + "{}")
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "dir.json").mkdir()
    t0 = time.monotonic()
    for name in ("fifo", "link", "big", "list", "dir"):
        with pytest.raises(BadRecord, match=f"{name}.json"):
            read_record(tmp_path / f"{name}.json")
    assert time.monotonic() - t0 < 2
    with pytest.raises(FileNotFoundError):
        read_record(tmp_path / "gone.json")
