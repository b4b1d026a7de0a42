"""Operations commands; ``cli.py`` registers :data:`COMMANDS`.

    watch INBOX -o OUTROOT [--interval S] [--once]     submit every complete book dropped into INBOX once
    backlog [--json] [--serve PORT]                    queued / in-flight batches and queued audio per queue
    beat --config watch.json                           scan the config's inboxes, each on its interval (workers.watch)
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path

import click

from commands.distributed import _connect, one_line_errors, redis_option
from commands.options import float_range, job_options
from core import settings
from core.errors import BrokerError
from workers.celery_app import DEFAULT_PRIORITY, DEFAULT_QUEUE_PREFIX, PRIORITIES

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
              envvar=settings.setting("BOOKTTS_WATCH_CONFIG").name, help="Watch config (JSON; see docs/operations.md) [env BOOKTTS_WATCH_CONFIG].")
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


COMMANDS = [watch, backlog, beat]
