"""``backlog`` counts each unit of work once (issue 31, low finding): a batch the reaper queued
again next to its first message, a batch a worker is running (its lease: ``in_flight``) and the
messages of a cancelled job are not counted as more work waiting. Real redis-server; the messages
are sent the way submit and the reaper send them (:func:`workers.enqueue.enqueue_batches`)."""

from __future__ import annotations

import time

import pytest

from workers.backlog import backlog, totals
from workers.celery_app import app, use_redis
from workers.enqueue import enqueue_batches
from workers.state import Holder, JobInfo, JobStatus, JobStore

pytestmark = pytest.mark.redis

QUEUE = "tts.normal"


def a_job(store: JobStore, job_id: str, batches: int) -> None:
    store.create_job(JobInfo(id=job_id, out_dir=f"/nonexistent/{job_id}", status=JobStatus.QUEUED,
                             priority="normal", queue=QUEUE, batches=batches, utterances=batches,
                             audio_s_est=10.0 * batches, created=time.time()))


def test_requeued_running_and_cancelled_messages_are_not_counted_twice(redis_url):
    before = app.conf.broker_url
    use_redis(redis_url)
    try:
        store = JobStore(redis_url)
        a_job(store, "live", 4)
        a_job(store, "gone", 2)
        enqueue_batches("/nonexistent/live", "live", [0, 1, 2, 3], QUEUE)
        enqueue_batches("/nonexistent/live", "live", [1], QUEUE)  # the reaper's copy of batch 1
        enqueue_batches("/nonexistent/gone", "gone", [0, 1], QUEUE)
        store.cancel("gone")
        assert store.begin("live", 2, Holder("w@test", "h", 1, "t1"), 30, 6)[0] == "ok"  # running now
        store.r.sadd(store.k("live", "done"), "3")  # written by a worker whose message is still queued
    finally:
        use_redis(before)
    assert store.r.llen(QUEUE) == 7
    q = backlog(store.r, [QUEUE])[QUEUE]
    assert (q.queued, q.in_flight) == (2, 1), "batches 0 and 1 wait, batch 2 runs"
    assert q.queued_audio_s == pytest.approx(20.0)
    assert totals({QUEUE: q})["work"] == 3
