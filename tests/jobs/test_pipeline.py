"""The shared pipeline (prepare -> run_batch -> finalize) and the local runner.

Most cases use the fake engine for speed; the integration cases at the end use the real voice.
"""

import numpy as np
import pyarrow.parquet as pq
from pathlib import Path
import pytest
import soundfile as sf

from jobs.config import JobConfig
from core.errors import InputError, JobError, UnsafePathError
from core.files import atomic_path, inside
from jobs.finalize import MANIFEST_COLUMNS, finalize
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.synthesize import run_batch
from jobs.runner import run_local

SMALL = dict(max_batch=3, max_batch_phonemes=803)  # many small batches, to exercise resume (803: the longest utterance)


class CountingEngine:
    """Wraps an engine and counts the items it was asked to synthesize."""

    def __init__(self, inner):
        self.inner, self.info, self.items, self.calls = inner, inner.info, 0, 0

    def synthesize(self, batch):
        self.calls += 1
        self.items += len(batch)
        return self.inner.synthesize(batch)


def manifest(out):
    return pq.read_table(out / "manifest.parquet").to_pylist()


def test_local_run_writes_every_utterance_once_in_order(short_book, tmp_path, fake_engine):
    out = tmp_path / "out"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    stats = run_local(job, fake_engine)
    rows = manifest(out)
    assert set(MANIFEST_COLUMNS) <= set(rows[0])
    keys = [(r["book_index"], r["chapter_index"], r["utterance_index"]) for r in rows]
    assert keys == sorted(set(keys)), "each utterance exactly once, in reading order"
    assert len(rows) == len(job.rows) == stats.summary.utterances
    # chapter words come back from the utterances, nothing dropped or duplicated
    from jobs.ingest import load_book

    book = load_book(short_book)
    for ch in book.chapters:
        got = " ".join(r["text"] for r in rows if r["chapter_index"] == ch.index).split()
        assert got == (ch.title + " " + " ".join(ch.paragraphs)).split()
    # each chapter file holds exactly its utterances and pauses, at the places the manifest says
    for path in {r["chapter_path"] for r in rows}:
        info = sf.info(str(out / path))
        mine = [r for r in rows if r["chapter_path"] == path]
        end = mine[-1]["start_s"] + mine[-1]["duration_s"] + mine[-1]["pause_after_s"]
        assert abs(info.frames / info.samplerate - end) < 1e-6
        assert all(abs(a["start_s"] + a["duration_s"] + a["pause_after_s"] - b["start_s"]) < 1e-9
                   for a, b in zip(mine, mine[1:]))
    assert not list(out.rglob(".tmp-*")), "no temporary files left behind"


def test_resume_runs_only_unfinished_batches_and_gives_the_same_output(short_book, tmp_path, fake_engine):
    ref_out, out = tmp_path / "ref", tmp_path / "out"
    run_local(prepare_job([short_book], ref_out, JobConfig(**SMALL)), fake_engine)
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    assert len(job.batches) >= 3
    first = job.pending_batches()[: len(job.batches) // 2]
    for b in first:  # an interrupted run finished these
        run_batch(job, b, fake_engine)
    counting = CountingEngine(fake_engine)
    again = prepare_job([short_book], out, JobConfig(**SMALL))  # the same command, re-run
    assert again.job_id == job.job_id
    stats = run_local(again, counting)
    assert stats.batches_skipped == len(first)
    assert counting.items == sum(b.size for b in job.batches if b.batch_id not in first)
    for a, b in zip(manifest(ref_out), manifest(out)):
        assert (a["text"], a["start_s"], a["duration_s"]) == (b["text"], b["start_s"], b["duration_s"])
    for path in {r["chapter_path"] for r in manifest(out)}:
        assert np.array_equal(sf.read(str(ref_out / path), dtype="int16")[0], sf.read(str(out / path), dtype="int16")[0])


def test_run_batch_is_idempotent(short_book, tmp_path, fake_engine):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    counting = CountingEngine(fake_engine)
    a = run_batch(job, 0, counting)
    b = run_batch(job, 0, counting)  # delivered twice
    assert counting.calls == 1 and a == b
    assert len(list((tmp_path / "o" / ".work" / "batches").glob("b000000*.wav"))) == 1


def test_out_of_memory_batch_is_split_in_two(short_book, tmp_path, voice):
    from engines.fake import FakeEngine

    job = prepare_job([short_book], tmp_path / "o", JobConfig(max_batch=8, max_batch_phonemes=10000))
    big = max(job.batches, key=lambda b: b.size)
    assert big.size >= 3
    rec = run_batch(job, big.batch_id, FakeEngine(voice.sample_rate, oom_over=2))
    assert rec.splits >= 1
    ref = run_batch(prepare_job([short_book], tmp_path / "p", JobConfig(max_batch=8, max_batch_phonemes=10000)),
                    big.batch_id, FakeEngine(voice.sample_rate))
    assert [i["samples"] for i in rec.items] == [i["samples"] for i in ref.items]


def test_finalize_refuses_an_unfinished_job(short_book, tmp_path, fake_engine):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    run_batch(job, 0, fake_engine)
    with pytest.raises(JobError, match="not done"):
        finalize(job)
    assert not (tmp_path / "o" / "manifest.parquet").exists()


def test_another_job_in_the_same_directory_is_refused(short_book, tmp_path):
    prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    with pytest.raises(JobError, match="another job"):
        prepare_job([short_book], tmp_path / "o", JobConfig(length_scale=1.2, **SMALL))


def test_chapter_selection(short_book, tmp_path, fake_engine):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(chapters="2", **SMALL))
    run_local(job, fake_engine)
    assert {r["chapter_index"] for r in manifest(tmp_path / "o")} == {2}
    with pytest.raises(InputError, match="only 2 chapters"):
        prepare_job([short_book], tmp_path / "p", JobConfig(chapters="1-5"))
    with pytest.raises(InputError, match="not a number"):
        prepare_job([short_book], tmp_path / "q", JobConfig(chapters="one"))


def test_load_job_reopens_the_plan(short_book, tmp_path):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**SMALL))
    again = load_job(tmp_path / "o")
    assert again.job_id == job.job_id and [r.key for r in again.rows] == [r.key for r in job.rows]


def test_opened_jobs_are_kept_least_recently_used_first_out(short_book, tmp_path, monkeypatch):
    """A worker's engine process opens every job it gathers batches from, in turn, call after call:
    the job it keeps using stays opened while others come and go (it was first in, first out)."""
    from jobs import job as jobs_job

    monkeypatch.setattr(jobs_job, "MAX_CACHED_JOBS", 2)
    jobs_job.forget_jobs()
    dirs = [tmp_path / n for n in "abc"]
    for i, d in enumerate(dirs):
        prepare_job([short_book], d, JobConfig(length_scale=1.0 + i / 10, **SMALL))
    jobs_job.forget_jobs()
    a = load_job(dirs[0])
    b = load_job(dirs[1])
    assert load_job(dirs[0]) is a, "kept"
    load_job(dirs[2])  # a third: the least recently used (b) goes
    assert load_job(dirs[0]) is a, "a was used since b: kept"
    assert load_job(dirs[1]) is not b, "b was dropped and opened again"
    assert len(jobs_job._JOB_CACHE) == 2
    jobs_job.forget_jobs()
    assert not jobs_job._JOB_CACHE


def test_a_worker_gathering_from_24_jobs_reads_each_plan_once(short_book, tmp_path, monkeypatch):
    """The bulk benchmark's 24 books, opened in turn at every engine call by a gathering worker: each
    job's plan is read from disk once (with 8 kept, every call read them again: 21-26 s per run)."""
    from jobs import job as jobs_job

    dirs = [tmp_path / f"j{i:02d}" for i in range(24)]
    for i, d in enumerate(dirs):
        prepare_job([short_book], d, JobConfig(length_scale=1.0 + i / 100, **SMALL))
    jobs_job.forget_jobs()
    reads = []
    real = jobs_job.pq.read_table
    monkeypatch.setattr(jobs_job.pq, "read_table", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    for _ in range(3):  # three engine calls, each opening every job
        for d in dirs:
            load_job(d)
    assert len(reads) == 24, f"{len(reads)} plan reads for 24 jobs"
    jobs_job.forget_jobs()


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "x.flac"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rel", ["../evil.flac", "/etc/passwd", "a/../../b"], ids=["dotdot", "absolute", "nested-dotdot"])
def test_paths_never_escape_the_output_directory(tmp_path, rel):
    with pytest.raises(UnsafePathError):
        inside(tmp_path, rel)


@pytest.mark.integration
def test_real_voice_end_to_end_is_deterministic_with_zero_noise(short_book, tmp_path, onnx_engine):
    cfg = dict(noise_scale=0.0, noise_w=0.0, audio_format="wav")
    a = run_local(prepare_job([short_book], tmp_path / "a", JobConfig(**cfg)), onnx_engine)
    b = run_local(prepare_job([short_book], tmp_path / "b", JobConfig(max_batch=1, **cfg)), onnx_engine)
    rows_a, rows_b = manifest(tmp_path / "a"), manifest(tmp_path / "b")
    assert [r["text"] for r in rows_a] == [r["text"] for r in rows_b]
    # batched (a) and one-at-a-time (b) give the same durations, sample for sample
    assert [r["duration_s"] for r in rows_a] == [r["duration_s"] for r in rows_b]
    assert all(r["engine"] == "onnx" and r["infer_ms"] > 0 for r in rows_a)
    for path in {r["chapter_path"] for r in rows_a}:
        x = sf.read(str(tmp_path / "a" / path), dtype="float32")[0]
        y = sf.read(str(tmp_path / "b" / path), dtype="float32")[0]
        assert len(x) == len(y)
        assert np.sqrt(np.mean(x ** 2)) > 0.05, "speech, not silence"
        assert np.linalg.norm(x - y) / np.linalg.norm(y) < 2e-2
    assert a.audio_s > 10


@pytest.mark.parametrize("name", ["alice-pg11.txt", "alice-pg11.epub"])
def test_whole_book_plan_keeps_every_word_of_every_chapter(tmp_path, name):
    """Segmentation without loss on a real book: each chapter's words come back from its utterances."""
    from pathlib import Path

    from jobs.ingest import load_book

    book_path = Path(__file__).resolve().parent.parent / "data" / name
    job = prepare_job([book_path], tmp_path / "o", JobConfig())
    book = load_book(book_path)
    assert len(book.chapters) == 12
    for ch in book.chapters:
        utts = [r.utt for r in job.rows if r.utt.chapter_index == ch.index]
        assert [u.utterance_index for u in utts] == list(range(len(utts)))
        # the book's announcement ("Title, by Author.") opens chapter 1, as its own utterance
        announced = [u.text for u in utts if u.paragraph_index == -2]
        assert announced == ([book.announcement()] if ch.index == 1 else [])
        utts = [u for u in utts if u.paragraph_index != -2]
        assert " ".join(u.text for u in utts).split() == (ch.title + " " + " ".join(ch.paragraphs)).split()
        assert all(len(u.phoneme_ids) <= 2 * job.config.max_phonemes + 3 for u in utts)
    assert job.meta["summary"]["padding_efficiency"] > 0.9


def test_parallel_finalize_equals_one_chapter_at_a_time(short_book, tmp_path, fake_engine, monkeypatch):
    # finalize encodes chapters in threads; the files and the manifest must not depend on it
    import jobs.finalize as finalize_module

    job = prepare_job([short_book], tmp_path / "out", JobConfig(**SMALL))
    run_local(job, fake_engine)
    parallel = {p.name: p.read_bytes() for p in (tmp_path / "out").rglob("*.flac")}
    rows = manifest(tmp_path / "out")
    assert len(parallel) == 2, "the short book has two chapters"
    monkeypatch.setattr(finalize_module, "FINALIZE_THREADS", 1)
    finalize(load_job(tmp_path / "out"))
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").rglob("*.flac")} == parallel
    assert manifest(tmp_path / "out") == rows


@pytest.mark.parametrize("parallel_above", [10**12, 1000], ids=["one-thread", "threads"])
def test_batch_normalisation_equals_piper_per_item_normalisation(monkeypatch, parallel_above):
    """What write_unit writes (_normalize_concat, item by item, a big unit over threads) is exactly the
    concatenation of _normalize per item: silent items, full-scale items and -32768 included."""
    import jobs.synthesize as pl

    monkeypatch.setattr(pl, "_PARALLEL_NORMALIZE_SAMPLES", parallel_above)
    rng = np.random.default_rng(7)
    for _ in range(25):
        items = []
        for _ in range(int(rng.integers(1, 40))):
            n, amp = int(rng.integers(0, 3000)), int(rng.choice([0, 1, 5, 300, 32767]))
            a = rng.integers(-amp, amp + 1, size=n).astype(np.int16) if amp else np.zeros(n, np.int16)
            if n and rng.random() < 0.2:
                a[0] = -32768
            items.append(a)
        want = np.concatenate([pl._normalize(a) for a in items])
        got = pl._normalize_concat(items)
        assert got.dtype == np.int16 and np.array_equal(got, want)


def test_run_in_reading_order_is_complete_and_writes_chapters_early(tmp_path, voice):
    """A job packed in reading order (the GPU default) through the local runner: every utterance once,
    playing its own audio, and the first chapter written before the last batch was synthesized."""
    from jobs.runner import run_local
    from tests.fake_audio import assert_rows_play_their_own_audio

    from engines.fake import FakeEngine

    out = tmp_path / "o"
    # loudness none: the fake engine makes these 3 chapters in under a second, less than measuring one
    # chapter's loudness takes; this test is about when chapters are written, not their level
    job = prepare_job([Path(__file__).resolve().parents[1] / "data" / "alice-pg11.txt"], out,
                      JobConfig(max_batch=64, batch_order="reading", chapters="1-3", loudness="none"))
    assert job.config.batch_order == "reading" and len(job.batches) > 3
    chapters = []
    stats = run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length),
                      on_chapter=lambda *a: chapters.append(a))
    assert stats is not None
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    assert len(rows) == len(job.rows)
    assert assert_rows_play_their_own_audio(out) == sum(r.utt.speakable for r in job.rows)
    assert len(chapters) >= 2, ("chapters 1 and 2 were written while synthesis went on", chapters)
    ident = JobConfig(max_batch=64).identity()
    assert "batch_order" not in ident and JobConfig(max_batch=64, batch_order="reading").identity()["batch_order"]


@pytest.mark.parametrize("mixing", [True, False], ids=["per-item-scales", "split-by-scales"])
def test_units_of_jobs_with_other_scales_share_a_call(short_book, tmp_path, voice, mixing):
    """Units of two jobs of different speaking rates in one ``synthesize_units`` call: each unit's
    audio is what its own job's call gives. An engine with ``per_item_scales`` gets one batch with
    each item's scales; another engine gets one batch per set of scales."""
    import dataclasses

    from engines.base import Scales
    from engines.fake import FakeEngine
    from jobs.synthesize import Unit, synthesize_units

    cfg = dict(max_batch=3, max_batch_phonemes=803, noise_scale=0.0, noise_w=0.0)
    a = prepare_job([short_book], tmp_path / "a", JobConfig(**cfg))
    b = prepare_job([short_book], tmp_path / "b", JobConfig(length_scale=1.37, **cfg))
    inner = FakeEngine(voice.sample_rate, hop_length=voice.hop_length)
    engine = CountingEngine(inner)
    engine.info = dataclasses.replace(inner.info, per_item_scales=mixing)
    seen = []
    orig = engine.synthesize

    def recording(batch):
        seen.append(batch)
        return orig(batch)

    engine.synthesize = recording
    units = [Unit(a, 0), Unit(b, 0), Unit(a, 1), Unit(b, 1)]
    synth = synthesize_units(units, engine)
    if mixing:
        assert engine.calls == 1 and seen[0].item_scales is not None
    else:
        assert engine.calls == 2 and all(s.item_scales is None for s in seen)
        assert {s.scales.length_scale for s in seen} == {a.scales.length_scale, 1.37}
    for k, u in enumerate(units):
        alone = synthesize_units([u], FakeEngine(voice.sample_rate, hop_length=voice.hop_length))
        assert len(synth.items[k]) == len(alone.items[0])
        for got, ref in zip(synth.items[k], alone.items[0]):
            assert np.array_equal(got, ref), f"unit {k} differs from its own job's call"
    assert b.scales == Scales(0.0, 1.37, 0.0)
    assert sum(len(x) for x in synth.items[1]) and len(synth.items[1][0]) > len(synth.items[0][0])
