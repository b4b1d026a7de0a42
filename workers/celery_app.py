"""The Celery application of the distributed runner, configured from ``REDIS_URL``.

Settings and why (see ``README-distributed.md`` for the long form):

- JSON only (``task_serializer``, ``result_serializer``, ``accept_content``): task
  arguments are paths, ids and numbers; nothing is unpickled from the broker.
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged
  only after its batch is written, and a pool child killed mid-batch puts its
  message back. Redelivery loops (a batch that kills its worker every time)
  are bounded by counting deliveries per batch in Redis (:mod:`workers.state`).
- ``worker_prefetch_multiplier = 1`` and ``worker_disable_prefetch`` (Celery >=
  5.6, Redis only): a worker takes a message only when a pool process is free,
  so a busy worker never sits on a message another worker could run, and a
  high-priority message enqueued later is taken by the next free process.
- One queue per priority (``tts.high``, ``tts.normal``, ``tts.low``), consumed
  in that order with ``queue_order_strategy = 'priority'``: kombu's Redis
  transport otherwise rotates the queue list after each message
  (``round_robin``), which interleaves a high job with a low one instead of
  running it first.
- ``visibility_timeout`` identical in ``broker_transport_options`` and
  ``result_backend_transport_options`` and far above the longest batch; lost
  workers are detected by batch leases (:mod:`workers.recovery`) long before it.

The Redis password comes only from the URL (``REDIS_URL`` or ``--redis-url``),
never from this file; :func:`redact_url` hides it in messages and logs.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from celery import Celery
from celery.app import defaults as celery_defaults
from kombu import Queue

from core import settings

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
#: Priorities, highest first; a worker consumes their queues in this order.
PRIORITIES = ("high", "normal", "low")
DEFAULT_PRIORITY = "normal"
#: Queue names are ``<prefix>.<priority>``; ``tts`` for every node, e.g. ``tts-gpu`` for GPU-only work.
DEFAULT_QUEUE_PREFIX = "tts"
#: Seconds before kombu redelivers an unacknowledged message. Must exceed the longest batch
#: (a batch is seconds to minutes); lost workers are found much sooner through leases.
DEFAULT_VISIBILITY_TIMEOUT = settings.setting("BOOKTTS_VISIBILITY_TIMEOUT").default

TASK_SYNTHESIZE = "booktts.synthesize_batch"
TASK_FINALIZE = "booktts.finalize_job"


def queue_name(priority: str, prefix: str = DEFAULT_QUEUE_PREFIX) -> str:
    """The queue of ``priority`` (``high``/``normal``/``low``)."""
    if priority not in PRIORITIES:
        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
    return f"{prefix}.{priority}"


def priority_of_queue(queue: str | None) -> str:
    """The priority encoded in a queue name (``normal`` when it has none)."""
    tail = (queue or "").rsplit(".", 1)[-1]
    return tail if tail in PRIORITIES else DEFAULT_PRIORITY


def default_queues(prefix: str = DEFAULT_QUEUE_PREFIX) -> list[str]:
    """The queues a worker consumes by default, highest priority first."""
    return [queue_name(p, prefix) for p in PRIORITIES]


def redis_url(url: str | None = None) -> str:
    """The Redis URL to use: the argument, else ``$REDIS_URL``, else the local default.

    A password (or user name) given as a query parameter (``redis://host/0?password=P``, which
    redis-py accepts but kombu does not) is moved into the URL's user part, percent-encoded, so
    that every client reads it the same way and every printed form of the URL hides it. Never
    raises: :func:`check_redis_url` reports a URL that cannot be parsed.
    """
    return _credentials_in_userinfo(url or settings.get("REDIS_URL") or DEFAULT_REDIS_URL)


_SECRET_QUERY_KEYS = ("password", "username")
_BAD_URL = ("the Redis URL (--redis-url or REDIS_URL) cannot be parsed; its form is "
            "redis://[:PASSWORD@]HOST[:PORT][/DB], and a '#', '/', '?', '@' or '%' in the password must be "
            "percent-encoded (%23, %2F, %3F, %40, %25)")


def _split(url: str):
    """``urlsplit(url)``, or None when the URL is not a usable Redis URL (a password with an
    unencoded '#', '/' or '?' ends the user part early and spills into the host, path or fragment)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        return None
    if parts.scheme == "unix":
        return parts
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or parts.fragment \
            or "@" in parts.path + parts.query or not re.fullmatch(r"/?\d*", parts.path):
        return None
    return parts


def _credentials_in_userinfo(url: str) -> str:
    parts = _split(url)
    if parts is None or not parts.query or parts.scheme == "unix":
        return url
    query = parse_qsl(parts.query, keep_blank_values=True)
    found = {k: v for k, v in query if k in _SECRET_QUERY_KEYS}
    if not found:
        return url
    user = found.get("username", unquote(parts.username or ""))
    password = found.get("password", None if parts.password is None else unquote(parts.password))
    host = parts.netloc.rpartition("@")[2]
    userinfo = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
    rest = urlencode([(k, v) for k, v in query if k not in _SECRET_QUERY_KEYS])
    return _join(parts.scheme, f"{userinfo}@{host}" if userinfo else host, parts.path, rest)


def _join(scheme: str, netloc: str, path: str, query: str) -> str:
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def check_redis_url(url: str) -> str:
    """``url`` if it is a Redis URL this runner can use; else :class:`InputError`, one line that
    shows no part of the URL (it may hold a password)."""
    from core.errors import InputError

    if _split(url) is None:
        raise InputError(_BAD_URL)
    return url


def redact_url(url: str) -> str:
    """``url`` with its password (if any, in the user part or the query) replaced by ``***``, for
    messages and logs; a URL that cannot be parsed is not shown at all."""
    parts = _split(url)
    if parts is None:
        return "<unparsable Redis URL>"
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:***@{host}"
    query = parts.query
    if query:
        query = "&".join(f"{k}=***" if k == "password" else f"{k}={v}" if v else k
                         for k, v in parse_qsl(query, keep_blank_values=True))
    return _join(parts.scheme, netloc, parts.path, query)


def visibility_timeout() -> int:
    """Visibility timeout in seconds (``$BOOKTTS_VISIBILITY_TIMEOUT`` overrides the default)."""
    return settings.get("BOOKTTS_VISIBILITY_TIMEOUT")


def _has_worker_setting(name: str) -> bool:
    worker_ns = celery_defaults.NAMESPACES.get("worker", {})
    return name in worker_ns


def transport_options() -> dict:
    """Redis transport options shared by the broker and the result backend."""
    return {
        "visibility_timeout": visibility_timeout(),
        # Strict queue order: BRPOP on [high, normal, low] always in that order. kombu's default,
        # round_robin, moves the queue just served to the end of the list. The (test-only)
        # variable exists to demonstrate the difference in the tests.
        "queue_order_strategy": settings.get("BOOKTTS_QUEUE_ORDER"),
        # Notice a dead or restarted Redis quickly instead of hanging on a half-open socket.
        "socket_connect_timeout": 5,
        "socket_timeout": 30,
        "health_check_interval": 10,
    }


def configure(app: Celery, url: str | None = None) -> Celery:
    """Apply the runner's settings to ``app`` for the Redis at ``url``."""
    url = redis_url(url)
    opts = transport_options()
    queues = [Queue(q, routing_key=q) for q in default_queues()]
    app.conf.update(
        broker_url=url,
        result_backend=url,
        broker_transport_options=dict(opts),
        result_backend_transport_options=dict(opts),
        # JSON only.
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        # State lives in our own Redis keys (workers.state); task results are not read.
        task_ignore_result=True,
        # At-least-once delivery; duplicates are made harmless by leases and the done-set.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        # Routing: one queue per priority, direct to the queue (anonymous exchange: no
        # binding keys needed in Redis, so publishing still works after Redis lost its data).
        task_queues=queues,
        task_default_queue=queue_name(DEFAULT_PRIORITY),
        task_create_missing_queues=True,
        task_publish_retry=True,
        task_publish_retry_policy={"max_retries": 5, "interval_start": 0.2, "interval_step": 0.5,
                                   "interval_max": 2.0},
        # Keep reconnecting to a restarted Redis; keep running tasks on connection loss
        # (their batch still gets written and recorded; the ack may be lost, which only
        # causes a harmless duplicate delivery).
        broker_connection_retry=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # An engine load (TensorRT build, CUDA init, warm-up) can take minutes in the child.
        worker_proc_alive_timeout=settings.get("BOOKTTS_PROC_ALIVE_TIMEOUT"),
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=True,
        broker_channel_error_retry=True,
        result_expires=24 * 3600,
    )
    if _has_worker_setting("disable_prefetch"):
        # Celery 5.6+: the Redis consumer takes a message only when a pool process is free.
        app.conf.worker_disable_prefetch = True
    return app


def use_redis(url: str | None = None, target: Celery | None = None) -> str:
    """Point ``target`` (default: :data:`app`) at the Redis of ``url`` (or ``$REDIS_URL``).

    Connection and producer pools opened for another URL are dropped, so commands run
    in one process (tests) can talk to different servers. A URL that cannot be parsed is an
    :class:`~core.errors.InputError` (one line, no part of the URL shown).
    """
    target = target or app
    url = check_redis_url(redis_url(url))
    if target.conf.broker_url != url or target.conf.result_backend != url:
        target.conf.broker_url = url
        target.conf.result_backend = url
        target._pool = None
        target.amqp._producer_pool = None
    return url


#: Task names of this project start so; a worker accepts no other (:func:`own_tasks_only`).
TASK_PREFIX = "booktts."


def own_tasks_only(sender: Celery, **_kw) -> None:
    """Drop every task of the app ``sender``'s registry that is not the project's own (``booktts.*``).

    Celery registers its built-in tasks (``celery.chord_unlock``, ``celery.map``, ``celery.starmap``,
    ``celery.accumulate``, ``celery.backend_cleanup``, ``celery.chain``, ...) on every app when it is
    finalized. The runner uses none of them, and anyone who can write to the broker could start them
    by name: a forged ``chord_unlock`` retried itself forever. A worker treats a name that is not
    registered as Celery does any unknown task: one ``unregistered task`` error line, and the message
    is dropped, not retried. Connected to ``on_after_finalize``, which runs after the built-ins are
    added."""
    for name in [n for n in list(sender.tasks) if not n.startswith(TASK_PREFIX)]:
        sender.tasks.unregister(name)


def make_app(url: str | None = None) -> Celery:
    """A configured Celery app with the runner's tasks registered (and no other, :func:`own_tasks_only`)."""
    app = Celery("booktts", include=["workers.tasks"])
    app.on_after_finalize.connect(own_tasks_only, sender=app, weak=False)
    return configure(app, url)


app = make_app()
