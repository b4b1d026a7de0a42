"""The Celery tasks: thin wrappers that move work to :mod:`jobs.pipeline`.

``synthesize_batch(job_dir, job_id, batch_id, queued_at)``
    takes the batch's lease (:meth:`workers.state.JobStore.begin`), calls
    :func:`jobs.pipeline.run_batch` with this process's engine, counts the batch once in
    Redis (:meth:`~workers.state.JobStore.complete`, a Lua script), and, when it completes
    the job, enqueues exactly one ``finalize_job`` (an ``SET NX`` guard inside the script).

``finalize_job(job_dir, job_id)``
    calls :func:`jobs.pipeline.finalize` and marks the job done.

Failure handling:

- transient errors (:class:`~jobs.errors.TransientEngineError`, including an out-of-memory on a
  single utterance, lost Redis connections, OS errors of a shared filesystem, a full disk:
  :class:`~jobs.errors.DiskFullError` is an ``OSError``, also for libsndfile's write errors) are
  retried by Celery (``autoretry_for`` with exponential backoff, :data:`MAX_RETRIES`);
- out-of-memory on a batch is handled inside ``run_batch``, which splits the batch in two
  (recursively) and records the number of splits;
- everything else (:class:`~jobs.errors.DeterministicEngineError`, bad input, bugs) and
  exhausted retries are recorded in the job (batch, error, worker, attempt) by
  :meth:`BatchTask.on_failure`; the other batches still run, and the job ends ``failed``
  with one report line per failed batch;
- a worker that cannot build its engine gives the message back (``Reject(requeue=True)``) and
  stops: that is the node's fault, not the batch's;
- a batch delivered more than ``BOOKTTS_MAX_DELIVERIES`` times (its worker died each time) is
  declared failed instead of looping.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path

import redis
from celery import Task, signals
from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from jobs.errors import BrokerError, EngineUnavailable, JobError, TransientEngineError, VoiceError
from workers import runtime
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE, app, queue_name, DEFAULT_PRIORITY
from workers.leases import Heartbeat, ReaperThread
from workers import metrics
from workers.backlog import EST_HEADER
from workers.state import FINALIZE, Holder, JobStore, check_job_id

log = logging.getLogger("booktts.tasks")

MAX_RETRIES = 3
RETRY_BACKOFF = 2
RETRY_BACKOFF_MAX = 60
#: Worth retrying: the same call may succeed later.
RETRYABLE = (TransientEngineError, BrokerError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
             OperationalError, OSError)

# ------------------------------------------------------------------ per-process Redis store

_store: tuple[int, str, JobStore] | None = None
_store_lock = threading.Lock()


def get_store() -> JobStore:
    """This process's :class:`JobStore` (re-created after a fork, for the app's broker URL)."""
    global _store
    url = app.conf.broker_url
    with _store_lock:
        if _store is None or _store[0] != os.getpid() or _store[1] != url:
            _store = (os.getpid(), url, JobStore(url))
        return _store[2]


# ------------------------------------------------------------------ enqueueing


def enqueue_batches(job_dir: str, job_id: str, batch_ids, queue: str) -> int:
    """One ``synthesize_batch`` message per batch on ``queue``. Returns how many were sent."""
    from jobs.pipeline import now_iso

    batch_ids = [int(b) for b in batch_ids]
    if not batch_ids:
        return 0
    queued_at = now_iso()
    est = _batch_estimates(job_dir, job_id, batch_ids)
    with app.producer_or_acquire() as producer:
        for b in batch_ids:
            headers = {EST_HEADER: est[b]} if b in est else None  # read by `backlog` (queued audio seconds)
            synthesize_batch.apply_async((str(job_dir), job_id, b, queued_at), queue=queue, producer=producer,
                                         headers=headers)
    return len(batch_ids)


def _batch_estimates(job_dir: str, job_id: str, batch_ids) -> dict[int, float]:
    """Estimated audio seconds per batch (``Job.batch_estimated_seconds``); {} if the job cannot be read."""
    try:
        job = _load(str(job_dir), job_id)
        return {b: round(job.batch_estimated_seconds(b), 3) for b in batch_ids}
    except Exception as exc:  # an estimate is only for the backlog report; never block enqueueing
        log.debug("no batch estimates for job %s: %s", job_id, exc)
        return {}


def enqueue_finalize(job_dir: str, job_id: str, queue: str) -> None:
    finalize_job.apply_async((str(job_dir), job_id), queue=queue)


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
    if not isinstance(job_dir, str) or not job_dir:
        raise JobError(f"task argument job_dir {job_dir!r} is not a directory path")
    check_job_id(job_id)
    if batch_id is None:
        return job_dir, job_id, None
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise JobError(f"task argument batch_id {batch_id!r} is not a batch number")
    return job_dir, job_id, batch_id


def _load(job_dir: str, job_id: str):
    from jobs.pipeline import load_job

    job = load_job(Path(job_dir))
    if job.job_id != job_id:
        raise JobError(f"{job_dir} now holds job {job.job_id}, not {job_id}; the job was replaced")
    return job


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


class BatchTask(Task):
    """Base of both tasks: records a failure that will not be retried in the job."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
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
            from jobs.pipeline import now_iso

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
    runtime.remember_job(job_id, job_dir, queue)
    holder = _holder(task)
    s = runtime.settings()
    verdict, value = store.begin(job_id, batch, holder, s.lease_seconds, s.max_deliveries)
    if verdict == "missing":
        from workers.control import rebuild_job

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
          acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def synthesize_batch(self, job_dir: str, job_id: str, batch_id: int, queued_at: str | None = None) -> dict:
    """Synthesize one batch of a job with this process's engine (see the module doc)."""
    from jobs.pipeline import run_batch

    job_dir, job_id, batch_id = _parse(job_dir, job_id, batch_id)
    store = get_store()
    queue, holder, verdict, value = _claim(self, store, job_dir, job_id, batch_id)
    if verdict == "exhausted":
        raise JobError(f"batch {batch_id} was started {value - 1} times without finishing (the worker running "
                       f"it died each time: out of memory, a crash?); see the worker logs")
    if verdict != "ok":
        log.info("job %s batch %d: skipped (%s)", job_id, batch_id, verdict)
        return {"job": job_id, "batch": batch_id, "skipped": verdict}
    attempt = int(value)
    s = runtime.settings()
    _HOLDERS[str(self.request.id)] = (holder.to_json(), attempt)
    try:
        with Heartbeat(store, job_id, batch_id, holder, s.lease_seconds, s.heartbeat_s):
            job = _load(job_dir, job_id)
            try:
                engine = runtime.get_engine(job.voice)
                t0 = time.perf_counter()
                rec = run_batch(job, batch_id, engine, worker=holder.worker, attempt=attempt, queued_at=queued_at)
                if rec.worker == holder.worker and rec.attempt == attempt:  # synthesized now, not found done
                    metrics.batch_done(engine.info, queue, len(rec.items), rec.audio_samples / rec.sample_rate,
                                       rec.infer_ms / 1000.0, time.perf_counter() - t0)
            except (EngineUnavailable, VoiceError) as exc:  # the node's fault (no package, device, voice)
                raise _EngineMissing(exc) from exc
    except _EngineMissing as exc:
        # This node cannot run the engine: give the message back for another node and stop.
        store.release(job_id, batch_id, holder)
        _HOLDERS.pop(str(self.request.id), None)
        log.error("error: %s; this worker stops, batch %d goes back to the queue", exc.inner, batch_id)
        _request_worker_shutdown()
        raise Reject(str(exc.inner), requeue=True) from exc
    except RETRYABLE:
        _hold_for_retry(store, job_id, batch_id, holder, s.lease_seconds)
        raise
    audio_s = rec.audio_samples / rec.sample_rate
    summary = {"worker": rec.worker, "attempt": rec.attempt, "audio_s": round(audio_s, 3),
               "started_at": rec.started_at, "finished_at": rec.finished_at, "queued_at": rec.queued_at,
               "splits": rec.splits, "infer_ms": rec.infer_ms}
    verdict, added = store.complete(job_id, batch_id, holder, summary, audio_s)
    if verdict == "missing":
        from workers.control import rebuild_job

        rebuild_job(store, job_dir, job_id, queue)  # counts this batch from its record on disk
        verdict, added = store.complete(job_id, batch_id, holder, summary, audio_s)
    if verdict == "finalize":
        _enqueue_finalize_or_release_guard(store, job_dir, job_id, queue)
    log.info("job %s batch %d: %s (%.1f s audio, attempt %d)%s", job_id, batch_id,
             "done" if added else "already counted", audio_s, attempt,
             "; last batch, finalize enqueued" if verdict == "finalize" else "")
    return {"job": job_id, "batch": batch_id, "audio_s": audio_s, "counted": added, "job_state": verdict}


class _EngineMissing(Exception):
    def __init__(self, inner: Exception) -> None:
        super().__init__(str(inner))
        self.inner = inner


@app.task(bind=True, base=BatchTask, name=TASK_FINALIZE, autoretry_for=RETRYABLE, max_retries=MAX_RETRIES,
          retry_backoff=RETRY_BACKOFF, retry_backoff_max=RETRY_BACKOFF_MAX, retry_jitter=True,
          acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def finalize_job(self, job_dir: str, job_id: str) -> dict:
    """Assemble the chapter files and manifest of a job whose batches are all done."""
    from jobs.pipeline import finalize

    job_dir, job_id, _ = _parse(job_dir, job_id)
    store = get_store()
    queue, holder, verdict, value = _claim(self, store, job_dir, job_id, FINALIZE)
    if verdict == "exhausted":
        raise JobError(f"finalize was started {value - 1} times without finishing; see the worker logs")
    if verdict != "ok":
        log.info("job %s finalize: skipped (%s)", job_id, verdict)
        return {"job": job_id, "skipped": verdict}
    s = runtime.settings()
    _HOLDERS[str(self.request.id)] = (holder.to_json(), int(value))
    try:
        with Heartbeat(store, job_id, FINALIZE, holder, s.lease_seconds, s.heartbeat_s):
            job = _load(job_dir, job_id)
            missing = job.pending_batches()
            if missing:
                # Redis counted batches whose records this node cannot see (or that were deleted):
                # run them again rather than fail.
                store.r.srem(store.k(job_id, "done"), *missing)
                store.r.delete(store.k(job_id, FINALIZE))
                store.release(job_id, FINALIZE, holder)
                from workers.state import JobStatus

                store.set_status(job_id, JobStatus.RUNNING)
                enqueue_batches(job_dir, job_id, missing, queue)
                log.warning("job %s: %d batches counted as done have no record on disk; re-enqueued",
                            job_id, len(missing))
                return {"job": job_id, "requeued": missing}
            summary = finalize(job)
    except RETRYABLE:
        _hold_for_retry(store, job_id, FINALIZE, holder, s.lease_seconds)
        raise
    store.finish(job_id, asdict(summary))
    runtime.forget_job(job_id)
    log.info("job %s: finalized, %d chapter files, %.1f s audio", job_id, len(summary.chapter_files), summary.audio_s)
    return {"job": job_id, "audio_s": summary.audio_s, "chapter_files": len(summary.chapter_files)}


# ------------------------------------------------------------------ worker process lifecycle

_MAIN_PID: int | None = None
_reaper: ReaperThread | None = None


@signals.worker_init.connect
def _on_worker_init(**_) -> None:
    global _MAIN_PID
    _MAIN_PID = os.getpid()


@signals.worker_process_init.connect
def _on_process_init(**_) -> None:
    """In each pool process (or the solo worker): build the engine, start the reaper."""
    global _reaper
    s = runtime.settings()
    _reaper = ReaperThread(get_store, interval_s=s.heartbeat_s)
    _reaper.start()
    try:
        runtime.preload()
    except Exception as exc:  # an unusable engine: say so once and stop the worker
        msg = f"cannot build the {s.engine.name} engine on {s.engine.device}: {exc}"
        log.error("error: %s; stopping this worker", msg)
        status_file = os.environ.get("BOOKTTS_WORKER_STATUS_FILE")
        if status_file:
            try:
                with open(status_file, "w", encoding="utf-8") as f:
                    f.write(msg)
            except OSError:
                pass
        if _MAIN_PID is None or _MAIN_PID == os.getpid():
            raise
        _request_worker_shutdown()


@signals.worker_process_shutdown.connect
def _on_process_shutdown(**_) -> None:
    if _reaper is not None:
        _reaper.stop()
