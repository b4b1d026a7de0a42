"""Written chapter files -> their records, so a later finalize need not write them again.

Every chapter file that :func:`jobs.finalize.write_chapter` writes (early, while the rest of the
job is synthesized, or in a finalize) gets a record ``.work/chapters/bBB-cCCCC.json`` beside the
job, written after the file: the batch records it was assembled from (their audio file, attempt
and finish time), the size and mtime of the file it wrote, its samples and skipped rows (its
manifest rows follow from the batch records). :func:`valid` gives ``finalize`` the chapters whose
record still matches: same job, the same batch records, the chapter file unchanged. Anything else (no record,
a record from before a batch was redone, a file that was deleted or replaced, an unreadable
record) is written again, so a record can only save work, never change the output.

A chapter written early holds :func:`writing` (a shared ``flock`` on ``.work/chapters/.lock``) and
is skipped once the job has its manifest; a finalize holds it exclusively from its start to its
manifest (:func:`finishing`), so it waits for early writes in flight (and keeps their files), and no
early write starts in a job that is finalizing or done (a writer killed mid-chapter leaves its
temporary file to the finalize's sweep, never in a finished job).

This module knows file layout and records; it does not know how a chapter is assembled (that is
:mod:`jobs.finalize`) or who asks for it early (the worker's :mod:`workers.chapter_writer`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock: early writes are off (``writing`` yields False)
    fcntl = None

from core.files import atomic_path, inside

log = logging.getLogger("booktts.chapters")

CHAPTERS_DIR = ".work/chapters"
RECORD_VERSION = 1
#: How long a finalize waits for an early chapter write in flight (seconds).
FINISH_WAIT_S = 300.0


def record_path(job, key: tuple[int, int]) -> Path:
    """Where the record of chapter ``key`` (book index, chapter index) of ``job`` goes."""
    return inside(job.out_dir, f"{CHAPTERS_DIR}/b{key[0]:02d}-c{key[1]:04d}.json")


def _lock_fd(job) -> int:
    path = inside(job.out_dir, f"{CHAPTERS_DIR}/.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


@contextlib.contextmanager
def writing(job):
    """While an early chapter write runs: True if no finalize of ``job`` is finishing (then none
    finishes until the block ends), False if one is (write nothing)."""
    if fcntl is None:
        yield False
        return
    fd = _lock_fd(job)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def finishing(job, wait_s: float = FINISH_WAIT_S):
    """A finalize (its chapters, the book-level files, the manifest): waits for early chapter writes
    in flight (their records then let it keep their files) and keeps new ones out. A write still
    running after ``wait_s`` (a stalled filesystem) is not waited for: the finalize then writes that
    chapter itself, and the late write replaces the file with the same bytes."""
    if fcntl is None:
        yield
        return
    fd = _lock_fd(job)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.warning("job %s: an early chapter write still runs after %.0f s; finalizing beside it",
                                job.job_id, wait_s)
                    break
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def batches_of(rows) -> list[int]:
    """The batches a chapter's planned rows read (rows with nothing speakable have none)."""
    return sorted({r.batch_id for r in rows if r.batch_id >= 0})


def _source(rec) -> str:
    return f"{rec.audio_file}|{rec.attempt}|{rec.finished_at}"


def sources(job, rows, records: dict) -> dict[str, str] | None:
    """What a chapter was assembled from: batch id -> its record's identity; None if a batch has
    no record (``records``: records read so far by batch id, filled here)."""
    out = {}
    for b in batches_of(rows):
        rec = records.get(b)
        if rec is None:
            rec = records[b] = job.batch_record(b)
        if rec is None:
            return None
        out[str(b)] = _source(rec)
    return out


def _file_state(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def save(job, key: tuple[int, int], file: str, rows, samples: int, skipped: int, records: dict) -> None:
    """Record that chapter ``key`` was written to ``file`` (relative to the job) from ``rows`` (its
    planned rows): ``samples`` long, ``skipped`` rows with nothing speakable. Called after the file is
    in place. (Its manifest rows are not kept: they follow from the batch records.)"""
    src = sources(job, rows, records)
    state = _file_state(inside(job.out_dir, file))
    if src is None or state is None:
        return
    doc = {"version": RECORD_VERSION, "job_id": job.job_id, "file": file, "file_state": state, "sources": src,
           "samples": int(samples), "skipped": int(skipped)}
    with atomic_path(record_path(job, key)) as tmp:
        tmp.write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")


def valid(job, chapters, records: dict) -> list:
    """Those of ``chapters`` (``(book index, book, chapter, rows)``) whose record matches the job,
    its batch records and its file as they are now: their files can be kept."""
    out = []
    for work in chapters:
        b_i, _book, ch, rows = work
        path = record_path(job, (b_i, ch["index"]))
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.info("job %s: chapter record %s unreadable (%s); the chapter is written again", job.job_id,
                     path.name, exc)
            continue
        if (isinstance(doc, dict) and doc.get("version") == RECORD_VERSION and doc.get("job_id") == job.job_id
                and doc.get("file") == ch["file"]
                and doc.get("file_state") == _file_state(inside(job.out_dir, ch["file"]))
                and doc.get("sources") == sources(job, rows, records)):
            out.append(work)
    return out
