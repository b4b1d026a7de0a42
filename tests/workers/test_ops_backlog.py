"""`cli.py backlog`: queued, in-flight and queued-audio per queue, with a real redis-server and a
real (slowed-down) worker."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from click.testing import CliRunner

from cli import main
from jobs.job import load_job
from workers.celery_app import use_redis
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def backlog_json(url: str, *opts: str) -> dict:
    res = CliRunner().invoke(main, ["backlog", "--json", "--redis-url", url, *opts])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def submit(url: str, book, out, *opts: str) -> str:
    res = CliRunner().invoke(main, ["submit", str(book), "-o", str(out), "--redis-url", url, *map(str, opts)])
    assert res.exit_code == 0, res.output
    return res.stdout.strip().splitlines()[0]


def test_backlog_counts_queued_in_flight_and_audio_while_a_job_runs_then_zero(redis_url, start_worker, short_book,
                                                                             tmp_path):
    store = JobStore(redis_url)
    out = tmp_path / "out"
    job_id = submit(redis_url, short_book, out, "--max-batch", "1")
    job = load_job(out)
    est = {b.batch_id: job.batch_estimated_seconds(b.batch_id) for b in job.batches}
    n = len(est)
    assert n >= 4
    doc = backlog_json(redis_url)
    assert set(doc) == {"queues"} and set(doc["queues"]) >= {"tts.high", "tts.normal", "tts.low"}
    for q in doc["queues"].values():
        assert set(q) == {"queued", "in_flight", "queued_audio_s"}
    normal = doc["queues"]["tts.normal"]
    assert (normal["queued"], normal["in_flight"]) == (n, 0)
    # each message carries its batch's estimate rounded to 0.1 s: their sum may differ from the rounded sum
    assert normal["queued_audio_s"] == pytest.approx(sum(est.values()), abs=0.05 * n + 0.05)
    assert doc["queues"]["tts.high"] == doc["queues"]["tts.low"] == {"queued": 0, "in_flight": 0,
                                                                     "queued_audio_s": 0.0}
    # one worker, one process, 0.8 s per batch: one batch in flight, the others queued
    start_worker(redis_url, "w1", env={"BOOKTTS_FAKE_DELAY_S": "0.8"})
    seen_in_flight = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not seen_in_flight:
        before = store.get_job(job_id)
        running = [int(b) for b in store.running(job_id) if b != "finalize"]
        doc = backlog_json(redis_url, "--queues", "tts.normal")
        after = store.get_job(job_id)
        if before.done != after.done or len(running) != 1 or set(store.running(job_id)) != {str(running[0])}:
            time.sleep(0.1)
            continue  # a batch finished while we looked: look again
        q = doc["queues"]["tts.normal"]
        assert list(doc["queues"]) == ["tts.normal"]
        assert q["in_flight"] == 1, doc
        assert q["queued"] == n - after.done - 1, (doc, after)
        waiting = set(est) - store.done_ids(job_id) - set(running)
        assert q["queued_audio_s"] == pytest.approx(sum(est[b] for b in waiting), abs=0.11)
        assert store.r.hlen("unacked") == 1, "kombu agrees: one delivered, unacknowledged message"
        seen_in_flight = True
    assert seen_in_flight
    deadline = time.monotonic() + 60
    while store.get_job(job_id).status is not JobStatus.DONE:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(0.3)  # the finalize task's ack
    doc = backlog_json(redis_url)
    assert all(q == {"queued": 0, "in_flight": 0, "queued_audio_s": 0.0} for q in doc["queues"].values()), doc


def test_backlog_sums_priority_sublists_falls_back_to_job_average_and_serves_http(redis_url, short_book, tmp_path):
    from workers import backlog as bl
    from workers.tasks import synthesize_batch

    store = JobStore(redis_url)
    out = tmp_path / "out"
    job_id = submit(redis_url, short_book, out, "--max-batch", "2", "--priority", "low")
    job = load_job(out)
    total_est = sum(job.batch_estimated_seconds(b.batch_id) for b in job.batches)
    n = len(job.batches)
    # batch 0's message replaced by one with a kombu priority (lands in the sub-list 'tts.low\x06\x166') and
    # without the estimate header (as an older version sent it): counted, at the job's average batch estimate
    # (a second message of one batch is not more work: a unit counts once)
    use_redis(redis_url)
    from workers.enqueue import withdraw

    assert withdraw("tts.low", [(job_id, 0)]) == 1
    synthesize_batch.apply_async((str(out.resolve()), job_id, 0, None), queue="tts.low", priority=6)
    assert store.r.llen("tts.low\x06\x166") == 1
    avg = store.get_job(job_id).audio_s_est / n
    result = bl.backlog(store.r)
    low = result["tts.low"]
    assert low.queued == n and low.sublists == {"tts.low\x06\x166": 1}
    assert low.queued_audio_s == pytest.approx(total_est - job.batch_estimated_seconds(0) + avg, abs=0.01)
    # a lease of a running batch counts as in flight on its job's queue (kombu not involved)
    store.r.set(store.k_lease(job_id, 1), "{}", px=5000)
    assert bl.backlog(store.r)["tts.low"].in_flight == 1
    # the human table shows the sub-list
    res = CliRunner().invoke(main, ["backlog", "--redis-url", redis_url, "--prefix", "tts"])
    assert res.exit_code == 0 and "tts.low" in res.stdout and "kombu priority sub-list" in res.stdout
    # --serve: the same document over HTTP, totals for one metric, Prometheus gauges
    server = bl.serve(store.r, 0, "127.0.0.1", prefix="tts")
    port = server.server_address[1]
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        def get(path):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.read().decode()

        assert json.loads(get("/backlog.json")) == bl.as_json(bl.backlog(store.r, prefix="tts"))
        total = json.loads(get("/total.json?prefix=tts"))
        # batch 1 is leased: in flight, no longer counted as waiting
        assert total["queued"] == n - 1 and total["in_flight"] == 1 and total["work"] == n
        text = get("/metrics")
        assert f'booktts_queue_queued{{queue="tts.low"}} {float(n - 1)}' in text
        assert 'booktts_queue_in_flight{queue="tts.low"} 1.0' in text
    finally:
        server.shutdown()
        server.server_close()
    # an unreachable Redis is one line
    res = CliRunner().invoke(main, ["backlog", "--json", "--redis-url", "redis://127.0.0.1:1/0"])
    assert res.exit_code == 5 and res.stderr.startswith("error: cannot reach Redis")
