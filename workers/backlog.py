"""The autoscaling signal: per queue, how much work waits and how much is running.

For each queue (``tts.high``, ``tts-gpu.normal``, ...) :func:`backlog` reports

``queued``
    messages waiting in Redis: ``LLEN`` of the queue's list **plus** kombu's priority
    sub-lists (``<queue>\\x06\\x16<n>`` for n in the transport's ``priority_steps``,
    3/6/9 by default; see ``kombu/transport/redis.py``, ``_q_for_pri``). The runner
    itself never sets a message priority (priorities are queues), so the sub-lists are
    normally empty, but a message published with ``priority=`` lands there and is
    still work. A job's ``finalize_job`` message counts like a batch: it is work a
    worker has to take. A ``synthesize_batch`` message counts only while it stands for
    work: **once per unit** (job, batch), however many copies wait (the reaper's re-queued
    copy next to the original), and not at all when its job is cancelled, done or failed,
    its batch is done, or a worker holds its lease (that batch is counted in ``in_flight``):
    workers skip all of those. A message of a job Redis does not know is counted (a worker
    rebuilds such a job from its directory). A batch parked for an engine no live worker served
    (:mod:`workers.presence`) counts here too, once, on its job's queue: it waits for a worker.
``in_flight``
    tasks a worker is running right now, counted from the runner's own **lease keys**
    (``booktts:lease:<job>:<batch>``, :mod:`workers.state`), each attributed to the
    queue of its job. A lease exists from the moment a worker starts a batch (or a
    finalize) until it is counted done or failed, is renewed by a heartbeat while the
    batch runs, is kept while a retry waits for its back-off, and expires
    ``--lease-seconds`` after the worker vanished.

    Why not kombu's ``unacked`` hash (``unacked`` / ``unacked_index``)? It does hold
    every delivered, unacknowledged message with its routing key, but a message of a
    node that died (SIGKILL, power loss) stays there until the visibility timeout
    (6 h here) although nobody runs it: the lease reaper has long since put the batch
    back on the queue, where it is counted as ``queued``. Counting ``unacked`` would
    count that batch twice and keep a replica alive for hours. The unacked count is
    still shown by ``backlog`` (without ``--json``) as a diagnostic.
``queued_audio_s``
    estimated audio seconds of the queued batch messages: each ``synthesize_batch``
    message carries its batch's estimate in the header ``booktts_est_audio_s``
    (:func:`workers.tasks.enqueue_batches`, from ``Job.batch_estimated_seconds``);
    a message without it (sent by an older version) counts its job's average batch
    (``audio_s_est / batches`` from the job hash). Finalize messages count 0.

``python cli.py backlog --json`` prints exactly
``{"queues": {"<queue>": {"queued": N, "in_flight": N, "queued_audio_s": X}}}``;
``backlog --serve PORT`` serves the same document over HTTP for KEDA's ``metrics-api``
scaler (see ``docs/operations.md``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import redis

from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE, default_queues
from workers.state import PARKED_KEY, PREFIX, JobStatus

_ACTIVE = {s.value for s in JobStatus if s.active}

#: Header of a ``synthesize_batch`` message that holds its batch's estimated audio seconds.
EST_HEADER = "booktts_est_audio_s"
#: kombu's Redis transport: separator of priority sub-lists, and the default priority steps.
try:  # pragma: no cover - the import only fails with a very different kombu
    from kombu.transport.redis import PRIORITY_STEPS as _KOMBU_STEPS
    from kombu.transport.redis import Channel as _KombuChannel

    PRIORITY_SEP = _KombuChannel.sep
    PRIORITY_STEPS = tuple(_KOMBU_STEPS)
except ImportError:  # pragma: no cover
    PRIORITY_SEP, PRIORITY_STEPS = "\x06\x16", (0, 3, 6, 9)
UNACKED_KEY = "unacked"
#: kombu's sorted set of the same messages by the time each was delivered.
UNACKED_INDEX_KEY = "unacked_index"
LEASE_PATTERN = f"{PREFIX}lease:*"
_CHUNK = 500


@dataclass
class QueueBacklog:
    queued: int = 0
    in_flight: int = 0
    queued_audio_s: float = 0.0
    unacked: int = 0
    """kombu's delivered-and-unacknowledged messages of this queue (diagnostic only, see the module doc)."""
    sublists: dict[str, int] = field(default_factory=dict)

    def public(self) -> dict:
        return {"queued": self.queued, "in_flight": self.in_flight, "queued_audio_s": round(self.queued_audio_s, 1)}


def priority_lists(queue: str, steps=PRIORITY_STEPS) -> list[str]:
    """The Redis lists kombu uses for ``queue``: the queue itself (priority 0) and its sub-lists."""
    return [queue] + [f"{queue}{PRIORITY_SEP}{p}" for p in steps if p]


def base_queue(key: str) -> str:
    """The queue a Redis list belongs to (``tts.low\\x06\\x163`` -> ``tts.low``)."""
    return key.split(PRIORITY_SEP, 1)[0]


def _s(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _message_task(raw: bytes) -> tuple[str | None, dict, list]:
    """(task name, headers, args) of a kombu Redis message (JSON envelope, base64 JSON body)."""
    try:
        msg = json.loads(raw)
        headers = msg.get("headers") or {}
        task = headers.get("task")
        args: list = []
        if task == TASK_SYNTHESIZE:
            body = msg.get("body", "")
            if (msg.get("properties") or {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            decoded = json.loads(body)
            args = list(decoded[0]) if isinstance(decoded, list) and decoded else []
        return task, headers, args
    except (ValueError, TypeError, AttributeError, IndexError):
        return None, {}, []


class _JobAverages:
    """Average estimated seconds per batch of a job, from its hash (fallback for old messages)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r, self.cache = r, {}

    def get(self, job_id) -> float:
        if not isinstance(job_id, str):
            return 0.0
        if job_id not in self.cache:
            est, n = self.r.hmget(f"{PREFIX}job:{job_id}", "audio_s_est", "batches")
            try:
                self.cache[job_id] = float(json.loads(est)) / max(int(json.loads(n)), 1)
            except (TypeError, ValueError):
                self.cache[job_id] = 0.0
        return self.cache[job_id]


def _list_keys(r: redis.Redis) -> set[str]:
    """Every list in the database (the queues and their priority sub-lists)."""
    try:
        return {_s(k) for k in r.scan_iter(count=1000, _type="list")}
    except redis.exceptions.ResponseError:  # Redis < 6: no TYPE filter
        return {_s(k) for k in r.scan_iter(count=1000) if r.type(k) == b"list"}


def _unit(task, args) -> tuple[str, str] | None:
    """(job id, batch id) of a ``synthesize_batch`` message, from its arguments; None for any other."""
    if task != TASK_SYNTHESIZE or len(args) < 3 or not isinstance(args[1], str) \
            or isinstance(args[2], bool) or not isinstance(args[2], (int, str)):
        return None
    return args[1], str(args[2])


class _Units:
    """Which ``synthesize_batch`` messages still stand for work (see the module doc): each unit once
    in a whole :func:`backlog` call, and only while its job is active (or unknown) and its batch is
    neither done nor leased."""

    def __init__(self, r: redis.Redis) -> None:
        self.r, self.seen, self.status = r, set(), {}

    def live(self, units: list) -> list[bool]:
        jobs = list({u[0] for u in units if u and u[0] not in self.status})
        with self.r.pipeline(transaction=False) as p:
            for j in jobs:
                p.hget(f"{PREFIX}job:{j}", "status")
            for u in units:
                if u:
                    p.sismember(f"{PREFIX}job:{u[0]}:done", u[1])
                    p.exists(f"{PREFIX}lease:{u[0]}:{u[1]}")
            res = p.execute()
        for j, st in zip(jobs, res):
            try:
                self.status[j] = json.loads(st) if st is not None else None
            except ValueError:
                self.status[j] = _s(st)
        out, i = [], len(jobs)
        for u in units:
            if not u:
                out.append(True)
                continue
            done, leased = res[i], res[i + 1]
            i += 2
            st = self.status[u[0]]
            if u in self.seen or done or leased or (st is not None and st not in _ACTIVE):
                out.append(False)
                continue
            self.seen.add(u)
            out.append(True)
        return out


def _queued(r: redis.Redis, queue: str, q: QueueBacklog, averages: _JobAverages, steps,
            units: _Units | None = None) -> None:
    units = units or _Units(r)
    for key in priority_lists(queue, steps):
        n = r.llen(key)
        if not n:
            continue
        if key != queue:
            q.sublists[key] = n
        for start in range(0, n, _CHUNK):
            msgs = [_message_task(raw) for raw in r.lrange(key, start, start + _CHUNK - 1)]
            live = units.live([_unit(task, args) for task, _h, args in msgs])
            for (task, headers, args), keep in zip(msgs, live):
                if not keep:
                    continue
                q.queued += 1
                if task == TASK_FINALIZE:
                    continue
                est = headers.get(EST_HEADER)
                if est is not None:
                    try:
                        q.queued_audio_s += float(est)
                        continue
                    except (TypeError, ValueError):
                        pass
                if task == TASK_SYNTHESIZE and len(args) >= 2:
                    q.queued_audio_s += averages.get(args[1])


def _in_flight(r: redis.Redis) -> dict[str, int]:
    """Queue -> live leases of its jobs' batches and finalize steps."""
    queue_of: dict[str, str | None] = {}
    out: dict[str, int] = {}
    for key in r.scan_iter(match=LEASE_PATTERN, count=1000):
        parts = _s(key)[len(PREFIX) + len("lease:"):].rsplit(":", 1)
        if len(parts) != 2:
            continue
        job_id = parts[0]
        if job_id not in queue_of:
            raw = r.hget(f"{PREFIX}job:{job_id}", "queue")
            try:
                queue_of[job_id] = json.loads(raw) if raw is not None else None
            except ValueError:
                queue_of[job_id] = _s(raw)
        queue = queue_of[job_id]
        if queue:
            out[queue] = out.get(queue, 0) + 1
    return out


def _unacked(r: redis.Redis) -> dict[str, int]:
    out: dict[str, int] = {}
    for _tag, raw in r.hscan_iter(UNACKED_KEY, count=1000):
        try:
            _msg, _exchange, routing_key = json.loads(raw)
        except (ValueError, TypeError):
            continue
        out[routing_key] = out.get(routing_key, 0) + 1
    return out


def _parked(r: redis.Redis) -> dict[str, list[tuple[str, str]]]:
    """Queue -> the units parked for an engine no live worker served (:mod:`workers.presence`)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for f, raw in r.hscan_iter(PARKED_KEY, count=1000):
        job_id, _, batch = _s(f).rpartition(":")
        try:
            queue = json.loads(raw)["queue"]
        except (ValueError, TypeError, KeyError):
            continue
        if job_id and isinstance(queue, str):
            out.setdefault(queue, []).append((job_id, batch))
    return out


def backlog(r: redis.Redis, queues: list[str] | None = None, prefix: str | None = None,
            steps=PRIORITY_STEPS) -> dict[str, QueueBacklog]:
    """Backlog per queue (see the module doc).

    ``queues``: report exactly these (each is reported even when empty). Otherwise every
    queue found in Redis (lists, leased jobs, unacked messages) plus the default
    ``tts.*`` queues, restricted to names starting with ``prefix + '.'`` when a prefix is given.
    """
    in_flight = _in_flight(r)
    unacked = _unacked(r)
    parked = _parked(r)
    if queues:
        names = list(dict.fromkeys(queues))
    else:
        found = {base_queue(k) for k in _list_keys(r)} | set(in_flight) | set(unacked) | set(parked)
        found |= set(default_queues(prefix) if prefix else default_queues())
        if prefix:
            found = {q for q in found if q.startswith(prefix + ".")}
        names = sorted(found)
    averages = _JobAverages(r)
    units = _Units(r)
    out: dict[str, QueueBacklog] = {}
    for name in names:
        q = QueueBacklog(in_flight=in_flight.get(name, 0), unacked=unacked.get(name, 0))
        _queued(r, name, q, averages, steps, units)
        out[name] = q
    for name, q in out.items():  # parked units wait for a worker too (once each, like queued messages)
        mine = parked.get(name, [])
        for (job_id, _b), keep in zip(mine, units.live(mine) if mine else []):
            if keep:
                q.queued += 1
                q.queued_audio_s += averages.get(job_id)
    return out


def as_json(result: dict[str, QueueBacklog]) -> dict:
    """The ``backlog --json`` document."""
    return {"queues": {name: q.public() for name, q in result.items()}}


def totals(result: dict[str, QueueBacklog], prefix: str | None = None) -> dict:
    """Sums over the queues (those named ``<prefix>.*`` when a prefix is given), for one KEDA metric."""
    qs = [q for n, q in result.items() if not prefix or n.startswith(prefix + ".")]
    queued, in_flight = sum(q.queued for q in qs), sum(q.in_flight for q in qs)
    return {"queued": queued, "in_flight": in_flight, "work": queued + in_flight,
            "queued_audio_s": round(sum(q.queued_audio_s for q in qs), 1)}


def prometheus_text(result: dict[str, QueueBacklog]) -> str:
    """The backlog as Prometheus gauges (``/metrics`` of ``backlog --serve``)."""
    lines = []
    for metric, help_, attr in (
            ("booktts_queue_queued", "Messages waiting in the queue (all priority sub-lists).", "queued"),
            ("booktts_queue_in_flight", "Tasks of the queue running now (live batch leases).", "in_flight"),
            ("booktts_queue_queued_audio_seconds", "Estimated audio seconds of the queued batches.",
             "queued_audio_s"),
            ("booktts_queue_unacked", "kombu's delivered, unacknowledged messages (diagnostic).", "unacked")):
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} gauge"]
        for name, q in result.items():
            label = name.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{metric}{{queue="{label}"}} {float(getattr(q, attr))}')
    return "\n".join(lines) + "\n"


def serve(r: redis.Redis, port: int, addr: str = "0.0.0.0", queues: list[str] | None = None,
          prefix: str | None = None):
    """An HTTP server (not started) answering ``/backlog.json``, ``/total.json[?prefix=P]`` and
    ``/metrics``; every request reads Redis afresh. Returns the server; call ``serve_forever``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            try:
                result = backlog(r, queues, prefix)
            except redis.exceptions.RedisError as exc:
                self._send(503, "text/plain", f"redis error: {type(exc).__name__}\n")
                return
            if url.path in ("/", "/backlog.json"):
                self._send(200, "application/json", json.dumps(as_json(result)))
            elif url.path == "/total.json":
                p = (parse_qs(url.query).get("prefix") or [prefix])[0]
                self._send(200, "application/json", json.dumps(totals(result, p)))
            elif url.path == "/metrics":
                self._send(200, "text/plain; version=0.0.4", prometheus_text(result))
            else:
                self._send(404, "text/plain", "not found: try /backlog.json, /total.json or /metrics\n")

        def _send(self, code: int, ctype: str, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # quiet: KEDA polls every few seconds
            pass

    return ThreadingHTTPServer((addr, port), Handler)
