"""``python -m workers.finalize_child JOB_DIR [--job-id ID] [--processes N] | --stdin [--jobs N]``: finalizes in a process of their own.

A GPU worker assembles a finished job's chapters (batch audio, loudness, encoding, the manifest)
here rather than in a thread of its engine's process, where that work's Python would hold the
interpreter lock the engine's launch thread needs; so does reading the job and checking that every
batch has its record. Prints one JSON line: ``{"summary": {...}}``, or ``{"error": {...}}`` with the
exception's kind, message and, for I/O errors, errno and file, for batches without a record their
ids (exit status 3). :func:`run` is the caller's side: it starts the process and gives back the summary, or
raises the error again as the same kind of exception (a full disk stays a retryable
:class:`~core.errors.DiskFullError`). With ``--stdin`` the process does its imports first and then
waits for its jobs on standard input (one JSON line each: ``job_dir``, ``job_id``, ``processes``, ``encoding``) and answers
each with its JSON line, up to ``--jobs`` (:data:`JOBS_PER_PROCESS`) jobs: :func:`run` keeps one started ahead and
gives each process back after its job, so that a finalize neither waits for an interpreter to start
nor pays for its imports again (on the GPU host a fresh process's imports were a large part of a
finalize's CPU time in the bulk benchmark). A process whose finalize failed is not reused.
"""

from __future__ import annotations

import errno as _errno
import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Niceness a worker's chapter-writing processes add to their own (the finalize process, the early
#: chapter process, and the processes they start): they use every core the engine's process leaves
#: idle, and leave it its core however many of them run (a nice-19 process weighs about 1/70 of a
#: nice-0 one in Linux's scheduler).
CHILD_NICE = 19
#: Jobs one finalize process serves before it exits (a new one is started): bounds what a
#: long-lived process may keep of its memory.
JOBS_PER_PROCESS = 32
#: Idle finalize processes a worker process keeps (more are closed when they come back).
MAX_IDLE = 8


def lower_priority() -> None:
    """Run this process (and the processes it starts) at :data:`CHILD_NICE` more niceness."""
    try:
        os.nice(CHILD_NICE)
    except OSError:  # not permitted here: run at the worker's priority
        pass


def main(argv: list[str]) -> int:
    import logging

    # its log lines go to the worker's log (stderr is inherited), marked as this process's
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[%(asctime)s: %(levelname)s/finalize-{os.getpid()}] %(message)s")

    lower_priority()
    if argv[:1] == ["--stdin"]:  # started ahead, its imports done: the jobs come on standard input
        jobs = int(argv[2]) if argv[1:2] == ["--jobs"] and argv[2:3] and argv[2].isdigit() else JOBS_PER_PROCESS
        _preload()
        for served in range(1, jobs + 1):
            line = sys.stdin.readline()
            if not line.strip():  # the worker closed it (shutdown, or it died)
                return 0
            try:
                req = json.loads(line)
                job_dir, job_id = str(req["job_dir"]), req.get("job_id")
                processes = None if req.get("processes") is None else int(req["processes"])
                chosen = req.get("encoding")
                chosen = None if chosen is None else _encoding(chosen)
            except (ValueError, KeyError, TypeError):
                print(json.dumps({"error": {"kind": "usage", "message": f"unreadable request {line.strip()[:200]!r}"}}),
                      flush=True)
                return 2
            rc = _finalize_one(job_dir, job_id, processes, more=served < jobs, chosen=chosen)
            if rc:
                return rc
            _forget_jobs()
        return 0
    opts = dict(zip(argv[1::2], argv[2::2]))
    if len(argv) % 2 == 0 or not set(opts) <= {"--processes", "--job-id"} \
            or not opts.get("--processes", "0").isdigit():
        print(json.dumps({"error": {"kind": "usage",
                                    "message": "usage: python -m workers.finalize_child JOB_DIR [--job-id ID] "
                                               "[--processes N] | --stdin [--jobs N]"}}))
        return 2
    return _finalize_one(argv[0], opts.get("--job-id"),
                         int(opts["--processes"]) if "--processes" in opts else None, more=False)


def _encoding(d: dict):
    from jobs.encoding import Encoding

    return Encoding.from_dict(d)


def _finalize_one(job_dir: str, job_id: str | None, processes: int | None, more: bool, chosen=None) -> int:
    """Finalize one job; print its JSON line (``more``: this process takes another job). 0, or 3 on an error.
    ``chosen``: the worker's :class:`jobs.encoding.Encoding` (None: the finalize chooses)."""
    from core.errors import BatchesNotDone, DiskFullError, JobError, StorageError, TTSError
    from jobs.finalize import finalize
    from jobs.job import load_checked, load_job

    try:
        job = load_job(Path(job_dir)) if job_id is None else load_checked(job_dir, job_id)
        summary = finalize(job, processes=processes, chosen=chosen)
    except BatchesNotDone as exc:
        out = {"kind": "missing", "job_id": exc.job_id, "batches": exc.batches, "total": exc.total,
               "message": str(exc)}
    except OSError as exc:
        kind = "disk_full" if isinstance(exc, DiskFullError) else "storage" if isinstance(exc, StorageError) else "os"
        out = {"kind": kind, "filename": exc.filename, "message": exc.strerror or str(exc), "errno": exc.errno}
    except JobError as exc:
        out = {"kind": "job", "message": str(exc)}
    except TTSError as exc:
        out = {"kind": "tts", "type": type(exc).__name__, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which records it
        out = {"kind": "other", "type": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else ""}
    else:
        print(json.dumps({"summary": asdict(summary), "more": more}), flush=True)
        return 0
    print(json.dumps({"error": out}), flush=True)
    return 3


def _forget_jobs() -> None:
    """Drop what the last job left cached in this process (its job, read again by the next finalize)."""
    import gc

    from jobs.job import forget_jobs

    forget_jobs()
    gc.collect()


def _preload() -> None:
    """What a finalize imports (the job, Parquet, audio encoding, loudness, FLAC tags), done before the job
    comes: its chapter processes, forked from it, then import none of them."""
    import importlib

    from jobs.chapter_pool import PRELOAD

    for name in [m for m in PRELOAD if m != "__main__"]:
        try:
            importlib.import_module(name)
        except ImportError:  # a package the job may not need: its finalize says so if it does
            pass


def child_env() -> dict[str, str]:
    """The environment of a worker's child process run as ``python -m workers...``: this one, with
    the project first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workers.finalize_child", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=None, text=True, env=child_env(), cwd=str(ROOT))


_idle: list[tuple[int, subprocess.Popen]] = []  # (the pid that started it, the process), oldest first
_idle_lock = threading.Lock()


def _waiting(entry: tuple[int, subprocess.Popen]) -> bool:
    """``entry`` was started by this process (not a copy inherited through a fork) and still waits."""
    return entry[0] == os.getpid() and entry[1].poll() is None


def _spare() -> tuple[int, subprocess.Popen] | None:
    try:
        return os.getpid(), _start(["--stdin", "--jobs", str(JOBS_PER_PROCESS)])
    except OSError:  # no process to spare now: the next finalize starts its own
        return None


def _take_ready() -> subprocess.Popen | None:
    """A waiting finalize process (the most recently used: its memory is warm), else a new one; when
    none is left waiting, another is started for the next finalize. None if no process can start."""
    with _idle_lock:
        while _idle:
            entry = _idle.pop()
            if _waiting(entry):
                if not _idle:
                    spare = _spare()
                    if spare is not None:
                        _idle.insert(0, spare)
                return entry[1]
    new = _spare()
    return new[1] if new is not None else None


def _give_back(proc: subprocess.Popen) -> None:
    """A process that finished its job and takes another waits for the next finalize (or is closed
    when :data:`MAX_IDLE` already wait)."""
    with _idle_lock:
        if len(_idle) < MAX_IDLE:
            _idle.append((os.getpid(), proc))
            return
    _close(proc)


def _close(proc: subprocess.Popen) -> None:
    try:
        proc.communicate(input="", timeout=10)  # the end of its input: it exits
    except (OSError, ValueError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def start_ready() -> None:
    """Start the process for the next finalize now, if none is waiting (a worker's start)."""
    with _idle_lock:
        if not any(_waiting(e) for e in _idle):
            spare = _spare()
            if spare is not None:
                _idle.append(spare)


def close_ready() -> None:
    """Let every waiting finalize process exit (the end of its standard input); a worker's shutdown."""
    with _idle_lock:
        entries, _idle[:] = list(_idle), []
    for pid, proc in entries:
        if pid == os.getpid():
            _close(proc)


def _ask(proc: subprocess.Popen, request: str) -> dict | None:
    """Send a waiting process its job; its JSON answer, or None if it died first."""
    try:
        proc.stdin.write(request)
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                return None
            if line.startswith("{"):
                return json.loads(line)
    except (OSError, ValueError):
        return None


def run(job_dir: str, processes: int | None = None, ahead: bool = True, job_id: str | None = None, chosen=None):
    """Finalize ``job_dir`` in a child process; its :class:`~jobs.finalize.FinalizeSummary`.
    ``job_id``: refuse (:class:`JobError`) if the directory now holds another job.
    :class:`~core.errors.BatchesNotDone` names the batches without a record.
    ``processes``: at most this many processes of its own write the chapters (0: threads).
    ``ahead``: use a process started ahead (or kept from an earlier finalize), whose imports are done,
    and keep one waiting for the next finalize. ``chosen``: the FLAC level (``--flac-level auto``) and
    chapters at once (:class:`jobs.encoding.Encoding`; None: the finalize process chooses, as a node with
    no engine waiting; a process not started ahead always does)."""
    from core.errors import BatchesNotDone, DiskFullError, JobError, StorageError
    from jobs.finalize import FinalizeSummary

    proc = _take_ready() if ahead else None
    if proc is not None:
        doc = _ask(proc, json.dumps({"job_dir": str(job_dir), "job_id": job_id, "processes": processes,
                                     "encoding": chosen.to_dict() if chosen is not None else None}) + "\n")
        if doc is not None and doc.get("more") and proc.poll() is None:
            _give_back(proc)
        else:
            _close(proc)
    else:
        proc = _start([str(job_dir)] + ([] if job_id is None else ["--job-id", str(job_id)])
                      + ([] if processes is None else ["--processes", str(int(processes))]))
        try:
            out, _ = proc.communicate(input="")
        except OSError:  # it died before reading its input: its result is missing below
            out = ""
            proc.wait()
        lines = [line for line in (out or "").splitlines() if line.startswith("{")]
        try:
            doc = json.loads(lines[-1])
        except (IndexError, ValueError):
            doc = None
    if doc is None:
        raise ChildProcessError(_errno.ECHILD, f"the finalize process of {job_dir} ended without a result "
                                               f"(exit status {proc.returncode}; its log is the worker's)")
    if "summary" in doc:
        return FinalizeSummary(**doc["summary"])
    err = doc["error"]
    kind, msg = err.get("kind"), err.get("message") or ""
    if kind == "disk_full":
        raise DiskFullError(err.get("filename"), msg or "no space left on device", err.get("errno") or _errno.ENOSPC)
    if kind == "storage":
        raise StorageError(err.get("filename"), msg, err.get("errno") or _errno.EIO)
    if kind == "os":
        raise OSError(err.get("errno") or _errno.EIO, msg, err.get("filename"))
    if kind == "missing":
        raise BatchesNotDone(err.get("job_id") or "?", err.get("batches") or [], err.get("total") or 0)
    if kind == "job":
        raise JobError(msg)
    raise RuntimeError(f"{err.get('type', 'error')}: {msg}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
