"""One worker process per GPU: the supervisor behind ``worker --gpus all|LIST``.

:func:`run_gpu_workers` starts one ``worker`` per visible GPU, each with its own
``CUDA_VISIBLE_DEVICES`` and ``--device cuda:0``, and forwards SIGTERM/SIGINT once for Celery's
warm shutdown. Finding the GPUs never imports torch or initialises CUDA.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import click

from core import settings as settings_module
from core.errors import EngineUnavailable, InputError

_GPU_LINE = re.compile(r"^GPU (\d+): .*?(?:\(UUID: ([^)]+)\))?\s*$")
_MIG_LINE = re.compile(r"^\s+MIG .*Device\s+\d+: \(UUID: ([^)]+)\)\s*$")
_NO_DEVICES = ("", "-1", "none", "void", "nodevfiles")


def visible_gpus(env: dict | None = None, host: bool = False) -> tuple[list[str], str]:
    """The GPUs this node may use, as CUDA_VISIBLE_DEVICES values, and where they came from.

    ``CUDA_VISIBLE_DEVICES`` when it is set (indices or UUIDs; empty / ``-1`` = none); else
    ``nvidia-smi -L`` (``$BOOKTTS_NVIDIA_SMI`` overrides the command): GPU indices, or the MIG
    device UUIDs of a GPU split into MIG instances. Never imports torch or initialises CUDA.
    ``host``: the host's GPUs, as ``nvidia-smi -L`` lists them, whatever CUDA_VISIBLE_DEVICES hides.
    """
    cvd = None if host else settings_module.setting("CUDA_VISIBLE_DEVICES").raw(env, blank_is_unset=False)
    if cvd is not None:
        ids = [x.strip() for x in cvd.split(",") if x.strip()]
        if not ids or ids[0].lower() in _NO_DEVICES:
            return [], f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
        return ids, "CUDA_VISIBLE_DEVICES"
    exe = settings_module.get("BOOKTTS_NVIDIA_SMI", env) or shutil.which("nvidia-smi", path=None if env is None
                                                                  else env.get("PATH"))
    if not exe:
        return [], "nvidia-smi is not installed and CUDA_VISIBLE_DEVICES is not set"
    try:
        proc = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"nvidia-smi -L failed: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        return [], f"nvidia-smi -L failed: {why[0] if why else f'exit {proc.returncode}'}"
    gpus: list[tuple[str, list[str]]] = []
    for line in proc.stdout.splitlines():
        m = _GPU_LINE.match(line)
        if m:
            gpus.append((m.group(1), []))
            continue
        m = _MIG_LINE.match(line)
        if m and gpus:
            gpus[-1][1].append(m.group(1))
    ids = [mig for idx, migs in gpus for mig in migs] + [idx for idx, migs in gpus if not migs]
    return ids, "nvidia-smi -L" if ids else "nvidia-smi -L lists no GPU"


#: ``worker``'s engine processes per GPU when ``--concurrency`` is not given (:func:`engines_per_gpu`):
#: one for every CORES_PER_ENGINE host cores a GPU has, at most MAX_ENGINES_PER_GPU.
CORES_PER_ENGINE = 5
MAX_ENGINES_PER_GPU = 3


def engines_per_gpu(cores: int, gpus: int, mig: bool = False) -> tuple[int, str]:
    """Engine processes per GPU (``worker --concurrency`` with ``--gpus`` or a cuda device) when the
    operator gives none, and why: ``cores`` of the host (:func:`usable_cores`) shared by its ``gpus``
    (visible ones, at least 1). One engine process for every :data:`CORES_PER_ENGINE` cores per GPU,
    at most :data:`MAX_ENGINES_PER_GPU`, at least 1: on an H200 with 16 host cores three were the
    fastest (four no faster, two faster than one; docs/operations.md, "A worker's defaults: what the
    benchmarks found fastest"),
    and each needs host CPU for its work between engine calls beside the finalizes and submits that
    already keep such a host 80-90 % busy. ``mig``: the GPUs are MIG instances (a slice of a GPU's
    memory and compute: one engine each)."""
    gpus = max(1, gpus)
    per = max(1, cores // gpus)
    if mig:
        return 1, f"MIG instances ({gpus} visible): one engine each"
    n = max(1, min(MAX_ENGINES_PER_GPU, per // CORES_PER_ENGINE))
    return n, f"{cores} host cores for {gpus} GPU{'' if gpus == 1 else 's'}: one engine per {CORES_PER_ENGINE} " \
              f"cores of a GPU, at most {MAX_ENGINES_PER_GPU}"


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, bounded by its cgroup's CPU quota (a container's
    ``--cpus`` or a Kubernetes CPU limit: ``cpu.max`` of cgroup v2), rounded up."""
    from jobs.segment_pool import host_cores

    cores = host_cores()
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max", encoding="ascii").read().split()[:2]
        if quota != "max" and int(period) > 0:
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


def default_concurrency(gpus: str | None, device: str, on_gpu: bool, env: dict | None = None) -> tuple[int, str]:
    """``worker``'s ``--concurrency`` when not given, and why: :func:`engines_per_gpu` for a GPU worker
    (``--gpus``, or an engine on a cuda device: its host's visible GPUs counted), else 1 (a CPU engine
    runs its sessions on every core of the node in one process: engines.onnx_cpu)."""
    if not (gpus or on_gpu):
        return 1, "a CPU engine uses every core in one process"
    visible, _ = visible_gpus(env)
    # the host's GPUs share its cores, also those this worker's CUDA_VISIBLE_DEVICES hides (one
    # worker per GPU started by hand, or by bench/bulk_gpu.py): nvidia-smi -L counts them
    host, _ = visible_gpus(env, host=True)
    selected = select_gpus(gpus, env) if gpus else []
    ids = selected or visible
    return engines_per_gpu(usable_cores(), max(len(host), len(visible), len(selected), 1),
                           mig=bool(ids) and all(i.startswith("MIG-") for i in ids))


def select_gpus(spec: str, env: dict | None = None) -> list[str]:
    """``all`` or a comma list (indices/UUIDs as ``nvidia-smi -L`` / CUDA_VISIBLE_DEVICES name them)."""
    visible, source = visible_gpus(env)
    if spec.strip().lower() == "all":
        if not visible:
            raise EngineUnavailable(f"--gpus all: no GPU visible ({source}); run the worker without --gpus for "
                                    f"a CPU worker")
        return visible
    wanted = [x.strip() for x in spec.split(",") if x.strip()]
    if not wanted:
        raise InputError("--gpus: give 'all' or a comma-separated list like 0,1")
    if len(set(wanted)) != len(wanted):
        raise InputError(f"--gpus {spec}: a GPU is listed twice")
    if not visible:
        raise EngineUnavailable(f"--gpus {spec}: no GPU visible ({source}); run the worker without --gpus for "
                                f"a CPU worker")
    missing = [g for g in wanted if g not in visible]
    if missing:
        raise EngineUnavailable(f"--gpus {spec}: GPU {', '.join(missing)} is not visible here "
                                f"(visible per {source}: {', '.join(visible)})")
    return wanted


def _cli_path() -> str:
    spec = importlib.util.find_spec("cli")
    if spec is None or not spec.origin:  # pragma: no cover
        raise EngineUnavailable("cannot find cli.py to start the per-GPU workers")
    return spec.origin


def _pdeathsig():
    """In the child: get SIGTERM (a warm shutdown) if the supervisor dies without forwarding it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def run_gpu_workers(gpus: str, settings, *, queues: list[str], pool: str, name: str | None, loglevel: str,
                    redis_url: str, metrics_port: int = 0, per_gpu: int = 1) -> int:
    """Start one ``worker`` per selected GPU and supervise them. Returns the exit code.

    ``settings`` (:class:`workers.runtime.WorkerSettings`, its engine on ``cuda:0``) go to every
    child as one record (:meth:`~workers.runtime.WorkerSettings.child_values`), with
    ``CUDA_VISIBLE_DEVICES=<gpu>`` and the Redis URL in its environment (never on its command
    line); its command line has only ``--settings-from-parent``, ``--concurrency <per_gpu>`` (that
    many pool processes, each with its own engine on the GPU: while one does its host work between
    engine calls, the other's kernels run; docs/operations.md, "Within a node"), the queues, the
    pool, its name and log level. SIGTERM, SIGINT and SIGQUIT
    are forwarded once to every child (Celery: warm shutdown, the running batch finishes). When
    one child exits on its own, the others are stopped the same way and the supervisor exits with
    that child's code, so a restart policy (systemd, compose, Kubernetes) brings the node back
    whole. With ``metrics_port`` the supervisor serves the metrics of all its workers on that
    port (one shared multiprocess directory; the ``device`` label is the physical GPU).
    """
    ids = select_gpus(gpus)
    host = socket.gethostname()
    base = (name or f"booktts.{os.getpid()}").split("@", 1)[0]
    metrics_dir = None
    if metrics_port:
        from workers import metrics

        metrics_dir = metrics.prepare_dir()
        metrics.serve(metrics_port)
    cli = _cli_path()
    children: list[tuple[str, subprocess.Popen]] = []
    stopping = threading.Event()
    code = 0

    def forward(signum, _frame=None):
        stopping.set()
        for _gpu, p in children:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)}
    try:
        for i, gpu in enumerate(ids):
            cmd = [sys.executable, cli, "worker", "--settings-from-parent", "--concurrency", str(per_gpu),
                   "--pool", pool, "--queues", ",".join(queues), "--name", f"{base}-gpu{i}@{host}",
                   "--loglevel", loglevel]
            env = settings_module.child_environment(
                {**settings.child_values(), "CUDA_VISIBLE_DEVICES": gpu, "REDIS_URL": redis_url,
                 "BOOKTTS_METRICS_DEVICE": f"cuda:{gpu}", "BOOKTTS_METRICS_PORT": None,  # (the supervisor serves)
                 **({"PROMETHEUS_MULTIPROC_DIR": metrics_dir} if metrics_dir else {})})
            # Own session: a terminal's Ctrl-C reaches the children once, through forward().
            p = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_pdeathsig)
            children.append((gpu, p))
            click.echo(f"supervisor: worker {base}-gpu{i}@{host} on GPU {gpu} (pid {p.pid})", err=True)
            if stopping.is_set():
                forward(signal.SIGTERM)
        while any(p.poll() is None for _g, p in children):
            for gpu, p in children:
                rc = p.poll()
                if rc is not None and not stopping.is_set():
                    click.echo(f"supervisor: the worker on GPU {gpu} exited with code {rc}; stopping the others "
                               f"(warm shutdown)", err=True)
                    code = (128 - rc if rc < 0 else rc) or 1
                    forward(signal.SIGTERM)
            time.sleep(0.2)
        if not code:
            code = next((p.returncode for _g, p in children if p.returncode not in (0, None)), 0)
            if code < 0:  # killed by a signal
                code = 128 - code
        return code
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for _g, p in children:
            if p.poll() is None:
                p.kill()
        if metrics_dir:
            from workers import metrics

            metrics.cleanup()
