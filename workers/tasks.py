"""The Celery tasks: thin wrappers that move work to :mod:`jobs.synthesize` and :mod:`jobs.finalize`.

``synthesize_batch(job_dir, job_id, batch_id, queued_at)``
    claims, calls, hands off. It takes the lease of the message's unit (:func:`_claim_unit`:
    :meth:`workers.state.JobStore.begin`); makes one engine call of that unit and of the queued
    units gathered to it up to the engine's capacity (:func:`_engine_call`: :func:`workers.batcher.gather`,
    :func:`jobs.synthesize.synthesize_units` with this process's engine); and hands the audio to the
    writer thread (:func:`_hand_off`), which writes each unit (:func:`jobs.synthesize.write_unit`),
    counts it once in Redis (:meth:`~workers.state.JobStore.complete`, a Lua script) and, for the
    unit that completes the job, starts exactly one finalize (an ``SET NX`` guard inside the script):
    on this process's finalize threads, or as a ``finalize_job`` message.

``finalize_job(job_dir, job_id)``
    calls :func:`jobs.finalize.finalize` and marks the job done.

Failure handling:

- transient errors (:class:`~core.errors.TransientEngineError`, including an out-of-memory on a
  single utterance, lost Redis connections, OS errors of a shared filesystem, a full disk:
  :class:`~core.errors.DiskFullError` is an ``OSError``, also for libsndfile's write errors) are
  retried by Celery (``autoretry_for`` with exponential backoff, :data:`MAX_RETRIES`); a write of
  finished audio that fails so is retried the same way on the writer thread, under the lease;
- out-of-memory in an engine call is handled inside :func:`jobs.synthesize.synthesize_units`, which
  splits the call in two (recursively) and records the number of splits in each unit's record;
- everything else (:class:`~core.errors.DeterministicEngineError`, bad input, bugs) and
  exhausted retries are recorded in the job (batch, error, worker, attempt) by
  :meth:`BatchTask.on_failure`; the other batches still run, and the job ends ``failed``
  with one report line per failed batch;
- a worker that cannot build its engine gives the message back (``Reject(requeue=True)``) and
  stops: that is the node's fault, not the batch's;
- a batch delivered more than ``BOOKTTS_MAX_DELIVERIES`` times (its worker died each time) is
  declared failed instead of looping;
- a directory the job's files go into that is a symbolic link, or resolves outside the job directory
  (``.work/batches`` replaced by a link elsewhere, say: :func:`jobs.job.check_write_directories`),
  fails the batch like bad input, before anything is synthesized or written;
- a batch of a job whose batches another engine identity synthesized (backend and precision:
  :func:`jobs.job.check_engine`) is left for a worker of that engine, before its lease is taken (no
  delivery counted, the job does not fail): put back on its queue after :data:`ENGINE_GIVE_BACK_S` while
  a live worker of that engine consumes it, parked in Redis until one does otherwise
  (:mod:`workers.presence`); a worker gathers only batches of jobs of its own engine or of none yet;
- a job directory outside the worker's allowed roots (``worker --allowed-root``,
  ``BOOKTTS_ALLOWED_ROOTS``; :func:`workers.runtime.check_job_dir`) is refused before anything is
  read or written: one ``error: refused ...`` log line, a failure recorded in the job (when Redis
  knows it), no retry. Every task of this module takes its directory through :func:`_parse`.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass

import redis
from celery import Task, signals
from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from core import settings as env_settings
from core.errors import (BatchesNotDone, BrokerError, EngineMismatch, EngineUnavailable, JobError, TransientEngineError,
                         UnsafePathError, VoiceError)
from workers import runtime
from workers.runtime import OutsideAllowedRoots
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE, app, queue_name, DEFAULT_PRIORITY
from workers.recovery import Heartbeat, ReaperThread, rebuild_job
from workers import metrics
from workers import batcher, chapter_writer, finalize_child, finalize_slots
from workers.batcher import Claimed
from workers.enqueue import enqueue_batches, enqueue_finalize, get_store, load_checked, withdraw_units
from workers.state import FINALIZE, Holder, JobStore, check_job_id

log = logging.getLogger("booktts.tasks")

MAX_RETRIES = 3
RETRY_BACKOFF = 2
RETRY_BACKOFF_MAX = 60
#: Worth retrying: the same call may succeed later.
RETRYABLE = (TransientEngineError, BrokerError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
             OperationalError, OSError)



#: Seconds a worker waits before it puts back the message of a batch that another engine must run while a
#: live worker of that engine consumes the queue (so that the two do not pass it around without pause);
#: with none live, the batch is parked instead (:mod:`workers.presence`).
ENGINE_GIVE_BACK_S = 1.0


def _give_back(store: JobStore, claimed, holder: Holder) -> None:
    """Units this worker gathered but will not finish: drop their leases and queue them again
    (their own messages may already have been skipped). Their delivery count bounds any loop."""
    for c in claimed:
        try:
            # the lease first, the running entry once the unit is queued: if queueing fails, that entry
            # (with no lease) is what the reaper finds and queues
            store.release(c.job_id, c.batch_id, holder, keep_running=True)
            enqueue_batches(c.job_dir, c.job_id, [c.batch_id], c.queue)
            store.release(c.job_id, c.batch_id, holder)
        except Exception as exc:  # the reaper queues it (or, if Redis lost it, the job's rebuild)
            log.warning("job %s batch %d: could not re-queue it (%s); the reaper will", c.job_id, c.batch_id, exc)


# ------------------------------------------------------------------ helpers

_HOLDERS: dict[str, tuple[str, int]] = {}
"""task id -> (JSON of the lease holder, attempt) while its body runs, for ``on_failure``."""


def _holder(task: Task) -> Holder:
    return Holder(worker=task.request.hostname or f"{socket.gethostname()}:{os.getpid()}",
                  host=socket.gethostname(), pid=os.getpid(), task_id=str(task.request.id))


def _queue_of(task: Task) -> str:
    info = task.request.delivery_info or {}
    return info.get("routing_key") or queue_name(DEFAULT_PRIORITY)


def _parse(job_dir, job_id, batch_id=None):
    """Check a task's arguments; returns the job directory as its real path inside the allowed roots
    (raises :class:`OutsideAllowedRoots` before anything touches a directory outside them)."""
    if not isinstance(job_dir, str) or not job_dir or "\0" in job_dir:
        raise JobError(f"task argument job_dir {job_dir!r} is not a directory path")
    check_job_id(job_id)
    if batch_id is not None and (isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0):
        raise JobError(f"task argument batch_id {batch_id!r} is not a batch number")
    return runtime.check_job_dir(job_dir), job_id, batch_id


def _request_worker_shutdown() -> None:
    pid = _MAIN_PID or os.getpid()
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass


def _enqueue_finalize_or_release_guard(store: JobStore, job_dir: str, job_id: str, queue: str) -> None:
    """Enqueue the job's finalize; if that fails, drop the guard so the retry of this task sets it
    again (otherwise the job would wait for the reaper's stale-finalize rule)."""
    try:
        enqueue_finalize(job_dir, job_id, queue)
    except Exception:
        try:
            store.r.delete(store.k(job_id, FINALIZE))
        except redis.exceptions.RedisError:
            pass
        raise


def _refused(task: Task, exc: OutsideAllowedRoots, task_id, args, kwargs) -> None:
    """A job directory outside the allowed roots: one log line, and the failure recorded in the job
    if Redis knows the job (a forged message about an unknown job leaves Redis alone)."""
    named = dict(zip(("job_dir", "job_id", "batch_id"), args or ()), **(kwargs or {}))
    job_id, batch = named.get("job_id"), named.get("batch_id")
    what = "finalize" if task.name == TASK_FINALIZE else f"batch {batch}"
    log.error("error: refused %s for job %s %s (task %s): %s; start the worker with --allowed-root covering "
              "the job directory if this job is genuine", task.name, job_id, what, task_id, exc)
    try:
        check_job_id(job_id)
    except Exception:
        return
    store = get_store()
    failure = {"batch": FINALIZE if task.name == TASK_FINALIZE else batch, "error_type": type(exc).__name__,
               "error": str(exc), "worker": task.request.hostname, "attempt": task.request.retries + 1,
               "task_id": str(task_id)}
    try:
        from jobs.job import now_iso

        failure["at"] = now_iso()
        if task.name == TASK_FINALIZE:
            if store.get_job(job_id) is not None:
                store.fail_job(job_id, f"finalize: {type(exc).__name__}: {exc} (worker {task.request.hostname})")
        elif isinstance(batch, int) and not isinstance(batch, bool):
            store.fail(job_id, batch, "", failure)  # a job Redis does not know: "missing", nothing written
    except redis.exceptions.RedisError as rexc:
        log.error("job %s %s: the refusal could not be recorded in Redis: %s", job_id, what, rexc)


class BatchTask(Task):
    """Base of both tasks: records a failure that will not be retried in the job."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        if isinstance(exc, OutsideAllowedRoots):
            _refused(self, exc, task_id, args, kwargs)
            return
        holder_json, attempt = _HOLDERS.pop(str(task_id), ("", self.request.retries + 1))
        try:
            job_dir, job_id, batch = (list(args) + [None, None, None])[:3]
            if self.name == TASK_FINALIZE:
                batch = FINALIZE
            check_job_id(job_id)
        except Exception:
            log.error("task %s failed with unusable arguments %r: %s", task_id, args, exc)
            return
        store = get_store()
        failure = {"batch": batch, "error_type": type(exc).__name__, "error": str(exc).splitlines()[0] if str(exc) else "",
                   "worker": self.request.hostname, "attempt": attempt, "task_id": str(task_id)}
        try:
            from jobs.job import now_iso

            failure["at"] = now_iso()
            if batch == FINALIZE:
                store.fail_job(job_id, f"finalize: {failure['error_type']}: {failure['error']} "
                                       f"(worker {failure['worker']})")
                h = Holder.from_json(holder_json)
                if h is not None:
                    store.release(job_id, FINALIZE, h)
            else:
                verdict = store.fail(job_id, batch, holder_json, failure)
                log.error("job %s batch %s failed: %s: %s%s", job_id, batch, failure["error_type"], failure["error"],
                          " (job failed)" if verdict == "failed" else "")
        except redis.exceptions.RedisError as rexc:
            log.error("job %s batch %s failed (%s: %s) and Redis could not record it: %s", job_id, batch,
                      type(exc).__name__, exc, rexc)

    def on_success(self, retval, task_id, args, kwargs):
        _HOLDERS.pop(str(task_id), None)


def _claim(task, store: JobStore, job_dir: str, job_id: str, batch):
    """Take the lease of one piece of work (a batch id or FINALIZE) for this delivery of ``task``.
    Returns (queue, holder, verdict, value), the last two from :meth:`JobStore.begin`; an exhausted
    piece is remembered as such for the failure handler."""
    queue = _queue_of(task)
    runtime.remember_job(job_id, job_dir, queue, store.url)
    holder = _holder(task)
    s = runtime.settings()
    verdict, value = store.begin(job_id, batch, holder, s.lease_seconds, s.max_deliveries)
    if verdict == "missing":
        rebuild_job(store, job_dir, job_id, queue)
        verdict, value = store.begin(job_id, batch, holder, s.lease_seconds, s.max_deliveries)
    if verdict == "leased":
        other = Holder.from_json(value)
        if other is not None and other.process_is_dead():
            # Same host, holder process gone (a pool child killed mid-batch): take over now
            # rather than waiting for its lease to expire.
            log.warning("job %s batch %s: holder pid %d is dead; taking its lease over", job_id, batch, other.pid)
            verdict, value = store.begin(job_id, batch, holder, s.lease_seconds, s.max_deliveries, steal=value)
    if verdict == "exhausted":
        _HOLDERS[str(task.request.id)] = ("", int(value))
    return queue, holder, verdict, value


def _hold_for_retry(store: JobStore, job_id: str, key, holder, lease_seconds: float) -> None:
    """Keep the lease through Celery's retry backoff (same task id). If the retry never starts,
    the lease expires and the reaper re-enqueues the work; a Redis that is down changes nothing."""
    try:
        store.hold(job_id, key, holder, RETRY_BACKOFF_MAX + lease_seconds)
    except redis.exceptions.RedisError:
        pass


@app.task(bind=True, base=BatchTask, name=TASK_SYNTHESIZE, autoretry_for=RETRYABLE, max_retries=MAX_RETRIES,
          retry_backoff=RETRY_BACKOFF, retry_backoff_max=RETRY_BACKOFF_MAX, retry_jitter=True,
          acks_late=True, reject_on_worker_lost=True, ignore_result=True, throws=(OutsideAllowedRoots, UnsafePathError))
def synthesize_batch(self, job_dir: str, job_id: str, batch_id: int, queued_at: str | None = None) -> dict:
    """Claim the message's unit, make one engine call of it and the units gathered to it, hand the
    audio to the writer thread (see the module doc)."""
    t_in = time.perf_counter()
    job_dir, job_id, batch_id = _parse(job_dir, job_id, batch_id)
    store = get_store()
    if _leave_to_its_engine(store, job_dir, job_id, batch_id, _queue_of(self)):
        return {"job": job_id, "batch": batch_id, "skipped": "engine"}
    seed, holder, skipped = _claim_unit(self, store, job_dir, job_id, batch_id, queued_at, t_in)
    if seed is None:
        return skipped
    call = _engine_call(self, store, seed, holder)
    if not isinstance(call, _EngineCall):  # nothing to synthesize, or left to a worker of the job's engine
        return call
    return _hand_off(self, store, call, holder, t_in)


def _claim_unit(task, store: JobStore, job_dir: str, job_id: str, batch_id: int, queued_at: str | None,
                t_in: float) -> tuple[Claimed | None, Holder | None, dict | None]:
    """Take the lease of the message's unit (:func:`_claim`). Returns (the unit, its holder, None), or
    (None, None, the task's result) when this delivery is not to run it (done, leased, cancelled);
    a unit delivered too often is a :class:`JobError` (recorded by :meth:`BatchTask.on_failure`)."""
    queue, holder, verdict, value = _claim(task, store, job_dir, job_id, batch_id)
    if verdict == "exhausted":
        raise JobError(f"batch {batch_id} was started {value - 1} times without finishing (the worker running "
                       f"it died each time: out of memory, a crash?); see the worker logs")
    if verdict != "ok":
        log.info("job %s batch %d: skipped (%s)", job_id, batch_id, verdict)
        batcher.call_clock().skip(t_in, time.perf_counter())
        return None, None, {"job": job_id, "batch": batch_id, "skipped": verdict}
    attempt = int(value)
    _HOLDERS[str(task.request.id)] = (holder.to_json(), attempt)
    return Claimed(job_dir, job_id, batch_id, attempt, queued_at, queue), holder, None


@dataclass
class _EngineCall:
    """One engine call a task made: its units (the message's first), their audio, and its times."""

    job: object
    """The message's unit's job (:class:`jobs.job.Job`)."""
    engine: object
    synth: object
    """The call's audio, not written yet (:class:`jobs.synthesize.SynthesizedUnits`)."""
    claimed: list[Claimed]
    heartbeat: Heartbeat
    """Renews the units' leases until each is written and counted."""
    settings: object
    """This worker's settings (:class:`workers.runtime.WorkerSettings`) the call ran with."""
    loaded: float
    gathered: float
    started: float
    finished: float
    """``time.perf_counter()`` after the engine was at hand, after the gather, around the engine call."""


def _engine_call(task, store: JobStore, seed: Claimed, holder: Holder) -> _EngineCall | dict:
    """Synthesize the leased unit ``seed``, with the units :func:`_gather_units` adds to it, in one engine
    call. Returns the call, or the task's result when nothing was synthesized: the unit was written
    before (counted now), or its job belongs to a worker of another engine (every unit given back).
    On a failure the gathered units are given back and the error is raised (a node that cannot run the
    engine gives the message back and stops)."""
    s = runtime.settings()
    job_dir, job_id, batch_id = seed.job_dir, seed.job_id, seed.batch_id
    hb = Heartbeat(store, job_id, batch_id, holder, s.lease_seconds, s.heartbeat_s).start()
    extra: list = []
    try:
        job = load_checked(job_dir, job_id)
        from jobs.job import check_write_directories

        check_write_directories(job_dir, job)  # a link planted below the job directory: refused, not retried
        existing = job.batch_record(batch_id)
        if existing is not None:  # written before (Redis lost the count): count it, nothing to run
            hb.stop()
            return _count(store, job_dir, job_id, batch_id, holder, existing, seed.queue)
        try:
            engine = runtime.get_engine(job.voice, on_built=metrics.engine_loaded)
            t_loaded = time.perf_counter()
            if s.gather:
                extra = _gather_units(store, job, seed, holder, engine, s)
                _join_call(store, [c for c, _ in extra], hb)
            t_gathered = time.perf_counter()
            from jobs.synthesize import Unit, synthesize_units

            units = [Unit(job, batch_id, seed.attempt, seed.queued_at)] + [Unit(j, c.batch_id, c.attempt, c.queued_at)
                                                                           for c, j in extra]
            t0 = time.perf_counter()
            synth = synthesize_units(units, engine)
            t1 = time.perf_counter()
            metrics.engine_call(engine.info, seed.queue, synth, t1 - t0)
        except (EngineUnavailable, VoiceError) as exc:  # the node's fault (no package, device, voice)
            raise _EngineMissing(exc) from exc
    except _EngineMissing as exc:
        hb.stop()
        _give_back(store, [c for c, _ in extra], holder)
        # This node cannot run the engine: give the message back for another node and stop.
        store.release(job_id, batch_id, holder)
        _HOLDERS.pop(str(task.request.id), None)
        log.error("error: %s; this worker stops, batch %d goes back to the queue", exc.inner, batch_id)
        _request_worker_shutdown()
        raise Reject(str(exc.inner), requeue=True) from exc
    except EngineMismatch as exc:  # a worker of another engine took the job's first batch meanwhile
        hb.stop()
        _HOLDERS.pop(str(task.request.id), None)
        _give_back(store, [seed] + [c for c, _ in extra], holder)
        log.info("job %s batch %d: left for a worker of the job's engine (%s)", job_id, batch_id, exc)
        return {"job": job_id, "batch": batch_id, "skipped": "engine"}
    except BaseException as exc:
        hb.stop()
        _give_back(store, [c for c, _ in extra], holder)
        if isinstance(exc, RETRYABLE):
            _hold_for_retry(store, job_id, batch_id, holder, s.lease_seconds)
        raise
    return _EngineCall(job, engine, synth, [seed] + [c for c, _ in extra], hb, s, t_loaded, t_gathered, t0, t1)


def _gather_units(store: JobStore, job, seed: Claimed, holder: Holder, engine, s) -> list:
    """Queued units of any job of ``seed``'s synthesis class that join its engine call, each leased
    (:func:`workers.batcher.gather`), up to the engine's capacity: its item limit and this worker's
    padded-phoneme limit; jobs another engine synthesizes are left out."""
    return batcher.gather(store, job, seed, holder, max_items=engine.info.max_batch,
                          max_padded=s.max_batch_phonemes, lease_s=s.lease_seconds,
                          max_deliveries=s.max_deliveries,
                          load_job=functools.partial(load_job_here, identity=s.engine.identity()),
                          mix_scales=engine.info.per_item_scales)


def _join_call(store: JobStore, claimed: list[Claimed], hb: Heartbeat) -> None:
    """The gathered units ``claimed`` join this task: their leases renewed by its heartbeat, their jobs
    remembered by this process, their own messages taken off their queues
    (:func:`workers.enqueue.withdraw_units`)."""
    for c in claimed:
        hb.add(c.job_id, c.batch_id)
        runtime.remember_job(c.job_id, c.job_dir, c.queue, store.url)
    batcher.call_clock().withdrew(withdraw_units(claimed))


def _hand_off(task, store: JobStore, call: _EngineCall, holder: Holder, t_in: float) -> dict:
    """Give the call's audio to the writer thread (each unit written, counted, its lease dropped there:
    :func:`_write_and_count`), and the engine's shapes to the node's profile; log the call's timing.
    The Celery message is acknowledged when this returns."""
    seed, synth, engine = call.claimed[0], call.synth, call.engine
    _HOLDERS.pop(str(task.request.id), None)  # from here on failures are handled by the writer
    batcher.offloader().write(lambda: _write_and_count(store, synth, call.claimed, holder, call.heartbeat))
    shapes = runtime.shapes_to_record(engine, call.settings.engine, call.job.voice)
    if shapes is not None:  # the node's profile of the engine's shapes, for the next worker's start
        batcher.offloader().write(shapes)
    timing = batcher.call_clock().call(t_in, call.loaded, call.gathered, call.started, call.finished,
                                       synth.infer_ms / 1000.0, time.perf_counter())
    extra = call.claimed[1:]
    log.info("job %s batch %d: engine batch of %d utterances with %d more batches of %d jobs; timing %s",
             seed.job_id, seed.batch_id, synth.size, len(extra), len({c.job_id for c in extra} | {seed.job_id}),
             timing)
    return {"job": seed.job_id, "batch": seed.batch_id, "engine_batch": synth.size, "units": len(call.claimed)}


def load_job_here(path, identity: dict | None = None):
    """The job in ``path``; with ``identity`` (this worker's engine), :class:`EngineMismatch` for a job
    that another engine synthesizes (so :func:`workers.batcher.gather` leaves it out)."""
    from jobs.job import check_engine, load_job

    job = load_job(path)
    if identity is not None:
        check_engine(path, job.job_id, identity)
    return job


def _leave_to_its_engine(store: JobStore, job_dir: str, job_id: str, batch_id: int, queue: str) -> bool:
    """True if the job's batches come from another engine identity than this worker's: then, while the
    job is active and the batch not done or failed, its message goes back on ``queue`` after
    :data:`ENGINE_GIVE_BACK_S` if a live worker of that engine consumes the queue, and the batch is
    parked until one does otherwise (:mod:`workers.presence`); it is dropped when the job is not active.
    Nothing is leased or counted. False: this worker may run it."""
    from jobs.job import check_engine, recorded_engine
    from workers import presence

    try:
        check_engine(job_dir, job_id, runtime.settings().engine.identity())
        return False
    except EngineMismatch as exc:
        info = store.get_job(job_id)
        active = (info is not None and info.status.value in ("queued", "running")
                  and batch_id not in store.done_ids(job_id) and batch_id not in store.failures(job_id))
        if not active:
            log.info("job %s batch %d: dropped: the job is not active (%s)", job_id, batch_id, exc)
            return True
        engine = recorded_engine(job_dir)
        if presence.served(store.r, engine, queue):  # a worker of its engine takes it from the queue soon
            log.info("job %s batch %d: left for a worker of the job's engine (%s)", job_id, batch_id, exc)
            time.sleep(ENGINE_GIVE_BACK_S)
            enqueue_batches(job_dir, job_id, [batch_id], queue)
            return True
        tries = presence.park(store.r, job_dir, job_id, batch_id, queue, engine)
        if tries & (tries - 1) == 0:  # the 1st, 2nd, 4th, 8th... time: a log line, not a flood
            log.info("job %s batch %d: left for a worker of the job's engine, parked until one is live (parked "
                     "%d times) (%s)", job_id, batch_id, tries, exc)
        return True


def _count(store: JobStore, job_dir: str, job_id: str, batch_id: int, holder: Holder, rec, queue: str) -> dict:
    """Count a written batch in Redis (once); enqueue the job's finalize if it was the last."""
    audio_s = rec.audio_samples / rec.sample_rate
    summary = {"worker": rec.worker, "attempt": rec.attempt, "audio_s": round(audio_s, 3),
               "started_at": rec.started_at, "finished_at": rec.finished_at, "queued_at": rec.queued_at,
               "splits": rec.splits, "infer_ms": rec.infer_ms, "engine_batch_size": rec.engine_batch_size}
    verdict, added = store.complete(job_id, batch_id, holder, summary, audio_s)
    if verdict == "missing":
        rebuild_job(store, job_dir, job_id, queue)  # counts this batch from its record on disk
        verdict, added = store.complete(job_id, batch_id, holder, summary, audio_s)
    store.drop_ready(store.sclass(job_id), [(job_id, batch_id)])
    if verdict == "finalize" and not _finalize_here(store, job_dir, job_id, queue, holder):
        _enqueue_finalize_or_release_guard(store, job_dir, job_id, queue)
    log.info("job %s batch %d: %s (%.1f s audio, attempt %d)%s", job_id, batch_id,
             "done" if added else "already counted", audio_s, rec.attempt,
             "; last batch, finalize enqueued" if verdict == "finalize" else "")
    return {"job": job_id, "batch": batch_id, "audio_s": audio_s, "counted": added, "job_state": verdict}


def _finalize_here(store: JobStore, job_dir: str, job_id: str, queue: str, holder: Holder) -> bool:
    """Start the job's finalize on this process's finalize threads at once, under its own lease,
    instead of sending a message that would wait behind the queue (full of the planned batches'
    messages, already done). False if the lease could not be taken: the caller enqueues it."""
    s = runtime.settings()
    fin = Holder(worker=holder.worker, host=holder.host, pid=os.getpid(), task_id=f"finalize-{os.urandom(6).hex()}")
    try:
        verdict, _ = store.begin(job_id, FINALIZE, fin, s.lease_seconds, s.max_deliveries)
    except redis.exceptions.RedisError:
        return False
    if verdict != "ok":
        return verdict in ("done", "cancelled", "leased")  # someone else has it, or nothing to do
    hb = Heartbeat(store, job_id, FINALIZE, fin, s.lease_seconds, s.heartbeat_s).start()
    batcher.offloader().finalize(lambda: _finalize_in_background(store, job_dir, job_id, queue, fin, hb))
    return True


def _write_and_count(store: JobStore, synth, claimed, holder: Holder, hb: Heartbeat) -> None:
    """On the writer thread: write each unit's audio and record (several units at once), count it,
    then drop its lease renewal. A unit that cannot be written goes back to the queue (its delivery
    count bounds it)."""
    from jobs.synthesize import write_unit

    def one(item) -> None:
        i, c = item
        try:
            rec = _write_retrying(lambda: write_unit(synth, i, worker=holder.worker), c)
            hb.discard(c.job_id, c.batch_id)
            counted = _count(store, c.job_dir, c.job_id, c.batch_id, holder, rec, c.queue)
        except Exception as exc:
            hb.discard(c.job_id, c.batch_id)
            log.error("job %s batch %d: not written (%s: %s); queued again", c.job_id, c.batch_id,
                      type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            _give_back(store, [c], holder)
            return
        if counted["job_state"] == "progress":  # chapters this unit completed: written now, off this process
            _chapters_early(store, synth.units[i].job, c, holder)

    try:
        batcher.offloader().each(one, enumerate(claimed))
    finally:
        hb.stop()


def _chapters_early(store: JobStore, job, c, holder: Holder) -> None:
    """Send the chapters of ``job`` that unit ``c`` completed to this process's chapter process
    (:mod:`workers.chapter_writer`); any failure leaves them to the job's finalize."""
    try:
        keys = chapter_writer.writer(runtime.settings().early_chapters).batch_done(store, job, c.job_dir,
                                                                                   c.batch_id, holder.worker)
        if keys:
            log.info("job %s batch %d: chapters %s complete, to be written early", c.job_id, c.batch_id,
                     ", ".join(f"{b}:{ch}" for b, ch in keys))
    except Exception as exc:  # noqa: BLE001 - an optimisation only
        log.info("job %s batch %d: chapters not sent to be written early (%s: %s)", c.job_id, c.batch_id,
                 type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")


def _write_retrying(write, c):
    """``write()``, retried on the writer thread after a transient error (a full disk, an I/O error of
    a shared filesystem) with the tasks' backoff, while the heartbeat keeps the lease: the audio is
    in memory, so a retry only writes again. Raises the last error once :data:`MAX_RETRIES` are spent."""
    for attempt in range(MAX_RETRIES + 1):
        try:
            return write()
        except RETRYABLE as exc:
            if attempt == MAX_RETRIES:
                raise
            delay = min(RETRY_BACKOFF_MAX, RETRY_BACKOFF * 2 ** attempt)
            log.warning("job %s batch %d: write failed (%s: %s); Retry in %d s (%d of %d)", c.job_id, c.batch_id,
                        type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", delay, attempt + 1,
                        MAX_RETRIES)
            time.sleep(delay)
    raise AssertionError("unreachable")


class _EngineMissing(Exception):
    def __init__(self, inner: Exception) -> None:
        super().__init__(str(inner))
        self.inner = inner


@app.task(bind=True, base=BatchTask, name=TASK_FINALIZE, autoretry_for=RETRYABLE, max_retries=MAX_RETRIES,
          retry_backoff=RETRY_BACKOFF, retry_backoff_max=RETRY_BACKOFF_MAX, retry_jitter=True,
          acks_late=True, reject_on_worker_lost=True, ignore_result=True, throws=(OutsideAllowedRoots, UnsafePathError))
def finalize_job(self, job_dir: str, job_id: str) -> dict:
    """Assemble the chapter files and manifest of a job whose batches are all done."""
    job_dir, job_id, _ = _parse(job_dir, job_id)
    store = get_store()
    queue, holder, verdict, value = _claim(self, store, job_dir, job_id, FINALIZE)
    if verdict == "exhausted":
        raise JobError(f"finalize was started {value - 1} times without finishing; see the worker logs")
    if verdict != "ok":
        log.info("job %s finalize: skipped (%s)", job_id, verdict)
        return {"job": job_id, "skipped": verdict}
    s = runtime.settings()
    hb = Heartbeat(store, job_id, FINALIZE, holder, s.lease_seconds, s.heartbeat_s).start()
    # Chapter encoding runs on this process's finalize threads, so the engine takes the next
    # batch now; the lease (renewed until finalize ends) protects the step if the process dies.
    batcher.offloader().finalize(lambda: _finalize_in_background(store, job_dir, job_id, queue, holder, hb))
    return {"job": job_id, "finalize": "started"}


def _synthesis_waiting(store: JobStore, job_id: str) -> bool:
    """Whether batches of ``job_id``'s synthesis class wait for an engine (False if Redis cannot say)."""
    try:
        return store.ready_count_of(job_id) > 0
    except redis.exceptions.RedisError:
        return False


def _finalize_in_background(store: JobStore, job_dir: str, job_id: str, queue: str, holder: Holder,
                            hb: Heartbeat) -> None:
    try:
        # in a process of its own (Offloader's doc), waited for here; it reads the job and checks its
        # batch records itself, so that none of that runs in this (the engine's) process
        t0 = time.perf_counter()
        try:
            # the finalizes running on this node now share its cores (workers.finalize_slots)
            with finalize_slots.hold(runtime.settings().state_dir) as running:
                waiting = _synthesis_waiting(store, job_id)
                processes = batcher.offloader().chapter_processes(running, waiting)
                # FLAC level (--flac-level auto) and chapters at once from the same load (jobs.encoding)
                chosen = batcher.offloader().encoding(running, waiting)
                summary = finalize_child.run(job_dir, processes=processes, job_id=job_id, chosen=chosen)
        except BatchesNotDone as exc:
            # Redis counted batches whose records this node cannot see (or that were deleted):
            # run them again rather than fail.
            missing = exc.batches
            store.r.srem(store.k(job_id, "done"), *missing)
            store.r.delete(store.k(job_id, FINALIZE))
            store.release(job_id, FINALIZE, holder)
            from workers.state import JobStatus

            store.set_status(job_id, JobStatus.RUNNING)
            enqueue_batches(job_dir, job_id, missing, queue)
            log.warning("job %s: %d batches counted as done have no record on disk; re-enqueued",
                        job_id, len(missing))
            return
        from workers.control import done_summary

        record = done_summary(load_checked(job_dir, job_id), summary)  # with the settings that made the files
        if not store.finish(job_id, record):  # Redis lost the job meanwhile: its directory says done
            rebuild_job(store, job_dir, job_id, queue)
        runtime.forget_job(job_id)
        log.info("job %s: finalized, %d chapter files, %.1f s audio, in %.2f s (up to %d chapter processes), "
                 "%d finalizes running on this node at its start; for --flac-level auto: level %d, up to %d "
                 "chapters at once (%s)", job_id, len(summary.chapter_files), summary.audio_s,
                 time.perf_counter() - t0, processes, running, chosen.flac_level, chosen.threads, chosen.why)
    except RETRYABLE as exc:  # (ChildProcessError, an OSError: the finalize process died without a result)
        log.warning("job %s finalize: %s: %s; queued again", job_id, type(exc).__name__, exc)
        try:
            store.release(job_id, FINALIZE, holder)
            enqueue_finalize(job_dir, job_id, queue, countdown=RETRY_BACKOFF)
        except Exception as exc2:  # the lease expires; the reaper's stale-finalize rule re-enqueues it
            log.warning("job %s finalize: could not re-queue it (%s); the reaper will", job_id, exc2)
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else ""
        log.error("job %s finalize failed: %s: %s", job_id, type(exc).__name__, msg)
        try:
            store.fail_job(job_id, f"finalize: {type(exc).__name__}: {msg} (worker {holder.worker})")
            store.release(job_id, FINALIZE, holder)
        except redis.exceptions.RedisError as rexc:
            log.error("job %s: finalize failure not recorded in Redis: %s", job_id, rexc)
    finally:
        hb.stop()


# ------------------------------------------------------------------ worker process lifecycle

_MAIN_PID: int | None = None
_reaper: ReaperThread | None = None


@signals.worker_init.connect
def _on_worker_init(**_) -> None:
    global _MAIN_PID
    _MAIN_PID = os.getpid()


@signals.celeryd_after_setup.connect
def _on_after_setup(**_) -> None:
    """Once per worker, in its main process: which job directories it accepts."""
    roots = runtime.settings().allowed_roots
    if roots:
        log.info("accepting job directories only under %s", ", ".join(roots))
    else:
        log.warning("no --allowed-root set: accepting job directories anywhere (any client of the broker can "
                    "make this worker write into any directory it can write that holds a job); set "
                    "--allowed-root DIR or %s", runtime.ALLOWED_ROOTS_ENV)


@signals.worker_process_init.connect
def _on_process_init(**_) -> None:
    """In each pool process (or the solo worker): build the engine, start the reaper."""
    global _reaper
    s = runtime.settings()
    finalize_child.start_ready()  # its interpreter starts and imports while the engine loads
    chapter_writer.writer(s.early_chapters).start()  # likewise the chapter process
    _reaper = ReaperThread(get_store, interval_s=s.heartbeat_s)
    _reaper.start()
    _start_presence(s)
    try:
        runtime.preload(on_built=metrics.engine_loaded)
    except Exception as exc:  # an unusable engine: say so once and stop the worker
        msg = f"cannot build the {s.engine.name} engine on {s.engine.device}: {exc}"
        log.error("error: %s; stopping this worker", msg)
        status_file = s.status_file  # (set by the worker command)
        if status_file:
            try:
                with open(status_file, "w", encoding="utf-8") as f:
                    f.write(msg)
            except OSError:
                pass
        if _MAIN_PID is None or _MAIN_PID == os.getpid():
            raise
        _request_worker_shutdown()


def _start_presence(s) -> None:
    """This process's presence in Redis (its engine and queues: :mod:`workers.presence`)."""
    from workers import presence

    try:
        queues = sorted(app.amqp.queues.consume_from or {})
    except Exception:  # noqa: BLE001 - unknown queues: taken to consume every queue
        queues = []
    presence.Presence(get_store, s.engine.identity(), s.engine.device, queues).start()


@signals.worker_process_shutdown.connect
def _on_process_shutdown(**_) -> None:
    batcher.drain_if_started(timeout=env_settings.get("BOOKTTS_SHUTDOWN_DRAIN_S"))
    chapter_writer.close()
    finalize_child.close_ready()
    if _reaper is not None:
        _reaper.stop()
