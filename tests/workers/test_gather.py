"""Worker-side batch formation (workers/batcher.py) with a real redis-server and real workers.

Jobs are planned in small batches (``--max-batch 2``); a worker started with ``--gather`` and a
larger engine budget combines queued batches of every job of the same voice into one engine call
(each item keeps its job's scales). The output must be exactly what the local runner writes (the fake engine's audio
depends on each utterance alone), every utterance once, and leases, kills and priorities must
still hold per planned batch.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.workers.test_distributed import (LEASE_S, SECOND_BOOK, assert_same_output, local_manifest, manifest,
                                            submit, wait_status)
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]


def records(out: Path) -> list[dict]:
    import json

    return [json.loads(p.read_text()) for p in sorted((out / ".work" / "batches").glob("b*.json"))]


def chapter_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.flac"))}


@pytest.fixture
def second_book(tmp_path) -> Path:
    p = tmp_path / "second.txt"
    p.write_text(SECOND_BOOK, encoding="utf-8")
    return p


def test_gathered_batches_of_two_jobs_match_the_local_runner(redis_url, start_worker, short_book, second_book,
                                                            tmp_path, voice):
    store = JobStore(redis_url)
    a_out, b_out = tmp_path / "a", tmp_path / "b"
    a = submit(redis_url, short_book, a_out, "--max-batch", "2")
    b = submit(redis_url, second_book, b_out, "--max-batch", "2")
    planned = store.get_job(a).batches + store.get_job(b).batches
    w = start_worker(redis_url, "g", args=["--gather", "--max-batch", "16"], lease_s=LEASE_S)
    for j in (a, b):
        assert wait_status(store, j, timeout=60).status is JobStatus.DONE
    for book, out, j in ((short_book, a_out, a), (second_book, b_out, b)):
        local_out = tmp_path / f"local-{j}"
        assert_same_output(manifest(out), local_manifest(book, local_out, voice, max_batch=2))
        assert chapter_bytes(out) == chapter_bytes(local_out), "gathered audio differs from the local runner's"
    recs = records(a_out) + records(b_out)
    assert len(recs) == planned, "one record per planned batch"
    calls = {r["engine_batch"] for r in recs}
    assert len(calls) < planned, "planned batches were combined into fewer engine calls"
    shared = [c for c in calls if {r["job_id"] for r in recs if r["engine_batch"] == c} == {a, b}]
    assert shared, "an engine call combined batches of both jobs"
    for r in recs:
        assert r["engine_batch_size"] <= 16
        assert r["engine_batch_size"] == sum(len(x["items"]) for x in recs if x["engine_batch"] == r["engine_batch"])
        assert r["queued_at"] and r["attempt"] == 1
    rows = manifest(a_out) + manifest(b_out)
    by_call = {r["engine_batch"]: r["engine_batch_size"] for r in recs}
    assert {row["batch_size"] for row in rows if row["status"] == "synthesized"} <= set(by_call.values())
    # the gathered units' own messages were taken off the queue, not delivered to be skipped
    log = w.output()
    gathered = planned - len(calls)
    withdrawn = sum(int(m) for m in re.findall(r"withdrawn=(\d+)", log))
    skipped = log.count(": skipped (")
    assert gathered > 0 and withdrawn + skipped == gathered, (gathered, withdrawn, skipped)
    assert skipped <= len(calls), f"{skipped} of {gathered} gathered units' messages were delivered"
    assert store.r.llen("tts.normal") == 0


def test_withdraw_takes_only_the_named_units_messages_off_the_queue(redis_url, short_book, tmp_path):
    import json

    from workers.celery_app import use_redis
    from workers.enqueue import UNIT_HEADER, enqueue_batches, withdraw

    use_redis(redis_url)
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, short_book, tmp_path / "b", "--max-batch", "2", "--length-scale", "1.2")
    n = store.get_job(a).batches
    assert n >= 4 and store.r.llen("tts.normal") == 2 * n

    def queued():
        return sorted(json.loads(m)["headers"][UNIT_HEADER] for m in store.r.lrange("tts.normal", 0, -1))

    assert withdraw("tts.normal", [(a, 1), (a, 3), (a, 99)]) == 2
    assert queued() == sorted([f"{a}:{i}" for i in range(n) if i not in (1, 3)] + [f"{b}:{i}" for i in range(n)])
    assert withdraw("tts.normal", [(a, 1)]) == 0, "already gone"
    assert withdraw("tts.high", [(a, 0)]) == 0, "another queue"
    enqueue_batches(str(tmp_path / "a"), a, [0], "tts.normal")  # a second message of one unit (the reaper's)
    assert withdraw("tts.normal", [(a, 0)]) == 2, "every message of the unit"
    assert f"{a}:0" not in queued() and len(queued()) == 2 * n - 3


def test_high_priority_batches_are_gathered_first(redis_url, start_worker, short_book, second_book, tmp_path):
    store = JobStore(redis_url)
    low = submit(redis_url, short_book, tmp_path / "low", "--max-batch", "2", "--priority", "low")
    high = submit(redis_url, second_book, tmp_path / "high", "--max-batch", "2", "--priority", "high")
    start_worker(redis_url, "g", args=["--gather", "--max-batch", "4"], lease_s=LEASE_S)
    for j in (low, high):
        assert wait_status(store, j, timeout=60).status is JobStatus.DONE
    hi = records(tmp_path / "high")
    lo = records(tmp_path / "low")
    last_high = max(r["started_at"] for r in hi)
    assert all(r["started_at"] >= last_high for r in lo if r["engine_batch"] not in {h["engine_batch"] for h in hi}), \
        "a low batch ran alone before the high job's batches were all started"


def test_jobs_of_different_speaking_rates_share_calls_each_at_its_own(redis_url, start_worker, short_book, tmp_path,
                                                                       voice):
    """Two jobs of one voice at length scales 1.0 and 1.3: the worker combines their batches into
    the same engine calls (the engine takes each item's scales), and each job's audio is exactly
    the local runner's at its own rate."""
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, short_book, tmp_path / "b", "--max-batch", "2", "--length-scale", "1.3")
    start_worker(redis_url, "g", args=["--gather", "--max-batch", "32"], lease_s=LEASE_S)
    for j in (a, b):
        assert wait_status(store, j, timeout=60).status is JobStatus.DONE
    ca = {r["engine_batch"] for r in records(tmp_path / "a")}
    cb = {r["engine_batch"] for r in records(tmp_path / "b")}
    assert ca & cb, "no engine call combined the two speaking rates"
    for out, extra in ((tmp_path / "a", {}), (tmp_path / "b", {"length_scale": 1.3})):
        local_out = tmp_path / f"local-{out.name}"
        assert_same_output(manifest(out), local_manifest(short_book, local_out, voice, max_batch=2, **extra))
        assert chapter_bytes(out) == chapter_bytes(local_out), f"{out.name}: audio differs from the local runner's"
    assert sum(r["duration_s"] for r in manifest(tmp_path / "b")) > 1.2 * sum(r["duration_s"]
                                                                               for r in manifest(tmp_path / "a"))


def test_worker_killed_holding_gathered_batches(redis_url, start_worker, short_book, second_book, tmp_path, voice):
    """SIGKILL of a worker that holds several gathered batches: each comes back through its lease
    and ends up written exactly once by the other worker."""
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, second_book, tmp_path / "b", "--max-batch", "2")
    slow = start_worker(redis_url, "slow", env={"BOOKTTS_FAKE_DELAY_S": "30"},
                        args=["--gather", "--max-batch", "16"], lease_s=LEASE_S)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(store.running(a)) + len(store.running(b)) < 3:
        time.sleep(0.05)
    held = len(store.running(a)) + len(store.running(b))
    assert held >= 3, "the worker gathered several batches into one engine call"
    slow.kill_group()
    start_worker(redis_url, "fast", args=["--gather", "--max-batch", "16"], lease_s=LEASE_S)
    for j in (a, b):
        assert wait_status(store, j, timeout=90).status is JobStatus.DONE
    assert_same_output(manifest(tmp_path / "a"), local_manifest(short_book, tmp_path / "la", voice, max_batch=2))
    assert_same_output(manifest(tmp_path / "b"), local_manifest(second_book, tmp_path / "lb", voice, max_batch=2))
    for j in (a, b):
        assert all(r["worker"] == "fast@test" for r in store.records(j).values())


def test_cancelled_job_is_not_gathered(redis_url, start_worker, short_book, second_book, tmp_path):
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, second_book, tmp_path / "b", "--max-batch", "2")
    store.cancel(b)
    start_worker(redis_url, "g", args=["--gather", "--max-batch", "32"], lease_s=LEASE_S)
    assert wait_status(store, a, timeout=60).status is JobStatus.DONE
    time.sleep(0.5)
    assert not (tmp_path / "b" / ".work" / "batches").exists() or not records(tmp_path / "b")
    assert store.get_job(b).status is JobStatus.CANCELLED


def test_startup_report_says_why():
    from engines.base import EngineInfo
    from workers.runtime import startup_report

    info = EngineInfo("torch", "fp16", "cuda:0", 22050, 1024,
                      extra={"precompile": True, "precompile_s": 12.5, "precompile_kernels": 40,
                             "precompile_compiled": 30, "warmup": "lazy"})
    text = startup_report(info, 14.0)
    assert "30 compiled, 10 from the cache in 12.5 s" in text
    assert "TRITON_CACHE_DIR" in text and "warm-up lazy" in text and "14.0 s" in text
    assert "Triton" not in startup_report(EngineInfo("onnx", "fp32", "cpu", 22050, 32), 0.5)


def test_the_seed_job_is_filled_first_so_jobs_finish_one_after_the_other(redis_url, start_worker, short_book, tmp_path):
    """Two queued jobs of one class: a worker fills each engine call from the seed's own job first
    (then from others), so the first job's batches all run before the second's last: its finalize
    overlaps the second's synthesis instead of both finishing at the end."""
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, short_book, tmp_path / "b", "--max-batch", "2", "--length-scale", "1.3")
    assert store.get_job(a).batches >= 4
    start_worker(redis_url, "g", args=["--gather", "--max-batch", "6"], lease_s=LEASE_S)
    for j in (a, b):
        assert wait_status(store, j, timeout=60).status is JobStatus.DONE
    ra, rb = records(tmp_path / "a"), records(tmp_path / "b")
    first = min(ra + rb, key=lambda r: r["started_at"])["engine_batch"]
    assert {r["job_id"] for r in ra + rb if r["engine_batch"] == first} == {a}, "the first call mixed in job b"
    assert max(r["started_at"] for r in ra) < max(r["started_at"] for r in rb)
    calls_with_a = {r["engine_batch"] for r in ra}
    assert len(calls_with_a) <= -(-sum(len(r["items"]) for r in ra) // 6) + 1  # a's calls were full of a


def test_gather_leases_in_one_round_and_offers_room_left_by_held_units_to_the_rest(redis_url, short_book, tmp_path):
    """In-process: a unit another worker holds is not taken, and the room it leaves goes to the next
    candidates (a second round), so the call is as full as the budget allows; every unit taken is
    leased to this holder with its attempt, queued_at and queue, and gone from the ready index."""
    import socket

    from jobs.job import load_job
    from jobs.synthesize import synthesis_class
    from workers.batcher import Claimed, gather, unit_shape
    from workers.state import Holder

    out = tmp_path / "j"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    store = JobStore(redis_url)
    job = load_job(out)
    n = len(job.batches)
    assert n >= 5
    me = Holder("me@h", socket.gethostname(), 10**6 + 1, "t-me")
    other = Holder("other@h", "elsewhere", 7, "t-other")
    assert store.begin(job_id, 0, me, 60, 5)[0] == "ok"
    assert store.begin(job_id, 1, other, 60, 5)[0] == "ok"  # another worker runs batch 1
    info = store.get_job(job_id)
    seed = Claimed(str(out), job_id, 0, 1, store.queued_at(job_id, 0), info.queue)
    budget = sum(unit_shape(job, b)[0] for b in range(4))  # seed + 3 units' worth of utterances
    got = gather(store, job, seed, me, max_items=budget, max_padded=10**9, lease_s=60, max_deliveries=5,
                 load_job=load_job)
    ids = [c.batch_id for c, _ in got]
    assert 1 not in ids and 0 not in ids and len(set(ids)) == len(ids)
    assert sum(unit_shape(job, b)[0] for b in ids) + unit_shape(job, 0)[0] <= budget
    left = [b for b in range(2, n) if b not in ids]
    # full: no unit left over would still fit
    room = budget - unit_shape(job, 0)[0] - sum(unit_shape(job, b)[0] for b in ids)
    assert all(unit_shape(job, b)[0] > room for b in left)
    assert len(ids) >= 3
    for c, _ in got:
        assert c.attempt == 1 and c.queue == info.queue and c.queued_at == store.queued_at(job_id, c.batch_id)
        verdict, value = store.begin(job_id, c.batch_id, other, 60, 5)
        assert verdict == "leased" and Holder.from_json(value).task_id == "t-me"
    ready = {(j, b) for j, b, _ in store.ready_candidates(synthesis_class(job), 0, 10**12, 10**6)}
    assert not ready & {(job_id, b) for b in ids}
    assert (job_id, 1) in ready or store.begin(job_id, 1, me, 60, 5)[0] == "leased"


def test_ready_count_is_the_classs_queued_batches_not_yet_taken(redis_url, short_book, tmp_path):
    """What a finalize asks to choose threads or processes (workers.tasks): the batches of its job's
    synthesis class still waiting for an engine, other jobs of the class included."""
    store = JobStore(redis_url)
    a = submit(redis_url, short_book, tmp_path / "a", "--max-batch", "2")
    b = submit(redis_url, short_book, tmp_path / "b", "--max-batch", "2", "--length-scale", "1.2")
    n = store.get_job(a).batches
    assert store.sclass(a) == store.sclass(b) != ""
    assert store.ready_count_of(a) == store.ready_count_of(b) == 2 * n
    store.drop_ready(store.sclass(a), [(a, i) for i in range(n)])  # a's units taken by an engine
    assert store.ready_count_of(a) == n, "b's batches still wait"
    assert store.ready_count_of("no-such-job") == 0
