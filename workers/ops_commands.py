"""Operations commands; ``cli.py`` registers :data:`COMMANDS`.

    watch INBOX -o OUTROOT [--interval S] [--once]     submit every complete book dropped into INBOX once
    backlog [--json] [--serve PORT]                    queued / in-flight batches and queued audio per queue
    beat --config watch.json                           scan the config's inboxes, each on its interval (workers.watch)

and the GPU supervisor behind ``worker --gpus all|LIST`` (:func:`run_gpu_workers`): one
worker process per visible GPU, each with its own ``CUDA_VISIBLE_DEVICES`` and
``--device cuda:0``, SIGTERM/SIGINT forwarded for Celery's warm shutdown.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from jobs.cli_options import float_range, job_options
from jobs.errors import BrokerError, EngineUnavailable, InputError
from workers.celery_app import DEFAULT_PRIORITY, DEFAULT_QUEUE_PREFIX, PRIORITIES
from workers.commands import _connect, one_line_errors, redis_option

log = logging.getLogger("booktts.ops")

# ------------------------------------------------------------------ watch


@click.command("watch")
@click.argument("inbox", type=click.Path(path_type=Path, file_okay=False))
@click.option("-o", "--out", "out_root", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="OUTROOT: each book gets OUTROOT/<stem>-<sha8>/ (shared filesystem, as for submit).")
@click.option("--interval", type=float_range(0.05, 86400), default=10.0, show_default=True,
              help="Seconds between scans.")
@click.option("--settle", type=float_range(0, 86400), default=None,
              help="A file is taken once unchanged (size, mtime) for this long across two scans [default: --interval].")
@click.option("--once", is_flag=True,
              help="One pass and exit (for cron); waits one --settle for files seen for the first time.")
@click.option("--priority", type=click.Choice(PRIORITIES), default=DEFAULT_PRIORITY, show_default=True)
@click.option("--queue-prefix", default=DEFAULT_QUEUE_PREFIX, show_default=True,
              help="Queues are PREFIX.high/.normal/.low (e.g. tts-gpu).")
@redis_option
@job_options
@one_line_errors
def watch(inbox, out_root, interval, settle, once, priority, queue_prefix, redis_url, config) -> None:
    """Submit every complete book file dropped into INBOX exactly once; move it to INBOX/done/ or
    INBOX/failed/ with a one-line <name>.reason.txt.

    Files are identified by content hash (a re-drop of the same content is not synthesized again);
    dotfiles, *.part and *.tmp are ignored (write there, then rename). The ledger
    INBOX/.booktts-ledger.json makes restarts safe. SIGTERM/Ctrl-C stop after the current pass.
    """
    from workers.watch import Inbox

    store = _connect(redis_url)
    settle = interval if settle is None else settle
    box = Inbox(inbox, out_root, store, config, priority, queue_prefix, settle_s=settle)
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    click.echo(f"watching {inbox} -> {out_root} every {interval:g} s (settle {settle:g} s), queue "
               f"{box.queue}, Redis {_redact(store.url)}",
               err=True)
    try:
        if once:
            res = _report(box.scan())
            if res.waiting and not res.error and not stop.is_set():
                stop.wait(settle)
                res = _report(box.scan())
            if res.error:
                raise BrokerError(res.error)
            return
        while not stop.is_set():
            _report(box.scan())
            stop.wait(interval)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _report(res):
    for line in res.lines():
        click.echo(line, err=line.startswith("error:"))
    return res


# ------------------------------------------------------------------ backlog


@click.command("backlog")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"queues": {"<queue>": {"queued": N, "in_flight": N, "queued_audio_s": X}}}.')
@click.option("--queues", default=None, metavar="LIST",
              help="Report exactly these queues (comma-separated) [default: every queue found, and tts.*].")
@click.option("--prefix", default=None, help="Only queues named PREFIX.* (e.g. tts-gpu).")
@click.option("--serve", "serve_port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
              help="Serve /backlog.json, /total.json?prefix=P and /metrics over HTTP (for KEDA) instead.")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address for --serve.")
@redis_option
@one_line_errors
def backlog(as_json, queues, prefix, serve_port, addr, redis_url) -> None:
    """Per queue: queued batches (all priority sub-lists), in-flight batches (live leases) and the
    queued audio seconds: the autoscaling signal."""
    from workers import backlog as bl

    store = _connect(redis_url)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    if serve_port:
        server = bl.serve(store.r, serve_port, addr, names, prefix)
        click.echo(f"backlog on http://{addr}:{serve_port}/backlog.json (Redis {_redact(store.url)})",
                   err=True)
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            server.server_close()
        return
    result = bl.backlog(store.r, names, prefix)
    if as_json:
        click.echo(json.dumps(bl.as_json(result), sort_keys=True))
        return
    click.echo(f"{'QUEUE':24s} {'QUEUED':>8s} {'IN_FLIGHT':>9s} {'QUEUED_AUDIO':>13s} {'UNACKED':>8s}")
    for name, q in result.items():
        click.echo(f"{name:24s} {q.queued:8d} {q.in_flight:9d} {q.queued_audio_s:12.1f}s {q.unacked:8d}")
        for sub, n in q.sublists.items():
            click.echo(f"  {sub!r}: {n} (kombu priority sub-list)")


def _redact(url: str) -> str:
    from workers.celery_app import redact_url

    return redact_url(url)


# ------------------------------------------------------------------ beat


@click.command("beat")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              envvar="BOOKTTS_WATCH_CONFIG", help="Watch config (JSON; see docs/operations.md) [env BOOKTTS_WATCH_CONFIG].")
@click.option("--schedule-file", type=click.Path(path_type=Path, dir_okay=False), default=None, hidden=True,
              help="Ignored (kept so that older command lines still start).")
@click.option("--loglevel", "-l", default="WARNING", show_default=True,
              help="Log level of the scan code (each pass's results are printed whatever it is).")
@redis_option
@one_line_errors
def beat(config_path, schedule_file, loglevel, redis_url) -> None:
    """Scan every inbox of the watch config on its own interval, in this process (run it where the
    inboxes and output roots are mounted). The same pass as `watch`; no scan is ever sent to a queue,
    so no broker message can name a directory to scan. SIGTERM/Ctrl-C stop after the current pass."""
    from workers.watch import load_config, open_inboxes, run_schedule

    logging.getLogger().setLevel(getattr(logging, str(loglevel).upper(), logging.WARNING))
    cfg = load_config(config_path)
    store = _connect(redis_url)
    boxes = open_inboxes(cfg, store)
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    click.echo(f"beat: scanning {len(boxes)} inbox(es) in this process, Redis {_redact(store.url)}", err=True)
    for box, every in boxes:
        click.echo(f"  {box.inbox} -> {box.out_root} every {every:g} s (settle {box.settle_s:g} s), queue {box.queue}",
                   err=True)

    def report(box, res):
        for line in res.lines():
            click.echo(f"{box.inbox}: {line}", err=line.startswith("error:"))

    try:
        run_schedule(boxes, stop, report)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ------------------------------------------------------------------ worker --gpus

_GPU_LINE = re.compile(r"^GPU (\d+): .*?(?:\(UUID: ([^)]+)\))?\s*$")
_MIG_LINE = re.compile(r"^\s+MIG .*Device\s+\d+: \(UUID: ([^)]+)\)\s*$")
_NO_DEVICES = ("", "-1", "none", "void", "nodevfiles")


def visible_gpus(env: dict | None = None) -> tuple[list[str], str]:
    """The GPUs this node may use, as CUDA_VISIBLE_DEVICES values, and where they came from.

    ``CUDA_VISIBLE_DEVICES`` when it is set (indices or UUIDs; empty / ``-1`` = none); else
    ``nvidia-smi -L`` (``$BOOKTTS_NVIDIA_SMI`` overrides the command): GPU indices, or the MIG
    device UUIDs of a GPU split into MIG instances. Never imports torch or initialises CUDA.
    """
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [x.strip() for x in cvd.split(",") if x.strip()]
        if not ids or ids[0].lower() in _NO_DEVICES:
            return [], f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
        return ids, "CUDA_VISIBLE_DEVICES"
    exe = env.get("BOOKTTS_NVIDIA_SMI") or shutil.which("nvidia-smi", path=env.get("PATH"))
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


def run_gpu_workers(gpus: str, engine_spec, *, max_batch: int, queues: list[str], pool: str, lease_seconds: float,
                    max_deliveries: int, voice: str | None, name: str | None, loglevel: str, redis_url: str,
                    metrics_port: int = 0, allowed_roots=()) -> int:
    """Start one ``worker`` per selected GPU and supervise them. Returns the exit code.

    Each child gets ``CUDA_VISIBLE_DEVICES=<gpu>``, ``--device cuda:0 --concurrency 1`` and the
    supervisor's ``--allowed-root`` directories (the Redis URL through the environment, never on
    its command line). SIGTERM, SIGINT and SIGQUIT
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
            cmd = [sys.executable, cli, "worker", "--engine", engine_spec.name, "--precision", engine_spec.precision,
                   "--device", "cuda:0", "--concurrency", "1", "--pool", pool, "--max-batch", str(max_batch),
                   "--queues", ",".join(queues), "--lease-seconds", repr(float(lease_seconds)),
                   "--max-deliveries", str(max_deliveries), "--voice", voice or "", "--name", f"{base}-gpu{i}@{host}",
                   "--loglevel", loglevel]
            if engine_spec.threads:
                cmd += ["--threads", str(engine_spec.threads)]
            for root in allowed_roots:
                cmd += ["--allowed-root", root]
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "REDIS_URL": redis_url,
                   "BOOKTTS_METRICS_DEVICE": f"cuda:{gpu}"}
            env.pop("BOOKTTS_METRICS_PORT", None)
            if metrics_dir:
                env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
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


COMMANDS = [watch, backlog, beat]
