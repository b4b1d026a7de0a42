"""The Redis job state and its Lua scripts, against a real redis-server (no workers)."""

from __future__ import annotations

import time

import pytest

from workers.celery_app import PRIORITIES, default_queues, make_app, priority_of_queue, queue_name, redact_url
from workers.state import FINALIZE, Holder, JobInfo, JobStatus, JobStore

pytestmark = pytest.mark.redis


def _store(url) -> JobStore:
    return JobStore(url)


def _job(store: JobStore, batches: int = 3, job_id: str = "abc123") -> str:
    store.create_job(JobInfo(id=job_id, out_dir="/tmp/x", status=JobStatus.QUEUED, priority="normal",
                             queue="tts.normal", batches=batches, utterances=10, audio_s_est=30.0, created=time.time()))
    return job_id


def _holder(task="t1", pid=1) -> Holder:
    return Holder(worker=f"w{pid}@test", host="elsewhere", pid=pid, task_id=task)


def test_settings_json_only_acks_late_strict_priority():
    app = make_app("redis://localhost:1/0")
    c = app.conf
    assert c.task_serializer == c.result_serializer == "json" and c.accept_content == ["json"]
    assert c.task_acks_late and c.task_reject_on_worker_lost and c.worker_prefetch_multiplier == 1
    assert c.worker_disable_prefetch is True  # Celery 5.6+ (installed: 5.7)
    assert c.broker_transport_options["queue_order_strategy"] == "priority"
    vt = c.broker_transport_options["visibility_timeout"]
    assert vt == c.result_backend_transport_options["visibility_timeout"] >= 3600
    assert default_queues() == ["tts.high", "tts.normal", "tts.low"]
    assert [priority_of_queue(queue_name(p, "tts-gpu")) for p in PRIORITIES] == list(PRIORITIES)


def test_redact_url_hides_password():
    assert redact_url("redis://:s3cret@host:6380/2") == "redis://:***@host:6380/2"
    assert redact_url("redis://user:s3cret@host/0") == "redis://user:***@host/0"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"


def test_batch_counted_once_and_finalize_enqueued_once(redis_url):
    s = _store(redis_url)
    j = _job(s, batches=2)
    h1, h2 = _holder("t1", 1), _holder("t2", 2)
    assert s.begin(j, 0, h1, 10, 6) == ("ok", 1)
    assert s.get_job(j).status is JobStatus.RUNNING and s.get_job(j).started
    assert s.complete(j, 0, h1, {"worker": "w1"}, 1.5) == ("progress", True)
    assert s.complete(j, 0, h1, {"worker": "w1"}, 1.5) == ("progress", False), "a duplicate is not counted"
    assert s.begin(j, 0, h2, 10, 6)[0] == "done", "a done batch is skipped"
    assert s.begin(j, 1, h2, 10, 6) == ("ok", 1)
    assert s.complete(j, 1, h2, {}, 2.0) == ("finalize", True)
    assert s.complete(j, 1, h2, {}, 2.0) == ("complete", False), "finalize is enqueued once"
    info = s.get_job(j)
    assert (info.done, info.running, info.status) == (2, 0, JobStatus.FINALIZING)
    assert info.audio_s_done == pytest.approx(3.5)
    assert not s.finalize_guard(j)


def test_lease_excludes_others_but_not_a_retry_of_the_same_task(redis_url):
    s = _store(redis_url)
    j = _job(s)
    a, b = _holder("task-a", 1), _holder("task-b", 2)
    assert s.begin(j, 0, a, 10, 6)[0] == "ok"
    verdict, value = s.begin(j, 0, b, 10, 6)
    assert verdict == "leased" and Holder.from_json(value).task_id == "task-a"
    retry = _holder("task-a", 3)  # same task id: a Celery retry or a redelivery of the same message
    assert s.begin(j, 0, retry, 10, 6) == ("ok", 2)
    assert s.lease_holder(j, 0).pid == 3
    # steal: exactly the value seen
    verdict, value = s.begin(j, 0, b, 10, 6)
    assert s.begin(j, 0, b, 10, 6, steal=value) == ("ok", 3)


def test_deliveries_are_bounded(redis_url):
    s = _store(redis_url)
    j = _job(s)
    for n in range(1, 4):
        assert s.begin(j, 0, _holder("same"), 10, 3) == ("ok", n)
    assert s.begin(j, 0, _holder("same"), 10, 3) == ("exhausted", 4)


def test_reaper_claims_only_expired_leases(redis_url):
    s = _store(redis_url)
    j = _job(s)
    h = _holder()
    assert s.begin(j, 1, h, 0.3, 6)[0] == "ok"
    raw = s.running_raw(j)["1"]
    assert not s.claim_orphan(j, "1", raw), "lease alive"
    assert s.renew(j, 1, h, 0.3) == 1
    time.sleep(0.45)
    assert s.leased(j, [1]) == set()
    assert s.claim_orphan(j, "1", raw)
    assert not s.claim_orphan(j, "1", raw), "claimed once"
    # a heartbeat that finds its lease gone takes it back, running entry included
    assert s.renew(j, 1, h, 5) == 2
    assert s.running_raw(j)["1"] == h.to_json()


def test_failures_end_the_job_failed_when_all_batches_are_accounted(redis_url):
    s = _store(redis_url)
    j = _job(s, batches=2)
    h = _holder()
    s.begin(j, 0, h, 10, 6)
    assert s.fail(j, 0, h.to_json(), {"error": "boom", "error_type": "DeterministicEngineError"}) == "progress"
    assert s.begin(j, 0, _holder("t9"), 10, 6)[0] == "failed", "a failed batch is not retried until resume"
    assert s.lease_holder(j, 0) is None and s.running(j) == {}
    s.begin(j, 1, h, 10, 6)
    assert s.complete(j, 1, h, {}, 1.0)[0] == "failed"
    info = s.get_job(j)
    assert info.status is JobStatus.FAILED and info.failed == 1 and info.finished
    assert j not in s.active_jobs()
    assert s.failures(j)[0]["error"] == "boom"


def test_cancel_and_reset(redis_url):
    s = _store(redis_url)
    j = _job(s, batches=2)
    s.cancel(j)
    assert s.begin(j, 0, _holder(), 10, 6)[0] == "cancelled"
    info = s.get_job(j)
    assert info.status is JobStatus.CANCELLED and info.cancelled
    info.status = JobStatus.RUNNING
    info.cancelled = False
    assert s.create_job(info, done_ids=[1], reset=True) == 2
    again = s.get_job(j)
    assert again.status is JobStatus.RUNNING and not again.cancelled and again.done == 1
    assert s.begin(j, 0, _holder(), 10, 6)[0] == "ok"


def test_finalize_uses_the_same_lease_machinery(redis_url):
    s = _store(redis_url)
    j = _job(s, batches=1)
    h = _holder()
    assert s.begin(j, FINALIZE, h, 10, 6)[0] == "ok"
    s.finish(j, {"chapter_files": []})
    info = s.get_job(j)
    assert info.status is JobStatus.DONE and s.running(j) == {} and s.lease_holder(j, FINALIZE) is None
    assert s.begin(j, FINALIZE, _holder("t2"), 10, 6)[0] == "done"


def test_a_job_redis_lost_is_not_finished_into_a_stub(redis_url):
    # a finalize that ends after Redis restarted empty must not create a "done" job of a few fields (no
    # batches, no directory): finish says so, and the caller rebuilds the job from its directory
    s = _store(redis_url)
    assert s.finish("lost01", {"chapter_files": []}) is False
    assert s.set_status("lost01", JobStatus.RUNNING) is False
    assert s.get_job("lost01") is None and not s.r.exists(s.k_job("lost01"))
    assert "lost01" not in s.active_jobs()
    j = _job(s, batches=1)
    assert s.set_status(j, JobStatus.RUNNING) is True and j in s.active_jobs()
    assert s.finish(j, None) is True and s.get_job(j).status is JobStatus.DONE and j not in s.active_jobs()


def test_an_output_directory_is_held_by_one_active_job(redis_url):
    from core.errors import JobError

    s = _store(redis_url)
    d = "/shared/out/book"
    a = _job(s, job_id="jobA")
    s.set_fields(a, out_dir=d)
    assert s.claim_dir(d, a) is None and s.dir_holder(d) == a
    assert s.claim_dir(d, a) == a, "the same job again (resume): fine"
    with pytest.raises(JobError, match=f"{d} is the output directory of job {a}, which is queued"):
        s.claim_dir(d, "jobB")
    assert s.dir_holder(d) == a
    s.fail_job(a, "x")  # no longer active: another job may take the directory
    assert s.claim_dir(d, "jobB") == a and s.dir_holder(d) == "jobB"
    s.release_dir(d, "jobB", a)  # undo of a refused attempt gives it back
    assert s.dir_holder(d) == a
    s.release_dir(d, "jobB", None)  # not the holder: nothing happens
    assert s.dir_holder(d) == a
    s.finish(a, None)
    assert 0 < s.r.ttl(s.k_dir(d)) <= 30 * 24 * 3600, "expires with its done job"
    s.forget(a)
    assert s.dir_holder(d) is None
    e = _job(s, job_id="jobE")
    s.set_fields(e, out_dir="/elsewhere")
    s.r.set(s.k_dir(d), e)  # its job moved to another directory: stale, replaced
    assert s.claim_dir(d, "jobF") == e


def test_a_provisional_directory_claim_keeps_others_out_until_registered_or_lapsed(redis_url):
    from core.errors import JobError

    s = _store(redis_url)
    d = "/shared/out/new"
    assert s.claim_dir(d, "jobA", provisional_s=30) is None  # a submit, before it wrote anything
    assert 0 < s.r.pttl(s.k_dir(d)) <= 30_000
    with pytest.raises(JobError, match=f"{d} is being submitted as job jobA"):
        s.claim_dir(d, "jobB", provisional_s=30)
    assert s.claim_dir(d, "jobA") == "jobA" and s.r.ttl(s.k_dir(d)) == -1, "registered: permanent"
    assert s.claim_dir(d, "jobA", provisional_s=30) == "jobA" and s.r.ttl(s.k_dir(d)) == -1, "a resume keeps it"
    s.r.delete(s.k_dir(d))
    s.claim_dir(d, "jobA", provisional_s=0.2)
    time.sleep(0.3)  # that submit died before registering: the claim lapses
    assert s.claim_dir(d, "jobB") is None and s.dir_holder(d) == "jobB"


def test_a_finalized_job_redis_lost_is_rebuilt_as_done(redis_url, short_book, tmp_path, voice, monkeypatch):
    # the fault schedule's seed 3269205294: a job's finalize child wrote the manifest, the pool process
    # that ran it was killed before it told Redis, then Redis restarted empty. A reaper of the node finds
    # the job in the state directory and re-creates it as done (it used to forget a finalized job, and
    # the job's clients waited for it forever)
    from engines.fake import FakeEngine
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.runner import run_local
    from workers import recovery, runtime

    monkeypatch.setenv(runtime.STATE_DIR_ENV, str(tmp_path / "state"))
    runtime.reset_for_tests()
    try:
        job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=4))
        run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
        assert job.finalized
        s = _store(redis_url)
        runtime.remember_job(job.job_id, str(job.out_dir), "tts.normal", s.url)
        assert s.get_job(job.job_id) is None
        recovery.rebuild_lost_jobs(s)
        info = s.get_job(job.job_id)
        assert info is not None and info.status is JobStatus.DONE, info
        assert job.job_id not in runtime.known_jobs(s.url), "done: forgotten by the node"
        assert recovery.rebuild_lost_jobs(s) == 0
    finally:
        runtime.reset_for_tests()


def test_a_done_batch_keeps_no_running_entry_after_a_resume_or_the_finish(redis_url):
    # A worker wrote batches 1 and 2 but could not count them (Redis was down): their running entries stay
    # while their leases lapse. A resume that finds them written on disk counts them done, and no entry of a
    # done batch outlives that: the reaper never sweeps a cancelled or finished job, so nothing else drops it.
    s = _store(redis_url)
    j = _job(s, batches=3)
    w = _holder("t-writer", pid=7)
    for b in (1, 2):
        assert s.begin(j, b, w, 0.05, 6)[0] == "ok"
    s.cancel(j)
    time.sleep(0.1)  # the leases lapse
    info = s.get_job(j)
    info.status, info.cancelled = JobStatus.RUNNING, False
    assert s.create_job(info, done_ids=[1], reset=True) == 2
    assert set(s.running(j)) == {"2"}  # batch 2 not known done yet: its entry is what the reaper queues
    assert s.begin(j, 0, _holder("t0"), 10, 6)[0] == "ok"
    s.r.sadd(s.k(j, "done"), 2)  # counted another way (a rebuild from the directory)
    assert s.complete(j, 0, _holder("t0"), {}, 1.0)[0] == "finalize"
    assert s.begin(j, FINALIZE, _holder("tf"), 10, 6)[0] == "ok"
    assert s.finish(j, {"chapter_files": []}) is True
    assert s.running(j) == {}
