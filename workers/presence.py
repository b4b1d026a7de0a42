"""Which engines the live workers serve, and the batches waiting for an engine nobody serves.

Every worker process (each prefork child, or the solo worker) writes its presence every
:data:`PRESENCE_S` seconds into ``<P>worker:<host>:<pid>`` (a JSON string with a TTL of
:data:`PRESENCE_TTL_S`): its engine identity (backend and precision), device and queues. A
worker that dies is gone from there within the TTL.

A batch of a job that another engine identity synthesizes (:func:`jobs.job.check_engine`) used to
go back on its queue a second after a worker of the wrong engine took it: with no worker of the job's
engine running, it went round the workers once a second for ever, each time with a log line. Now:

- while a live worker of the job's engine consumes the queue, the worker of the wrong engine still puts
  the message back after :data:`workers.tasks.ENGINE_GIVE_BACK_S` (the other worker takes it soon);
- while none does, it *parks* the batch (:func:`park`): the batch goes into the hash ``<P>parked``
  (field ``<job>:<batch>``, JSON ``{dir, queue, engine, at, tries}``) and its message is acknowledged.
  Nothing is leased, counted or failed: the batch stays pending in the job (``backlog`` counts it as
  queued on its queue), and it causes no message, log line or work until a worker of its engine
  appears.

Every worker's presence thread moves parked batches back onto their queue (:func:`drain`) as soon as a
live worker serves their engine on their queue (a worker of that engine, at its start, does it at
once); a batch of a job no longer active, or a batch done or failed, leaves the hash instead. Taking a
field out of the hash (``HDEL`` answers 1 to one caller only) decides which worker queues it, so a
batch is queued once. ``cli.py status JOB`` names the engine a job needs and whether a live worker
serves it (:func:`engine_line`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

import redis

from workers.state import PARKED_KEY, PREFIX

log = logging.getLogger("booktts.presence")

PRESENCE_S = 5.0
PRESENCE_TTL_S = 3 * PRESENCE_S + 5
WORKER_PATTERN = f"{PREFIX}worker:*"


def _key(host: str, pid: int) -> str:
    return f"{PREFIX}worker:{host}:{pid}"


def _ident(d) -> tuple[str, str] | None:
    if not isinstance(d, dict):
        return None
    name, precision = d.get("name"), d.get("precision")
    return (name, precision) if isinstance(name, str) and isinstance(precision, str) else None


def describe(ident: tuple[str, str] | None) -> str:
    return "any engine" if ident is None else f"{ident[0]} {ident[1]}"


def announce(r: redis.Redis, engine: dict, device: str, queues: list[str]) -> None:
    """Write this process's presence (engine identity, device, queues), with its TTL."""
    host, pid = socket.gethostname(), os.getpid()
    rec = {"host": host, "pid": pid, "engine": {"name": engine["name"], "precision": engine["precision"]},
           "device": device, "queues": list(queues), "at": time.time()}
    r.set(_key(host, pid), json.dumps(rec), ex=int(PRESENCE_TTL_S))


def live_workers(r: redis.Redis) -> list[dict]:
    """The presence records of the live worker processes (unreadable ones left out)."""
    keys = list(r.scan_iter(match=WORKER_PATTERN, count=500))
    out = []
    for raw in (r.mget(keys) if keys else []):
        try:
            rec = json.loads(raw)
        except (TypeError, ValueError):
            continue
        if isinstance(rec, dict) and _ident(rec.get("engine")) is not None:
            out.append(rec)
    return out


def serving(workers: list[dict], ident: tuple[str, str] | None, queue: str | None) -> list[dict]:
    """Of ``workers``, those whose engine is ``ident`` (any, for None) and that consume ``queue``
    (a record without queues is taken to consume every queue)."""
    return [w for w in workers if (ident is None or _ident(w.get("engine")) == ident)
            and (not queue or not w.get("queues") or queue in w["queues"])]


def served(r: redis.Redis, engine: dict | None, queue: str) -> bool:
    """Whether a live worker of ``engine`` (a job's identity; None: any) consumes ``queue``."""
    return bool(serving(live_workers(r), _ident(engine), queue))


def park(r: redis.Redis, job_dir: str, job_id: str, batch_id: int, queue: str, engine: dict) -> int:
    """Park a batch that needs ``engine`` (the job's identity) until a live worker serves it (see the
    module doc). Returns how many times the batch was parked."""
    ident = _ident(engine)
    field = f"{job_id}:{batch_id}"
    old = r.hget(PARKED_KEY, field)
    try:
        tries = int(json.loads(old).get("tries", 0)) if old else 0
    except (TypeError, ValueError, AttributeError):
        tries = 0
    rec = {"dir": str(job_dir), "queue": queue, "engine": {"name": ident[0], "precision": ident[1]},
           "at": time.time(), "tries": tries + 1}
    r.hset(PARKED_KEY, field, json.dumps(rec))
    return tries + 1


def parked_of(r: redis.Redis, job_id: str) -> int:
    """How many batches of ``job_id`` are parked."""
    head = f"{job_id}:"
    return sum(1 for f in r.hkeys(PARKED_KEY) if f.decode(errors="replace").startswith(head))


def drain(store) -> int:
    """Queue again the parked batches that a live worker serves (see the module doc), each job's in one
    call; of those, drop the batches of jobs no longer active and the batches done or failed. Entries
    nobody serves cost no Redis call but the one read of the hash. Returns how many were queued."""
    from workers.enqueue import enqueue_batches

    r = store.r
    entries = r.hgetall(PARKED_KEY)
    if not entries:
        return 0
    workers = live_workers(r)
    due: dict[tuple[str, str, str], list[tuple[bytes, bytes, int]]] = {}
    for raw_field, raw in entries.items():
        job_id, _, batch = raw_field.decode(errors="replace").rpartition(":")
        try:
            rec = json.loads(raw)
            batch_id, ident, job_dir, queue = int(batch), _ident(rec["engine"]), str(rec["dir"]), str(rec["queue"])
        except (TypeError, ValueError, KeyError, AttributeError):
            r.hdel(PARKED_KEY, raw_field)
            continue
        if ident is None or not job_id:
            r.hdel(PARKED_KEY, raw_field)
            continue
        if serving(workers, ident, queue):
            due.setdefault((job_id, job_dir, queue), []).append((raw_field, raw, batch_id))
    n = 0
    for (job_id, job_dir, queue), items in due.items():
        info = store.get_job(job_id)  # (a job Redis lost is queued again by its rebuild)
        ended = (store.done_ids(job_id) | set(store.failures(job_id))) if info is not None else set()
        drop = [f for f, _, b in items if info is None or not info.status.active or b in ended]
        if drop:
            r.hdel(PARKED_KEY, *drop)
        mine = [(f, raw, b) for f, raw, b in items if f not in drop and r.hdel(PARKED_KEY, f) == 1]
        if not mine:  # (HDEL answers 1 to one worker only: another took them)
            continue
        try:
            enqueue_batches(job_dir, job_id, [b for _, _, b in mine], queue)
        except Exception:
            r.hset(PARKED_KEY, mapping={f: raw for f, raw, _ in mine})  # parked again: the next tick retries
            raise
        n += len(mine)
    if n:
        log.info("%d parked batches queued again for live workers of their engine", n)
    return n


class Presence(threading.Thread):
    """This process's presence, written every :data:`PRESENCE_S` s, and :func:`drain` on each tick
    (the first at once)."""

    def __init__(self, store_factory, engine: dict, device: str, queues: list[str]) -> None:
        super().__init__(name="booktts-presence", daemon=True)
        self.store_factory, self.engine, self.device, self.queues = store_factory, engine, device, queues
        self._stop = threading.Event()
        self._last_error = 0.0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while True:
            try:
                store = self.store_factory()
                announce(store.r, self.engine, self.device, self.queues)
                drain(store)
            except Exception as exc:  # keep going through Redis restarts and the like
                if time.monotonic() - self._last_error > 30:
                    self._last_error = time.monotonic()
                    log.warning("presence: %s: %s (will retry)", type(exc).__name__, exc)
            if self._stop.wait(PRESENCE_S):
                return


def engine_line(store, info) -> str | None:
    """For ``status JOB``: the engine the job needs and whether a live worker serves it; None for a
    job that is not waiting on batches."""
    from jobs.job import recorded_engine

    if info.status.value not in ("queued", "running") or info.done + info.failed >= info.batches:
        return None
    try:
        ident = _ident(recorded_engine(info.out_dir))
    except Exception:  # noqa: BLE001 - an unreadable engine.json is reported where it is used
        ident = None
    workers = live_workers(store.r)
    ok = serving(workers, ident, info.queue)
    parked = parked_of(store.r, info.id)
    if ok:
        return (f"{describe(ident)}; served by {len(ok)} live worker process{'es' if len(ok) != 1 else ''}"
                + (f" ({parked} batches waiting to be queued again)" if parked else ""))
    others = sorted({f"{describe(_ident(w['engine']))} on {w.get('device', '?')}" for w in workers})
    return (f"needs {describe(ident)}; no live worker serves it on queue {info.queue} "
            f"({'live workers: ' + ', '.join(others) if others else 'no live workers'})"
            + (f"; {parked} batches parked until one starts (`cli.py worker --engine {ident[0]}"
               f" --precision {ident[1]}`)" if parked and ident else "")
            + ("; its batches wait until one starts" if not parked else ""))
