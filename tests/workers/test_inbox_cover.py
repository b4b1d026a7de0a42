"""An EPUB dropped into a watched inbox keeps its cover in the finished M4B.

The watcher plans a book from a private copy of the dropped file and removes that copy once the
book is submitted; the book file itself goes to ``done/``. Finalize, on a worker, read the cover from
the path the job was planned from: gone by then, so the M4B had no cover. Now the cover is copied into
the job's directory when the job is planned (``.work/covers``, atomically, within the cover size
limit), and finalize reads that copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from mutagen.mp4 import MP4

from jobs.config import JobConfig
from tests.test_input_hardening import PNG, make_epub
from tests.workers.test_trust import wait_for
from workers.celery_app import use_redis
from workers.state import JobStatus, JobStore
from workers.watch import Inbox

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]


def test_an_epub_from_the_inbox_has_its_cover_in_the_finished_m4b(redis_url, start_worker, tmp_path):
    use_redis(redis_url)
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    part = tmp_path / "book.epub.part"
    make_epub(part, title="Covered", cover=PNG)
    os.replace(part, inbox / "book.epub")
    box = Inbox(inbox, out, store, JobConfig(audio_format="m4b", max_batch=2), settle_s=0.0)
    box.scan()
    time.sleep(0.05)
    res = box.scan()
    assert [s["name"] for s in res.submitted] == ["book.epub"], res
    job_dir = Path(res.submitted[0]["out_dir"])
    planned_from = Path(json.loads((job_dir / "job.json").read_text())["books"][0]["path"])
    assert not planned_from.exists(), "the watcher's private copy is gone once the book is submitted"

    fake = start_worker(redis_url, "fake")
    jid = res.submitted[0]["job_id"]
    wait_for(lambda: store.get_job(jid).status in (JobStatus.DONE, JobStatus.FAILED), 90, "the job's end", fake)
    assert store.get_job(jid).status is JobStatus.DONE
    m4bs = list(job_dir.glob("*.m4b"))
    assert len(m4bs) == 1, list(job_dir.iterdir())
    covr = MP4(str(m4bs[0])).tags.get("covr")
    assert covr and bytes(covr[0]) == PNG, "the M4B carries the EPUB's cover"
    book = json.loads((job_dir / "job.json").read_text())["books"][0]
    kept = job_dir / book["cover_copy"]["file"]
    assert kept.read_bytes() == PNG and book["cover_copy"]["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert "no cover" not in fake.output() and "Traceback" not in fake.output()
