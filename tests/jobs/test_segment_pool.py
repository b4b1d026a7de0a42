"""Planning on the host's cores: the same utterances as segmenting chapter after chapter."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import jobs.segment_pool as segment_pool
from jobs.config import JobConfig
from jobs.ingest import Chapter, load_book
from jobs.prepare import prepare_job
from jobs.plan import to_table
from jobs.segment_pool import _pieces, segment_chapters

DATA = Path(__file__).resolve().parent.parent / "data"


def test_pieces_are_whole_paragraphs_in_order_with_the_title_first():
    ch = Chapter(3, "CHAPTER III.", ["a" * 50, "b" * 50, "c" * 50, "d" * 10, "e" * 200])
    pieces = _pieces(ch, 100)
    assert [p.title for p, _ in pieces] == ["CHAPTER III.", "", "", ""]
    assert [start for _, start in pieces] == [0, 1, 3, 4]  # [a] [b c] [d] [e]
    assert [para for p, _ in pieces for para in p.paragraphs] == ch.paragraphs
    assert all(p.index == 3 for p, _ in pieces)
    assert _pieces(Chapter(1, "", []), 100) == [(Chapter(1, "", []), 0)]


def test_parallel_segmentation_equals_serial_on_a_whole_book(voice):
    book = load_book(DATA / "alice-pg11.txt")
    # the announcement goes with the first piece of chapter 1; the spoken text (normalisation) in every worker
    chapters = [(0, ch, "Alice, by Lewis Carroll." if i == 0 else None) for i, ch in enumerate(book.chapters)]
    seen = []
    serial = segment_chapters(voice, 400, chapters, workers=1, normalize_text=True)
    parallel = segment_chapters(voice, 400, chapters, workers=2, min_chars=0, piece_chars=3000,
                                progress=lambda b_i, ch: seen.append(ch.index), normalize_text=True)
    assert max(len(_pieces(ch, 3000)) for _, ch, _ in chapters) > 1, "chapters were cut into pieces"
    assert serial[0][0].paragraph_index == -2 and serial[0][0].text == "Alice, by Lewis Carroll."
    assert any(u.spoken_text for utts in serial for u in utts), "normalisation ran"
    assert parallel == serial
    assert seen == [ch.index for ch in book.chapters]


def test_prepare_job_plans_the_same_job_in_parallel(tmp_path, monkeypatch):
    book = DATA / "short-story.txt"
    serial = prepare_job([book], tmp_path / "a", JobConfig())
    monkeypatch.setattr(segment_pool, "PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr(segment_pool, "PIECE_CHARS", 200)
    monkeypatch.setattr(segment_pool, "host_cores", lambda: 2)
    monkeypatch.setattr(segment_pool, "_context", lambda: multiprocessing.get_context("spawn"))
    parallel = prepare_job([book], tmp_path / "b", JobConfig())
    assert parallel.job_id == serial.job_id
    assert to_table(parallel.rows).equals(to_table(serial.rows))
    assert parallel.meta["batches"] == serial.meta["batches"] and parallel.meta["books"][0]["chapters"] == \
        serial.meta["books"][0]["chapters"]
    assert (tmp_path / "a" / "plan.parquet").read_bytes() == (tmp_path / "b" / "plan.parquet").read_bytes()


def test_small_inputs_stay_in_this_process(voice, monkeypatch):
    def no_pool(*a, **k):
        raise AssertionError("a process pool for a small input")

    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    out = segment_chapters(voice, 400, [(0, Chapter(1, "One", ["A short paragraph. Two sentences."]), None)])
    assert [u.text for u in out[0]] == ["One", "A short paragraph.", "Two sentences."]


def test_with_another_thread_running_the_pool_forks_from_a_clean_server(tmp_path, monkeypatch):
    """cli.py run starts its engine on a thread while it plans: the pool then uses forkserver (not a
    fork of a multi-threaded process), and the plan is still the serial one."""
    import threading

    book = DATA / "short-story.txt"
    serial = prepare_job([book], tmp_path / "a", JobConfig())
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert segment_pool._context().get_start_method() == "forkserver"
        monkeypatch.setattr(segment_pool, "PARALLEL_MIN_CHARS", 0)
        monkeypatch.setattr(segment_pool, "PIECE_CHARS", 200)
        monkeypatch.setattr(segment_pool, "host_cores", lambda: 2)
        parallel = prepare_job([book], tmp_path / "b", JobConfig())
    finally:
        stop.set()
    assert (tmp_path / "a" / "plan.parquet").read_bytes() == (tmp_path / "b" / "plan.parquet").read_bytes()


def test_plannings_running_at_once_share_the_cores(monkeypatch, tmp_path):
    """Alone, a planning takes every core; with others planning on the host (their slots held by other
    processes) it takes its share, and plans in its own process once that share is under
    SHARED_MIN_CORES; a holder that dies stops counting. The utterances are the same either way."""
    import contextlib
    import subprocess
    import sys

    from core import slots
    import jobs.segment_pool as sp

    monkeypatch.setattr(sp, "planning_slots_dir", lambda: tmp_path / "planning")
    monkeypatch.setattr(sp, "host_cores", lambda: 16)
    seen = []
    monkeypatch.setattr(sp, "_segment", lambda *a: seen.append(a[3]) or [])

    def holders(n):
        code = ("import sys, time\nfrom core import slots\n"
                "with slots.hold(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n")
        procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "planning")], stdout=subprocess.PIPE,
                                  text=True, cwd=str(Path(__file__).resolve().parents[2])) for _ in range(n)]
        for p in procs:
            assert p.stdout.readline().strip() == "held"
        return procs

    chapters = [(0, Chapter(1, "One", ["x" * 100]), None)]
    segment_chapters(None, 400, chapters, min_chars=0)
    procs = holders(3)
    try:
        segment_chapters(None, 400, chapters, min_chars=0)  # 4 plannings on 16 cores: 4 each
        extra = holders(4)
        segment_chapters(None, 400, chapters, min_chars=0)  # 8: 2 each, under the minimum: in process
        for p in extra:
            p.kill()
            p.wait()
        segment_chapters(None, 400, chapters, min_chars=0)  # the killed ones no longer count
        segment_chapters(None, 400, chapters, workers=3, min_chars=0)  # a caller's choice holds
        segment_chapters(None, 400, chapters)  # small text: in process, no slot taken
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert seen == [16, 4, 1, 4, 3, 1]
    assert slots.count(tmp_path / "planning") == 0
