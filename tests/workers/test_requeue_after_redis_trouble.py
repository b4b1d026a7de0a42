"""Units whose queueing fails while Redis is in trouble are queued later, by the reaper: each unit is
always queued, leased, or has a ``running`` entry the reaper acts on (real redis-server, no workers).

The fault schedule's seed 2375747205: Redis restarted empty mid-job, a reaper rebuilt the job from its
directory, and Redis went away again (a restart keeping its data) between the job's re-creation and the
sending of its unfinished batches. The job was back in Redis, so it was not rebuilt again, and its
unfinished batches had no lease, no ``running`` entry and no message: it stayed at 9 of 11 batches.
"""

from __future__ import annotations

import json
import time

import pytest
import redis
from click.testing import CliRunner
from kombu.exceptions import OperationalError

from cli import main
from jobs.config import JobConfig
from jobs.prepare import prepare_job
from workers import control, recovery, runtime
from workers.batcher import Claimed
from workers.celery_app import use_redis
from workers.state import Holder, JobInfo, JobStatus, JobStore

pytestmark = pytest.mark.redis

QUEUE = "tts.normal"


@pytest.fixture
def broker():
    """Point this process's Celery app at the test's Redis (and back afterwards)."""
    from workers.celery_app import app

    before = app.conf.broker_url

    def point(url: str) -> None:
        use_redis(url)

    yield point
    use_redis(before)


def queued_units(store: JobStore, job_id: str) -> list[int]:
    """Batch ids of the ``synthesize_batch`` messages waiting in :data:`QUEUE`."""
    units = [json.loads(m)["headers"]["booktts_unit"] for m in store.r.lrange(QUEUE, 0, -1)]
    return sorted(int(u.rpartition(":")[2]) for u in units if u.startswith(f"{job_id}:"))


def a_job(store: JobStore, job_id: str = "gap01", batches: int = 3) -> str:
    store.create_job(JobInfo(id=job_id, out_dir="/tmp/x", status=JobStatus.RUNNING, priority="normal", queue=QUEUE,
                             batches=batches, utterances=batches, audio_s_est=10.0, created=time.time()))
    return job_id


def holder(task: str = "t1") -> Holder:
    return Holder(worker="w1@test", host="elsewhere", pid=1, task_id=task)


def recording(sent: list):
    def enqueue(job_dir, job_id, batch_ids, queue):
        sent.extend(int(b) for b in batch_ids)
        return len(batch_ids)
    return enqueue


def failing(*_a, **_k):
    raise OperationalError("Error 111 connecting to 127.0.0.1. Connection refused.")


def test_rebuilt_job_whose_batches_could_not_be_sent_is_requeued_by_the_reaper(own_redis, broker, short_book,
                                                                               tmp_path, monkeypatch):
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    pending = job.pending_batches()
    assert len(pending) >= 3
    runtime.reset_for_tests()
    broker(own_redis.url)
    s = JobStore(own_redis.url)
    runtime.remember_job(job.job_id, str(job.out_dir), QUEUE, s.url)
    real_enqueue = control.enqueue_batches

    def redis_goes_away_then_enqueue(*args, **kwargs):
        # the job has just been re-created; Redis now shuts down keeping it (as in the fault schedule's
        # redis_kept right after redis_lost), so sending the batches fails
        try:
            s.r.shutdown(save=True)
        except redis.exceptions.ConnectionError:
            pass
        own_redis.proc.wait(timeout=10)
        return real_enqueue(*args, **kwargs)

    try:
        assert s.get_job(job.job_id) is None  # Redis lost it
        monkeypatch.setattr(control, "enqueue_batches", redis_goes_away_then_enqueue)
        with pytest.raises(redis.exceptions.ConnectionError):
            recovery.rebuild_lost_jobs(s)  # (a reaper thread logs this and sweeps again later)
        monkeypatch.setattr(control, "enqueue_batches", real_enqueue)
        own_redis.start()
        info = s.get_job(job.job_id)
        assert info is not None and info.status.active and info.done == 0, "the re-created job was kept"
        assert queued_units(s, job.job_id) == []
        # the next sweep: the job exists, so it is not rebuilt again; the reaper queues its batches
        assert recovery.rebuild_lost_jobs(s) == 0
        recovery.reap(s)
        assert queued_units(s, job.job_id) == pending, "every unfinished batch queued again"
        assert s.running(job.job_id) == {}
        assert recovery.reap(s) == 0 and queued_units(s, job.job_id) == pending, "once"
    finally:
        runtime.forget_job(job.job_id)
        runtime.reset_for_tests()


def test_a_rebuild_that_sends_its_batches_leaves_nothing_for_the_reaper(redis_url, broker, short_book, tmp_path):
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    broker(redis_url)
    s = JobStore(redis_url)
    assert recovery.rebuild_job(s, str(job.out_dir), job.job_id, QUEUE)
    assert queued_units(s, job.job_id) == job.pending_batches()
    assert s.running(job.job_id) == {}, "the rebuild's running entries are dropped once the batches are sent"
    assert recovery.reap(s) == 0 and queued_units(s, job.job_id) == job.pending_batches()


def test_reaper_that_cannot_send_an_orphan_keeps_it_for_the_next_sweep(redis_url, monkeypatch):
    s = JobStore(redis_url)
    j = a_job(s)
    assert s.begin(j, 1, holder(), 0.2, 6)[0] == "ok"
    time.sleep(0.3)  # its worker died: the lease expired
    monkeypatch.setattr(recovery, "enqueue_batches", failing)
    with pytest.raises(OperationalError):
        recovery.reap(s)
    sent: list[int] = []
    monkeypatch.setattr(recovery, "enqueue_batches", recording(sent))
    assert recovery.reap(s) == 1 and sent == [1]
    assert s.running(j) == {} and recovery.reap(s) == 0 and sent == [1]


def test_a_unit_given_back_that_cannot_be_queued_is_left_to_the_reaper(redis_url, monkeypatch):
    from workers import tasks

    s = JobStore(redis_url)
    j = a_job(s)
    h = holder()
    assert s.begin(j, 2, h, 30, 6)[0] == "ok"
    monkeypatch.setattr(tasks, "enqueue_batches", failing)
    tasks._give_back(s, [Claimed("/tmp/x", j, 2, 1, None, QUEUE)], h)  # logs "could not re-queue it"
    assert s.leased(j, [2]) == set(), "its lease is given up"
    sent: list[int] = []
    monkeypatch.setattr(recovery, "enqueue_batches", recording(sent))
    assert recovery.reap(s) == 1 and sent == [2], "the reaper finds it"
    # queued fine: nothing is left for the reaper
    assert s.begin(j, 0, h, 30, 6)[0] == "ok"
    monkeypatch.setattr(tasks, "enqueue_batches", recording(sent))
    tasks._give_back(s, [Claimed("/tmp/x", j, 0, 1, None, QUEUE)], h)
    assert sent == [2, 0] and s.running(j) == {} and s.leased(j, [0]) == set()


def test_queueing_units_of_a_job_redis_lost_does_not_hide_it_from_the_rebuild(redis_url, broker, short_book,
                                                                             tmp_path):
    # a worker giving units back after Redis restarted empty used to write the ready index's `sclass`
    # into the job's hash: a stub of one field, which the reapers took for the job (never rebuilt)
    from workers.enqueue import enqueue_batches

    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    broker(redis_url)
    s = JobStore(redis_url)
    runtime.reset_for_tests()
    runtime.remember_job(job.job_id, str(job.out_dir), QUEUE, s.url)
    try:
        enqueue_batches(str(job.out_dir), job.job_id, [0], QUEUE)
        assert s.get_job(job.job_id) is None and not s.r.exists(s.k_job(job.job_id))
        assert recovery.rebuild_lost_jobs(s) == 1
        info = s.get_job(job.job_id)
        assert info.batches == len(job.batches) and s.sclass(job.job_id)
    finally:
        runtime.forget_job(job.job_id)
        runtime.reset_for_tests()


def test_a_submit_that_dies_before_queueing_its_batches_leaves_them_to_the_reaper(redis_url, broker, short_book,
                                                                                 tmp_path, monkeypatch):
    """`submit` registers the job, then queues its batches: a submit killed (or failing) in between left a
    job queued in Redis with no message, no lease and no entry, which nothing would ever run (the job
    exists, so a second submit leaves it alone). Its batches are entered in `running` with the job; the
    reaper leaves them to the submit for SENDING_GRACE_S, then queues them, once."""
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    pending = job.pending_batches()
    assert len(pending) >= 3
    broker(redis_url)
    s = JobStore(redis_url)

    class Killed(BaseException):
        """The submit's process ends here (SIGKILL, or an error before any message went out)."""

    def killed(*_a, **_k):
        raise Killed

    monkeypatch.setattr(control, "enqueue_batches", killed)
    with pytest.raises(Killed):
        control.start_job(s, job, mode="submit")
    monkeypatch.undo()
    info = s.get_job(job.job_id)
    assert info is not None and info.status.active and queued_units(s, job.job_id) == []
    # `status` says the batches wait to be queued, not that they run (one line for the submit, not one a batch)
    shown = CliRunner().invoke(main, ["status", job.job_id, "--redis-url", redis_url])
    assert shown.exit_code == 0, shown.output
    assert f"0/{len(job.batches)} done, 0 running, {len(pending)} being queued, 0 failed" in shown.output, shown.output
    assert "running on:" not in shown.output and shown.output.count("queueing:") == 1, shown.output
    assert f"queueing:    {len(pending)} batches, by submit (queueing the batches)" in shown.output
    # a second submit of the same books finds the job active and leaves it alone
    assert control.start_job(s, job, mode="submit")[1] == 0 and queued_units(s, job.job_id) == []
    # within the grace: the submit may still be queueing; the reaper leaves them
    assert recovery.reap(s) == 0 and queued_units(s, job.job_id) == []
    monkeypatch.setattr(control, "SENDING_GRACE_S", 0.0)
    assert recovery.reap(s) == len(pending)
    assert queued_units(s, job.job_id) == pending, "every unfinished batch queued, once"
    assert s.running(job.job_id) == {} and recovery.reap(s) == 0 and queued_units(s, job.job_id) == pending


def test_a_resume_after_a_submit_that_died_takes_over_its_entries(redis_url, broker, short_book, tmp_path,
                                                                  monkeypatch):
    """The user runs `resume` after the failed submit: it queues the batches itself and leaves no entry of
    the dead submit behind, so the reaper sends nothing twice; a worker's entry is left alone."""
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    pending = job.pending_batches()
    broker(redis_url)
    s = JobStore(redis_url)
    monkeypatch.setattr(control, "enqueue_batches", failing)
    with pytest.raises(OperationalError):
        control.start_job(s, job, mode="submit")
    monkeypatch.undo()
    assert sorted(int(b) for b in s.running(job.job_id)) == pending
    # a worker took batch 0 (its lease, its entry) before the resume
    w = holder("w-task")
    assert s.begin(job.job_id, pending[0], w, 30, 6)[0] == "ok"
    info, n = control.start_job(s, job, mode="resume")
    assert n == len(pending) - 1 and queued_units(s, job.job_id) == pending[1:]
    assert list(s.running(job.job_id)) == [str(pending[0])], "only the worker's entry is left"
    monkeypatch.setattr(control, "SENDING_GRACE_S", 0.0)
    assert recovery.reap(s) == 0 and queued_units(s, job.job_id) == pending[1:], "nothing sent twice"


def test_a_submit_that_queues_its_batches_leaves_nothing_for_the_reaper(redis_url, broker, short_book, tmp_path,
                                                                       monkeypatch):
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    broker(redis_url)
    s = JobStore(redis_url)
    info, n = control.start_job(s, job, mode="submit")
    assert n == len(job.pending_batches()) and queued_units(s, job.job_id) == job.pending_batches()
    assert s.running(job.job_id) == {}, "the submit's entries are dropped once its batches are queued"
    monkeypatch.setattr(control, "SENDING_GRACE_S", 0.0)
    assert recovery.reap(s) == 0 and queued_units(s, job.job_id) == job.pending_batches()


def test_a_message_a_worker_received_and_lost_before_starting_it_is_requeued(redis_url, monkeypatch):
    """The fault schedule's seed 2513361243: a new worker received a batch's message as Redis shut down;
    kombu could not put it back, the task never started (no lease, no `running` entry), and the message
    sat in kombu's `unacked` hash until the visibility timeout: the job stayed at 7 of 8 batches."""
    s = JobStore(redis_url)
    job_id = a_job(s, batches=6)
    s.r.sadd(s.k(job_id, "done"), "1")
    s.r.hset(s.k(job_id, "running"), "2", holder().to_json())
    s.r.set(s.k_lease(job_id, 3), holder().to_json())
    old, new = time.time() - 60, time.time()

    def delivered(tag: str, unit: str | None, at: float) -> None:
        headers = {"task": "booktts.synthesize_batch", **({"booktts_unit": unit} if unit else {})}
        s.r.hset("unacked", tag, json.dumps([{"body": "", "headers": headers, "properties": {}}, "", QUEUE]))
        s.r.zadd("unacked_index", {tag: at})

    delivered("t0", f"{job_id}:0", old)  # never started: queued again
    delivered("t1", f"{job_id}:1", old)  # done
    delivered("t2", f"{job_id}:2", old)  # running elsewhere
    delivered("t3", f"{job_id}:3", old)  # leased
    delivered("t4", f"{job_id}:4", new)  # just delivered: its worker is starting it
    delivered("t5", None, old)  # a finalize (no unit header)
    delivered("t6", "nojob:5", old)  # a job Redis does not know
    sent: list[int] = []
    monkeypatch.setattr(recovery, "enqueue_batches", recording(sent))
    assert recovery.requeue_stranded(s, 30.0) == 1 and sent == [0]
    assert sorted(t.decode() for t in s.r.hkeys("unacked")) == ["t1", "t2", "t3", "t4", "t5", "t6"]
    assert s.r.zscore("unacked_index", "t0") is None
    assert recovery.requeue_stranded(s, 30.0) == 0 and sent == [0], "queued once"
