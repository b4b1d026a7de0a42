"""Worker metrics (`worker --metrics-port`) and the per-GPU supervisor (`worker --gpus`), with a real
redis-server and real worker subprocesses (fake engine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from jobs.config import GPU_MAX_BATCH
from tests.workers.procs import children_of, free_port
from workers.state import JobStatus, JobStore

from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, labs), v in samples.items()
               if n == name and all(dict(labs).get(k) == want for k, want in labels.items()))


def submit(url: str, book, out, *opts: str) -> str:
    res = CliRunner().invoke(main, ["submit", str(book), "-o", str(out), "--redis-url", url, *map(str, opts)])
    assert res.exit_code == 0, res.output
    return res.stdout.strip().splitlines()[0]


def wait_done(store: JobStore, job_id: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while (info := store.get_job(job_id)).status is not JobStatus.DONE:
        assert time.monotonic() < deadline, info
        time.sleep(0.1)
    return info


def test_prefork_worker_serves_metrics_that_grow_as_a_job_runs(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    port = free_port()
    w = start_worker(redis_url, "m1", env={"BOOKTTS_FAKE_DELAY_S": "0.3", "PROMETHEUS_MULTIPROC_DIR": ""},
                     args=["--metrics-port", str(port), "--concurrency", "2"])
    first = scrape(port)  # served by the parent before any batch ran
    assert total(first, "booktts_batches_total") == 0
    job_id = submit(redis_url, short_book, tmp_path / "out", "--max-batch", "1")
    n = store.get_job(job_id).batches
    deadline = time.monotonic() + 30
    while (done := store.get_job(job_id).done) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    mid = scrape(port)
    lab = dict(engine="fake", precision="fp32", device="cpu", queue="tts.normal")
    assert total(mid, "booktts_batches_total", **lab) >= 2
    info = wait_done(store, job_id)
    end = scrape(port)
    assert total(end, "booktts_batches_total", **lab) == n > total(mid, "booktts_batches_total")
    rows = pq.read_table(tmp_path / "out" / "manifest.parquet").to_pylist()
    assert total(end, "booktts_utterances_total", **lab) == sum(r["status"] == "synthesized" for r in rows)
    assert total(end, "booktts_audio_seconds_total", **lab) == pytest.approx(
        sum(r["duration_s"] for r in rows if r["status"] == "synthesized"), rel=1e-3)
    assert total(end, "booktts_engine_seconds_total", **lab) >= 0.3 * n * 0.9  # the fake engine sleeps 0.3 s
    assert total(end, "booktts_batch_duration_seconds_count", **lab) == n
    assert total(end, "booktts_batch_fill_ratio_count", **lab) == n
    assert total(end, "booktts_batch_fill_ratio_bucket", le="0.1", **lab) == n, "1 item of max 32 per batch"
    loads = total(end, "booktts_engine_load_seconds_count", engine="fake", device="cpu")
    assert 1 <= loads <= 2, "each pool child builds its engine once"
    assert total(end, "booktts_batch_failures_total") == 0
    assert info.audio_s_done == pytest.approx(total(end, "booktts_audio_seconds_total"), rel=1e-3)
    assert f"metrics on :{port}" in w.output()


def test_failures_are_counted_with_their_error(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    port = free_port()
    # refuse every batch: phoneme id 1 ('^', the start marker) is in every utterance
    start_worker(redis_url, "m2", env={"BOOKTTS_FAKE_FAIL_ID": "1"}, args=["--metrics-port", str(port)])
    job_id = submit(redis_url, short_book, tmp_path / "out", "--max-batch", "4", "--chapters", "2")
    deadline = time.monotonic() + 30
    while store.get_job(job_id).status is not JobStatus.FAILED:
        assert time.monotonic() < deadline, store.get_job(job_id)
        time.sleep(0.1)
    s = scrape(port)
    assert total(s, "booktts_batch_failures_total", error="DeterministicEngineError", queue="tts.normal",
                 engine="fake") == store.get_job(job_id).failed >= 1
    assert total(s, "booktts_batches_total") == 0


# ------------------------------------------------------------------ worker --gpus


def test_gpus_without_a_gpu_is_one_line_error(redis_url, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    for env, why in (({"PATH": str(empty), "CUDA_VISIBLE_DEVICES": None}, "nvidia-smi is not installed and CUDA_VISIBLE_DEVICES is not set"),
                     ({"CUDA_VISIBLE_DEVICES": "-1"}, "CUDA_VISIBLE_DEVICES='-1' hides every GPU")):
        res = CliRunner(env=env).invoke(main, ["worker", "--gpus", "all", "--redis-url", redis_url])
        assert res.exit_code == 6, res.output
        assert res.stderr.strip() == (f"error: --gpus all: no GPU visible ({why}); run the worker without --gpus for "
                                      f"a CPU worker")
    res = CliRunner(env={"CUDA_VISIBLE_DEVICES": "0,1"}).invoke(main, ["worker", "--gpus", "2", "--redis-url",
                                                                       redis_url])
    assert res.exit_code == 6 and "GPU 2 is not visible here (visible per CUDA_VISIBLE_DEVICES: 0, 1)" in res.stderr
    res = CliRunner().invoke(main, ["worker", "--gpus", "all", "--device", "cuda:1", "--redis-url", redis_url])
    assert res.exit_code == 2 and "--gpus" in res.stderr


def test_visible_gpus_parses_nvidia_smi_and_mig(tmp_path):
    from workers.gpus import visible_gpus

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n"
                   "GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
                   "GPU 1: NVIDIA H200 (UUID: GPU-66666666-7777-8888-9999-000000000000)\n"
                   "  MIG 3g.71gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)\n"
                   "  MIG 3g.71gb     Device  1: (UUID: MIG-ffffffff-bbbb-cccc-dddd-eeeeeeeeeeee)\n"
                   "EOF\n")
    smi.chmod(0o755)
    ids, source = visible_gpus({"BOOKTTS_NVIDIA_SMI": str(smi)})
    assert source == "nvidia-smi -L"
    assert ids == ["MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "MIG-ffffffff-bbbb-cccc-dddd-eeeeeeeeeeee", "0"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-1,GPU-2", "BOOKTTS_NVIDIA_SMI": str(smi)}) == \
        (["GPU-1", "GPU-2"], "CUDA_VISIBLE_DEVICES")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(x.decode(errors="replace").split("=", 1) for x in raw if b"=" in x)


def test_gpus_all_runs_one_worker_per_gpu_and_forwards_sigterm(redis_url, short_book, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-a)'\necho 'GPU 1: Fake GPU (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "BOOKTTS_NVIDIA_SMI": str(smi),
           "BOOKTTS_FAKE_DELAY_S": "0.3"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("REDIS_URL", None)
    log = tmp_path / "supervisor.log"
    with open(log, "wb") as f:
        sup = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "worker", "--gpus", "all", "--engine", "fake",
                                "--voice", "", "--lease-seconds", "3", "-n", "node", "--metrics-port", str(port),
                                "--concurrency", "2",
                                "--allowed-root", str(tmp_path), "--redis-url", redis_url], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                               start_new_session=True)
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while log.read_text(errors="replace").count(" ready.") < 2:
            assert sup.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        kids = children_of(sup.pid)
        assert len(kids) == 2
        envs = [_environ(k) for k in kids]
        assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in envs) == ["0", "1"]
        for k, e in zip(kids, envs):
            cmd = Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
            assert cmd[cmd.index(b"--concurrency") + 1] == b"2", "--concurrency: engine processes per GPU"
            # the worker's settings travel as one record (core.settings), not as flags or a variable each
            assert b"--settings-from-parent" in cmd
            assert not {b"--device", b"--max-batch", b"--lease-seconds", b"--allowed-root", b"--engine"} & set(cmd)
            assert not {"BOOKTTS_GATHER", "BOOKTTS_MAX_BATCH_PHONEMES", "BOOKTTS_UNIT_WRITERS",
                        "BOOKTTS_PREPARE_SHAPES_S", "BOOKTTS_EARLY_CHAPTERS"} & set(e)
            record = json.loads(e["BOOKTTS_WORKER_SETTINGS"])
            assert record["engine"]["name"] == "fake" and record["engine"]["device"] == "cuda:0"
            # a GPU worker is built for GPU-sized batches unless --max-batch says otherwise
            assert record["engine"]["max_batch"] == GPU_MAX_BATCH and record["lease_seconds"] == 3.0
            assert redis_url.encode() not in b" ".join(cmd), "the Redis URL travels in the environment"
            assert redis_url not in e["BOOKTTS_WORKER_SETTINGS"], "and never in the record"
            assert e["REDIS_URL"] == redis_url and e["BOOKTTS_METRICS_DEVICE"] == f"cuda:{e['CUDA_VISIBLE_DEVICES']}"
            # each GPU's worker gets the supervisor's allowed roots
            assert record["allowed_roots"] == [str(tmp_path.resolve())]
        store = JobStore(redis_url)
        out = tmp_path / "out"
        job_id = submit(redis_url, short_book, out, "--max-batch", "1")
        wait_done(store, job_id)
        workers = {r["worker"] for r in pq.read_table(out / "manifest.parquet").to_pylist() if r["worker"]}
        assert {w.split("@")[0] for w in workers} == {"node-gpu0", "node-gpu1"}, "both GPUs' workers took batches"
        s = scrape(port)  # one port for the whole node; the device label is the physical GPU
        n = store.get_job(job_id).batches
        assert total(s, "booktts_batches_total", device="cuda:0") + total(s, "booktts_batches_total",
                                                                          device="cuda:1") == n
        assert total(s, "booktts_batches_total", device="cuda:0") > 0 and \
            total(s, "booktts_batches_total", device="cuda:1") > 0
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(timeout=30) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert text.count("Warm shutdown") >= 2, "each worker was asked for a warm shutdown"
        assert text.count(f"accepting job directories only under {tmp_path.resolve()}") == 2
        assert not any(Path(f"/proc/{k}").exists() for k in kids), "the children exited and were reaped"
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(sup.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        sup.wait(timeout=10)
        for k in kids:  # their pool children, if any survived
            try:
                os.killpg(k, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass



def test_cpu_worker_autoscale_grows_its_pool_while_work_waits(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    w = start_worker(redis_url, "auto", env={"BOOKTTS_FAKE_DELAY_S": "0.6"}, args=["--autoscale", "2,1"])
    assert len(w.children()) == 1, "starts with MIN processes"
    assert "autoscale 2,1" in w.output()
    out = tmp_path / "out"
    job_id = submit(redis_url, short_book, out, "--max-batch", "1")
    most = 1
    deadline = time.monotonic() + 60
    while store.get_job(job_id).status is not JobStatus.DONE:
        most = max(most, len(w.children()))
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert most == 2, "grew to MAX while batches waited"
    holders = {r["worker"] for r in store.records(job_id).values()}
    assert holders == {w.name}
