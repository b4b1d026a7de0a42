"""The local (embedded) runner: the whole pipeline in one process, no broker.

It calls exactly the functions the Celery workers call (:mod:`jobs.synthesize`, :mod:`jobs.finalize`); the loop over
batches runs here, and nothing that is not synthesis runs on the loop's thread:

- a writer thread writes each batch's audio and record (:func:`jobs.synthesize.write_unit`) while
  the engine synthesizes the next one; at most ``writer_depth`` synthesized batches wait for it
  (back-pressure: the loop blocks when they do). Its first error stops the writing (nothing
  after the failed batch is written, as in a serial loop) and is raised on the loop's thread;
- a chapter whose batches are all done is written at once (:func:`jobs.finalize.write_chapter`)
  on a small pool of threads, from the audio still in memory, while the rest is synthesized.
  An early chapter write that fails is left to the final ``finalize``, which writes it again and
  reports its error as before. Early writes are skipped while the output filesystem has less free
  space than the batches still to be written need (twice their estimated size plus the chapter),
  so that chapter files never take the space of synthesized audio;
- ``finalize`` at the end writes the chapters that are left and the manifest (last, atomically).

Outputs are the same bytes as running :func:`jobs.synthesize.run_batch` for each batch and then
:func:`jobs.finalize.finalize`: the same functions write them, from the same audio.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from jobs.claim import claim, run_lock
from core.files import free_bytes
from core.host_load import Since
from jobs import chapter_pool, encoding
from jobs.batching import RUN_ORDERS, run_order
from jobs.finalize import (ChapterPart, ChapterWork, FinalizeSummary, chapter_key, finalize, finalized_summary,
                           selected_chapters, sweep_stale_temp_files, write_chapter, write_chapters_in_processes)
from jobs.job import Job
from jobs.synthesize import Unit, synthesize_units, write_unit

log = logging.getLogger("booktts.runner")

#: Synthesized batches that may wait for the writer thread at once (bounds host memory).
WRITER_DEPTH = 2
#: Most chapter files written at once while batches are synthesized (also bounded by the cores).
CHAPTER_THREADS = 4
#: Most chapter files written at once after the last batch (the loop is done: the host's cores are free).
TAIL_THREADS = 32
#: Batch audio kept in memory for the chapters still to be written; past this, they read batch files.
MEMORY_AUDIO_BYTES = 4 << 30


@dataclass
class RunStats:
    batches_run: int
    batches_skipped: int
    audio_s: float
    wall_s: float
    summary: FinalizeSummary
    phases: dict = field(default_factory=dict)
    """Seconds per phase of this run: ``synth_loop`` (first synthesis to last batch handed to the
    writer), ``engine_busy`` (inside the engine), ``write`` (writer thread busy), ``write_wait`` (the
    loop waiting for the writer: back-pressure and the final drain), ``chapters_early`` (chapter
    threads busy, summed over threads), ``chapters_early_n``, ``first_chapter_s`` (from the start of
    the run to the first chapter file written early; None: none was), ``chapters_tail`` (after the writer
    drained: writing the chapters still queued, waiting for those being written), ``finalize``
    (the final finalize call: chapters not written yet, the manifest)."""

    @property
    def x_real_time(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0


def batch_order(job: Job, pending: list[int], order: str = "plan") -> list[int]:
    """``pending`` in the order they are run (:func:`jobs.batching.run_order`, :data:`jobs.batching.RUN_ORDERS`)."""
    chapters = ([r.batch_id for r in work[3] if r.batch_id >= 0] for work in selected_chapters(job))
    return run_order(pending, chapters, order)


class _Overlap:
    """The writer thread and the early chapter writes of one local run."""

    def __init__(self, job: Job, pending: list[int], writer_depth: int, chapter_threads: int,
                 early_chapters: bool, on_chapter: Callable[[str], None] | None,
                 kept: chapter_pool.KeptPool | None = None) -> None:
        self.job = job
        self.kept = kept
        self.on_chapter = on_chapter
        self.early = early_chapters
        self.q: queue.Queue = queue.Queue(maxsize=max(1, writer_depth))
        self.done: queue.SimpleQueue = queue.SimpleQueue()  # (batch id, record) written, for the loop's callbacks
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.records: dict = {}
        self.memory: dict[int, list[np.ndarray]] = {}
        self.memory_bytes = 0
        self.written: dict[tuple[int, int], ChapterPart] = {}
        self.futures: list[tuple[ChapterWork, Future]] = []
        self.disk_trouble = False
        self.times = {"write": 0.0, "chapters_early": 0.0, "chapters_early_n": 0, "first_chapter_s": None}
        self.t0 = time.perf_counter()
        #: the host's CPU time from here on: what the chapters' FLAC level is chosen from (jobs.encoding)
        self.since = Since()
        self.cores = chapter_pool.host_cores()
        self._tail: encoding.Encoding | None = None
        pending_set = set(pending)
        self.chapters = selected_chapters(job)
        self.waiting: dict[tuple[int, int], set[int]] = {}  # chapter -> its batches not written yet
        self.users: dict[int, set[tuple[int, int]]] = {}  # batch -> chapters not written yet that read it
        for work in self.chapters:
            key = chapter_key(work)
            batches = {r.batch_id for r in work[3] if r.batch_id >= 0}
            self.waiting[key] = batches & pending_set
            for b in batches:
                self.users.setdefault(b, set()).add(key)
        sr = job.sample_rate
        self.unwritten_bytes = {b: 2 * job.batch_estimated_seconds(b) * sr for b in pending}
        self.pool = ThreadPoolExecutor(max(1, min(chapter_threads, (os.cpu_count() or 2) - 1)),
                                       thread_name_prefix="chapters") if early_chapters else None
        self.thread = threading.Thread(target=self._writer, name="batch-writer", daemon=True)
        self.thread.start()
        for work in self.chapters:
            if not self.waiting[chapter_key(work)]:
                self._chapter_ready(work)

    # ---------------------------------------------------------------- the loop's side

    def put(self, synth) -> None:
        """Hand a synthesized batch to the writer; blocks while ``writer_depth`` wait. Raises the
        writer's error."""
        while True:
            self.raise_error()
            try:
                self.q.put(synth, timeout=0.1)
                return
            except queue.Full:
                continue

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def written_batches(self):
        """(batch id, record) of batches written since the last call."""
        while True:
            try:
                yield self.done.get_nowait()
            except queue.Empty:
                return

    def drain(self) -> None:
        """Wait until every batch handed over is written; raise the writer's error."""
        self.q.put(None)
        self.thread.join()
        self.raise_error()

    def tail_encoding(self) -> encoding.Encoding:
        """The FLAC level (for ``--flac-level auto``) of the chapters written once synthesis is done:
        no engine of this run waits, so it follows what else kept the host busy during the run (this
        process's own CPU time left out). Chosen once, at the first call."""
        if self._tail is None:
            self._tail = encoding.choose(self.since.busy(others=True), False, self.cores)
        return self._tail

    def finish_chapters(self) -> None:
        """Once every batch is written: the chapters still queued for the chapter threads are
        written now on up to :data:`TAIL_THREADS` threads (the loop is done, all cores may encode),
        while those being written finish. Chapters not submitted early (the early writes were
        off, or stopped after a failure) are left to ``finalize``."""
        left = [work for work, f in self.futures if f.cancel()]
        threads = max(1, min(len(left), os.cpu_count() or 1, TAIL_THREADS))
        processes = chapter_pool.processes_for(self.job, left)
        chosen = self.tail_encoding() if left else None
        if left:
            log.info("job %s: %d chapters left after the last batch: %s", self.job.job_id, len(left),
                     encoding.describe(self.job.config.flac_level, chosen, self.job.config.audio_format))
        if processes:  # hours of audio: processes, not threads that share one interpreter lock
            self.written.update(write_chapters_in_processes(self.job, left, processes, self.kept, chosen))
        elif left:
            with ThreadPoolExecutor(threads, thread_name_prefix="chapters-tail") as pool:
                for work, part in zip(left, pool.map(lambda w: write_chapter(self.job, w, self.records, self.memory,
                                                                             chosen), left)):
                    self.written[chapter_key(work)] = part
        for _, f in self.futures:
            if not f.cancelled():
                f.result()

    def close(self) -> None:
        """On the way out (also on an error or Ctrl-C): let the writer finish what it holds (those
        batches are synthesized already), then stop the chapter threads."""
        if self.thread.is_alive():
            self.q.put(None)  # the writer keeps taking items, also after an error
            self.thread.join()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    # ---------------------------------------------------------------- the writer thread

    def _writer(self) -> None:
        while True:
            synth = self.q.get()
            if synth is None:
                return
            if self.error is not None:
                continue  # after the first error nothing more is written (as in a serial loop)
            t0 = time.perf_counter()
            try:
                rec = write_unit(synth, 0, worker="local")
            except BaseException as exc:  # surfaced on the loop's thread
                self.error = exc
                continue
            finally:
                self.times["write"] += time.perf_counter() - t0
            self.done.put((synth.units[0].batch_id, rec))
            self._batch_written(synth, rec)

    def _batch_written(self, synth, rec) -> None:
        b = rec.batch_id
        ready = []
        with self.lock:
            self.unwritten_bytes.pop(b, None)
            self.records[b] = rec
            ours = rec.engine_batch == synth.engine_batch  # not another writer's record of the batch
            nbytes = sum(a.nbytes for a in synth.items[0])
            if ours and self.early and self.users.get(b) and self.memory_bytes + nbytes <= MEMORY_AUDIO_BYTES:
                self.memory[b] = synth.written_audio(0)[1]  # as written: normalised where the job asks
                self.memory_bytes += nbytes
            for work in self.chapters:
                key = chapter_key(work)
                w = self.waiting[key]
                if b in w:
                    w.discard(b)
                    if not w:
                        ready.append(work)
        for work in ready:
            self._chapter_ready(work)

    # ---------------------------------------------------------------- chapter threads

    def _chapter_ready(self, work: ChapterWork) -> None:
        if self.pool is not None and not self.disk_trouble:
            self.futures.append((work, self.pool.submit(self._write_early, work)))

    def _room_for(self, work: ChapterWork) -> bool:
        with self.lock:
            reserve = 2 * sum(self.unwritten_bytes.values())
        chapter = sum(2 * i["samples"] for r in work[3] if r.batch_id >= 0 and r.batch_id in self.records
                      for i in [self.records[r.batch_id].items[r.batch_pos]])
        free = free_bytes(self.job.out_dir)
        return free is None or free >= reserve + 2 * chapter

    def _write_early(self, work: ChapterWork) -> None:
        key = chapter_key(work)
        if self.disk_trouble or self.error is not None or not self._room_for(work):
            return  # left to the final finalize
        t0 = time.perf_counter()
        # this run's engine has work waiting while a chapter is written early: CPU time is the engine's
        # (on a CPU node), so the level follows the host's load with the engine counted (jobs.encoding)
        chosen = encoding.choose(self.since.busy(), True, self.cores)
        try:
            part = write_chapter(self.job, work, self.records, self.memory, chosen)
        except Exception as exc:
            self.disk_trouble = self.disk_trouble or isinstance(exc, OSError)
            log.info("job %s: chapter %s not written early (%s: %s); finalize writes it", self.job.job_id,
                     work[2]["file"], type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return
        finally:
            with self.lock:
                self.times["chapters_early"] += time.perf_counter() - t0
        with self.lock:
            self.written[key] = part
            self.times["chapters_early_n"] += 1
            if self.times["first_chapter_s"] is None:
                self.times["first_chapter_s"] = time.perf_counter() - self.t0
            for b in {r.batch_id for r in work[3] if r.batch_id >= 0}:
                users = self.users.get(b)
                if users is not None:
                    users.discard(key)
                    if not users and b in self.memory:
                        self.memory_bytes -= sum(a.nbytes for a in self.memory.pop(b))
        if self.on_chapter:
            self.on_chapter(work[2]["file"])


def run_local(job: Job, engine, on_batch: Callable[[int, float], None] | None = None, *,
              on_chapter: Callable[[str], None] | None = None, order: str = "plan",
              writer_depth: int = WRITER_DEPTH, chapter_threads: int = CHAPTER_THREADS,
              early_chapters: bool = True, chapter_processes: chapter_pool.KeptPool | None = None) -> RunStats:
    """Run every pending batch of ``job`` through ``engine``, then finalize.

    ``on_batch(batch_id, audio_seconds)`` is called, on the calling thread, after each batch is
    written (for progress bars); ``on_chapter(relative_path)`` on a chapter thread after a chapter
    file was written early (not for those the final finalize writes). ``order``: see
    :data:`jobs.batching.RUN_ORDERS`. ``chapter_processes``: the processes that write the chapters left after the
    last batch, where processes write them (a long-lived caller's, started once; default: a pool
    forked for this run). Batches already done (a previous, interrupted run) are not synthesized again,
    and the temporary files such a run left behind are removed.
    The directory's run lock is held throughout: another local run into the same directory
    (even of the same job) is refused while this one runs (:func:`jobs.claim.run_lock`).
    """
    if order not in RUN_ORDERS:
        raise ValueError(f"unknown batch order {order!r}; choose one of {', '.join(RUN_ORDERS)}")
    with run_lock(job.out_dir, job.job_id):
        claim(job.out_dir, job.job_id)
        sweep_stale_temp_files(job)
        pending = job.pending_batches()
        skipped = len(job.batches) - len(pending)
        audio_s = 0.0
        phases: dict = {}
        t0 = time.perf_counter()
        if not pending and job.finalized:
            summary = finalized_summary(job)
            return RunStats(0, skipped, 0.0, time.perf_counter() - t0, summary, phases)

        def report(ov: _Overlap) -> None:
            nonlocal audio_s
            for batch_id, rec in ov.written_batches():
                secs = rec.audio_samples / rec.sample_rate
                audio_s += secs
                if on_batch:
                    on_batch(batch_id, secs)

        ov = _Overlap(job, pending, writer_depth, chapter_threads, early_chapters, on_chapter, chapter_processes)
        engine_s = wait_s = 0.0
        try:
            for batch_id in batch_order(job, pending, order):
                ov.raise_error()
                t = time.perf_counter()
                synth = synthesize_units([Unit(job, batch_id)], engine)
                engine_s += time.perf_counter() - t
                t = time.perf_counter()
                ov.put(synth)
                wait_s += time.perf_counter() - t
                report(ov)
            phases["synth_loop"] = time.perf_counter() - t0
            t = time.perf_counter()
            ov.drain()
            report(ov)
            wait_s += time.perf_counter() - t
            wall = time.perf_counter() - t0
            t = time.perf_counter()
            ov.finish_chapters()
            phases["chapters_tail"] = time.perf_counter() - t
        finally:
            ov.close()
            report(ov)
        t = time.perf_counter()
        summary = finalize(job, written=ov.written, memory=ov.memory, records=ov.records, chosen=ov.tail_encoding())
        phases.update(engine_busy=engine_s, write_wait=wait_s, finalize=time.perf_counter() - t, **ov.times)
    return RunStats(len(pending), skipped, audio_s, wall, summary, phases)
