"""Batch audio that no record refers to (found by tests/faults, seed 4250689042: a batch with two
audio files in a finished job's directory). Two deliveries of one batch whose writers both passed
the "no record yet" check each wrote audio and a record, the last renamed record won and the other
audio stayed; a writer killed between its audio and its record leaves its audio too."""

from __future__ import annotations

import shutil

from jobs.config import JobConfig
from jobs.finalize import finalize
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.synthesize import Unit, synthesize_units, write_unit
from jobs.runner import run_local
from tests.fake_audio import assert_rows_play_their_own_audio


def audio_files(job, batch_id: int) -> list[str]:
    return sorted(p.name for p in (job.out_dir / ".work" / "batches").glob(f"b{batch_id:06d}-{job.job_id}-*.wav"))


def test_two_writers_past_the_check_leave_one_record_and_one_audio_file(short_book, tmp_path, fake_engine,
                                                                       monkeypatch):
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=2))
    first = synthesize_units([Unit(job, 0, attempt=1)], fake_engine)
    second = synthesize_units([Unit(job, 0, attempt=2)], fake_engine)
    monkeypatch.setattr(job, "batch_record", lambda b: None)  # both writers saw no record yet
    a = write_unit(first, 0, worker="a")
    b = write_unit(second, 0, worker="b")
    monkeypatch.undo()
    rec = job.batch_record(0)
    assert rec is not None and rec.worker == "a" and b.worker == "a" and a.audio_file == rec.audio_file, \
        "the first record stays; the second writer returns it"
    assert audio_files(job, 0) == [rec.audio_file], "the second writer removed its own audio"


def test_finalize_removes_batch_audio_no_record_refers_to(short_book, tmp_path, fake_engine):
    out = tmp_path / "out"
    job = prepare_job([short_book], out, JobConfig(max_batch=2))
    run_local(job, fake_engine)
    job = load_job(out)
    rec = job.batch_record(1)
    batches = out / ".work" / "batches"
    orphan = batches / f"b000001-{job.job_id}-0badc0de.wav"  # a writer killed before its record
    shutil.copy(batches / rec.audio_file, orphan)
    other = batches / "b000001-0123456789abcdef-0badc0de.wav"  # another job's file: not this job's to remove
    shutil.copy(batches / rec.audio_file, other)
    finalize(job)
    assert not orphan.exists() and other.exists()
    assert all(audio_files(job, b) == [job.batch_record(b).audio_file] for b in range(len(job.batches)))
    assert assert_rows_play_their_own_audio(out) > 0
