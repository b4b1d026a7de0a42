"""Chapter records (jobs/chapter_records.py): a finalize keeps the chapter files written before it
only while their records match, and its output is the same either way."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import chapter_records
from jobs import finalize as finalize_module
from jobs.config import JobConfig
from jobs.finalize import finalize, selected_chapters
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.runner import run_local

DET = dict(noise_scale=0.0, noise_w=0.0)


def snapshot(out: Path):
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
             and p.suffix in (".flac", ".vtt") and ".work" not in p.parts}
    return files, pq.read_table(out / "manifest.parquet").to_pylist()


def count_writes(monkeypatch) -> list:
    written: list = []
    real = finalize_module._write_chapter

    def spy(job, b_i, book, ch, *rest):
        written.append(ch["file"])
        return real(job, b_i, book, ch, *rest)

    monkeypatch.setattr(finalize_module, "_write_chapter", spy)
    return written


@pytest.fixture
def done_job(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**DET, captions="vtt"))
    run_local(job, fake_engine)
    return out


def test_every_written_chapter_has_a_record_and_a_second_finalize_keeps_the_files(done_job, monkeypatch):
    out = done_job
    ref = snapshot(out)
    job = load_job(out)
    works = selected_chapters(job)
    assert len(works) == 2
    for w in works:
        doc = json.loads(chapter_records.record_path(job, finalize_module.chapter_key(w)).read_text())
        assert doc["job_id"] == job.job_id and doc["file"] == w[2]["file"]
        assert sorted(map(int, doc["sources"])) == chapter_records.batches_of(w[3])
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.flac")}
    (out / "manifest.parquet").unlink()
    written = count_writes(monkeypatch)
    finalize(load_job(out))
    assert written == [], "the chapters were written again"
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.flac")} == mtimes
    assert snapshot(out) == ref, "the manifest from the records is the one the chapters gave (time stamps too)"


@pytest.mark.parametrize("change", ["file deleted", "file replaced", "batch redone", "record unreadable",
                                    "record of another job"])
def test_a_record_that_no_longer_matches_gets_its_chapter_written_again(done_job, monkeypatch, change):
    out = done_job
    ref = snapshot(out)
    job = load_job(out)
    first = selected_chapters(job)[0]
    chapter = out / first[2]["file"]
    rec_path = chapter_records.record_path(job, finalize_module.chapter_key(first))
    doc = json.loads(rec_path.read_text())
    if change == "file deleted":
        chapter.unlink()
    elif change == "file replaced":
        chapter.write_bytes(chapter.read_bytes()[:-10])
    elif change == "batch redone":  # the chapter was assembled from a record that is not there now
        b = next(iter(doc["sources"]))
        doc["sources"][b] = doc["sources"][b].replace("|", "|9", 1)
        rec_path.write_text(json.dumps(doc))
    elif change == "record unreadable":
        rec_path.write_text('{"version": 1, "job_id"')
    else:
        doc["job_id"] = "0" * 16
        rec_path.write_text(json.dumps(doc))
    (out / "manifest.parquet").unlink()
    written = count_writes(monkeypatch)
    finalize(load_job(out))
    assert written == [first[2]["file"]], "only the chapter whose record does not match"
    assert snapshot(out) == ref


def test_an_early_write_waits_for_no_finalize_and_none_starts_in_a_finishing_or_finished_job(short_book, tmp_path,
                                                                                            fake_engine):
    from workers.chapter_writer import write_requested

    out = tmp_path / "o"
    run_local(prepare_job([short_book], out, JobConfig(**DET, captions="vtt", max_batch=2)), fake_engine)
    job = load_job(out)
    first = selected_chapters(job)[0]
    key = [list(finalize_module.chapter_key(first))]
    (out / "manifest.parquet").unlink()
    (out / first[2]["file"]).unlink()
    # a batch the first chapter does not read is still to run (a job with every batch done is left
    # to its finalize, which is due: see test_early_chapters)
    other = job.record_path(next(b for b in range(len(job.batches))
                                 if b not in set(chapter_records.batches_of(first[3]))))
    other_doc = other.read_bytes()
    other.unlink()
    with chapter_records.finishing(job):  # a finalize between its chapters and its manifest
        assert write_requested(str(out), job.job_id, key) == []
        with chapter_records.writing(job) as ok:
            assert not ok
    assert not (out / first[2]["file"]).exists()
    assert write_requested(str(out), "0" * 16, key) == [], "a request for a job the directory no longer holds"
    assert write_requested(str(out), job.job_id, key) == [first[2]["file"]]
    assert write_requested(str(out), job.job_id, key) == [], "its record matches: nothing to do"
    other.write_bytes(other_doc)
    finalize(load_job(out))
    (out / first[2]["file"]).unlink()
    assert write_requested(str(out), job.job_id, key) == [], "the job is finished"
    assert not (out / first[2]["file"]).exists()


def test_a_finalize_waits_for_an_early_write_in_flight_and_keeps_its_chapter(done_job, monkeypatch):
    import threading
    import time

    out = done_job
    ref = snapshot(out)
    job = load_job(out)
    first = selected_chapters(job)[0]
    (out / "manifest.parquet").unlink()
    (out / first[2]["file"]).unlink()
    started = threading.Event()

    def early():
        with chapter_records.writing(job) as ok:
            assert ok
            started.set()
            time.sleep(0.5)
            finalize_module.write_chapter(job, first)

    t = threading.Thread(target=early)
    t.start()
    started.wait(5)
    written = count_writes(monkeypatch)  # counts the finalize's writes from here (the early one's too)
    finalize(load_job(out))
    t.join()
    assert written == [first[2]["file"]], "one write of the chapter: the early one, which the finalize waited for and kept"
    assert snapshot(out) == ref
