"""Forged broker traffic that names work the project does not have (issue 31, findings 8 and 9).

Real redis-server, real `cli.py worker` processes, real job directories. The forged messages are
sent the way any broker client could (a bare Celery app, or raw entries in kombu's keys):

- entries in kombu's ``unacked`` hash, a ``running`` entry and plain task messages naming batches
  999 and -1 of a real job of several batches: the reaper queues none of them, the worker refuses
  them without recording a failure, and the job ends done with its manifest;
- a forged ``celery.chord_unlock`` (one of Celery's built-in tasks) is dropped as an unregistered
  task, once, not retried, and a worker restarted afterwards does not see it again.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.workers.test_trust import cli, forge, wait_for
from workers import recovery
from workers.backlog import UNACKED_INDEX_KEY, UNACKED_KEY
from workers.celery_app import TASK_SYNTHESIZE, use_redis
from workers.enqueue import UNIT_HEADER
from workers.state import Holder, JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

QUEUE = "tts.normal"


@pytest.fixture
def broker():
    """Point this process's Celery app at the test's Redis (and back afterwards)."""
    from workers.celery_app import app

    before = app.conf.broker_url
    yield use_redis
    use_redis(before)


def unacked_entry(r, tag: str, job_id: str, batch: str, age_s: float = 3600.0) -> None:
    """A kombu ``unacked`` entry (``[message, exchange, routing key]``) delivered ``age_s`` ago."""
    msg = {"body": "", "headers": {"task": TASK_SYNTHESIZE, UNIT_HEADER: f"{job_id}:{batch}"},
           "properties": {"delivery_tag": tag}}
    r.hset(UNACKED_KEY, tag, json.dumps([msg, "", QUEUE]))
    r.zadd(UNACKED_INDEX_KEY, {tag: time.time() - age_s})


def test_unplanned_batch_ids_never_fail_a_job(redis_url, broker, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    out = tmp_path / "out"
    jid = cli("submit", short_book, "-o", out, "--max-batch", "1", "--redis-url", redis_url).stdout.splitlines()[0]
    n = store.get_job(jid).batches
    assert n >= 3
    # kombu's unacked hash: batch 999, batch -1 and a batch id that is no number
    for tag, batch in (("forged-999", "999"), ("forged-neg", "-1"), ("forged-x", "x1")):
        unacked_entry(store.r, tag, jid, batch)
    # a running entry of a holder whose lease is long gone (what the reaper acts on)
    dead = Holder(worker="ghost@test", host="elsewhere", pid=1, task_id="t-ghost", since=time.time() - 3600)
    store.r.hset(store.k(jid, "running"), "999", dead.to_json())
    broker(redis_url)
    assert recovery.requeue_stranded(store, 60) == 0, "no unplanned batch is queued"
    assert not store.r.hlen(UNACKED_KEY), "the forged unacked entries are dropped"
    assert recovery.reap(store, [jid]) == 0 and "999" not in store.running_raw(jid)
    # plain task messages for batches the job does not have, sent like any broker client could
    forge(redis_url, [(TASK_SYNTHESIZE, [str(out), jid, b, None], QUEUE) for b in (999, -1, n)])
    w = start_worker(redis_url, "w1", lease_s=2.0)
    wait_for(lambda: not store.get_job(jid).status.active, 60, "the job finished", w)
    info = store.get_job(jid)
    assert info.status is JobStatus.DONE, (info.status, store.failures(jid), w.output()[-3000:])
    assert info.done == n and store.failures(jid) == {}
    assert (out / "manifest.parquet").exists()
    log = w.output()
    assert log.count("skipped (unplanned)") == 2, log[-3000:]  # 999 and n
    # -1 is no batch number at all: refused by the task's argument check (its failure is not recorded)
    assert "task argument batch_id -1 is not a batch number" in log and "Retry in" not in log, log[-3000:]


def test_job_store_refuses_unplanned_batches(redis_url, short_book, tmp_path):
    """The Lua steps themselves: begin, fail and complete of an unplanned batch change nothing."""
    from workers.state import JobInfo

    store = JobStore(redis_url)
    store.create_job(JobInfo(id="j15", out_dir=str(tmp_path), status=JobStatus.QUEUED, priority="normal",
                             queue=QUEUE, batches=15, utterances=15, audio_s_est=15.0, created=time.time()))
    h = Holder(worker="w@test", host="h", pid=1, task_id="t1")
    for b in (15, 999, "-1", "01", "x"):
        assert store.begin("j15", b, h, 30, 6)[0] == "unplanned", b
        assert store.fail("j15", b, h.to_json(), {"error": "boom"}) == "unplanned", b
        assert store.complete("j15", b, h, {}, 1.0) == ("unplanned", False), b
    assert store.get_job("j15").status is JobStatus.QUEUED and store.failures("j15") == {}
    assert store.begin("j15", 14, h, 30, 6)[0] == "ok", "a planned batch still starts"


def test_forged_builtin_celery_task_is_dropped_not_retried(redis_url, start_worker):
    store = JobStore(redis_url)
    w = start_worker(redis_url, "w1")
    forge(redis_url, [("celery.chord_unlock", ["forged-group", {"task": "x", "args": [], "kwargs": {}}], QUEUE),
                      ("celery.starmap", [{"task": "booktts.synthesize_batch"}, [[1]]], QUEUE),
                      ("celery.backend_cleanup", [], QUEUE)])
    wait_for(lambda: w.output().count("unregistered task of type") >= 3, 30, "three unregistered-task lines", w)
    time.sleep(3.0)  # a retrying chord_unlock delivers itself again many times a second
    log = w.output()
    assert "Received unregistered task of type 'celery.chord_unlock'" in log, log[-3000:]
    assert "Task celery.chord_unlock[" not in log and "Retry in" not in log, "it ran (and retried):\n" + log[-3000:]
    assert store.r.llen(QUEUE) == 0 and not store.r.hlen(UNACKED_KEY), "nothing waits to be delivered again"
    # a worker started afterwards meets nothing of it
    w.kill_group()
    w2 = start_worker(redis_url, "w2")
    time.sleep(2.0)
    assert "chord_unlock" not in w2.output(), w2.output()[-3000:]
