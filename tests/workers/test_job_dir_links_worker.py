"""A worker does not follow a link planted below a job directory inside its allowed root (issue 31,
finding 5): with ``.work/batches`` replaced by a link elsewhere after the submit, the old worker wrote
every batch's audio and record there and the job ended "done"; now each batch is refused before it is
synthesized, recorded as the job's failure with one line naming the link, and nothing lands elsewhere."""

from __future__ import annotations

import pytest

from tests.workers.test_trust import cli, wait_for
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def test_worker_refuses_a_linked_batches_directory(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    job_dir = root / "job"
    jid = cli("submit", short_book, "-o", job_dir, "--max-batch", "2", "--redis-url", redis_url).stdout.splitlines()[0]
    batches = job_dir / ".work" / "batches"
    if batches.exists():
        batches.rmdir()
    batches.symlink_to(elsewhere, target_is_directory=True)
    w = start_worker(redis_url, "w1", args=["--allowed-root", str(root)])
    wait_for(lambda: store.get_job(jid).status in (JobStatus.DONE, JobStatus.FAILED), 60, "the job's end", w)
    info = store.get_job(jid)
    assert list(elsewhere.iterdir()) == [], "nothing was written through the link"
    assert info.status is JobStatus.FAILED and info.done == 0 and info.failed == info.batches, info
    failures = store.failures(jid).values()
    assert all(f["error_type"] == "UnsafePathError" and "symbolic link" in f["error"] and str(batches) in f["error"]
               for f in failures), list(failures)
    assert "Traceback" not in w.output() and "Retry in" not in w.output(), w.output()[-3000:]
    assert not (job_dir / "manifest.parquet").exists()
