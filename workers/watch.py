"""A watched inbox: every complete book file dropped into it is submitted exactly once.

``python cli.py watch INBOX -o OUTROOT`` scans in a loop; ``--once`` does one pass (for
cron); ``python cli.py beat --config watch.json`` scans several inboxes, each on its own
interval, in its own loop (:func:`run_schedule`; the config format is :func:`load_config`'s
docstring and ``docs/operations.md``). Each pass is :meth:`Inbox.scan`.

Scanning is never a task a broker message can start: the inboxes and output roots come only
from the command line or the config file of the process that scans (a message naming a
directory would let any broker client move files out of it and submit their text).

What a pass does with a file directly inside INBOX:

- it ignores dotfiles (``core.files.atomic_path`` writes ``.tmp-*`` names), ``*.part`` and
  ``*.tmp``, and anything that is not a regular file (``done/``, ``failed/``, a symbolic link);
- it takes a file only once it is **complete**: its size, mtime and inode are the same
  as at the previous pass and that pass was at least ``settle_s`` ago. A file renamed in
  atomically (the safe way to drop a file) is taken on the second pass after it appeared;
  a file still being written changes between passes and waits;
- it reads a complete file **once**, through one descriptor opened with ``O_NOFOLLOW``: the opened
  file must be a regular file with one link (a hard link would be another name of a file kept
  elsewhere, refused to ``failed/``), of the size, mtime and inode observed, and within the size a
  book may have (:func:`jobs.ingest.check_input_size`'s limits). Its bytes are hashed and copied into a
  private directory (``mkdtemp``, mode 0700) as they are read, and the book is planned from that
  copy. So the bytes planned are the bytes checked: an inbox others can write to where ``a.txt`` is
  swapped for a symlink to a file only the watcher may read (the check used to happen when the
  files were listed, and planning opened the name again, following the link) never gets that file
  planned. The copy is removed when the submission is over;
- it identifies the file by the **SHA-256 of its content**. Content already submitted
  from this inbox is not submitted again: the file goes to ``done/`` with the reason
  ``duplicate of ...``;
- otherwise it submits the book exactly as ``cli.py submit`` does (:func:`workers.control.submit_job`:
  ``prepare_job`` then ``start_job``, see :func:`submit_book`) into its own output
  directory ``OUTROOT/<stem>-<sha8>/`` (``manifest.parquet`` appears there when the job is
  done), then moves the file to ``done/``;
- a bad book (:class:`~core.errors.InputError`: empty, binary, not UTF-8, a broken EPUB...)
  or a job error goes to ``failed/``. Next to every moved file, ``<name>.reason.txt`` holds
  one line saying what happened;
- a broker failure (Redis down) leaves the file where it is for the next pass.

The **ledger** ``INBOX/.booktts-ledger.json`` (written atomically: temporary file, fsync,
rename) holds the content hashes submitted so far and the pending observations. It is
updated *before* a submission (state ``submitting``) and after it (``submitted``), so a
watcher killed at any point neither loses nor repeats a book: a ``submitting`` book is
submitted again after a restart, which is harmless because a submission of the same
content to the same directory is idempotent (same job id; an active or finished job is
left alone). The ledger lives with the inbox, so it survives a Redis restart without
persistence and moves with the inbox. A pass holds ``INBOX/.booktts-watch.lock``
(``flock``) and a Redis lock, so two watchers (or beat ticks) never scan one inbox at once.
The Redis lock names its holder (host and pid) and lives ``REDIS_LOCK_S`` at a time, renewed
while the pass runs: a watcher killed mid-pass (SIGKILL, a lost node) holds the inbox at most
that long, and not at all for the next watcher on the same host, which sees that the holder's
process is gone and takes the lock over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import redis

from jobs.config import JobConfig
from core.errors import BrokerError, InputError, JobError, TTSError
from core.files import sha256_file
from core.files import atomic_path, read_json, slug, write_json
from workers.celery_app import DEFAULT_PRIORITY, DEFAULT_QUEUE_PREFIX, PRIORITIES, queue_name
from jobs.claim import process_gone as pid_gone

log = logging.getLogger("booktts.watch")

LEDGER = ".booktts-ledger.json"
LOCK = ".booktts-watch.lock"
DONE, FAILED = "done", "failed"
IGNORED_SUFFIXES = (".part", ".tmp")
REASON_SUFFIX = ".reason.txt"
#: ``moved_to`` of a file taken away from the inbox (by its owner) before the watcher could move it.
GONE = "(gone from the inbox before it was moved)"
LEDGER_VERSION = 1
#: The inbox's Redis lock lives this long at a time; a pass renews it every third of that while it
#: runs (planning a huge book takes minutes), so a holder that died frees the inbox within this time.
REDIS_LOCK_S = 60.0
#: Replace the lock's holder only if it is still the one we read (a compare-and-set).
_TAKE_OVER = """if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3]) and 1 or 0 end return 0"""
#: Extend the lock only while we hold it.
_RENEW = """if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"""


def _holder_gone(holder: bytes | None) -> bool:
    """True when the lock's holder (``host:pid:time``) ran on this host and its process is gone.
    A holder on another host is never judged gone here: its lock runs out by itself."""
    try:
        host, pid, _ = (holder or b"").decode().rsplit(":", 2)
        pid = int(pid)
    except ValueError:
        return False
    # on this host, a zombie (exited, not yet reaped) is gone too: jobs.claim.process_gone
    return pid != os.getpid() and host == socket.gethostname() and pid_gone(pid)




class _Changed(Exception):
    """The inbox entry is not what was observed: ``obs`` is its new observation, or None when it is no
    longer a regular file (swapped for a link, say)."""

    def __init__(self, obs: list | None) -> None:
        super().__init__("changed since observed")
        self.obs = obs


class _CopyFailed(Exception):
    """The private copy could not be written (the temporary directory's disk is full, say): the
    watcher's trouble, not the book's; the file waits for the next pass."""


def _observation(st: os.stat_result) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def take_copy(path: Path, obs: list, into: Path) -> tuple[Path, str]:
    """Read the inbox entry ``path`` once and copy it to ``into/<name>``; returns (the copy, SHA-256 of
    the bytes read). The entry is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a symlink or a FIFO swapped in
    since the listing is not followed, not waited on) and the opened descriptor is checked: a regular
    file, with one link, observed as ``obs`` before and after the read, not larger than a book may be.
    Raises :class:`_Changed` when it is not (yet) what was observed, :class:`InputError` for a drop that
    can never be taken (hard links, too large), ``FileNotFoundError`` when it is gone."""
    from jobs.ingest import reader_for

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK):  # a link (or a socket) now
            raise _Changed(None) from None
        raise
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(src.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _Changed(None)
        if _observation(st) != obs:
            raise _Changed(_observation(st))
        if st.st_nlink != 1:
            raise InputError(f"{path.name} has {st.st_nlink} hard links (another name of a file kept elsewhere); "
                             f"drop a copy of the book, not a link to it")
        limit = reader_for(path).max_bytes
        if st.st_size > limit:
            raise InputError(f"{path.name} is {st.st_size >> 20} MB, larger than the {limit >> 20} MB such a "
                             f"book may be")
        digest = hashlib.sha256()
        copy = into / path.name
        try:
            dst = open(copy, "xb")
        except OSError as exc:
            raise _CopyFailed(f"cannot write {copy}: {exc.strerror or exc}") from None
        with dst:
            left = limit + 1
            while left > 0:
                chunk = src.read(min(1 << 20, left))
                if not chunk:
                    break
                digest.update(chunk)
                try:
                    dst.write(chunk)
                except OSError as exc:
                    raise _CopyFailed(f"cannot write {copy}: {exc.strerror or exc}") from None
                left -= len(chunk)
        after = os.fstat(src.fileno())
        if _observation(after) != obs or after.st_size > limit:  # written to while read
            raise _Changed(_observation(after))
    return copy, digest.hexdigest()


def one_line(text: str) -> str:
    first = " ".join(str(text).split("\n")[0].split())
    return first or "(no message)"


def submit_book(store, book: Path, out_dir: Path, config: JobConfig, priority: str, queue: str):
    """Submit one book the way ``cli.py submit`` does: plan it here, register it and enqueue its
    unfinished batches. Returns (job, JobInfo, batches enqueued). The watcher passes its private copy
    of the inbox file (:func:`take_copy`), never the inbox name."""
    from workers.control import submit_job

    return submit_job(store, [book], out_dir, config, priority, queue)


@dataclass
class ScanResult:
    submitted: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    """Files seen but not (yet) complete: first seen, changed since the last pass, or too recent."""
    busy: bool = False
    """Another pass held the inbox's lock; nothing was done."""
    error: str | None = None
    """A broker failure stopped the pass early (the remaining files wait for the next one)."""

    def lines(self) -> list[str]:
        out = [f"submitted {s['name']}: job {s['job_id']}, {s['queued']} of {s['batches']} batches queued "
               f"-> {s['out_dir']}" for s in self.submitted]
        out += [f"duplicate {d['name']}: {d['reason']}" for d in self.duplicates]
        out += [f"failed {f['name']}: {f['reason']}" for f in self.failed]
        if self.error:
            out.append(f"error: {self.error}")
        return out


class Inbox:
    """One inbox, its output root and the job settings of the books dropped into it."""

    def __init__(self, inbox: Path, out_root: Path, store, config: JobConfig | None = None,
                 priority: str = DEFAULT_PRIORITY, queue_prefix: str = DEFAULT_QUEUE_PREFIX,
                 settle_s: float = 0.0) -> None:
        self.inbox = Path(inbox)
        self.out_root = Path(out_root)
        self.store = store
        self.config = config or JobConfig()
        if priority not in PRIORITIES:
            raise InputError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
        self.priority = priority
        self.queue = queue_name(priority, queue_prefix)
        self.settle_s = float(settle_s)
        if not self.inbox.is_dir():
            raise InputError(f"inbox {self.inbox}: no such directory; create it or check the path")
        for sub in (DONE, FAILED):
            (self.inbox / sub).mkdir(exist_ok=True)
        self.out_root.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ ledger
    @property
    def ledger_path(self) -> Path:
        return self.inbox / LEDGER

    def load_ledger(self) -> dict:
        p = self.ledger_path
        if not p.exists():
            return {"version": LEDGER_VERSION, "books": {}, "pending": {}}
        try:
            led = read_json(p)
            if not isinstance(led, dict) or not isinstance(led.get("books"), dict):
                raise ValueError("not a ledger")
        except (ValueError, OSError) as exc:
            keep = p.with_name(f"{LEDGER}.unreadable-{int(time.time())}")
            os.replace(p, keep)
            log.error("inbox ledger %s is unreadable (%s); kept as %s, starting a new one (content submitted "
                      "before is still not synthesized twice: same content, same output directory)", p, exc, keep)
            return {"version": LEDGER_VERSION, "books": {}, "pending": {}}
        led.setdefault("pending", {})
        return led

    def save_ledger(self, ledger: dict) -> None:
        write_json(self.ledger_path, ledger)

    # ------------------------------------------------------------ files
    def candidates(self) -> list[Path]:
        out = []
        with os.scandir(self.inbox) as it:
            for e in it:
                name = e.name
                if name.startswith(".") or name.lower().endswith(IGNORED_SUFFIXES):
                    continue
                if not e.is_file(follow_symlinks=False):
                    continue
                out.append(Path(e.path))
        return sorted(out, key=lambda p: p.name)

    def out_dir_for(self, name: str, sha: str) -> Path:
        return self.out_root / f"{slug(Path(name).stem, 'book')}-{sha[:8]}"

    def _move(self, src: Path, sub: str, reason: str, sha: str) -> str:
        """Move ``src`` into ``INBOX/<sub>/`` (a free name) and write its one-line reason file; returns
        where it went (:data:`GONE` when someone took it away first: nothing is moved, no reason file)."""
        dest_dir = self.inbox / sub
        dest = dest_dir / src.name
        n = 1
        while dest.exists() or dest.with_name(dest.name + REASON_SUFFIX).exists():
            n += 1
            dest = dest_dir / f"{src.stem}-{sha[:8]}{'' if n == 2 else f'-{n}'}{src.suffix}"
        with atomic_path(dest.with_name(dest.name + REASON_SUFFIX)) as tmp:
            tmp.write_text(one_line(reason) + "\n", encoding="utf-8")
        try:
            os.replace(src, dest)  # the name itself: a link swapped in since it was read is moved, not followed
        except FileNotFoundError:
            dest.with_name(dest.name + REASON_SUFFIX).unlink(missing_ok=True)
            return GONE
        return str(dest)

    # ------------------------------------------------------------ locking
    @property
    def redis_lock_key(self) -> str:
        """The Redis key of this inbox's lock (one per resolved inbox path)."""
        return f"booktts:watch:lock:{hashlib.sha1(str(self.inbox.resolve()).encode()).hexdigest()[:16]}"

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(self.inbox / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        key = self.redis_lock_key
        token = f"{socket.gethostname()}:{os.getpid()}:{time.time():.6f}"
        ttl_ms = int(REDIS_LOCK_S * 1000)
        redis_locked = False
        stop_renewing = threading.Event()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    yield False
                    return
                raise
            if self.store is not None:
                r = self.store.r
                redis_locked = bool(r.set(key, token, nx=True, px=ttl_ms))
                if not redis_locked:
                    holder = r.get(key)
                    if _holder_gone(holder):
                        redis_locked = bool(r.eval(_TAKE_OVER, 1, key, holder, token, ttl_ms))
                        if redis_locked:
                            log.warning("inbox %s: took over the lock of %s (that process is gone)",
                                        self.inbox, holder.decode(errors="replace"))
                if not redis_locked:
                    yield False
                    return
                threading.Thread(target=self._renew, args=(key, token, ttl_ms, stop_renewing),
                                 name="watch-lock-renew", daemon=True).start()
            yield True
        finally:
            stop_renewing.set()
            if redis_locked:
                with contextlib.suppress(redis.exceptions.RedisError):
                    if self.store.r.get(key) == token.encode():
                        self.store.r.delete(key)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _renew(self, key: str, token: str, ttl_ms: int, stop: threading.Event) -> None:
        while not stop.wait(ttl_ms / 3000):
            with contextlib.suppress(redis.exceptions.RedisError):
                if not self.store.r.eval(_RENEW, 1, key, token, ttl_ms):
                    return

    # ------------------------------------------------------------ one pass
    def scan(self, now: float | None = None) -> ScanResult:
        """One pass over the inbox (see the module doc). Raises only for errors that concern the
        watcher itself (its voice, its engine settings), never for one bad book."""
        res = ScanResult()
        try:
            with self._locked() as ok:
                if not ok:
                    res.busy = True
                    return res
                self._scan(res, time.time() if now is None else now)
        except (redis.exceptions.RedisError, BrokerError) as exc:
            res.error = f"Redis at {getattr(self.store, 'url', '?')} failed: {type(exc).__name__}: {one_line(exc)}"
        return res

    def _scan(self, res: ScanResult, now: float) -> None:
        ledger = self.load_ledger()
        books: dict = ledger["books"]
        pending: dict = ledger["pending"]
        present = set()
        changed = False
        for path in self.candidates():
            name = path.name
            present.add(name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):  # swapped for a link (or anything else) since the listing
                continue
            obs = _observation(st)
            prev = pending.get(name)
            if prev is None or prev.get("obs") != obs:
                pending[name] = {"obs": obs, "at": now}
                res.waiting.append(name)
                changed = True
                continue
            if now - float(prev.get("at", now)) < self.settle_s:
                res.waiting.append(name)
                continue
            try:
                private = Path(tempfile.mkdtemp(prefix="booktts-inbox-"))  # 0700, this user's alone
            except OSError as exc:
                res.error = f"no private directory for {name} in {tempfile.gettempdir()}: {exc.strerror or exc}"
                break
            try:
                try:
                    copy, sha = take_copy(path, obs, private)
                except FileNotFoundError:  # taken away meanwhile
                    pending.pop(name, None)
                    changed = True
                    continue
                except _Changed as ch:  # written to, or swapped, since observed: observe again
                    if ch.obs is None:
                        pending.pop(name, None)
                    else:
                        pending[name] = {"obs": ch.obs, "at": now}
                    res.waiting.append(name)
                    changed = True
                    continue
                except _CopyFailed as exc:
                    res.error = f"{name} not taken: {exc}; it waits for the next pass"
                    break
                except (InputError, OSError) as exc:  # a drop that cannot be taken: not a watcher fault
                    pending.pop(name, None)
                    changed = True
                    reason = (one_line(exc) if isinstance(exc, InputError)
                              else f"cannot read the file: {exc.strerror or exc}")
                    dest = self._move(path, FAILED, reason, "refused")
                    res.failed.append({"name": name, "reason": reason, "moved_to": str(dest)})
                    continue
                changed = True
                try:
                    self._take(path, copy, sha, books, ledger, res, now)
                finally:
                    if not os.path.lexists(path):  # moved to done/ or failed/; a file left in place stays observed
                        pending.pop(name, None)
            finally:
                shutil.rmtree(private, ignore_errors=True)
            if res.error:
                break
        for name in list(pending):
            if name not in present:
                pending.pop(name)
                changed = True
        if changed:
            self.save_ledger(ledger)

    def _take(self, path: Path, copy: Path, sha: str, books: dict, ledger: dict, res: ScanResult,
              now: float) -> None:
        """A complete file (``copy``: the bytes read from it, :func:`take_copy`): a duplicate, the
        unfinished work of an earlier pass, or a new book."""
        name = path.name
        entry = books.get(sha)
        if entry and entry.get("state") == "submitted" and entry.get("name") == name and not entry.get("moved_to"):
            moved = self._moved_before(name, sha)
            if moved is not None:  # that pass moved it and stopped before saying so: this one is a drop again
                entry["moved_to"] = moved
                books[sha] = entry
                self.save_ledger(ledger)
        if entry and entry.get("state") == "submitted":
            if entry.get("name") == name and not entry.get("moved_to"):
                # submitted by a pass that stopped before moving the file: finish that pass's work
                self._done(path, entry, sha, books, ledger)
                res.submitted.append(dict(entry, name=name))
            else:
                reason = (f"duplicate of {entry.get('name')} (same content, sha256 {sha[:12]}), submitted "
                          f"{entry.get('at', '?')} as job {entry.get('job_id')} into {entry.get('out_dir')}; "
                          f"not submitted again")
                dest = self._move(path, DONE, reason, sha)
                res.duplicates.append({"name": name, "reason": reason, "moved_to": str(dest)})
                log.info("inbox %s: %s", self.inbox, reason)
            return
        self._submit(path, copy, sha, books, ledger, res, now)

    def _submit(self, path: Path, copy: Path, sha: str, books: dict, ledger: dict, res: ScanResult,
                now: float) -> None:
        from jobs.job import now_iso

        name = path.name
        out_dir = self.out_dir_for(name, sha)
        books[sha] = {"state": "submitting", "name": name, "out_dir": str(out_dir), "at": now_iso()}
        self.save_ledger(ledger)  # before submitting: a restart submits it again (idempotent), never loses it
        try:
            job, info, n = submit_book(self.store, copy, out_dir, self.config, self.priority, self.queue)
        except (InputError, JobError) as exc:
            books.pop(sha, None)
            reason = one_line(exc)
            dest = self._move(path, FAILED, reason, sha)
            self.save_ledger(ledger)
            res.failed.append({"name": name, "reason": reason, "moved_to": str(dest)})
            log.warning("inbox %s: %s failed: %s", self.inbox, name, reason)
            return
        except (redis.exceptions.RedisError, BrokerError) as exc:
            # Leave the file and its "submitting" entry: the next pass submits it again.
            res.error = f"Redis failed while submitting {name}: {type(exc).__name__}: {one_line(exc)}"
            return
        except TTSError:
            raise  # the watcher's own settings (voice, engine): every book would fail the same way
        except Exception as exc:
            from kombu.exceptions import OperationalError

            if isinstance(exc, OperationalError):
                res.error = f"the broker failed while submitting {name}: {one_line(exc)}"
                return
            books.pop(sha, None)
            reason = f"{type(exc).__name__}: {one_line(exc)}"
            dest = self._move(path, FAILED, reason, sha)
            self.save_ledger(ledger)
            res.failed.append({"name": name, "reason": reason, "moved_to": str(dest)})
            log.exception("inbox %s: %s failed", self.inbox, name)
            return
        entry = {"state": "submitted", "name": name, "job_id": job.job_id, "out_dir": str(out_dir),
                 "queue": self.queue, "batches": info.batches, "queued": n, "at": now_iso()}
        books[sha] = entry
        self.save_ledger(ledger)
        self._done(path, entry, sha, books, ledger)
        res.submitted.append(dict(entry))
        log.info("inbox %s: submitted %s as job %s (%d of %d batches queued) -> %s", self.inbox, name, job.job_id,
                 n, info.batches, out_dir)

    def _moved_before(self, name: str, sha: str) -> str | None:
        """Where an earlier pass moved a file of this name and content into ``done/`` (its reason file beside
        it), when it was stopped before recording that in the ledger; None when it did not."""
        dest = self.inbox / DONE / name
        if not dest.with_name(dest.name + REASON_SUFFIX).is_file() or not dest.is_file() or dest.is_symlink():
            return None
        try:
            return str(dest) if sha256_file(dest) == sha else None
        except OSError:
            return None

    def _done(self, path: Path, entry: dict, sha: str, books: dict, ledger: dict) -> None:
        reason = (f"submitted as job {entry['job_id']} on {entry.get('queue', self.queue)}: "
                  f"{entry.get('queued', 0)} of {entry.get('batches', '?')} batches queued; "
                  f"output {entry['out_dir']}")
        dest = self._move(path, DONE, reason, sha)
        entry["moved_to"] = str(dest)
        books[sha] = entry
        self.save_ledger(ledger)


# ------------------------------------------------------------------ beat: several inboxes from a config file


def job_config(options: dict | None) -> JobConfig:
    """A :class:`JobConfig` from a mapping of its field names (the ``job`` block of a watch config)."""
    options = dict(options or {})
    known = {f.name for f in fields(JobConfig)} - {"engine"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"unknown job setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return JobConfig(**options)


def load_config(path: Path) -> dict:
    """Read and check a watch config file (JSON)::

        {
          "inboxes": [
            {
              "inbox": "/srv/books/inbox",         # required: the watched directory
              "out": "/srv/books/out",             # required: OUTROOT, one directory per book
              "every_s": 60,                       # optional: seconds between scans (default 60)
              "settle_s": 30,                      # optional: a file must be unchanged this long (default every_s/2)
              "priority": "normal",                # optional: high | normal | low
              "queue_prefix": "tts",               # optional: e.g. tts-gpu
              "job": {"max_batch": 32, "audio_format": "flac"}   # optional: JobConfig fields
            }
          ]
        }

    Returns ``{"inboxes": [normalised entries]}``; a bad file is an InputError. A top-level
    ``"queue"`` (where older versions sent scan tasks) is accepted and ignored: the scans run in
    the process that read the file.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"watch config {path}: no such file") from None
    except ValueError as exc:
        raise InputError(f"watch config {path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("inboxes"), list) or not raw["inboxes"]:
        raise InputError(f"watch config {path}: needs a non-empty \"inboxes\" list")
    out = []
    for i, e in enumerate(raw["inboxes"]):
        where = f"watch config {path}, inboxes[{i}]"
        if not isinstance(e, dict) or not e.get("inbox") or not e.get("out"):
            raise InputError(f"{where}: needs \"inbox\" and \"out\"")
        unknown = sorted(set(e) - {"inbox", "out", "every_s", "settle_s", "priority", "queue_prefix", "job"})
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}")
        every = float(e.get("every_s", 60))
        if every <= 0:
            raise InputError(f"{where}: every_s must be > 0")
        prio = e.get("priority", DEFAULT_PRIORITY)
        if prio not in PRIORITIES:
            raise InputError(f"{where}: priority must be one of {', '.join(PRIORITIES)}")
        try:
            job_config(e.get("job"))
        except (InputError, TypeError) as exc:
            raise InputError(f"{where}: {exc}") from None
        out.append({"inbox": str(e["inbox"]), "out": str(e["out"]), "every_s": every,
                    "settle_s": float(e.get("settle_s", every / 2)), "priority": prio,
                    "queue_prefix": str(e.get("queue_prefix", DEFAULT_QUEUE_PREFIX)), "job": dict(e.get("job") or {})})
    return {"inboxes": out}


def open_inboxes(config: dict, store) -> list[tuple[Inbox, float]]:
    """An :class:`Inbox` and its interval for every entry of a loaded config (a missing inbox is an
    InputError now, not at its first scan)."""
    return [(Inbox(Path(e["inbox"]), Path(e["out"]), store, job_config(e["job"]), e["priority"], e["queue_prefix"],
                   e["settle_s"]), e["every_s"]) for e in config["inboxes"]]


def run_schedule(boxes: list[tuple[Inbox, float]], stop, report=None, clock=time.monotonic) -> None:
    """Scan every inbox once at once, then each again after its interval, until ``stop`` (a
    :class:`threading.Event`) is set; a pass in progress finishes first. ``report(inbox, result)``
    is called after each pass. A pass that raises (the watcher's own settings) ends the loop."""
    due = [clock()] * len(boxes)
    while not stop.is_set():
        now = clock()
        for i, (box, every) in enumerate(boxes):
            if stop.is_set():
                return
            if due[i] <= now:
                res = box.scan()
                if report is not None:
                    report(box, res)
                due[i] = max(due[i] + every, clock())
        stop.wait(max(0.0, min(due) - clock()))
