"""Workers of another engine leave a job's batches to workers of its own (issue 31, finding 4).

A job whose first batch the fake engine synthesized (``.work/engine.json``) is queued; an ONNX worker
takes its messages. Before, it synthesized them (the job's chapters then mixed tones and speech); now
it puts each one back on the queue, leasing and counting nothing, and the job neither fails nor
advances until a worker of its own engine runs it.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.workers.test_trust import cli, wait_for
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

LEFT = "left for a worker of the job's engine"


def test_an_onnx_worker_leaves_a_fake_job_to_a_fake_worker(redis_url, start_worker, short_book, tmp_path, voice):
    from engines.fake import FakeEngine
    from jobs.job import load_job
    from jobs.synthesize import run_batch

    store = JobStore(redis_url)
    out = tmp_path / "job"
    jid = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url).stdout.splitlines()[0]
    n = store.get_job(jid).batches
    assert n >= 3
    run_batch(load_job(out), 0, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
    assert json.loads((out / ".work" / "engine.json").read_text()) == {"name": "fake", "precision": "fp32"}

    onnx = start_worker(redis_url, "onnx", engine="onnx", args=["--threads", "1"])
    wait_for(lambda: onnx.output().count(LEFT) >= n, 60, f"{n} batches left to the job's engine", onnx)
    records = sorted((out / ".work" / "batches").glob("b*.json"))
    assert len(records) == 1, "the ONNX worker synthesized nothing"
    info = store.get_job(jid)
    assert info.status in (JobStatus.QUEUED, JobStatus.RUNNING) and info.failed == 0, info
    assert store.deliveries(jid) == {}, "nothing was leased or counted"
    assert "engine ready: onnx" not in onnx.output(), "its engine was never needed"

    fake = start_worker(redis_url, "fake")
    wait_for(lambda: store.get_job(jid).status in (JobStatus.DONE, JobStatus.FAILED), 90, "the job's end", fake)
    assert store.get_job(jid).status is JobStatus.DONE
    engines = set(pq.read_table(out / "manifest.parquet").column("engine").to_pylist()) - {None}
    assert engines == {"fake"}, engines
    assert "Traceback" not in onnx.output() + fake.output()


def test_a_job_submitted_for_one_engine_is_left_by_workers_of_another(redis_url, start_worker, short_book, tmp_path):
    """`submit --engine` records the job's engine before its batches are queued: a CPU ONNX worker does
    not synthesize a job submitted for another engine, and a submit for another engine is refused."""
    store = JobStore(redis_url)
    out = tmp_path / "job"
    jid = cli("submit", short_book, "-o", out, "--max-batch", "2", "--engine", "fake", "--redis-url",
              redis_url).stdout.splitlines()[0]
    assert json.loads((out / ".work" / "engine.json").read_text()) == {"name": "fake", "precision": "fp32"}
    n = store.get_job(jid).batches
    onnx = start_worker(redis_url, "onnx", engine="onnx", args=["--threads", "1"])
    wait_for(lambda: onnx.output().count(LEFT) >= n, 60, f"{n} batches left to the job's engine", onnx)
    assert list((out / ".work" / "batches").glob("b*.json")) == [], "the ONNX worker synthesized nothing"
    assert store.deliveries(jid) == {} and store.get_job(jid).failed == 0
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--engine", "onnx", "--redis-url", redis_url,
              ok=False)
    assert res.exit_code != 0 and "--engine fake --precision fp32" in res.output, res.output
