"""A job whose engine no live worker serves: `status` says so, its batches wait without going round.

Submitted for ``--engine fake`` while only a CPU ONNX worker runs, each batch used to go back on its
queue a second after the ONNX worker took it, for ever (a log line and a message each time), and
``status JOB`` did not say why the job did not move. Now the worker parks each batch once
(:mod:`workers.presence`), ``status`` names the engine the job needs and that no live worker serves
it, and a worker of that engine, once started, runs every batch once.
"""

from __future__ import annotations

import time

import pytest

from tests.workers.test_ops_backlog import backlog_json
from tests.workers.test_trust import cli, wait_for
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

LEFT = "left for a worker of the job's engine"


def _received(worker) -> int:
    return worker.output().count("booktts.synthesize_batch[")


def test_a_job_no_live_worker_serves_waits_visibly_and_runs_once_one_starts(redis_url, start_worker, short_book,
                                                                             tmp_path):
    store = JobStore(redis_url)
    out = tmp_path / "job"
    jid = cli("submit", short_book, "-o", out, "--max-batch", "2", "--engine", "fake", "--redis-url",
              redis_url).stdout.splitlines()[0]
    n = store.get_job(jid).batches
    assert n >= 3
    onnx = start_worker(redis_url, "onnx", engine="onnx", args=["--threads", "1"])
    wait_for(lambda: onnx.output().count(LEFT) >= n, 60, f"{n} batches left to the job's engine", onnx)

    shown = cli("status", jid, "--redis-url", redis_url).output
    assert "needs fake fp32" in shown and "no live worker serves it" in shown, shown
    assert "onnx fp32 on cpu" in shown, shown  # the live workers it has instead

    # bounded: the messages stop going round (they used to come back about once a second each)
    time.sleep(2)
    before = _received(onnx)
    time.sleep(8)
    assert _received(onnx) - before <= 1, onnx.output()[-3000:]
    assert store.deliveries(jid) == {} and store.get_job(jid).failed == 0
    assert list((out / ".work" / "batches").glob("b*.json")) == []
    q = backlog_json(redis_url)["queues"]["tts.normal"]  # parked, the batches still count as waiting work
    assert q["queued"] == n and q["queued_audio_s"] > 0, q

    t0 = time.monotonic()
    fake = start_worker(redis_url, "fake")
    wait_for(lambda: store.get_job(jid).status in (JobStatus.DONE, JobStatus.FAILED), 60, "the job's end", fake)
    took = time.monotonic() - t0
    info = store.get_job(jid)
    assert info.status is JobStatus.DONE and info.failed == 0, info
    assert took < 45, took
    assert len(list((out / ".work" / "batches").glob("b*.json"))) == n
    assert all(v == 1 for v in store.deliveries(jid).values()), store.deliveries(jid)  # each batch ran once
    assert not store.r.hkeys("booktts:parked")
    assert "engine:" not in cli("status", jid, "--redis-url", redis_url).output  # done: nothing to wait for
    assert "Traceback" not in onnx.output() + fake.output()
