"""Worker-side batch formation, and the work a worker does off its engine's thread.

A job is planned in small, length-sorted *units* (its planned batches, sized for a CPU
worker) so that submitting stays cheap and worker-agnostic: one Celery message per unit.
A worker whose engine takes more (a GPU: 1024 utterances) fills it at run time:

- :func:`gather` starts from the unit of the message it received and adds queued units of
  *any* job of the same synthesis class (:func:`jobs.synthesize.synthesis_class`: same voice
  weights and speaker; each job keeps its own speaking rate and noise scales), found in a Redis sorted set scored by priority and length
  (:meth:`workers.state.JobStore.add_ready`), nearest in length first and higher priorities
  first, until the engine's item or padded-phoneme budget is full. Each unit it adds is
  leased exactly as if its own message had been delivered (:meth:`JobStore.begin`), so
  exactly-once, leases, cancel and the reaper work per unit as before. The unit's own message
  is then taken off the queue (:func:`workers.enqueue.withdraw`); one delivered meanwhile finds
  the unit done (or leased) and is skipped.
- :class:`Offloader` writes the units' audio and records and counts them in Redis on a
  writer thread while the engine runs the next batch, and runs ``finalize`` (chapter
  encoding, the manifest) on a thread pool, so the engine's process never waits for disks
  or encoders. The Celery message is acknowledged when the engine call is done; the units'
  leases, renewed by a heartbeat until their records are written and counted, are what
  protects the work if the process dies in between (the reaper re-enqueues them).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import redis

from core.host_load import HostLoad
from workers.state import READY_RANK_SCALE, Holder, JobStore

log = logging.getLogger("booktts.batcher")

#: Candidates read from the ready index per look-up.
SCAN_LIMIT = 256
#: Engine calls whose results may wait for the writer at once (bounds host memory).
WRITER_DEPTH = 2


@dataclass
class Claimed:
    """A unit this worker holds the lease of."""

    job_dir: str
    job_id: str
    batch_id: int
    attempt: int
    queued_at: str | None
    queue: str


def rank_of(queue: str) -> int:
    from workers.celery_app import PRIORITIES, priority_of_queue

    return PRIORITIES.index(priority_of_queue(queue))


def unit_shape(job, batch_id: int) -> tuple[int, int]:
    """(utterances, longest utterance in phoneme ids) of one planned batch."""
    b = job.batches[batch_id]
    return b.size, b.max_len


def gather(store: JobStore, seed_job, seed: Claimed, holder: Holder, *, max_items: int, max_padded: int,
           lease_s: float, max_deliveries: int, load_job, mix_scales: bool = True) -> list[tuple[Claimed, object]]:
    """More units to run with ``seed`` in one engine call: (claimed unit, its job), leased.

    Capacity: at most ``max_items`` utterances and ``max_padded`` padded phoneme ids (utterances x
    longest) in the whole engine call, seed included; which candidates fit is
    :func:`jobs.batching.fill_call`'s (this reads them from Redis and leases those chosen). Order: higher priorities first; within the
    seed's priority the seed's own job first, then other jobs, each nearest in length first. Jobs
    are so finished one after the other (each one's finalize overlaps the next one's synthesis)
    rather than all at the end. Units of other jobs are taken only if their job directory opens
    here (``load_job``) and has the seed's synthesis class; with ``mix_scales`` false (an engine
    that takes one set of scales per call) also only if they have the seed job's scales (the
    others stay queued for another call).
    """
    from jobs.batching import fill_call
    from jobs.synthesize import synthesis_class

    sclass = synthesis_class(seed_job)
    items, longest = unit_shape(seed_job, seed.batch_id)
    if items >= max_items:
        return []
    out: list[tuple[Claimed, object]] = []
    stale: list[tuple[str, int]] = []
    own_rank = rank_of(seed.queue)
    try:
        # Candidates in the order they are wanted, read in one round trip: per priority (high
        # first) the seed's own job, then other jobs, each nearest in length (the seed's length and
        # longer ascending, then shorter descending).
        windows = []
        for rank in range(3):
            base = rank * READY_RANK_SCALE
            windows += [(base + longest, base + READY_RANK_SCALE - 1), (base, base + longest - 1)]
        found, own = store.ready_scan(sclass, windows, SCAN_LIMIT, seed.job_id, range(len(seed_job.batches)))
        order: list[tuple[str, int]] = []
        for rank in range(3):
            base = rank * READY_RANK_SCALE
            cands = found[2 * rank] + found[2 * rank + 1][::-1]
            if rank == own_rank:
                mine = sorted((c for c in own if base <= c[2] < base + READY_RANK_SCALE), key=lambda c: c[2])
                mine = [c for c in mine if c[2] >= base + longest] + [c for c in mine if c[2] < base + longest][::-1]
                cands = mine + cands
            order += [(j, b) for j, b, _ in cands]
        seen: set[tuple[str, int]] = {(seed.job_id, seed.batch_id)}
        order = [c for c in order if not (c in seen or seen.add(c))]
        # Choose by the budget locally, lease the chosen in one round trip; units another worker
        # holds (or that ended meanwhile) leave room that the next round offers to the rest.
        opened: dict[str, object] = {}  # job id -> the job if it opens here with the seed's class, else None

        def open_job(job_id: str):
            if job_id not in opened:
                job = _open(store, job_id, load_job)
                opened[job_id] = job if job is not None and synthesis_class(job) == sclass else None
            return opened[job_id]

        def shape_of(unit: tuple[str, int]) -> tuple[int, int] | None:
            job_id, batch_id = unit
            job = open_job(job_id)
            if job is None or batch_id >= len(job.batches):
                stale.append(unit)
                return None
            if not mix_scales and job.scales != seed_job.scales:
                return None  # stays queued for another call
            return unit_shape(job, batch_id)

        while order and items < max_items:
            chosen, rest = fill_call(order, shape_of, items, longest, max_items, max_padded)
            if not chosen:
                break
            began = store.begin_many([unit for unit, _, _ in chosen], holder, lease_s, max_deliveries)
            for ((job_id, batch_id), n, length), (verdict, value, queued_at, queue) in zip(chosen, began):
                job = opened[job_id]
                if verdict in ("done", "failed", "cancelled", "missing", "exhausted"):
                    stale.append((job_id, batch_id))
                    if verdict == "exhausted":  # let its own message record the failure
                        store.release(job_id, batch_id, holder)
                    continue
                if verdict != "ok":  # leased by another worker
                    continue
                out.append((Claimed(str(job.out_dir), job_id, batch_id, int(value), queued_at, queue or seed.queue),
                            job))
                items += n
                longest = max(longest, length)
            if all(v == "ok" for v, *_ in began):
                break  # the budget is as full as this order fills it
            order = rest
    finally:
        store.drop_ready(sclass, stale + [(c.job_id, c.batch_id) for c, _ in out])
    return out


_JOB_DIRS: dict[str, str] = {}


def _open(store: JobStore, job_id: str, load_job):
    """The job ``job_id`` from the directory Redis records for it, or None if it cannot be opened here."""
    from pathlib import Path

    from core.errors import TTSError

    job_dir = _JOB_DIRS.get(job_id)
    if job_dir is None:
        info = store.get_job(job_id)
        if info is None or not info.out_dir:
            return None
        job_dir = _JOB_DIRS.setdefault(job_id, info.out_dir)
    try:
        from workers.runtime import check_job_dir

        job = load_job(Path(check_job_dir(job_dir)))  # only under this worker's --allowed-root
    except (TTSError, OSError, ValueError) as exc:
        log.debug("job %s in %s cannot be opened here (%s); not gathered", job_id, job_dir, exc)
        return None
    return job if job.job_id == job_id else None


class Offloader:
    """This process's writer thread (batch records) and finalize pool. One per worker process.

    A finalize (reading the batch audio, loudness, encoding the chapter files, the manifest) runs
    in a child process (:mod:`workers.finalize_child`): in a thread of the engine's process its
    Python work would hold the interpreter lock the engine's launch thread needs (the engine's time
    in the bulk benchmark grew by more than half while finalizes ran beside it: docs/PERFORMANCE.md).
    A finalize thread waits for the child while the job's finalize lease is renewed."""

    def __init__(self, finalize_threads: int | None = None, unit_writers: int = 4, load: HostLoad | None = None) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=WRITER_DEPTH)
        self._writer = threading.Thread(target=self._run, name="booktts-writer", daemon=True)
        self._writer.start()
        # jobs that finish close together finalize at once (CPU work in child processes)
        n = finalize_threads or max(1, min(8, (os.cpu_count() or 2) // 2))
        self._units = ThreadPoolExecutor(max(1, unit_writers), thread_name_prefix="booktts-unit")
        self._finalize = ThreadPoolExecutor(n, thread_name_prefix="booktts-finalize")
        self._pending: set[Future] = set()
        self._lock = threading.Lock()
        if load is None:
            from jobs.segment_pool import host_cores

            load = HostLoad(host_cores())
        #: the host's busy CPUs, sampled from now on (how many chapter processes a finalize may start)
        self.load = load
        self.load.busy()

    def chapter_processes(self, running: int, synthesis_waiting: bool = False) -> int:
        """Processes one finalize may write its chapters with when ``running`` finalizes (it included)
        run on this node (:mod:`workers.finalize_slots`): its share of the host's cores or 0 (threads
        of its finalize process) when that is under :data:`jobs.chapter_pool.PROCESS_MIN_CORES`.
        With ``synthesis_waiting`` (queued batches of the job's synthesis class: the engines have
        work ahead) no more than the cores idle now (:attr:`load`): the processes would otherwise take
        CPU time from the engines and the other finalizes for the wall time of one finalize. The last
        finalizes, with nothing left to synthesize, take their share. The processes run at a lower
        priority (:data:`workers.finalize_child.CHILD_NICE`), so the engine's process keeps its core."""
        from jobs.chapter_pool import PROCESS_MIN_CORES
        from workers.finalize_slots import chapter_processes

        idle = self.load.idle_cores() if synthesis_waiting else None
        return chapter_processes(self.load.cores, running, PROCESS_MIN_CORES, idle)

    def encoding(self, running: int, synthesis_waiting: bool):
        """The FLAC level (for ``--flac-level auto``) and chapters at once of a finalize that starts now
        (:func:`jobs.encoding.choose`) from the host's busy share (:attr:`load`), whether batches wait for
        an engine, and the finalizes running on this node (``running``, it included)."""
        from jobs.encoding import choose

        return choose(self.load.busy(), synthesis_waiting, self.load.cores, running)

    def write(self, fn) -> None:
        """Run ``fn()`` on the writer thread (blocks while :data:`WRITER_DEPTH` calls wait)."""
        self._q.put(fn)

    def each(self, fn, items) -> None:
        """``fn(item)`` for every item, ``unit_writers`` at a time (from the writer thread: an engine
        call's units); returns when all are done."""
        items = list(items)
        if len(items) == 1:
            fn(items[0])
            return
        for f in [self._units.submit(fn, item) for item in items]:
            f.result()

    def finalize(self, fn) -> None:
        """Run ``fn()`` on a finalize thread."""
        fut = self._finalize.submit(fn)
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: Future) -> None:
        with self._lock:
            self._pending.discard(fut)

    def _run(self) -> None:
        while True:
            fn = self._q.get()
            try:
                fn()
            except Exception:  # fn handles its own failures; this keeps the thread alive
                log.exception("writer: unexpected error")
            finally:
                self._q.task_done()

    def drain(self, timeout: float | None = None) -> None:
        """Wait for queued writes and running finalizes (warm shutdown, tests)."""
        self._q.join()
        with self._lock:
            pending = list(self._pending)
        for f in pending:
            try:
                f.result(timeout=timeout)
            except Exception:
                pass


@dataclass
class CallClock:
    """Where an engine process's time goes between one engine call and the next: one line per call
    in the worker's log (``bench/bulk_gpu.py`` sums them into its phase table). One per process."""

    last_end: float | None = None
    skipped: int = 0
    skipped_s: float = 0.0
    withdrawn: int = 0

    def withdrew(self, n: int) -> None:
        """Gathered units' own messages taken off the queue before delivery (never skipped)."""
        self.withdrawn += n

    def skip(self, started: float, now: float) -> None:
        """A message whose unit was already done or leased (a gathered unit's own message)."""
        self.skipped += 1
        self.skipped_s += now - started

    def call(self, started: float, loaded: float, gathered: float, synth_start: float, synth_end: float,
             infer_s: float, end: float) -> str:
        """Account one engine call (perf_counter stamps of its task) and return its timing, as
        ``key=value`` fields: ``wait`` (outside any task since the previous call: Celery's delivery,
        an empty queue), ``skipped`` (messages/ms), ``claim`` (lease and job), ``gather``, ``around``
        (building the batch and collecting its audio), ``infer`` (the engine), ``handoff`` (waiting for
        the writer), all in ms; then ``withdrawn``, the gathered units' messages taken off the queue."""
        wait = (started - self.last_end - self.skipped_s) if self.last_end is not None else 0.0
        ms = lambda v: f"{max(0.0, v) * 1000:.0f}"  # noqa: E731
        line = (f"wait={ms(wait)} skipped={self.skipped}/{ms(self.skipped_s)} claim={ms(loaded - started)} "
                f"gather={ms(gathered - loaded)} around={ms(synth_end - synth_start - infer_s)} "
                f"infer={ms(infer_s)} handoff={ms(end - synth_end)} withdrawn={self.withdrawn}")
        self.last_end, self.skipped, self.skipped_s, self.withdrawn = end, 0, 0.0, 0
        return line


_clock: tuple[int, CallClock] | None = None


def call_clock() -> CallClock:
    """This process's :class:`CallClock` (a new one after a fork)."""
    global _clock
    if _clock is None or _clock[0] != os.getpid():
        _clock = (os.getpid(), CallClock())
    return _clock[1]


_offloader: tuple[int, Offloader] | None = None
_off_lock = threading.Lock()


def offloader() -> Offloader:
    """This process's :class:`Offloader` (a new one after a fork)."""
    global _offloader
    with _off_lock:
        if _offloader is None or _offloader[0] != os.getpid():
            from workers.runtime import settings

            _offloader = (os.getpid(), Offloader(unit_writers=settings().unit_writers))
        return _offloader[1]


def drain_if_started(timeout: float | None = None) -> None:
    off = _offloader
    if off is not None and off[0] == os.getpid():
        try:
            off[1].drain(timeout)
        except redis.exceptions.RedisError:
            pass
