"""Starting and resuming jobs: what ``submit``, ``resume``, the inbox watcher and the recovery of a
lost job (:mod:`workers.recovery`) share.

The job directory is the truth about what is done (a batch record on disk);
Redis is told about it here, and only the batches without a record are enqueued.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import redis

from core.errors import JobError
from workers.celery_app import PRIORITIES, queue_name
from workers.state import REBUILD_PREFIX, SENDING_PREFIX, Holder, JobInfo, JobStatus, JobStore, now
from workers.enqueue import enqueue_batches, enqueue_finalize

log = logging.getLogger("booktts.control")


def audio_seconds_done(job, batch_ids) -> float:
    """Audio seconds of finished batches, from their records on disk."""
    total = 0.0
    for b in batch_ids:
        rec = job.batch_record(b)
        if rec is not None:
            total += rec.audio_samples / rec.sample_rate
    return total


#: The queue a job was last started on, in its directory (``resume OUTDIR`` after Redis lost the job).
QUEUE_FILE = "queue.json"


def record_queue(job, queue: str, priority: str) -> None:
    """Remember in the job directory which queue the job runs on, and the directory's own real path
    (``dir``: a copy of the directory carries the original's, which is how the reaper tells a copy from
    the job, :func:`workers.recovery.check_rebuild_dir`). Written only when either changes."""
    from core.files import read_json, write_json
    from jobs.job import WORK_DIR

    path = Path(job.out_dir) / WORK_DIR / QUEUE_FILE
    real = os.path.realpath(job.out_dir)
    try:
        before = read_json(path)
    except (OSError, ValueError):
        before = None
    if not isinstance(before, dict) or before.get("queue") != queue or before.get("dir") != real:
        write_json(path, {"queue": queue, "priority": priority, "dir": real})


def recorded_queue(out_dir) -> str | None:
    """The queue :func:`record_queue` wrote for the job in ``out_dir``, or None."""
    from core.files import read_json
    from jobs.job import WORK_DIR

    try:
        q = read_json(Path(out_dir) / WORK_DIR / QUEUE_FILE).get("queue")
    except (OSError, ValueError, AttributeError):
        return None
    return q if isinstance(q, str) and q else None


def queue_prefix_of(queue: str | None) -> str | None:
    """``tts-gpu`` for ``tts-gpu.high``; None for None."""
    if not queue:
        return None
    head, dot, tail = queue.rpartition(".")
    return head if dot and tail in PRIORITIES else queue


def job_info(job, priority: str, queue: str, done_ids, status: JobStatus) -> JobInfo:
    s = job.meta["summary"]
    return JobInfo(
        id=job.job_id, out_dir=str(Path(job.out_dir).resolve()), status=status, priority=priority, queue=queue,
        batches=len(job.batches), utterances=int(s["utterances"]), audio_s_est=float(s["estimated_audio_s"]),
        audio_s_done=audio_seconds_done(job, done_ids), created=now(), started=None)


def start_job(store: JobStore, job, priority: str = "normal", queue: str | None = None, *,
              mode: str = "submit") -> tuple[JobInfo, int]:
    """Register ``job`` in Redis and enqueue its unfinished batches. Returns (job info, batches enqueued).

    ``mode``:
      - ``submit``: a job already queued/running from the same directory is left alone (0 enqueued);
        a finished, failed or cancelled one is started again (only its unfinished batches run).
      - ``resume``: like submit, but an active job is also re-enqueued (a stalled job: its batches
        without a live lease are queued again; duplicates of queued messages are skipped by workers).
      - ``rebuild``: Redis lost the job; re-create it only if nobody else did in the meantime.
    """
    queue = queue or queue_name(priority)
    out_dir = str(Path(job.out_dir).resolve())
    info = store.get_job(job.job_id)
    if info is not None and mode != "rebuild":
        check_not_active_elsewhere(info, out_dir)
        if mode == "submit" and info.status.active:
            return info, 0
        if info.out_dir != out_dir:
            store.forget(job.job_id)  # the same job once ran elsewhere: start from this directory's state
    from jobs import claim as claims

    claims.check_claim(Path(job.out_dir), job.job_id)  # the directory's claim file names another job
    if mode != "rebuild":  # on disk, for a local run (jobs.claim); a live local run refuses
        claims.mark_submitted(Path(job.out_dir), job.job_id, by=mode)
    store.claim_dir(out_dir, job.job_id)  # another active job registered for this directory: JobError
    all_ids = [b.batch_id for b in job.batches]
    pending = job.pending_batches()
    pend = set(pending)
    done = [b for b in all_ids if b not in pend]
    status = JobStatus.RUNNING if done else JobStatus.QUEUED
    new = job_info(job, priority, queue, done, status)
    leased = store.leased(job.job_id, pending)
    todo = [b for b in pending if str(b) not in leased]
    # The job is (re-)created with the batches it is about to queue entered in `running`, held by nobody
    # (no lease), in the same step: if queueing them fails (Redis went away, or restarted keeping the
    # job) or this process dies first (a killed submit), the reaper queues them; nothing else would
    # (the job exists, so it is neither rebuilt nor submitted again, and they have no lease). The
    # entries are dropped once the batches are queued. A submit's or resume's entries wait
    # SENDING_GRACE_S for it to finish (recovery.reap); a rebuild's, made by a reaper, do not.
    holder = _sender(mode) if todo else ""
    created = store.create_job(new, done, reset=(mode != "rebuild"), running=todo, holder=holder)
    if mode != "rebuild" or created:
        record_queue(job, queue, priority)
    store.persist(job.job_id)
    if mode == "rebuild" and created == 0:
        return store.require_job(job.job_id), 0
    if not pending:
        if job.finalized:
            claims.clear_submitted(Path(job.out_dir), job.job_id)  # nothing queued: a local run may run it
            store.set_status(job.job_id, JobStatus.DONE, finished=now(), summary=done_summary(job))
            store.expire_done(job.job_id)
        elif store.finalize_guard(job.job_id):
            enqueue_finalize(out_dir, job.job_id, queue)
        return store.require_job(job.job_id), 0
    n = enqueue_batches(out_dir, job.job_id, todo, queue)
    if holder:
        try:
            store.drop_running(job.job_id, todo, holder)
        except redis.exceptions.RedisError as exc:  # the reaper queues them once more; a worker skips the copy
            log.info("job %s: batches queued, their running entries left to the reaper (%s)", job.job_id, exc)
    return store.require_job(job.job_id), n


#: Seconds the reaper leaves such an entry alone (its submit is still queueing: queueing it too would
#: send a second message of every batch); past it, the submit died or failed, and the reaper queues it.
SENDING_GRACE_S = 120.0


def _sender(mode: str) -> str:
    """The JSON holder of the ``running`` entries that :func:`start_job` makes for the batches it queues."""
    if mode == "rebuild":
        worker, task = "rebuild of a lost job", f"{REBUILD_PREFIX}{os.urandom(6).hex()}"
    else:
        worker, task = f"{mode} (queueing the batches)", f"{SENDING_PREFIX}{os.urandom(6).hex()}"
    return Holder(worker=worker, host=socket.gethostname(), pid=os.getpid(), task_id=task).to_json()


def still_sending(holder: Holder | None, at: float) -> bool:
    """Whether ``holder`` is a submit's or resume's entry for a batch it may still be queueing at time ``at``."""
    return holder is not None and holder.task_id.startswith(SENDING_PREFIX) and at - holder.since < SENDING_GRACE_S


#: A submit's claim of its directory in Redis before the job is registered lapses after this long.
SUBMIT_CLAIM_S = 600.0


def check_not_active_elsewhere(info: JobInfo | None, out_dir: str) -> None:
    """The same job (same books and settings) may run in one directory at a time."""
    if info is not None and info.out_dir != out_dir and info.status.active:
        raise JobError(f"job {info.id} (same books and settings) is already {info.status.value} in "
                       f"{info.out_dir}; wait for it, or cancel it first")


def submit_job(store: JobStore, books, out_dir: Path, config, priority: str, queue: str, engine=None):
    """Plan ``books`` into ``out_dir``, register the job and enqueue its unfinished batches (``submit``,
    the watched inbox). Returns (job, JobInfo, batches enqueued).

    Every check that can refuse runs before anything is written into ``out_dir``: the plan, the
    same job active elsewhere, a local ``cli.py run`` busy in the directory, the directory's Redis
    claim (:meth:`JobStore.claim_dir`) and its claim file. A refused submit leaves nothing behind.
    ``engine`` (an :class:`~engines.spec.EngineSpec`, ``submit --engine``): the job's engine, recorded
    before its batches are queued (:func:`jobs.job.claim_engine`; a job another engine synthesized
    is refused), so that only workers of that engine run them; None: the first worker's.
    """
    from jobs import claim as claims
    from jobs.job import claim_engine
    from jobs.prepare import prepare_job

    resolved = str(Path(out_dir).resolve())

    def before_write(job_id: str):
        check_not_active_elsewhere(store.get_job(job_id), resolved)
        # the submit mark first, then the local run's lock (a live one refuses): see jobs.claim
        unmark = claims.mark_submitted(Path(out_dir), job_id)
        try:
            previous = store.claim_dir(resolved, job_id, provisional_s=SUBMIT_CLAIM_S)
        except BaseException:
            if unmark is not None:
                unmark()
            raise
        release = None if previous == job_id else (lambda: store.release_dir(resolved, job_id, previous))
        undo = [f for f in (release, unmark) if f is not None]
        return (lambda: [f() for f in undo]) if undo else None

    job = prepare_job(list(books), Path(out_dir), config, before_write=before_write, engine=engine)
    if engine is not None:
        claim_engine(job, engine.identity())
    info, n = start_job(store, job, priority, queue, mode="submit")
    return job, info, n


#: The job settings a done job's record in Redis carries with its summary (what ``deliver`` may change).
RECORDED_OUTPUT = ("audio_format", "loudness", "captions", "flac_level")


def done_summary(job, summary=None) -> dict:
    """What a done job's record in Redis holds as its ``summary``: the finalize's (``summary``, else the
    one in the directory: :func:`jobs.finalize.finalized_summary`) and the output settings that made
    those files (:data:`RECORDED_OUTPUT`)."""
    from dataclasses import asdict

    from jobs.finalize import finalized_summary

    summary = finalized_summary(job) if summary is None else summary
    return {**asdict(summary), **{k: getattr(job.config, k, None) for k in RECORDED_OUTPUT}}


def record_delivery(store: JobStore, job) -> bool:
    """After ``deliver`` rewrote ``job``'s files: its record in Redis (when Redis knows the job in
    this directory) gets the new summary. False if Redis does not know it there; Redis errors raise."""
    info = store.get_job(job.job_id)
    if info is None or info.out_dir != str(Path(job.out_dir).resolve()) or info.status is not JobStatus.DONE:
        return False
    return store.set_status(job.job_id, JobStatus.DONE, summary=done_summary(job))


def failure_report(store: JobStore, info: JobInfo) -> list[str]:
    """One line per failed batch (and the job error), for ``status`` and ``submit --wait``."""
    lines = []
    for b, f in sorted(store.failures(info.id).items()):
        f = f or {}
        lines.append(f"batch {b}: {f.get('error_type', 'Error')}: {f.get('error', '?')} "
                     f"(worker {f.get('worker', '?')}, attempt {f.get('attempt', '?')})")
    if info.error:
        lines.append(info.error)
    return lines
