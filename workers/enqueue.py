"""Sending work by task name: ``synthesize_batch`` and ``finalize_job`` messages, and this process's
:class:`~workers.state.JobStore`.

Everything that queues work (submit, resume, the reaper, a worker giving back gathered batches)
goes through here; it names the tasks (:data:`~workers.celery_app.TASK_SYNTHESIZE`,
:data:`~workers.celery_app.TASK_FINALIZE`) and never imports their bodies (:mod:`workers.tasks`).
Results are never stored (``ignore_result``: by name, Celery would otherwise subscribe to the
result backend for every message sent, and a client then fails when Redis restarts).

Each ``synthesize_batch`` message names its unit in the header :data:`UNIT_HEADER`
(``<job id>:<batch id>``), so that :func:`withdraw` can take the messages of units a worker gathered
(and leased) into its engine call off the queue before they are delivered: otherwise every one of them
is delivered later only to be skipped (a GPU worker gathering 32 units a call skipped ~500 messages in
the bulk benchmark), and the queue's length overstates the work left (``backlog``, KEDA).
"""

from __future__ import annotations

import logging
import os
import threading

import redis

from workers.backlog import EST_HEADER, priority_lists
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE, app
from workers.state import JobStore

log = logging.getLogger("booktts.tasks")

#: Header of a ``synthesize_batch`` message naming its unit: ``<job id>:<batch id>``.
UNIT_HEADER = "booktts_unit"
#: Messages :func:`withdraw` looks at per Redis list, from the end consumers take from.
WITHDRAW_SCAN = 2048
#: Remove the messages (kombu's JSON envelopes) whose unit header is one of ARGV[2..], among the
#: last ARGV[1] of each list in KEYS (the oldest: consumers pop from the right). Atomic with respect
#: to a consumer's pop, so each message is either delivered or removed, never both.
_WITHDRAW = """
local want = {}
for i = 2, #ARGV do want[ARGV[i]] = true end
local removed = 0
for _, key in ipairs(KEYS) do
  local n = redis.call('llen', key)
  if n > 0 then
    local items = redis.call('lrange', key, math.max(0, n - tonumber(ARGV[1])), -1)
    for i = #items, 1, -1 do
      local u = string.match(items[i], '"booktts_unit":%s*"([^"]+)"')
      if u and want[u] then
        removed = removed + redis.call('lrem', key, -1, items[i])
      end
    end
  end
end
return removed
"""

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
    """One ``synthesize_batch`` message per batch on ``queue``, and the batches in the ready index
    (:mod:`workers.batcher`) for workers that combine them. Returns how many were sent."""
    from jobs.job import now_iso

    batch_ids = [int(b) for b in batch_ids]
    if not batch_ids:
        return 0
    queued_at = now_iso()
    job = _try_load(job_dir, job_id)
    est = _batch_estimates(job, batch_ids)
    if job is not None:
        from jobs.synthesize import synthesis_class
        from workers.batcher import rank_of

        shapes = {b: job.batches[b].max_len for b in batch_ids if 0 <= b < len(job.batches)}
        get_store().add_ready(job_id, synthesis_class(job), rank_of(queue), shapes, queued_at)
    with app.producer_or_acquire() as producer:
        for b in batch_ids:
            headers = {UNIT_HEADER: f"{job_id}:{b}"}
            if b in est:
                headers[EST_HEADER] = est[b]  # read by `backlog` (queued audio seconds)
            app.send_task(TASK_SYNTHESIZE, (str(job_dir), job_id, b, queued_at), queue=queue, producer=producer,
                          headers=headers, ignore_result=True)
    return len(batch_ids)


def withdraw(queue: str, units) -> int:
    """Take the queued ``synthesize_batch`` messages of ``units`` ((job id, batch id) pairs this worker
    has leased) off ``queue`` before they are delivered; returns how many were removed. Messages not
    found (delivered already, beyond :data:`WITHDRAW_SCAN`, sent without the header) are delivered and
    skipped as before: this only saves work. A unit whose lease then lapses is queued again by the
    reaper, as for any unit its worker lost."""
    ids = [f"{j}:{int(b)}" for j, b in units]
    if not ids:
        return 0
    keys = priority_lists(queue)
    return int(get_store().r.eval(_WITHDRAW, len(keys), *keys, WITHDRAW_SCAN, *ids))


def withdraw_units(claimed) -> int:
    """Take the own messages of units a worker gathered (:class:`workers.batcher.Claimed`) off their
    queues (:func:`withdraw`), so they are not delivered only to be skipped; returns how many were
    removed. A queue Redis fails on keeps its messages (one log line): they are delivered and skipped."""
    by_queue: dict[str, list] = {}
    for c in claimed:
        by_queue.setdefault(c.queue, []).append((c.job_id, c.batch_id))
    removed = 0
    for queue, units in by_queue.items():
        try:
            removed += withdraw(queue, units)
        except redis.exceptions.RedisError as exc:
            log.info("gathered units' messages not withdrawn from %s (%s); they will be skipped", queue, exc)
    return removed


def _try_load(job_dir: str, job_id: str):
    try:
        return load_checked(str(job_dir), job_id)
    except Exception as exc:  # only for estimates and the ready index; never block enqueueing
        log.debug("job %s in %s not readable here: %s", job_id, job_dir, exc)
        return None


def _batch_estimates(job, batch_ids) -> dict[int, float]:
    """Estimated audio seconds per batch (``Job.batch_estimated_seconds``); {} if the job cannot be read."""
    if job is None:
        return {}
    try:
        return {b: round(job.batch_estimated_seconds(b), 3) for b in batch_ids}
    except Exception as exc:  # an estimate is only for the backlog report; never block enqueueing
        log.debug("no batch estimates for job %s: %s", job.job_id, exc)
        return {}


def enqueue_finalize(job_dir: str, job_id: str, queue: str, countdown: float | None = None) -> None:
    """One ``finalize_job`` message on ``queue``."""
    app.send_task(TASK_FINALIZE, (str(job_dir), job_id), queue=queue, countdown=countdown, ignore_result=True)


def load_checked(job_dir: str, job_id: str):
    """The job in ``job_dir``, if it still is job ``job_id`` (:func:`jobs.job.load_checked`)."""
    from jobs.job import load_checked as load

    return load(job_dir, job_id)
