"""A resident engine for local runs: ``cli.py serve`` loads one engine and keeps it; ``cli.py run
--server`` hands its books to it instead of starting an engine of its own.

A fresh ``cli.py run`` on a GPU spends seconds before its first batch that have nothing to do with
the book: importing PyTorch, loading the weights and the fused kernels, capturing CUDA graphs. A
server pays them once. The run itself is the embedded runner's, unchanged: the server plans the
books (:func:`jobs.prepare.prepare_job`) and runs them (:func:`jobs.runner.run_local`) in its own
process, into the output directory the client names, so the files are those the same ``cli.py run``
without ``--server`` writes, and a run interrupted either way resumes either way.

Protocol: a Unix socket (a local, single-user service: the socket is made ``0600`` in a directory of
the user's that nobody else may write, made ``0700`` if absent; see :func:`check_socket_dir`), one
JSON object per line each way, never pickle. The client sends one request:

- ``{"op": "hello"}``: the server answers ``{"event": "hello", "engine": ..., "voice": ..., "pid": ...}``;
- ``{"op": "run", "books": [...], "out_dir": ..., "cwd": ..., "config": {...}}``: the server answers
  with events as the run goes (``queued`` when another run holds the engine, ``planned``, ``batch``
  per batch written, ``chapter`` per chapter written early), then one ``done`` with the run's figures,
  or one ``error`` naming the :mod:`core.errors` class and its one-line message.

Trust: ``serve`` replaces only a stale socket at its path (nothing else: a file stays as it is); the
client sends nothing to a server run by another user than its own (or root), checked with
``SO_PEERCRED``; every message it gets is checked field by field (:func:`check_message`), and a
``done`` is reported only once the job's job.json and manifest are found on disk (:func:`check_written`).

Runs take the engine one at a time, in the order they arrive. A client that goes away stops its run
after the batch being written (the job is resumable, as after Ctrl-C). What this module does not know:
how the engine synthesizes (it holds whatever :func:`engines.load_engine` returned) or what the books
are (the pipeline's functions decide that, as in the client's own process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import core.errors as errors
from core import settings
from core.errors import InputError, ServerError, TTSError
from engines import EngineSpec

log = logging.getLogger("booktts.server")

#: The engine server's socket, for ``cli.py serve --socket`` and ``cli.py run --server``.
SERVER_ENV = settings.setting("BOOKTTS_SERVER").name
#: Longest request line the server reads (a run's books and settings are a few kB).
MAX_REQUEST_BYTES = 1 << 20
#: Seconds a client waits to connect.
CONNECT_TIMEOUT_S = 10.0
#: Seconds a client waits for the answer to ``hello``: a server answers once its engine has started
#: (with an empty Triton cache that is tens of seconds on a GPU).
HELLO_TIMEOUT_S = 300.0


def default_socket() -> Path:
    """``$XDG_RUNTIME_DIR/booktts/server.sock``, else ``<tmp>/booktts-<uid>/server.sock``."""
    runtime = settings.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "booktts" if runtime else Path(tempfile.gettempdir()) / f"booktts-{os.getuid()}"
    return base / "server.sock"


def engine_matches(have: EngineSpec, want: EngineSpec) -> str | None:
    """None if a server running ``have`` may run a job asked for with ``want``; else what differs."""
    diffs = [f"{name} {getattr(have, name)} (asked: {getattr(want, name)})"
             for name in ("name", "precision", "device") if getattr(have, name) != getattr(want, name)]
    return ", ".join(diffs) or None


# ---------------------------------------------------------------------------------------- the socket's place


def check_socket_dir(directory: Path, create: bool = False) -> None:
    """Refuse (:class:`InputError`) a socket directory that another user could use to swap the
    socket: not a real directory (a symlink counts as not), not owned by this user, or writable by
    its group or others. ``create``: make it ``0700`` first if it does not exist."""
    directory = Path(directory)
    if create:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise InputError(f"socket directory {directory}: {exc.strerror or exc}; pass another --socket") from None
    fix = "pass a --socket in a directory of your own that only you can write (mode 0700)"
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"socket directory {directory} is not a directory (a symlink?); {fix}")
    if st.st_uid != os.getuid():
        raise InputError(f"socket directory {directory} belongs to {_user(st.st_uid)}, not to you "
                         f"({_user(os.getuid())}): that user could replace the socket; {fix}")
    if st.st_mode & 0o022:
        raise InputError(f"socket directory {directory} is writable by other users (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}): they could replace the socket; {fix}")


def _user(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _clear_stale_socket(path: Path) -> None:
    """Remove ``path`` if it is a socket that no server listens on (connecting is refused); nothing
    there: nothing to do. Anything else is an :class:`InputError` and stays as it is."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "a file"
        raise InputError(f"--socket {path} is {what}, not a server's socket; it was left untouched: "
                         "pass a path that does not exist yet")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            path.unlink()  # a server that is gone left it
            return
        except OSError as exc:
            raise InputError(f"--socket {path}: cannot tell whether a server is still using it "
                             f"({exc.strerror or exc}); stop that server or pass another --socket") from None
    raise InputError(f"already serving: a server listens on {path}; stop it or pass another --socket")


# ---------------------------------------------------------------------------------------- server


@dataclass
class ServedEngine:
    """What a server holds: the engine, the spec it was built from, and its voice."""

    engine: object
    """An engine of :mod:`engines` (the protocol of :mod:`engines.base`)."""
    spec: EngineSpec
    """The spec it was loaded with (the runs' ``config.engine`` becomes this)."""
    voice: object
    """Its :class:`core.voice.VoiceConfig`."""
    voice_name: str
    """The ``--voice`` it was started with, as given."""
    shapes: Path | None = None
    """The shape profile (:mod:`engines.shape_profile`) this server's engine prepares at start and
    merges its shapes into after each run; None: none kept."""


class _ClientGone(Exception):
    """The client closed its connection: its run stops after the batch being written."""


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
    except OSError as exc:
        raise _ClientGone(str(exc)) from exc


def _read_line(conn: socket.socket, limit: int = MAX_REQUEST_BYTES) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise InputError(f"request longer than {limit} bytes")
    return bytes(buf)


class RunServer:
    """Serves runs of one resident engine on a Unix socket (see the module's docstring)."""

    def __init__(self, served: ServedEngine, path: Path, chapter_processes=None) -> None:
        self.served = served
        self.path = Path(path)
        self.chapter_processes = chapter_processes
        """A :class:`jobs.chapter_pool.KeptPool` that writes every run's last chapters; None: each run forks its own."""
        self.engine_lock = threading.Lock()
        self.stopping = threading.Event()
        self.runs = 0
        self._sock: socket.socket | None = None
        self._bound: tuple[int, int] | None = None
        """(device, inode) of the socket file this server made: the only one :meth:`close` removes."""

    # ------------------------------------------------------------------ life cycle

    def bind(self) -> None:
        """Create the socket, ``0600``, in a directory of this user's that nobody else may write
        (:func:`check_socket_dir`; made ``0700`` if absent). A socket whose server is gone (connecting
        is refused) is replaced; anything else already at the path is left alone and refused with one
        line: a live server's socket, a regular file, a link."""
        check_socket_dir(self.path.parent, create=True)
        _clear_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except FileExistsError:
            sock.close()
            raise InputError(f"{self.path} appeared while this server was starting (another `cli.py serve`?); "
                             "stop it or pass another --socket") from None
        except OSError as exc:
            sock.close()
            raise InputError(f"cannot listen on {self.path}: {exc.strerror or exc}; pass another --socket") from None
        finally:
            os.umask(old)
        sock.listen(16)
        self._sock = sock
        st = os.lstat(self.path)
        self._bound = (st.st_dev, st.st_ino)

    def serve_forever(self, max_runs: int | None = None) -> None:
        """Accept connections until :meth:`stop` (or ``max_runs`` runs have ended); each on a thread."""
        assert self._sock is not None, "bind() first"
        self._sock.settimeout(0.2)
        threads: list[threading.Thread] = []
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = self._sock.accept()
                except socket.timeout:
                    continue
                except OSError:
                    if self.stopping.is_set():
                        break
                    raise
                t = threading.Thread(target=self._handle, args=(conn, max_runs), name="booktts-server-client",
                                     daemon=True)
                t.start()
                threads = [x for x in threads if x.is_alive()] + [t]
        finally:
            for t in threads:
                t.join()
            self.close()

    def stop(self) -> None:
        self.stopping.set()

    def close(self) -> None:
        if self.chapter_processes is not None:
            self.chapter_processes.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                st = os.lstat(self.path)
            except FileNotFoundError:
                return
            if (st.st_dev, st.st_ino) == self._bound:  # not a newer server's socket at the same path
                self.path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ shapes

    def prepare_shapes(self, budget_s: float) -> dict | None:
        """Have the engine prepare the shapes of the profile an earlier server (or this one) kept, so
        that the first runs replay them as later ones do; what the engine reported, or None."""
        from engines import shape_profile

        s = self.served
        return None if s.shapes is None else shape_profile.prepare(s.engine, s.shapes, budget_s)

    def _save_shapes(self) -> None:
        from engines import shape_profile
        from engines.base import PreparesShapes

        s = self.served
        if s.shapes is not None and isinstance(s.engine, PreparesShapes):
            shape_profile.merge(s.shapes, s.engine.shape_profile())

    # ------------------------------------------------------------------ requests

    def _handle(self, conn: socket.socket, max_runs: int | None) -> None:
        with conn:
            try:
                line = _read_line(conn)
                try:
                    req = json.loads(line)
                    op = req["op"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise InputError(f"not a request of this server ({type(exc).__name__})") from None
                if op == "hello":
                    _send(conn, self.hello())
                elif op == "run":
                    self._run(conn, req)
                    if max_runs is not None and self.runs >= max_runs:
                        self.stop()
                else:
                    raise InputError(f"unknown request {op!r}")
            except _ClientGone as exc:
                log.info("client went away (%s)", exc)
            except TTSError as exc:
                with contextlib.suppress(_ClientGone):
                    _send(conn, {"event": "error", "class": type(exc).__name__, "message": str(exc)})
            except Exception as exc:  # noqa: BLE001 - the server outlives a failed run
                log.exception("run failed")
                with contextlib.suppress(_ClientGone):
                    _send(conn, {"event": "error", "class": "TTSError",
                                 "message": f"the server's run failed: {type(exc).__name__}: {exc}; see the server's log"})

    def hello(self) -> dict:
        s = self.served
        return {"event": "hello", "engine": s.spec.to_dict(), "voice": s.voice_name, "pid": os.getpid(),
                "runs": self.runs, "busy": self.engine_lock.locked()}

    def _run(self, conn: socket.socket, req: dict) -> None:
        from jobs.config import JobConfig

        config = JobConfig.from_dict(req["config"])
        differs = engine_matches(self.served.spec, config.engine)
        if differs:
            raise ServerError(f"the server at {self.path} runs another engine: {differs}; start a server "
                              f"with this run's engine options, or run without --server")
        if not self.engine_lock.acquire(blocking=False):
            _send(conn, {"event": "queued"})
            self.engine_lock.acquire()
        try:
            with _working_dir(req.get("cwd")):
                self._run_locked(conn, req, config)
        finally:
            self.runs += 1
            self.engine_lock.release()

    def _run_locked(self, conn: socket.socket, req: dict, config) -> None:
        from jobs.job import forget_jobs, open_planned_job
        from jobs.prepare import prepare_job
        from jobs.runner import run_local

        s = self.served
        config.engine = replace(s.spec, max_batch=config.max_batch)
        books = [Path(b) for b in req.get("books") or []]
        out_dir = Path(req["out_dir"])
        t0 = time.perf_counter()
        try:
            # the run's voice is the server's (or a refusal), and a planned job's is the run's
            # (open_planned_job): the engine never synthesizes another voice's job
            voice = self._voice_for(config.voice)
            job = (prepare_job(books, out_dir, config, voice=voice, engine=config.engine) if books
                   else open_planned_job(out_dir, config.voice, engine=config.engine))  # one engine per job
            summ = job.meta["summary"]
            pending = job.pending_batches()
            _send(conn, {"event": "planned", "job_id": job.job_id, "utterances": summ["utterances"],
                         "batches": summ["batches"], "padding_efficiency": summ["padding_efficiency"],
                         "done": len(job.batches) - len(pending),
                         "pending_s": sum(job.batch_estimated_seconds(b) for b in pending),
                         "planning_s": time.perf_counter() - t0})

            def on_batch(batch_id: int, secs: float) -> None:
                _send(conn, {"event": "batch", "batch": int(batch_id), "s": float(secs)})

            def on_chapter(rel: str) -> None:
                with contextlib.suppress(_ClientGone):  # a chapter thread: the loop's send notices
                    _send(conn, {"event": "chapter", "file": rel})

            try:
                stats = run_local(job, s.engine, on_batch=on_batch, on_chapter=on_chapter,
                                  chapter_processes=self.chapter_processes)
            finally:
                self._save_shapes()
            summary = stats.summary
            log.info("job %s into %s: %d batches run (%d done before), %.0f s of speech in %.1f s",
                     job.job_id, out_dir, stats.batches_run, stats.batches_skipped, stats.audio_s, stats.wall_s)
            _send(conn, {"event": "done", "batches_run": stats.batches_run, "batches_skipped": stats.batches_skipped,
                         "audio_s": stats.audio_s, "wall_s": stats.wall_s, "audio_format": job.config.audio_format,
                         "phases": {k: v for k, v in stats.phases.items() if isinstance(v, (int, float))},
                         "summary": {"chapter_files": list(summary.chapter_files), "utterances": summary.utterances,
                                     "skipped": summary.skipped, "audio_s": summary.audio_s,
                                     "manifest": summary.manifest}})
        except _ClientGone:
            log.info("client went away: the run into %s stopped; the same command resumes it", out_dir)
            raise
        finally:
            forget_jobs()

    def _voice_for(self, name: str):
        """The server's voice, if ``name`` (as the client gave it) is that voice; else :class:`ServerError`."""
        from core.voice import resolve_voice

        s = self.served
        if name == s.voice_name:
            return s.voice
        asked = resolve_voice(name)
        if _source(asked) != _source(s.voice) or asked.sample_rate != s.voice.sample_rate:
            raise ServerError(f"the server at {self.path} runs voice {s.voice_name}, not {name}; start a server "
                              f"with --voice {name}, or run without --server")
        return asked


def _source(voice) -> str:
    """The hash that names a voice's model, also through its exported weights."""
    return voice.source_sha256 or voice.model_sha256()


@contextlib.contextmanager
def _working_dir(cwd: str | None):
    """Relative paths of a request (its voice, lexicon) resolve in the client's directory; only the
    thread that holds the engine changes it, and puts it back."""
    if not cwd:
        yield
        return
    old = os.getcwd()
    try:
        os.chdir(cwd)
    except OSError as exc:
        raise InputError(f"the client's working directory {cwd} is not reachable from the server: {exc.strerror}")
    try:
        yield
    finally:
        os.chdir(old)


# ---------------------------------------------------------------------------------------- client


#: The fields of each message a server sends, by its ``event``, and their types (``_INT``: an int,
#: not a bool; ``_NUM``: a finite int or float; a dict: a nested object, checked the same way).
_INT, _NUM, _STR, _BOOL, _STRS, _NUMS = "int", "number", "str", "bool", "list of str", "object of numbers"
_MESSAGES: dict[str, dict] = {
    "hello": {"engine": {"name": _STR, "precision": _STR, "device": _STR}, "voice": _STR, "pid": _INT,
              "runs": _INT, "busy": _BOOL},
    "queued": {},
    "planned": {"job_id": _STR, "utterances": _INT, "batches": _INT, "padding_efficiency": _NUM, "done": _INT,
                "pending_s": _NUM, "planning_s": _NUM},
    "batch": {"batch": _INT, "s": _NUM},
    "chapter": {"file": _STR},
    "done": {"batches_run": _INT, "batches_skipped": _INT, "audio_s": _NUM, "wall_s": _NUM, "audio_format": _STR,
             "phases": _NUMS, "summary": {"chapter_files": _STRS, "utterances": _INT, "skipped": _INT,
                                          "audio_s": _NUM, "manifest": _STR}},
    "error": {"class": _STR, "message": _STR},
}


def _fits(value, kind) -> bool:
    import math

    if isinstance(kind, dict):
        return isinstance(value, dict) and all(k in value and _fits(value[k], t) for k, t in kind.items())
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == _NUMS:
        return isinstance(value, dict) and all(_fits(v, _NUM) for v in value.values())
    raise AssertionError(kind)


def check_message(msg, path: Path) -> dict:
    """``msg`` if it is a message of this protocol with every field its ``event`` has, of its type;
    else a :class:`ServerError` naming the first field that is missing or wrong."""
    if not isinstance(msg, dict) or msg.get("event") not in _MESSAGES:
        event = msg.get("event") if isinstance(msg, dict) else None
        raise ServerError(f"the server on {path} sent a message this client does not know (event {event!r}); "
                          "is it a `cli.py serve` of this version? restart it, or run without --server")
    for name, kind in _MESSAGES[msg["event"]].items():
        if name not in msg or not _fits(msg[name], kind):
            raise ServerError(f"the server on {path} sent a malformed {msg['event']!r} message (field {name!r} "
                              f"missing or not {kind if isinstance(kind, str) else 'an object of its fields'}); "
                              "is it a `cli.py serve` of this version? restart it, or run without --server")
    return msg


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def check_written(out_dir: Path, job_id: str, done: dict, path: Path) -> None:
    """A server's ``done`` is believed only for what is on disk: ``out_dir``'s job.json names
    ``job_id``, and its manifest is a regular file (not a link) whose rows can be read, as many as
    the job's utterances. Else :class:`ServerError`: nothing is reported as written."""
    import pyarrow.parquet as pq

    from jobs.job import JOB_FILE

    out_dir = Path(out_dir)
    summ = done["summary"]
    advice = ("run the same command without --server (it resumes what is there), and check who runs the "
              f"server on {path}")

    def regular(p: Path) -> bool:
        try:
            return stat.S_ISREG(os.lstat(p).st_mode)
        except OSError:
            return False

    name = summ["manifest"]
    if not name or name != Path(name).name or name in (".", ".."):
        raise ServerError(f"the server on {path} reported manifest {name!r}, not a file of {out_dir}; {advice}")
    job_file, manifest = out_dir / JOB_FILE, out_dir / name
    try:
        on_disk = json.loads(job_file.read_text(encoding="utf-8")).get("job_id") if regular(job_file) else None
    except (OSError, ValueError, AttributeError):
        on_disk = None
    if on_disk != job_id:
        raise ServerError(f"the server on {path} reported job {job_id} done, but {job_file} "
                          + (f"holds job {on_disk}" if on_disk else "is missing or unreadable") + f"; {advice}")
    if not regular(manifest):
        raise ServerError(f"the server on {path} reported job {job_id} done, but {manifest} is missing or not a "
                          f"regular file; {advice}")
    try:
        rows = pq.read_table(manifest).num_rows
    except Exception as exc:  # noqa: BLE001 - any reader error: the file is not a manifest
        raise ServerError(f"the server on {path} reported job {job_id} done, but {manifest} cannot be read "
                          f"({type(exc).__name__}); {advice}") from None
    if rows != summ["utterances"]:
        raise ServerError(f"the server on {path} reported {summ['utterances']} utterances, but {manifest} holds "
                          f"{rows} rows; {advice}")


class RunClient:
    """Talks to a :class:`RunServer` on ``path``. It sends nothing to a server run by another user
    (root's aside), checks every message it gets, and believes a ``done`` only for the job.json
    and manifest it finds on disk."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise ServerError(f"no server answers on {self.path} ({exc.strerror or exc}); start one with "
                              f"`cli.py serve --socket {self.path}` and its engine options, or run without --server") from None
        try:
            uid = peer_uid(sock)
        except OSError as exc:
            sock.close()
            raise ServerError(f"cannot tell who runs the server on {self.path} ({exc.strerror or exc}); nothing "
                              "was sent to it; run without --server") from None
        if uid not in (os.getuid(), 0):
            sock.close()
            raise ServerError(f"the server on {self.path} runs as {_user(uid)}, not as you ({_user(os.getuid())}) "
                              "or root: nothing was sent to it; start your own server (`cli.py serve --socket PATH` "
                              "in a directory only you can write) or run without --server")
        return sock

    def _events(self, sock: socket.socket):
        f = sock.makefile("rb")
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                raise ServerError(f"the server on {self.path} sent something that is not JSON") from None
            check_message(msg, self.path)
            if msg["event"] == "error":
                cls = getattr(errors, msg["class"], None)
                if not (isinstance(cls, type) and issubclass(cls, TTSError)):
                    cls = ServerError
                elif cls.__init__ is not TTSError.__init__:
                    cls = _plain(cls)  # its own constructor's arguments did not travel: the message did
                raise cls(msg["message"] or "the server's run failed")
            yield msg
        raise ServerError(f"the server on {self.path} closed the connection before the run ended (did it stop?); "
                          "run the same command again to resume")

    def hello(self, timeout_s: float = HELLO_TIMEOUT_S) -> dict:
        with self._connect() as sock:
            sock.sendall(b'{"op":"hello"}\n')
            sock.settimeout(timeout_s)
            try:
                for msg in self._events(sock):
                    if msg["event"] != "hello":
                        raise ServerError(f"the server on {self.path} answered hello with {msg['event']!r}; is it "
                                          "a `cli.py serve` of this version? restart it, or run without --server")
                    return msg
            except socket.timeout:
                raise ServerError(f"the server on {self.path} did not answer in {timeout_s:.0f} s (is its engine "
                                  "still starting? see its output); try again") from None
        raise AssertionError("unreachable")

    def run(self, books: list[Path], out_dir: Path, config, on_event: Callable[[dict], None]) -> dict:
        """Run ``books`` (none: the job planned in ``out_dir``) on the server; ``on_event`` gets each
        event before ``done``, which is returned once :func:`check_written` finds its files. The
        server's errors are raised as their class."""
        out_dir = Path(out_dir).absolute()
        req = {"op": "run", "books": [str(Path(b).absolute()) for b in books], "out_dir": str(out_dir),
               "cwd": os.getcwd(), "config": config.to_dict()}
        job_id = None
        with self._connect() as sock:
            sock.sendall(json.dumps(req).encode() + b"\n")
            sock.settimeout(None)  # a run takes as long as it takes; events arrive as it goes
            for msg in self._events(sock):
                if msg["event"] == "done":
                    if job_id is None:
                        raise ServerError(f"the server on {self.path} reported a run done that it never planned; "
                                          "run without --server")
                    check_written(out_dir, job_id, msg, self.path)
                    return msg
                if msg["event"] == "planned":
                    job_id = msg["job_id"]
                elif msg["event"] == "hello":
                    raise ServerError(f"the server on {self.path} answered a run with 'hello'; restart it, or run "
                                      "without --server")
                on_event(msg)
        raise AssertionError("unreachable")


def _plain(cls: type) -> type:
    """An error class whose constructor takes other arguments than a message (``StorageError``):
    a subclass of it that takes the message the server sent."""

    class Relayed(cls):  # type: ignore[misc, valid-type]
        def __init__(self, message: str) -> None:
            Exception.__init__(self, message)
            self._message = message

        def __str__(self) -> str:
            return self._message

    Relayed.__name__ = cls.__name__
    return Relayed
