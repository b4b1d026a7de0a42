"""The local runner's overlap: a writer thread for batches, chapters written as soon as their
batches are done, ``finalize`` writing only what is left.

Its outputs must be the bytes of the serial path (``run_batch`` for each batch, then
``finalize``), errors of the writer thread must surface on the caller's thread, and an
interrupted run must resume to the same output. All with the fake engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import jobs.runner as runner
from jobs.config import JobConfig
from core.errors import DiskFullError, JobError
from core.files import TMP_NAME
from jobs.finalize import finalize, write_chapter
from jobs.job import BatchRecord, load_job
from jobs.prepare import prepare_job
from jobs.synthesize import run_batch, write_unit
from jobs.runner import batch_order, run_local

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(max_batch=2)  # five batches of the short book
#: Manifest columns that differ between two runs of the same job (who ran it, when, how fast).
PER_RUN = {"infer_ms", "started_at", "finished_at", "worker", "queued_at"}


def chapter_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.flac"))}


def manifest_rows(out: Path) -> list[dict]:
    return pq.read_table(out / "manifest.parquet").to_pylist()


def temp_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if TMP_NAME.match(p.name)]


def serial_reference(book: Path, out: Path, engine) -> Path:
    """The path without overlap: each batch written in turn, then finalize reads the batch files."""
    job = prepare_job([book], out, JobConfig(**SMALL))
    for b in job.batches:
        run_batch(job, b.batch_id, engine, worker="local")
    finalize(job)
    return out


def records_are_whole(job) -> int:
    """Every batch record in the job directory has its audio file with all its samples; returns
    how many records there are."""
    import soundfile as sf

    n = 0
    for b in job.batches:
        rec = job.batch_record(b.batch_id)
        if rec is None:
            continue
        n += 1
        audio = job.record_path(b.batch_id).parent / rec.audio_file
        assert audio.exists(), f"record of batch {b.batch_id} without its audio"
        assert sf.info(str(audio)).frames == rec.audio_samples
    return n


class SlowLast:
    """The fake engine, slowed on its last call; ``check()`` runs inside that call."""

    def __init__(self, inner, calls_total: int, check) -> None:
        self.inner, self.info, self.calls, self.total, self.check = inner, inner.info, 0, calls_total, check

    def synthesize(self, batch):
        self.calls += 1
        if self.calls == self.total:
            self.check()
        return self.inner.synthesize(batch)


@pytest.mark.parametrize("order", ["plan", "chapters"])
def test_outputs_are_the_bytes_of_the_serial_path(short_book, tmp_path, fake_engine, order):
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    out = tmp_path / "out"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    early: list[str] = []
    stats = run_local(job, fake_engine, order=order, on_chapter=early.append)
    assert early, "at least one chapter was written before the end of the run"
    assert stats.batches_run == len(job.batches) and stats.phases["chapters_early_n"] == len(early)
    assert chapter_bytes(out) == chapter_bytes(ref) and len(chapter_bytes(out)) == 2
    mine, theirs = manifest_rows(out), manifest_rows(ref)
    assert [{k: v for k, v in r.items() if k not in PER_RUN} for r in mine] == \
        [{k: v for k, v in r.items() if k not in PER_RUN} for r in theirs]
    # and finalize alone, reading the batch files, gives back the very same files and manifest
    written = {**chapter_bytes(out), "manifest.parquet": (out / "manifest.parquet").read_bytes()}
    finalize(load_job(out))
    assert {**chapter_bytes(out), "manifest.parquet": (out / "manifest.parquet").read_bytes()} == written
    assert temp_files(out) == []


def test_chapter_order_runs_each_chapters_batches_first(short_book, tmp_path):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    pending = job.pending_batches()
    order = batch_order(job, pending, "chapters")
    assert sorted(order) == pending and batch_order(job, pending, "plan") == pending
    first = {r.batch_id for r in job.rows if r.utt.chapter_index == 1 and r.batch_id >= 0}
    assert set(order[:len(first)]) == first
    with pytest.raises(ValueError, match="unknown batch order"):
        batch_order(job, pending, "random")


def test_chapter_one_is_written_while_the_last_batch_is_synthesized(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    ch1 = next(ch for ch in job.meta["books"][0]["chapters"] if ch["index"] == 1)
    order = batch_order(job, job.pending_batches(), "chapters")
    ch1_batches = {r.batch_id for r in job.rows if r.utt.chapter_index == 1 and r.batch_id >= 0}
    assert order[-1] not in ch1_batches, "the short book's plan has batches after chapter 1's"
    seen = {}

    def check():  # inside the last engine call: chapter 1 appears while it runs
        deadline = time.monotonic() + 10
        while not (out / ch1["file"]).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["exists"] = (out / ch1["file"]).exists()
        seen["manifest"] = (out / "manifest.parquet").exists()

    engine = SlowLast(fake_engine, len(order), check)
    run_local(job, engine, order="chapters")
    assert seen == {"exists": True, "manifest": False}


def test_a_writer_error_surfaces_and_nothing_after_it_is_written(short_book, tmp_path, fake_engine, monkeypatch):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    assert len(job.batches) >= 4
    real = write_unit
    caller = []

    def failing(synth, index, worker=None):
        if synth.units[index].batch_id == 1:
            raise DiskFullError(job.record_path(1))
        return real(synth, index, worker=worker)

    monkeypatch.setattr(runner, "write_unit", failing)
    engine_threads = []
    monkeypatch.setattr(fake_engine, "synthesize",
                        lambda b, f=fake_engine.synthesize: (engine_threads.append(threading.current_thread()), f(b))[1])
    with pytest.raises(DiskFullError) as ei:
        run_local(job, fake_engine, on_batch=lambda b, s: caller.append(threading.current_thread()))
    assert ei.value.filename == str(job.record_path(1))
    assert set(engine_threads) == {threading.main_thread()} and set(caller) <= {threading.main_thread()}
    assert records_are_whole(job) == 1 and job.pending_batches() == [b.batch_id for b in job.batches][1:]
    assert not (out / "manifest.parquet").exists() and temp_files(out) == []
    monkeypatch.undo()
    stats = run_local(load_job(out), fake_engine)
    assert stats.batches_skipped == 1
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    assert chapter_bytes(out) == chapter_bytes(ref)


def test_writer_back_pressure_bounds_batches_waiting(short_book, tmp_path, fake_engine, monkeypatch):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    real = write_unit
    counts = {"synth": 0, "written": 0, "ahead": 0}

    def slow(synth, index, worker=None):
        time.sleep(0.05)
        rec = real(synth, index, worker=worker)
        counts["written"] += 1
        return rec

    def synth(batch, f=fake_engine.synthesize):
        counts["synth"] += 1
        counts["ahead"] = max(counts["ahead"], counts["synth"] - counts["written"])
        return f(batch)

    monkeypatch.setattr(runner, "write_unit", slow)
    monkeypatch.setattr(fake_engine, "synthesize", synth)
    run_local(job, fake_engine, writer_depth=1)
    # one being written, one waiting, one being synthesized
    assert counts["written"] == len(job.batches) and 2 <= counts["ahead"] <= 3


def test_engine_error_mid_run_keeps_the_batches_before_it(short_book, tmp_path, voice):
    from engines.fake import FakeEngine
    from core.errors import DeterministicEngineError

    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    bad = job.batch_rows(3)[0].utt.phoneme_ids[1]
    first_bad = min(r.batch_id for r in job.rows if r.batch_id >= 0 and bad in r.utt.phoneme_ids)
    with pytest.raises(DeterministicEngineError):
        run_local(job, FakeEngine(voice.sample_rate, voice.hop_length, fail_on_id=bad))
    assert records_are_whole(job) == first_bad and not (out / "manifest.parquet").exists()
    assert temp_files(out) == []


def test_ctrl_c_mid_run_then_resume(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))

    class Interrupted:
        info, calls = fake_engine.info, 0

        def synthesize(self, batch):
            self.calls += 1
            if self.calls == 4:
                raise KeyboardInterrupt
            return fake_engine.synthesize(batch)

    with pytest.raises(KeyboardInterrupt):
        run_local(job, Interrupted())
    assert records_are_whole(job) == 3, "the batches synthesized before Ctrl-C are written"
    assert temp_files(out) == [] and not (out / "manifest.parquet").exists()
    stats = run_local(load_job(out), fake_engine)
    assert stats.batches_skipped == 3 and stats.batches_run == len(job.batches) - 3
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    assert chapter_bytes(out) == chapter_bytes(ref)
    assert len(manifest_rows(out)) == len(job.rows)


def test_killed_mid_run_leaves_whole_records_and_resumes(short_book, tmp_path, fake_engine):
    """`cli.py run` SIGKILLed while batches are being synthesized and written: each record there has
    all its audio; the re-run completes with the serial path's bytes and leaves no temporary files."""
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BOOKTTS_FAKE_DELAY_S": "0.3"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "run", "-o", str(out), "--engine", "fake"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(list((out / ".work" / "batches").glob("b*.json"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no batch was written"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = records_are_whole(job)
    assert 2 <= done < len(job.batches)
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", "-o", str(out), "--engine", "fake"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "BOOKTTS_FAKE_DELAY_S"})
    assert res.returncode == 0, res.stderr
    assert f"resuming: {done} batches already done" in res.stderr
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    assert chapter_bytes(out) == chapter_bytes(ref) and temp_files(out) == []
    # batch audio files: exactly one per record (a killed writer's audio without record is a temp file)
    wavs = sorted(p.name for p in (out / ".work" / "batches").glob("*.wav"))
    recs = sorted(BatchRecord.load(p).audio_file for p in (out / ".work" / "batches").glob("b*.json"))
    assert wavs == recs


def test_early_chapters_wait_while_free_space_is_needed_for_batches(short_book, tmp_path, fake_engine, monkeypatch):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    monkeypatch.setattr(runner, "free_bytes", lambda d: 1)  # nearly full: batches first
    early: list[str] = []
    stats = run_local(job, fake_engine, on_chapter=early.append)
    assert early == [] and stats.phases["chapters_early_n"] == 0
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    assert chapter_bytes(out) == chapter_bytes(ref)


def test_an_early_chapter_failure_is_left_to_finalize(short_book, tmp_path, fake_engine, monkeypatch):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    real = write_chapter
    failed = []

    def once(job_, work, records=None, memory=None, chosen=None):
        if not failed:
            failed.append(work[2]["file"])
            raise JobError("simulated failure of an early chapter write")
        return real(job_, work, records, memory, chosen)

    monkeypatch.setattr(runner, "write_chapter", once)
    run_local(job, fake_engine, order="chapters")
    assert failed
    ref = serial_reference(short_book, tmp_path / "ref", fake_engine)
    assert chapter_bytes(out) == chapter_bytes(ref) and temp_files(out) == []
