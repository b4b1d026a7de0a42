"""Recovery: the heartbeat that keeps a batch lease alive, the reaper that re-enqueues work whose
lease expired, and the rebuild of jobs Redis lost.

A worker that starts a batch takes its lease (a Redis key with a TTL of
``--lease-seconds``, see :meth:`workers.state.JobStore.begin`) and records
itself in the job's ``running`` hash. A :class:`Heartbeat` thread renews the
lease every third of its TTL while the batch runs. If the whole node vanishes
(SIGKILL of the worker and its children, power loss), nothing renews it: the
key expires, and the next reaper sweep finds a ``running`` entry without a
lease and enqueues the batch again. That takes at most about
``lease + lease/3`` seconds, instead of the broker's visibility timeout
(hours). The message of the dead node is redelivered by kombu much later and
is then skipped, because the batch is done.

A reaper thread runs in every worker process (:class:`ReaperThread`); a short
Redis lock makes one sweep per interval happen in the whole fleet. ``status``
and ``resume`` sweep too. The reaper also rebuilds jobs that workers of this node have seen and
that Redis no longer knows (Redis restarted without persistence): :func:`rebuild_lost_jobs`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import redis

from core import settings
from core.errors import JobError
from workers import runtime
from workers.backlog import UNACKED_INDEX_KEY, UNACKED_KEY
from workers.celery_app import priority_of_queue
from workers.control import start_job, still_sending
from workers.enqueue import UNIT_HEADER, enqueue_batches, enqueue_finalize
from workers.state import FINALIZE, Holder, JobStatus, JobStore, check_job_id, planned_batch

log = logging.getLogger("booktts.recovery")


class Heartbeat:
    """Renew leases in a daemon thread while the ``with`` block runs (or until :meth:`stop`).

    It starts with one piece of work (a batch id or ``finalize`` of a job); :meth:`add` and
    :meth:`discard` change the set while it runs (a worker that gathered several batches into
    one engine call renews them all, and drops each once it is counted).
    """

    def __init__(self, store: JobStore, job_id: str, batch: int | str, holder: Holder, lease_s: float,
                 interval_s: float | None = None) -> None:
        self.store, self.holder = store, holder
        self.lease_s = lease_s
        self.interval_s = interval_s or max(lease_s / 3.0, 0.2)
        self._pieces: list[tuple[str, int | str]] = [(job_id, batch)]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id}-{batch}", daemon=True)
        self.lost = False

    def __enter__(self) -> "Heartbeat":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def add(self, job_id: str, batch: int | str) -> None:
        with self._lock:
            self._pieces.append((job_id, batch))

    def discard(self, job_id: str, batch: int | str) -> None:
        with self._lock:
            if (job_id, batch) in self._pieces:
                self._pieces.remove((job_id, batch))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                pieces = list(self._pieces)
            for job_id, batch in pieces:
                try:
                    r = self.store.renew(job_id, batch, self.holder, self.lease_s)
                except redis.exceptions.RedisError as exc:
                    log.warning("lease %s/%s: cannot renew (%s); retrying", job_id, batch, exc)
                    continue
                if r == 0 and not self.lost:
                    self.lost = True
                    log.warning("lease %s/%s: taken over by another worker; finishing anyway (the output is "
                                "idempotent and counted once)", job_id, batch)
                elif r == 2:
                    log.warning("lease %s/%s: had vanished (Redis restarted or this process stalled); re-taken",
                                job_id, batch)


class ReaperThread(threading.Thread):
    """Periodically re-enqueue orphaned batches and rebuild lost jobs (one per worker process)."""

    def __init__(self, store_factory, interval_s: float) -> None:
        super().__init__(name="booktts-reaper", daemon=True)
        self.store_factory = store_factory
        self.interval_s = max(float(interval_s), 0.2)
        self._stop = threading.Event()
        self._last_error = 0.0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                store = self.store_factory()
                rebuild_lost_jobs(store)
                if store.try_lock(JobStore.K_REAPER, self.interval_s * 0.9):
                    reap(store)
                    requeue_stranded(store, 2 * runtime.settings().lease_seconds)
            except Exception as exc:  # keep the thread alive through Redis restarts and the like
                if time.monotonic() - self._last_error > 30:
                    self._last_error = time.monotonic()
                    log.warning("reaper: %s: %s (will retry)", type(exc).__name__, exc)


# ------------------------------------------------------------------ lost jobs, expired leases


def _load_job(job_dir: Path):
    from jobs.job import load_job

    return load_job(job_dir)


def check_rebuild_dir(job_dir: str, job_id: str) -> str:
    """The real path of ``job_dir`` if job ``job_id`` may be rebuilt from it; :class:`JobError` (one line
    saying why) otherwise. A state-directory record or a message names the directory; the directory
    itself must agree:

    - it lies inside this worker's allowed roots (:func:`workers.runtime.check_job_dir`) and is named by
      its real path (no symlink on the way);
    - its claim (``.work/claim.json``, :mod:`jobs.claim`) names ``job_id``;
    - it is not a copy: ``.work/queue.json`` (:func:`workers.control.record_queue`), when there, names
      this very directory. A copy of a running job's directory carries the original's path there; the
      reaper used to finish the job in the copy and leave the original incomplete.

    Those files are read with :func:`workers.node_state.read_record` (no symlink, no FIFO, small)."""
    from jobs.claim import WORK_DIR, claim_path
    from workers.control import QUEUE_FILE
    from workers.node_state import read_record

    real = runtime.check_job_dir(job_dir)
    if real != os.path.normpath(job_dir):
        raise JobError(f"job {job_id}: {job_dir} is not the real path of its directory ({real}); not rebuilt")
    try:
        claim = read_record(claim_path(Path(real)), own=False)
    except FileNotFoundError:
        raise JobError(f"job {job_id}: {real} has no claim ({claim_path(Path(real))}); not rebuilt; "
                       f"`resume {real}` if it is the job's directory") from None
    if claim.get("job_id") != job_id:
        raise JobError(f"job {job_id}: {real} is claimed by job {claim.get('job_id')!r}; not rebuilt")
    try:
        recorded = read_record(Path(real) / WORK_DIR / QUEUE_FILE, own=False).get("dir")
    except FileNotFoundError:
        recorded = None
    if recorded is not None and recorded != real:
        raise JobError(f"job {job_id}: {real} is a copy of the job's directory {recorded} (its {WORK_DIR}/"
                       f"{QUEUE_FILE} says so); not rebuilt from the copy; `resume {real}` if the copy is the "
                       f"one to finish")
    return real


def rebuild_job(store: JobStore, job_dir: str, job_id: str, queue: str) -> bool:
    """Re-create a job Redis lost, from its directory (checked first, :func:`check_rebuild_dir`). True
    if this call re-created it."""
    try:
        job_dir = check_rebuild_dir(job_dir, job_id)
    except JobError as exc:
        log.warning("job %s was missing from Redis and is not rebuilt: %s", job_id, exc)
        return False
    job = _load_job(Path(job_dir))
    if job.job_id != job_id:
        return False
    try:
        info, n = start_job(store, job, priority_of_queue(queue), queue, mode="rebuild")
    except JobError as exc:  # another job took the directory over in Redis meanwhile
        log.warning("job %s was missing from Redis and is not rebuilt: %s", job_id, exc)
        return False
    log.warning("job %s was missing from Redis (restarted without persistence?): rebuilt from %s, "
                "%d batches enqueued", job_id, job_dir, n)
    return True


def rebuild_lost_jobs(store: JobStore) -> int:
    """Rebuild the jobs that workers of this node have seen and Redis no longer knows (:func:`runtime.remember_job`)."""
    n = 0
    for job_id, (job_dir, queue) in runtime.known_jobs(store.url).items():
        info = store.get_job(job_id)
        if info is not None:
            if not info.status.active:
                runtime.forget_job(job_id)
            continue
        try:
            job_dir = check_rebuild_dir(job_dir, job_id)
            job = _load_job(Path(job_dir))
        except JobError as exc:  # a forged or stale record, a copy, a directory gone: never rebuilt from it
            log.warning("job %s is missing from Redis; the node's record of it is dropped: %s", job_id, exc)
            runtime.forget_job(job_id)
            continue
        if job.job_id != job_id:
            runtime.forget_job(job_id)
            continue
        # a finalized directory is re-created as done: its finalize ended, but the worker that ran it
        # died before telling Redis, which then lost the job (its clients would wait for it forever)
        n += rebuild_job(store, job_dir, job_id, queue)
        if job.finalized:
            runtime.forget_job(job_id)
    return n


def finalize_stale_s() -> float:
    """A job ``finalizing`` for this long with nobody running its finalize gets it enqueued again
    (its finalize message was lost: a publish that failed with Redis, a node that died holding it)."""
    return settings.get("BOOKTTS_FINALIZE_STALE_S")


def reap(store: JobStore, job_ids=None) -> int:
    """Re-enqueue the batches (and finalize steps) whose holder's lease expired. Returns how many."""
    n = 0
    for job_id in (job_ids if job_ids is not None else store.active_jobs()):
        info = store.get_job(job_id)
        if info is None or not info.status.active:
            continue
        if info.status is JobStatus.FINALIZING and store.refresh_stale_finalize(job_id, finalize_stale_s()):
            enqueue_finalize(info.out_dir, job_id, info.queue)
            log.warning("job %s: finalizing for over %.0f s with no finalize running; finalize re-enqueued",
                        job_id, finalize_stale_s())
            n += 1
        for batch, raw in store.running_raw(job_id).items():
            if batch != FINALIZE and not planned_batch(batch, info.batches):
                # a forged or corrupted entry: queueing it would end the job failed; drop it, queue nothing
                store.r.hdel(store.k(job_id, "running"), batch)
                log.warning("job %s: running entry for batch %r ignored and dropped: the job has batches 0 to %d",
                            job_id, batch, info.batches - 1)
                continue
            state = store.orphan_state(job_id, batch, raw)
            holder = Holder.from_json(raw)
            if state == "held" or (state == "orphan" and still_sending(holder, time.time())):
                continue
            if state == "orphan":
                # queued before its entry is dropped: if queueing fails (Redis went away again), the entry
                # stays and a later sweep queues it (a copy sent twice is skipped by the second worker)
                if batch == FINALIZE:
                    enqueue_finalize(info.out_dir, job_id, info.queue)
                else:
                    enqueue_batches(info.out_dir, job_id, [int(batch)], info.queue)
            if not store.claim_orphan(job_id, batch, raw):  # (a done batch's entry is only dropped)
                continue
            who = f"{holder.worker} (pid {holder.pid})" if holder else "an unknown worker"
            store.note_requeue(job_id, batch, raw)
            log.warning("job %s: batch %s held by %s lost its lease; re-enqueued", job_id, batch, who)
            n += 1
    return n


def requeue_stranded(store: JobStore, grace_s: float) -> int:
    """Queue again the batches whose message a worker received and lost before starting it; returns how many.

    kombu keeps a delivered message in its ``unacked`` hash until the worker acknowledges it (see
    :mod:`workers.backlog`). A worker whose connection dropped while Redis was down could not put it
    back, and a node killed between receiving a message and starting it never will: the message stays
    there until the visibility timeout (hours), and the batch has no lease and no ``running`` entry for
    :func:`reap` to find. Such a message, delivered over ``grace_s`` ago, of an active job whose batch is
    not done and was never started, is queued again and dropped from ``unacked`` (a worker that still
    runs it after all meets a leased or done batch, and skips it). Messages without a unit header
    (finalize) are left alone: a lost finalize is found by its guard (:func:`reap`). A message naming a
    batch the job's plan does not have (forged, or corrupted) is dropped with one warning, never queued."""
    r = store.r
    tags = r.zrangebyscore(UNACKED_INDEX_KEY, "-inf", time.time() - grace_s)
    if not tags:
        return 0
    n = 0
    for tag, raw in zip(tags, r.hmget(UNACKED_KEY, tags)):
        try:
            job_id, _, batch = json.loads(raw)[0]["headers"][UNIT_HEADER].rpartition(":")
            check_job_id(job_id)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, JobError):
            continue
        info = store.get_job(job_id)
        if info is None or not info.status.active:
            continue
        if not planned_batch(batch, info.batches):
            # forged or stale: queueing it would make a worker fail a batch the job does not have
            with r.pipeline() as p:
                p.zrem(UNACKED_INDEX_KEY, tag)
                p.hdel(UNACKED_KEY, tag)
                p.execute()
            log.warning("job %s: unacknowledged message for batch %r ignored and dropped: the job has batches "
                        "0 to %d", job_id, batch, info.batches - 1)
            continue
        with r.pipeline(transaction=False) as p:
            p.sismember(store.k(job_id, "done"), batch)
            p.hexists(store.k(job_id, "running"), batch)
            p.exists(store.k_lease(job_id, batch))
            if any(p.execute()):
                continue
        enqueue_batches(info.out_dir, job_id, [int(batch)], info.queue)
        with r.pipeline() as p:
            p.zrem(UNACKED_INDEX_KEY, tag)
            p.hdel(UNACKED_KEY, tag)
            p.execute()
        log.warning("job %s: batch %s was delivered over %.0f s ago and never started (its worker lost the "
                    "message); re-enqueued", job_id, batch, grace_s)
        n += 1
    return n
