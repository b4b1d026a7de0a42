"""Job state of the distributed runner, in Redis, JSON only.

The job directory stays the source of truth for *what is done* (a batch record
on disk means the batch is done); Redis holds what the fleet needs to
coordinate: counts, leases, failures, cancellation, priorities. If Redis loses
its data, a job can be rebuilt from its directory (:func:`workers.tasks.start_job`).

Keys (``<P>`` is :data:`PREFIX`, ``<J>`` a job id, ``<B>`` a batch id):

=====================================  =======  ===============================================
``<P>jobs``                            zset     job id -> created time (recent jobs)
``<P>active``                          set      ids of jobs not yet done/failed/cancelled
``<P>job:<J>``                         hash     the job: fields of :class:`JobInfo`, each a JSON value
``<P>job:<J>:done``                    set      batch ids whose record has been counted
``<P>job:<J>:failed``                  hash     batch id -> JSON failure (error, type, worker, attempt, time)
``<P>job:<J>:running``                 hash     batch id -> JSON holder of the batch's lease
``<P>job:<J>:deliveries``              hash     batch id -> times a worker started it (redelivery-loop bound)
``<P>job:<J>:records``                 hash     batch id -> JSON summary (worker, attempt, audio s, times)
``<P>job:<J>:requeued``                hash     batch id -> JSON {at, holder}: re-enqueued by the reaper
``<P>job:<J>:finalize``                string   set once (NX) by the task that completes the set
``<P>job:<J>:queued``                  hash     batch id -> JSON time it was (last) enqueued
``<P>ready:<C>``                       zset     ``<J>:<B>`` of queued batches of synthesis class ``<C>``
                                                (:func:`jobs.synthesize.synthesis_class`), scored by
                                                priority and length: where a worker finds more batches to
                                                fill its engine (:mod:`workers.batcher`)
``<P>lease:<J>:<B>``                   string   JSON holder, with a TTL (the lease); ``<B>`` may be ``finalize``
``<P>reaper``                          string   a short lock so one reaper sweeps at a time
``<P>dir:<resolved out dir>``          string   the job id that holds the directory (:meth:`JobStore.claim_dir`)
``<P>worker:<host>:<pid>``             string   JSON presence of a worker process (engine, device, queues),
                                                with a TTL (:mod:`workers.presence`)
``<P>parked``                          hash     ``<J>:<B>`` -> JSON: a batch parked for an engine no live
                                                worker served (:mod:`workers.presence`)
=====================================  =======  ===============================================

The atomic steps (begin a batch, complete it, fail it, renew/claim a lease)
are Lua scripts, so two workers can never both count a batch or both
enqueue the finalize task.
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable

import redis

from jobs import claim

from core import settings
from core.errors import BrokerError, JobError
from workers.celery_app import redact_url, redis_url

PREFIX = "booktts:"
#: Recent jobs kept in the ``jobs`` sorted set.
MAX_RECENT_JOBS = 1000
FINALIZE = "finalize"
#: Batches waiting for a worker of their job's engine (:mod:`workers.presence`).
PARKED_KEY = f"{PREFIX}parked"
#: Seconds a done job stays in Redis.
DONE_JOB_TTL_S = settings.setting("BOOKTTS_DONE_JOB_TTL_S").default
_JOB_PARTS = ("done", "failed", "running", "deliveries", "records", "requeued", "queued", FINALIZE)
#: Score of a ready batch: priority rank (0 = high) times this, plus its longest utterance.
READY_RANK_SCALE = 1_000_000
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class JobStatus(str, Enum):
    """Where a job is. ``done``, ``failed`` and ``cancelled`` are terminal (until ``resume``)."""

    QUEUED = "queued"
    RUNNING = "running"
    FINALIZING = "finalizing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FINALIZING)


class BatchStatus(str, Enum):
    """Where one batch is, as far as Redis knows."""

    PENDING = "pending"
    """Queued or waiting for a retry; no worker holds it."""
    RUNNING = "running"
    """A worker holds its lease."""
    DONE = "done"
    FAILED = "failed"


_ACTIVE_VALUES = {s.value for s in JobStatus if s.active}


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not _JOB_ID_RE.match(job_id):
        raise JobError(f"{job_id!r} is not a job id (letters, digits, '.', '_', '-'; at most 128)")
    return job_id


def now() -> float:
    return time.time()


_AUTH_WORDS = ("NOAUTH", "WRONGPASS", "invalid password", "invalid username-password",
               "Authentication required", "without any password configured", "must be called with the client "
               "already authenticated")


def auth_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it wraps: kombu wraps redis-py's) is Redis refusing the
    credentials: a wrong or missing password, or a password a server without one refuses."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, redis.exceptions.AuthenticationError):
            return True
        if isinstance(exc, redis.exceptions.ResponseError) and any(w.lower() in str(exc).lower()
                                                                   for w in _AUTH_WORDS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def auth_message(url: str, exc: BaseException) -> str:
    """The one line for :func:`auth_refused` errors (password hidden)."""
    from urllib.parse import urlsplit

    try:
        has_password = urlsplit(url).password is not None or "password=" in urlsplit(url).query
    except ValueError:
        has_password = True
    what = "refused the password" if has_password else "requires a password"
    return (f"Redis at {redact_url(url)} {what} ({type(exc).__name__}: {exc}); check REDIS_URL (or --redis-url): "
            f"redis://:PASSWORD@HOST:PORT/DB, special characters in the password percent-encoded")


@dataclass
class Holder:
    """Who holds a batch lease."""

    worker: str
    """Celery node name (``booktts.<pid>@<host>``), as it appears in the manifest."""
    host: str
    pid: int
    task_id: str
    since: float = field(default_factory=now)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes | None) -> "Holder | None":
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(str(d["worker"]), str(d["host"]), int(d["pid"]), str(d["task_id"]), float(d.get("since", 0)))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def is_sender(self) -> bool:
        """An entry of a submit, resume or rebuild for a batch it is queueing (see :data:`SENDING_PREFIX`),
        not a worker running the batch."""
        return self.task_id.startswith((SENDING_PREFIX, REBUILD_PREFIX))

    def process_is_dead(self) -> bool:
        """True only when the holder ran on this host and its process is gone."""
        return process_gone(self.host, self.pid)


def process_gone(host: str, pid: int) -> bool:
    """True only when process ``pid`` ran on this host (``host``) and is gone (a zombie is gone:
    :func:`jobs.claim.process_gone`)."""
    if host != socket.gethostname():
        return False
    return claim.process_gone(pid)


@dataclass
class JobInfo:
    """The job hash, decoded."""

    id: str
    out_dir: str
    status: JobStatus
    priority: str
    queue: str
    batches: int
    utterances: int
    audio_s_est: float
    audio_s_done: float = 0.0
    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    cancelled: bool = False
    error: str | None = None
    summary: dict | None = None
    done: int = 0
    failed: int = 0
    running: int = 0

    @property
    def elapsed(self) -> float | None:
        if self.started is None:
            return None
        return (self.finished or now()) - self.started

    @property
    def x_real_time(self) -> float | None:
        """Audio seconds produced per wall second since the first batch started."""
        e = self.elapsed
        if not e or e <= 0 or self.audio_s_done <= 0:
            return None
        return self.audio_s_done / e

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate (None before the first batch or when finished)."""
        if self.status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED):
            return None
        rate = self.x_real_time
        if not rate:
            return None
        return max(self.audio_s_est - self.audio_s_done, 0.0) / rate


_JOB_FIELDS = ("id", "out_dir", "status", "priority", "queue", "batches", "utterances", "audio_s_est",
               "audio_s_done", "created", "started", "finished", "cancelled", "error", "summary")


def _enc(v: Any) -> str:
    if isinstance(v, Enum):
        v = v.value
    return json.dumps(v)


def _verdict(reply) -> tuple[str, Any]:
    """``(verdict, value)`` of the begin script's reply, bytes decoded."""
    verdict, value = reply
    return (verdict.decode() if isinstance(verdict, bytes) else verdict,
            value.decode() if isinstance(value, bytes) else value)


def _dec(v: bytes | str | None) -> Any:
    if v is None:
        return None
    try:
        return json.loads(v)
    except ValueError:
        return v.decode() if isinstance(v, bytes) else v


# ---------------------------------------------------------------- Lua scripts
# Every hash value is JSON, so statuses are compared as '"running"' etc.

#: Whether a batch id (a string) names a batch of the job's plan: a decimal number as ``str(int)``
#: writes it (no sign, no leading zero), below the job's
#: ``batches``. A message or an ``unacked`` entry naming batch 999 or -1 of a job of 15 batches is
#: refused by the scripts that use it (begin, complete, fail) instead of becoming a failure of the job.
_LUA_PLANNED = """local function PLANNED(job, batch)
  if not (batch == '0' or string.match(batch, '^[1-9]%d*$')) then return false end
  local total = tonumber(redis.call('HGET', job, 'batches'))
  return total ~= nil and tonumber(batch) < total
end
"""


def planned_batch(batch, batches: int) -> bool:
    """The same test as :data:`_LUA_PLANNED`, in Python: ``batch`` (an int or its decimal string) is
    one of ``range(batches)``."""
    if isinstance(batch, bool):
        return False
    if isinstance(batch, int):
        return 0 <= batch < batches
    text = batch.decode() if isinstance(batch, bytes) else str(batch)
    canonical = text == "0" or (text[:1] in "123456789" and text[:1] != "" and text.isdigit())
    return text.isascii() and canonical and int(text) < batches


_LUA_BEGIN = _LUA_PLANNED + """
-- KEYS: job, done, failed, running, deliveries, lease
-- ARGV: batch, holder, lease_ms, task_id, steal, max_deliveries, now
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0} end
if ARGV[1] ~= 'finalize' and not PLANNED(KEYS[1], ARGV[1]) then return {'unplanned', 0} end
if redis.call('HGET', KEYS[1], 'cancelled') == 'true' then return {'cancelled', 0} end
local st = redis.call('HGET', KEYS[1], 'status')
if st == '"cancelled"' then return {'cancelled', 0} end
if st == '"done"' then return {'done', 0} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'done', 0} end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return {'failed', 0} end
local cur = redis.call('GET', KEYS[6])
if cur and cur ~= ARGV[5] then
  local ok, h = pcall(cjson.decode, cur)
  if not ok or h['task_id'] ~= ARGV[4] then return {'leased', cur} end
end
local n = redis.call('HINCRBY', KEYS[5], ARGV[1], 1)
if n > tonumber(ARGV[6]) then return {'exhausted', n} end
redis.call('SET', KEYS[6], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
if st == '"queued"' then
  redis.call('HSET', KEYS[1], 'status', '"running"')
end
local started = redis.call('HGET', KEYS[1], 'started')
if (not started) or started == 'null' then
  redis.call('HSET', KEYS[1], 'started', ARGV[7])
end
return {'ok', n}
"""

_COUNT_AND_CLOSE = """
local function count_and_close(job, done, failed, active, guard, job_id, now)
  local total = tonumber(redis.call('HGET', job, 'batches'))
  local nd = redis.call('SCARD', done)
  local nf = redis.call('HLEN', failed)
  if total == nil or nd + nf < total then return 'progress' end
  local st = redis.call('HGET', job, 'status')
  if st == '"cancelled"' then return 'cancelled' end
  if nf > 0 then
    if st ~= '"failed"' then
      redis.call('HSET', job, 'status', '"failed"', 'finished', now)
      redis.call('SREM', active, job_id)
    end
    return 'failed'
  end
  if redis.call('SET', guard, now, 'NX') then
    redis.call('HSET', job, 'status', '"finalizing"')
    return 'finalize'
  end
  return 'complete'
end
"""

_LUA_COMPLETE = _LUA_PLANNED + _COUNT_AND_CLOSE + """
-- KEYS: job, done, failed, running, records, lease, guard, active
-- ARGV: batch, record, audio_s, holder, now, job_id
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0} end
if not PLANNED(KEYS[1], ARGV[1]) then return {'unplanned', 0} end
local added = redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if added == 1 then
  redis.call('HINCRBYFLOAT', KEYS[1], 'audio_s_done', ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
end
if redis.call('GET', KEYS[6]) == ARGV[4] then redis.call('DEL', KEYS[6]) end
if redis.call('HGET', KEYS[4], ARGV[1]) == ARGV[4] then redis.call('HDEL', KEYS[4], ARGV[1]) end
return {count_and_close(KEYS[1], KEYS[2], KEYS[3], KEYS[8], KEYS[7], ARGV[6], ARGV[5]), added}
"""

_LUA_FAIL = _LUA_PLANNED + _COUNT_AND_CLOSE + """
-- KEYS: job, done, failed, running, lease, guard, active
-- ARGV: batch, failure, holder, now, job_id
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0} end
if ARGV[1] ~= 'finalize' and not PLANNED(KEYS[1], ARGV[1]) then return {'unplanned', 0} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'done', 0} end
local added = redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
if redis.call('GET', KEYS[5]) == ARGV[3] then redis.call('DEL', KEYS[5]) end
if redis.call('HGET', KEYS[4], ARGV[1]) == ARGV[3] then redis.call('HDEL', KEYS[4], ARGV[1]) end
return {count_and_close(KEYS[1], KEYS[2], KEYS[3], KEYS[7], KEYS[6], ARGV[5], ARGV[4]), added}
"""

_LUA_RENEW = """
-- KEYS: lease, running, done ; ARGV: holder, lease_ms, batch
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if cur then return 0 end
if redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 1 then return 0 end
-- The lease vanished (expired during a stall, or Redis lost its data): take it back, and the
-- running entry with it, so the reaper can still find this batch if this worker dies.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[1])
return 2
"""

_LUA_HOLD = """
-- KEYS: lease ; ARGV: holder, ttl_ms.  Extend our own lease (a retry is pending).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_LUA_CLAIM = """
-- KEYS: running, lease, done ; ARGV: batch, holder_seen
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
return 1
"""

#: Task id prefixes of the ``running`` entries that :func:`workers.control.start_job` makes for the batches
#: it is queueing (a submit's or resume's, a rebuild's); the create script below replaces such an entry
#: (an earlier sender's), not a worker's (:attr:`Holder.is_sender` is the same test in Python).
SENDING_PREFIX, REBUILD_PREFIX = "sending-", "rebuild-"
#: That test in Lua, on a holder's ``task`` (a string), put into the create script below.
_LUA_IS_SENDER = " or ".join(f"task:sub(1, {len(p)}) == '{p}'" for p in (SENDING_PREFIX, REBUILD_PREFIX))

_LUA_CREATE = """
-- KEYS: job, done, jobs, active, failed, deliveries, guard, running, records
-- ARGV: job_id, created, reset, nfields, f1, v1, ..., ndone, done ids (their running entries dropped), then
-- (optional) a holder and the
-- ids of batches to enter in `running` as held by it, with no lease (unless a worker's entry is there:
-- an earlier sender's, left by a submit that died or failed, is replaced: this one queues the batch now)
local exists = redis.call('EXISTS', KEYS[1]) == 1
if exists and ARGV[3] ~= '1' then return 0 end
local n = tonumber(ARGV[4])
if exists then
  redis.call('DEL', KEYS[5], KEYS[6], KEYS[7])
  redis.call('HDEL', KEYS[1], 'error', 'finished', 'cancelled', 'summary')
end
for i = 0, n - 1 do
  local f = ARGV[5 + 2 * i]
  if not (exists and (f == 'created' or f == 'started' or f == 'audio_s_done')) then
    redis.call('HSET', KEYS[1], f, ARGV[6 + 2 * i])
  end
end
local d = 5 + 2 * n
local nd = tonumber(ARGV[d])
for i = d + 1, d + nd do
  redis.call('SADD', KEYS[2], ARGV[i])
  -- a done batch runs nowhere: an entry left by a worker that wrote it but could not count it (Redis was
  -- down) would outlive the job, since the reaper does not sweep a cancelled or finished one
  redis.call('HDEL', KEYS[8], ARGV[i])
end
for i = d + nd + 2, #ARGV do
  local cur = redis.call('HGET', KEYS[8], ARGV[i])
  local replace = not cur
  if cur then
    local ok, h = pcall(cjson.decode, cur)
    local task = ok and type(h) == 'table' and h['task_id'] or ''
    replace = type(task) == 'string' and (IS_SENDER)
  end
  if replace then redis.call('HSET', KEYS[8], ARGV[i], ARGV[d + nd + 1]) end
end
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return exists and 2 or 1
""".replace("IS_SENDER", _LUA_IS_SENDER)


#: Update the status (and fields) of a job that exists; a job Redis lost is not re-created as a hash of
#: a few fields (a worker finishing a job just after Redis restarted empty did that: a "done" job with
#: no batches, directory or counts). KEYS: job hash, active set; ARGV: job id, "1" active / "0" not,
#: then field, value pairs. Returns 1, or 0 when the job does not exist.
_LUA_SET_STATUS = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if ARGV[2] == '1' then
  redis.call('SADD', KEYS[2], ARGV[1])
else
  redis.call('SREM', KEYS[2], ARGV[1])
end
return 1
"""

_LUA_DROP_RUNNING = """
-- KEYS: running ; ARGV: holder, batch ids.  Drop the entries of these batches that holder still has.
local n = 0
for i = 2, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1] then n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return n
"""

_LUA_DROP_DONE_RUNNING = """
-- KEYS: running, done.  Drop the entries of batches that are done.
local n = 0
for _, b in ipairs(redis.call('HKEYS', KEYS[1])) do
  if redis.call('SISMEMBER', KEYS[2], b) == 1 then n = n + redis.call('HDEL', KEYS[1], b) end
end
return n
"""

#: Set a field of a job's hash only if the job exists (a job Redis lost is not re-created as a stub of one
#: field, which would keep the reapers from rebuilding it). KEYS: job hash; ARGV: field, value.
_LUA_SET_IF_JOB = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

_LUA_STALE_FINALIZE = """
-- KEYS: guard, finalize lease ; ARGV: now, stale_s
local t = redis.call('GET', KEYS[1])
if not t then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if tonumber(ARGV[1]) - tonumber(t) < tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


class JobStore:
    """The distributed runner's view of jobs in Redis."""

    def __init__(self, url: str | None = None, client: redis.Redis | None = None) -> None:
        self.url = redis_url(url)
        self.r = client or redis.Redis.from_url(
            self.url, socket_connect_timeout=5, socket_timeout=30, health_check_interval=10,
            retry_on_timeout=True)
        self._begin = self.r.register_script(_LUA_BEGIN)
        self._complete = self.r.register_script(_LUA_COMPLETE)
        self._fail = self.r.register_script(_LUA_FAIL)
        self._renew = self.r.register_script(_LUA_RENEW)
        self._hold = self.r.register_script(_LUA_HOLD)
        self._claim = self.r.register_script(_LUA_CLAIM)
        self._create = self.r.register_script(_LUA_CREATE)
        self._stale = self.r.register_script(_LUA_STALE_FINALIZE)
        self._set_status = self.r.register_script(_LUA_SET_STATUS)
        self._drop_running = self.r.register_script(_LUA_DROP_RUNNING)
        self._drop_done_running = self.r.register_script(_LUA_DROP_DONE_RUNNING)
        self._set_if_job = self.r.register_script(_LUA_SET_IF_JOB)

    # ------------------------------------------------------------ keys
    @staticmethod
    def k_job(j: str) -> str:
        return f"{PREFIX}job:{j}"

    def k(self, j: str, part: str) -> str:
        return f"{PREFIX}job:{j}:{part}"

    @staticmethod
    def k_lease(j: str, b: int | str) -> str:
        return f"{PREFIX}lease:{j}:{b}"

    @staticmethod
    def k_dir(out_dir: str) -> str:
        return f"{PREFIX}dir:{out_dir}"

    K_JOBS = PREFIX + "jobs"
    K_ACTIVE = PREFIX + "active"
    K_REAPER = PREFIX + "reaper"

    # ------------------------------------------------------------ connection
    def ping(self) -> None:
        """Raise :class:`BrokerError` naming the (redacted) URL if Redis does not answer."""
        try:
            self.r.ping()
        except redis.exceptions.RedisError as exc:
            if auth_refused(exc):
                raise BrokerError(auth_message(self.url, exc)) from exc
            raise BrokerError(
                f"cannot reach Redis at {redact_url(self.url)} ({type(exc).__name__}: {exc}); "
                f"start redis-server or pass --redis-url / set REDIS_URL") from exc

    def wait_until_up(self, on_wait=None, interval_s: float = 1.0) -> None:
        """Ping until Redis answers, like Celery's broker connection retry: a worker started before
        Redis waits for it. ``on_wait(message)`` is called once, when the first ping fails.
        Refused credentials (and anything but a connection failure) raise :class:`BrokerError` at once."""
        told = False
        while True:
            try:
                self.r.ping()
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if auth_refused(exc):
                    raise BrokerError(auth_message(self.url, exc)) from exc
                if not told and on_wait is not None:
                    on_wait(f"waiting for Redis at {redact_url(self.url)} ({type(exc).__name__}: {exc}); "
                            f"retrying every {interval_s:g} s until it answers (Ctrl-C to stop)")
                told = True
                time.sleep(interval_s)
            except redis.exceptions.RedisError:
                self.ping()  # one line (refused password, say)
                raise

    # ------------------------------------------------------------ jobs
    def create_job(self, info: JobInfo, done_ids: Iterable[int] = (), reset: bool = False,
                   running: Iterable[int] = (), holder: str = "") -> int:
        """Store a job. 0: it existed (untouched); 1: created; 2: existed and was reset (``reset``).

        A reset keeps ``created``/``started``/``audio_s_done``, clears failures, delivery
        counts, the finalize guard and the cancelled flag, and adds ``done_ids`` to the done set.
        ``running`` (with ``holder``, a holder's JSON): batches entered in the ``running`` hash as held by
        ``holder``, without a lease, in the same step (those with a worker's entry keep it; an earlier
        sender's is replaced), so that the reaper queues them unless the caller queues them and drops
        the entries (:meth:`drop_running`). A sender's task id starts with ``sending-`` or ``rebuild-``
        (:func:`workers.control.start_job`).
        """
        check_job_id(info.id)
        d = {f: getattr(info, f) for f in _JOB_FIELDS}
        fields: list[str] = []
        for f, v in d.items():
            if f in ("cancelled", "error", "summary", "finished") and not v:
                continue
            fields += [f, _enc(v)]
        j = info.id
        keys = [self.k_job(j), self.k(j, "done"), self.K_JOBS, self.K_ACTIVE, self.k(j, "failed"),
                self.k(j, "deliveries"), self.k(j, FINALIZE), self.k(j, "running"), self.k(j, "records")]
        done_ids = [int(b) for b in done_ids]
        running = [int(b) for b in running] if holder else []
        args = [j, info.created or now(), "1" if reset else "0", len(fields) // 2, *fields,
                len(done_ids), *done_ids, *([holder, *running] if running else [])]
        res = int(self._create(keys=keys, args=args))
        if res == 1:
            self.r.zremrangebyrank(self.K_JOBS, 0, -MAX_RECENT_JOBS - 1)
        return res

    def exists(self, job_id: str) -> bool:
        return bool(self.r.exists(self.k_job(job_id)))

    def get_job(self, job_id: str) -> JobInfo | None:
        """The job, or None if Redis does not know it."""
        check_job_id(job_id)
        with self.r.pipeline(transaction=False) as p:
            p.hgetall(self.k_job(job_id))
            p.scard(self.k(job_id, "done"))
            p.hlen(self.k(job_id, "failed"))
            p.hlen(self.k(job_id, "running"))
            raw, nd, nf, nr = p.execute()
        if not raw:
            return None
        d = {k.decode(): _dec(v) for k, v in raw.items()}
        return JobInfo(
            id=d.get("id", job_id), out_dir=d.get("out_dir", ""), status=JobStatus(d.get("status", "queued")),
            priority=d.get("priority", "normal"), queue=d.get("queue", ""), batches=int(d.get("batches") or 0),
            utterances=int(d.get("utterances") or 0), audio_s_est=float(d.get("audio_s_est") or 0.0),
            audio_s_done=float(d.get("audio_s_done") or 0.0), created=float(d.get("created") or 0.0),
            started=d.get("started"), finished=d.get("finished"), cancelled=bool(d.get("cancelled")),
            error=d.get("error"), summary=d.get("summary"), done=int(nd), failed=int(nf), running=int(nr))

    def require_job(self, job_id: str) -> JobInfo:
        info = self.get_job(job_id)
        if info is None:
            raise JobError(f"no job {job_id!r} in Redis at {redact_url(self.url)}; "
                           f"check the id with `status`, or `resume OUTDIR` to re-register it from its directory")
        return info

    def recent_jobs(self, limit: int = 20) -> list[JobInfo]:
        ids = [i.decode() for i in self.r.zrevrange(self.K_JOBS, 0, max(limit - 1, 0))]
        return [j for j in (self.get_job(i) for i in ids) if j is not None]

    def active_jobs(self) -> list[str]:
        return sorted(i.decode() for i in self.r.smembers(self.K_ACTIVE))

    def set_fields(self, job_id: str, **fields: Any) -> None:
        self.r.hset(self.k_job(job_id), mapping={k: _enc(v) for k, v in fields.items()})

    def set_status(self, job_id: str, status: JobStatus, **fields: Any) -> bool:
        """Set the status (and ``fields``) of an existing job; False, changing nothing, if Redis does
        not know the job (it lost its data): the caller rebuilds it from its directory if it must."""
        pairs = [x for k, v in {"status": status, **fields}.items() for x in (k, _enc(v))]
        return bool(self._set_status(keys=[self.k_job(job_id), self.K_ACTIVE],
                                     args=[job_id, "1" if status.active else "0", *pairs]))

    def cancel(self, job_id: str) -> JobInfo:
        """Mark the job cancelled: its queued batches are dropped when a worker picks them up."""
        info = self.require_job(job_id)
        if info.status in (JobStatus.DONE,):
            return info
        with self.r.pipeline() as p:
            p.hset(self.k_job(job_id), mapping={"cancelled": "true", "status": _enc(JobStatus.CANCELLED),
                                                "finished": _enc(now())})
            p.srem(self.K_ACTIVE, job_id)
            p.execute()
        return self.require_job(job_id)

    def finish(self, job_id: str, summary: dict | None) -> bool:
        """Mark the job done (after ``finalize``); ``finalize_runs`` counts how often that happened. The
        ``running`` entries of done batches go (left by a worker that could not count its batch while Redis was
        down: no reaper sweeps a finished job). False if Redis does not know the job (see :meth:`set_status`)."""
        if not self.set_status(job_id, JobStatus.DONE, finished=now(), summary=summary):
            return False
        self.r.hincrby(self.k_job(job_id), "finalize_runs", 1)
        self.r.delete(self.k_lease(job_id, FINALIZE))
        self.r.hdel(self.k(job_id, "running"), FINALIZE)
        self._drop_done_running(keys=[self.k(job_id, "running"), self.k(job_id, "done")])
        self.expire_done(job_id)
        return True

    def expire_done(self, job_id: str) -> None:
        """A done job's state is kept for a while (status, the recent-jobs table), not forever; its
        directory stays the record (``resume OUTDIR`` re-registers it)."""
        ttl = settings.get("BOOKTTS_DONE_JOB_TTL_S")
        with self.r.pipeline(transaction=False) as p:
            for key in [self.k_job(job_id)] + [self.k(job_id, part) for part in _JOB_PARTS]:
                p.expire(key, ttl)
            p.execute()
        out_dir = _dec(self.r.hget(self.k_job(job_id), "out_dir"))
        if out_dir and self.dir_holder(out_dir) == job_id:
            self.r.expire(self.k_dir(out_dir), ttl)

    # ------------------------------------------------------------ output directories
    def dir_holder(self, out_dir: str) -> str | None:
        v = self.r.get(self.k_dir(out_dir))
        return v.decode() if v is not None else None

    def claim_dir(self, out_dir: str, job_id: str, provisional_s: float | None = None) -> str | None:
        """Register ``job_id`` as the job of ``out_dir`` (a resolved path), atomically.

        Refused (JobError naming the directory and the other job) while another job holds it that
        Redis knows as queued, running or finalizing in that directory, or that is being submitted
        (a provisional claim, not yet registered); a holder that is finished, failed, cancelled,
        forgotten, or moved elsewhere is replaced. ``provisional_s``: a submit claims before it
        writes the job's files and registers it; such a claim lapses after this many seconds unless
        the registration (a claim without it) makes it permanent. Returns the previous holder
        (``job_id`` itself if it held it already), for :meth:`release_dir`.
        """
        check_job_id(job_id)
        key = self.k_dir(out_dir)
        with self.r.pipeline() as p:
            while True:
                try:
                    p.watch(key)
                    cur = p.get(key)
                    cur = cur.decode() if cur is not None else None
                    if cur == job_id and provisional_s:
                        p.reset()
                        return cur  # ours already (a resume): keep it as it is
                    if cur is not None and cur != job_id:
                        self._refuse_if_held(p, out_dir, cur, job_id, key)
                    p.multi()
                    if provisional_s:
                        p.set(key, job_id, px=max(int(provisional_s * 1000), 1))
                    else:
                        p.set(key, job_id)
                    p.execute()
                    return cur
                except redis.exceptions.WatchError:
                    continue

    def _refuse_if_held(self, p, out_dir: str, cur: str, job_id: str, key: str) -> None:
        status, other_dir = (_dec(v) for v in p.hmget(self.k_job(cur), "status", "out_dir"))
        todo = (f"this is job {job_id} (other books or settings): choose another -o directory, or cancel job "
                f"{cur} and delete {out_dir} first")
        if status is None:
            ttl_ms = p.pttl(key)
            if ttl_ms is not None and ttl_ms > 0:  # provisional: its submit has not registered it yet
                p.reset()
                raise JobError(f"{out_dir} is being submitted as job {cur} (not registered yet; the claim "
                               f"lapses in {ttl_ms / 1000:.0f} s if that submit died); {todo}")
        elif status in _ACTIVE_VALUES and other_dir == out_dir:
            p.reset()
            raise JobError(f"{out_dir} is the output directory of job {cur}, which is {status}; {todo}")

    def release_dir(self, out_dir: str, job_id: str, previous: str | None) -> None:
        """Undo :meth:`claim_dir`: give the directory back to ``previous`` if ``job_id`` holds it."""
        key = self.k_dir(out_dir)
        with self.r.pipeline() as p:
            while True:
                try:
                    p.watch(key)
                    cur = p.get(key)
                    if cur is None or cur.decode() != job_id or previous == job_id:
                        p.reset()
                        return
                    p.multi()
                    if previous is None:
                        p.delete(key)
                    else:
                        p.set(key, previous)
                    p.execute()
                    return
                except redis.exceptions.WatchError:
                    continue

    def fail_job(self, job_id: str, error: str) -> None:
        self.set_status(job_id, JobStatus.FAILED, finished=now(), error=error)

    # ------------------------------------------------------------ batches
    def done_ids(self, job_id: str) -> set[int]:
        return {int(b) for b in self.r.smembers(self.k(job_id, "done"))}

    def failures(self, job_id: str) -> dict[int, dict]:
        return {int(b): _dec(v) for b, v in self.r.hgetall(self.k(job_id, "failed")).items()}

    def running(self, job_id: str) -> dict[str, Holder | None]:
        return {b.decode(): Holder.from_json(v) for b, v in self.r.hgetall(self.k(job_id, "running")).items()}

    def running_raw(self, job_id: str) -> dict[str, str]:
        return {b.decode(): v.decode() for b, v in self.r.hgetall(self.k(job_id, "running")).items()}

    def records(self, job_id: str) -> dict[int, dict]:
        return {int(b): _dec(v) for b, v in self.r.hgetall(self.k(job_id, "records")).items()}

    def deliveries(self, job_id: str) -> dict[int | str, int]:
        """Batch id (or ``finalize``) -> times a worker started it."""
        return {(int(b) if b.isdigit() else b.decode()): int(v)
                for b, v in self.r.hgetall(self.k(job_id, "deliveries")).items()}

    def lease_holder(self, job_id: str, batch: int | str) -> Holder | None:
        return Holder.from_json(self.r.get(self.k_lease(job_id, batch)))

    def leased(self, job_id: str, batches: Iterable[int | str]) -> set[str]:
        """The batches among ``batches`` whose lease is alive."""
        batches = [str(b) for b in batches]
        if not batches:
            return set()
        with self.r.pipeline(transaction=False) as p:
            for b in batches:
                p.exists(self.k_lease(job_id, b))
            alive = p.execute()
        return {b for b, a in zip(batches, alive) if a}

    def begin(self, job_id: str, batch: int | str, holder: Holder, lease_s: float, max_deliveries: int,
              steal: str = "") -> tuple[str, Any]:
        """Start work on a batch: take its lease and count the delivery, atomically.

        Returns ``(verdict, value)``: ``ok`` (value: the delivery number, the attempt),
        ``done``/``failed``/``cancelled``/``missing``/``unplanned`` (skip; ``unplanned``: the batch id is
        not one of the job's planned batches, :func:`planned_batch`), ``leased`` (value: the other
        holder's JSON), ``exhausted`` (value: deliveries so far, over ``max_deliveries``).
        ``steal``: take the lease over if its current value is exactly this.
        """
        return _verdict(self._begin(keys=self._begin_keys(job_id, batch),
                                    args=[str(batch), holder.to_json(), int(lease_s * 1000), holder.task_id, steal,
                                          int(max_deliveries), _enc(now())]))

    def _begin_keys(self, j: str, batch: int | str) -> list[str]:
        return [self.k_job(j), self.k(j, "done"), self.k(j, "failed"), self.k(j, "running"),
                self.k(j, "deliveries"), self.k_lease(j, batch)]

    def complete(self, job_id: str, batch: int, holder: Holder, record: dict, audio_s: float) -> tuple[str, bool]:
        """Count a finished batch once. Returns (``progress``|``finalize``|``complete``|``failed``|
        ``cancelled``|``missing``|``unplanned`` (not counted), whether this call added it)."""
        j = job_id
        keys = [self.k_job(j), self.k(j, "done"), self.k(j, "failed"), self.k(j, "running"),
                self.k(j, "records"), self.k_lease(j, batch), self.k(j, FINALIZE), self.K_ACTIVE]
        verdict, added = self._complete(keys=keys, args=[str(batch), json.dumps(record), repr(float(audio_s)),
                                                         holder.to_json(), _enc(now()), j])
        return (verdict.decode() if isinstance(verdict, bytes) else verdict), bool(added)

    def fail(self, job_id: str, batch: int | str, holder_json: str, failure: dict) -> str:
        """Record a batch failure. Returns ``progress``|``failed`` (the job is over)|``done``|``missing``|
        ``unplanned`` (a batch id the job does not have: nothing recorded, the job goes on)|..."""
        j = job_id
        keys = [self.k_job(j), self.k(j, "done"), self.k(j, "failed"), self.k(j, "running"),
                self.k_lease(j, batch), self.k(j, FINALIZE), self.K_ACTIVE]
        verdict, _ = self._fail(keys=keys, args=[str(batch), json.dumps(failure), holder_json, _enc(now()), j])
        return verdict.decode() if isinstance(verdict, bytes) else verdict

    def renew(self, job_id: str, batch: int | str, holder: Holder, lease_s: float) -> int:
        """Heartbeat: 1 renewed, 2 re-taken (it had vanished), 0 lost to another holder or done."""
        return int(self._renew(keys=[self.k_lease(job_id, batch), self.k(job_id, "running"), self.k(job_id, "done")],
                               args=[holder.to_json(), int(lease_s * 1000), str(batch)]))

    def hold(self, job_id: str, batch: int | str, holder: Holder, ttl_s: float) -> bool:
        """Extend our own lease to ``ttl_s`` (a retry of the same task will take it over)."""
        return bool(self._hold(keys=[self.k_lease(job_id, batch)], args=[holder.to_json(), int(ttl_s * 1000)]))

    def release(self, job_id: str, batch: int | str, holder: Holder, keep_running: bool = False) -> None:
        """Give up our lease and running entry (nothing else). ``keep_running``: the lease only; the entry
        then shows the reaper a batch nobody holds (it queues it) until a second call drops it."""
        h = holder.to_json()
        lease, running = self.k_lease(job_id, batch), self.k(job_id, "running")
        with self.r.pipeline() as p:
            p.get(lease)
            p.hget(running, str(batch))
            cur, run = p.execute()
        if cur is not None and cur.decode() == h:
            self.r.delete(lease)
        if run is not None and run.decode() == h and not keep_running:
            self.r.hdel(running, str(batch))

    def drop_running(self, job_id: str, batches: Iterable[int | str], holder: str) -> int:
        """Drop the ``running`` entries of ``batches`` that ``holder`` (JSON) still has."""
        batches = [str(b) for b in batches]
        if not batches:
            return 0
        return int(self._drop_running(keys=[self.k(job_id, "running")], args=[holder, *batches]))

    def orphan_state(self, job_id: str, batch: str, holder_seen: str) -> str:
        """Reaper, read only: ``orphan`` if ``batch``'s running entry is still ``holder_seen``, its lease is
        gone and it is not done (it must be queued again); ``done`` if it is done; else ``held``."""
        with self.r.pipeline(transaction=False) as p:
            p.hget(self.k(job_id, "running"), batch)
            p.exists(self.k_lease(job_id, batch))
            p.sismember(self.k(job_id, "done"), batch)
            cur, leased, done = p.execute()
        if done:
            return "done"
        return "orphan" if cur is not None and cur.decode() == holder_seen and not leased else "held"

    def claim_orphan(self, job_id: str, batch: str, holder_seen: str) -> bool:
        """Reaper: drop the running entry of a batch whose lease expired. True: re-enqueue it."""
        return bool(self._claim(keys=[self.k(job_id, "running"), self.k_lease(job_id, batch), self.k(job_id, "done")],
                                args=[batch, holder_seen]))

    def note_requeue(self, job_id: str, batch: str, holder_raw: str) -> None:
        """Remember that the reaper re-enqueued ``batch`` (shown by ``status``)."""
        self.r.hset(self.k(job_id, "requeued"), batch,
                    json.dumps({"at": now(), "holder": Holder.from_json(holder_raw) and json.loads(holder_raw)}))

    def requeues(self, job_id: str) -> dict[str, dict]:
        return {b.decode(): _dec(v) for b, v in self.r.hgetall(self.k(job_id, "requeued")).items()}

    def try_lock(self, key: str, ttl_s: float) -> bool:
        return bool(self.r.set(key, _enc(now()), nx=True, px=max(int(ttl_s * 1000), 1)))

    def finalize_guard(self, job_id: str) -> bool:
        """SETNX the finalize guard; True for the one caller that must enqueue finalize."""
        ok = bool(self.r.set(self.k(job_id, FINALIZE), _enc(now()), nx=True))
        if ok:
            self.set_status(job_id, JobStatus.FINALIZING)
        return ok

    def persist(self, job_id: str) -> None:
        """Drop the expiry a done job's keys got (the job is being run again)."""
        with self.r.pipeline(transaction=False) as p:
            for key in [self.k_job(job_id)] + [self.k(job_id, part) for part in _JOB_PARTS]:
                p.persist(key)
            p.execute()

    def refresh_stale_finalize(self, job_id: str, stale_s: float) -> bool:
        """True (and the guard's time reset) if the finalize guard is older than ``stale_s`` and no
        finalize holds a lease: the caller re-enqueues finalize, at most once per ``stale_s``."""
        return bool(self._stale(keys=[self.k(job_id, FINALIZE), self.k_lease(job_id, FINALIZE)],
                                args=[_enc(now()), repr(float(stale_s))]))

    # ------------------------------------------------------------ the ready index (worker-side batching)
    @staticmethod
    def k_ready(sclass: str) -> str:
        return f"{PREFIX}ready:{sclass}"

    def add_ready(self, job_id: str, sclass: str, rank: int, batches: dict[int, int], queued_at: str) -> None:
        """Index queued batches (id -> longest utterance) so workers of this synthesis class can
        combine them into larger engine batches; remember when they were queued."""
        if not batches:
            return
        with self.r.pipeline(transaction=False) as p:
            p.zadd(self.k_ready(sclass), {f"{job_id}:{b}": rank * READY_RANK_SCALE + int(n)
                                          for b, n in batches.items()})
            p.hset(self.k(job_id, "queued"), mapping={str(b): _enc(queued_at) for b in batches})
            self._set_if_job(keys=[self.k_job(job_id)], args=["sclass", _enc(sclass)], client=p)
            p.execute()

    def drop_ready(self, sclass: str, members: Iterable[tuple[str, int]]) -> None:
        members = [f"{j}:{b}" for j, b in members]
        if members and sclass:
            self.r.zrem(self.k_ready(sclass), *members)

    def ready_candidates(self, sclass: str, lo: float, hi: float, limit: int) -> list[tuple[str, int, float]]:
        """Up to ``limit`` indexed batches with scores in [lo, hi], lowest first: (job, batch, score)."""
        return self.ready_scan(sclass, [(lo, hi)], limit)[0][0]

    def ready_scan(self, sclass: str, windows: list[tuple[float, float]], limit: int, job_id: str | None = None,
                   batch_ids: Iterable[int] = ()) -> tuple[list[list[tuple[str, int, float]]], list[tuple[str, int, float]]]:
        """One round trip: for each (lo, hi) of ``windows``, up to ``limit`` indexed batches with scores in
        [lo, hi], lowest first; and which of ``job_id``'s ``batch_ids`` are indexed (lowest score first).
        Both as (job, batch, score)."""
        ids = list(batch_ids) if job_id else []
        if not sclass:
            return [[] for _ in windows], []
        with self.r.pipeline(transaction=False) as p:
            for lo, hi in windows:
                p.zrangebyscore(self.k_ready(sclass), lo, hi, start=0, num=limit, withscores=True)
            for b in ids:
                p.zscore(self.k_ready(sclass), f"{job_id}:{b}")
            res = p.execute()
        found = []
        for rows in res[:len(windows)]:
            out = []
            for m, score in rows:
                j, _, b = m.decode().rpartition(":")
                if j and b.isdigit():
                    out.append((j, int(b), float(score)))
            found.append(out)
        own = sorted(((job_id, b, float(sc)) for b, sc in zip(ids, res[len(windows):]) if sc is not None),
                     key=lambda t: t[2])
        return found, own

    def begin_many(self, pieces: list[tuple[str, int]], holder: Holder, lease_s: float,
                   max_deliveries: int) -> list[tuple[str, Any, str | None, str | None]]:
        """:meth:`begin` for each (job, batch) of ``pieces`` in one round trip, each atomic as there;
        with, for each, its ``queued_at`` and its job's queue (read in the same round trip)."""
        if not pieces:
            return []
        holder_json, ts = holder.to_json(), _enc(now())
        with self.r.pipeline(transaction=False) as p:
            for j, b in pieces:
                self._begin(keys=self._begin_keys(j, b), args=[str(b), holder_json, int(lease_s * 1000),
                                                               holder.task_id, "", int(max_deliveries), ts], client=p)
                p.hget(self.k(j, "queued"), str(b))
                p.hget(self.k_job(j), "queue")
            res = p.execute()
        return [(*_verdict(res[i]), _dec(res[i + 1]), _dec(res[i + 2])) for i in range(0, len(res), 3)]

    def queued_at(self, job_id: str, batch: int) -> str | None:
        return _dec(self.r.hget(self.k(job_id, "queued"), str(batch)))

    def sclass(self, job_id: str) -> str:
        return _dec(self.r.hget(self.k_job(job_id), "sclass")) or ""

    def ready_count_of(self, job_id: str) -> int:
        """Queued batches not yet taken by a worker, of every job in ``job_id``'s synthesis class
        (the work its engines still have ahead); 0 when the job has no class recorded."""
        sclass = self.sclass(job_id)
        return int(self.r.zcard(self.k_ready(sclass))) if sclass else 0

    def forget(self, job_id: str) -> None:
        """Delete everything Redis holds about a job (tests, housekeeping)."""
        out_dir = _dec(self.r.hget(self.k_job(job_id), "out_dir"))
        if out_dir:
            self.release_dir(out_dir, job_id, None)
        keys = [self.k_job(job_id)] + [self.k(job_id, p) for p in _JOB_PARTS]
        self.r.delete(*keys)
        self.r.zrem(self.K_JOBS, job_id)
        self.r.srem(self.K_ACTIVE, job_id)
