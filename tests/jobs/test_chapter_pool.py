"""Chapter files written by processes (jobs/chapter_pool.py) are the files threads write."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import chapter_pool
from jobs.config import JobConfig
from jobs.finalize import FINALIZE_DELAY_ENV, finalize, selected_chapters
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.runner import run_local

DET = dict(noise_scale=0.0, noise_w=0.0)


def outputs(out: Path) -> tuple[dict[str, bytes], list[dict]]:
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
             and p.suffix in (".flac", ".vtt", ".srt") and ".work" not in p.parts}
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    for r in rows:  # wall-clock stamps differ between runs
        for k in ("started_at", "finished_at", "queued_at", "infer_ms"):
            r.pop(k, None)
    return files, rows


def force_processes(monkeypatch, used: list):
    monkeypatch.setattr(chapter_pool, "PROCESS_MIN_AUDIO_S", 0.0)
    monkeypatch.setattr(chapter_pool, "PROCESS_MIN_CORES", 1)
    monkeypatch.setattr(chapter_pool, "PROCESS_MIN_CHAPTERS", 1)
    real = chapter_pool.write_chapters

    def spy(job, works, processes, *rest, **kw):
        used.append((len(works), processes))
        return real(job, works, processes, *rest, **kw)

    monkeypatch.setattr(chapter_pool, "write_chapters", spy)
    monkeypatch.setattr(chapter_pool, "host_cores", lambda: 2)


def test_processes_only_for_hours_of_audio_on_a_host_with_cores(short_book, tmp_path):
    job = prepare_job([short_book], tmp_path / "o", JobConfig(**DET))
    works = selected_chapters(job)
    assert len(works) == 2
    assert chapter_pool.processes_for(job, works, cores=16) == 0  # two short chapters: threads
    assert chapter_pool.processes_for(job, works[:1], cores=16) == 0
    est = sum(chapter_pool.chapter_seconds(job, w) for w in works)
    assert est > 0
    old = chapter_pool.PROCESS_MIN_AUDIO_S
    try:
        chapter_pool.PROCESS_MIN_AUDIO_S = est / 2
        assert chapter_pool.processes_for(job, works, cores=16) == 2
        assert chapter_pool.processes_for(job, works, cores=chapter_pool.PROCESS_MIN_CORES - 1) == 0
    finally:
        chapter_pool.PROCESS_MIN_AUDIO_S = old


@pytest.mark.parametrize("loudness", ["ebu", "none"])
def test_finalize_in_processes_writes_what_threads_write(short_book, tmp_path, fake_engine, monkeypatch, loudness):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**DET, loudness=loudness, captions="vtt"))
    run_local(job, fake_engine)
    threads = outputs(out)
    used: list = []
    force_processes(monkeypatch, used)
    for p in out.rglob("*.flac"):
        p.unlink()
    (out / "manifest.parquet").unlink()
    finalize(load_job(out))
    assert used == [(2, 2)]
    procs = outputs(out)
    assert procs[0].keys() == threads[0].keys() and len(procs[0]) >= 2
    assert procs == threads


def test_local_run_writes_its_last_chapters_in_processes(short_book, tmp_path, fake_engine, monkeypatch):
    """The chapters still queued for the chapter thread when the last batch is written go to processes."""
    ref = tmp_path / "threads"
    run_local(prepare_job([short_book], ref, JobConfig(**DET)), fake_engine)
    used: list = []
    force_processes(monkeypatch, used)
    # both chapters complete with the last batch; the one chapter thread is busy with the first
    monkeypatch.setenv(FINALIZE_DELAY_ENV, "0.5")
    out = tmp_path / "procs"
    run_local(prepare_job([short_book], out, JobConfig(**DET)), fake_engine, chapter_threads=1)
    assert used == [(1, 1)]
    assert outputs(out) == outputs(ref)


def _die(*_, **__):
    import os

    os._exit(9)  # a chapter process killed (out of memory, say)


def test_a_chapter_process_that_dies_fails_the_finalize_as_a_retryable_error(short_book, tmp_path, fake_engine,
                                                                             monkeypatch):
    import multiprocessing

    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**DET))
    run_local(job, fake_engine, early_chapters=False)
    ref = outputs(out)
    (out / "manifest.parquet").unlink()
    for p in out.rglob("*.flac"):  # else their records let the finalize keep them
        p.unlink()
    used: list = []
    force_processes(monkeypatch, used)
    monkeypatch.setattr(chapter_pool, "pool_context", lambda preload: multiprocessing.get_context("fork"))
    monkeypatch.setattr("jobs.finalize.write_chapter_of", _die)
    with pytest.raises(ChildProcessError, match="ended without its result"):
        finalize(load_job(out))
    assert used and not (out / "manifest.parquet").exists()  # not complete, and not looking complete
    monkeypatch.undo()
    finalize(load_job(out))  # the same command again
    assert outputs(out) == ref


def test_kept_chapter_processes_serve_run_after_run_and_a_broken_pool_is_replaced(short_book, tmp_path, fake_engine,
                                                                                  monkeypatch):
    """A server's chapter processes (chapter_pool.KeptPool): forked once, they write the last chapters of
    one run after another (the same files as threads); a pool whose process died is replaced."""
    import os
    import signal
    import time

    refs = []
    for k in range(2):
        ref = tmp_path / f"threads{k}"
        run_local(prepare_job([short_book], ref, JobConfig(length_scale=1.0 + k / 10, **DET)), fake_engine)
        refs.append(outputs(ref))
    used: list = []
    force_processes(monkeypatch, used)
    monkeypatch.setenv(FINALIZE_DELAY_ENV, "0.5")
    kept = chapter_pool.KeptPool(2)
    try:
        pool = kept.get()
        pids = set(pool._processes)
        assert len(pids) == 2  # forked up front, not at a run's end
        for k in range(2):
            out = tmp_path / f"kept{k}"
            run_local(prepare_job([short_book], out, JobConfig(length_scale=1.0 + k / 10, **DET)), fake_engine,
                      chapter_threads=1, chapter_processes=kept)
            assert outputs(out) == refs[k]
            assert kept.get() is pool and set(pool._processes) == pids
        assert len(used) == 2
        os.kill(next(iter(pids)), signal.SIGKILL)
        end = time.monotonic() + 10
        while not getattr(pool, "_broken", False) and time.monotonic() < end:
            time.sleep(0.05)
        out = tmp_path / "after"
        run_local(prepare_job([short_book], out, JobConfig(**DET)), fake_engine, chapter_threads=1,
                  chapter_processes=kept)
        assert kept.get() is not pool
        assert outputs(out) == refs[0]
    finally:
        kept.close()
