"""``python -m workers.finalize_child JOB_DIR [--job-id ID] [--processes N] | --stdin``: one job's ``finalize`` in a process of its own.

A GPU worker assembles a finished job's chapters (batch audio, loudness, encoding, the manifest)
here rather than in a thread of its engine's process, where that work's Python would hold the
interpreter lock the engine's launch thread needs; so does reading the job and checking that every
batch has its record. Prints one JSON line: ``{"summary": {...}}``, or ``{"error": {...}}`` with the
exception's kind, message and, for I/O errors, errno and file, for batches without a record their
ids (exit status 3). :func:`run` is the caller's side: it starts the process and gives back the summary, or
raises the error again as the same kind of exception (a full disk stays a retryable
:class:`~core.errors.DiskFullError`). With ``--stdin`` the process does its imports first and then
waits for its job on standard input (one JSON line: ``job_dir``, ``job_id``, ``processes``): :func:`run` keeps one
started ahead, so that a finalize does not wait for an interpreter to start and import.
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


def lower_priority() -> None:
    """Run this process (and the processes it starts) at :data:`CHILD_NICE` more niceness."""
    try:
        os.nice(CHILD_NICE)
    except OSError:  # not permitted here: run at the worker's priority
        pass


def main(argv: list[str]) -> int:
    import logging

    from core.errors import BatchesNotDone, DiskFullError, JobError, StorageError, TTSError
    from jobs.pipeline import finalize, load_checked, load_job

    # its log lines go to the worker's log (stderr is inherited), marked as this process's
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[%(asctime)s: %(levelname)s/finalize-{os.getpid()}] %(message)s")

    lower_priority()
    processes = job_id = None
    if argv == ["--stdin"]:  # started ahead, its imports done: the job comes on standard input
        _preload()
        line = sys.stdin.readline()
        if not line.strip():  # the worker closed it unused (shutdown, or it died)
            return 0
        try:
            req = json.loads(line)
            argv = [str(req["job_dir"])]
            processes, job_id = req.get("processes"), req.get("job_id")
            processes = None if processes is None else int(processes)
        except (ValueError, KeyError, TypeError):
            print(json.dumps({"error": {"kind": "usage", "message": f"unreadable request {line.strip()[:200]!r}"}}))
            return 2
    else:
        opts = dict(zip(argv[1::2], argv[2::2]))
        if len(argv) % 2 == 0 or not set(opts) <= {"--processes", "--job-id"} \
                or not opts.get("--processes", "0").isdigit():
            print(json.dumps({"error": {"kind": "usage",
                                        "message": "usage: python -m workers.finalize_child JOB_DIR [--job-id ID] "
                                                   "[--processes N] | --stdin"}}))
            return 2
        processes = int(opts["--processes"]) if "--processes" in opts else None
        job_id = opts.get("--job-id")
    try:
        job = load_job(Path(argv[0])) if job_id is None else load_checked(argv[0], job_id)
        summary = finalize(job, processes=processes)
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
        print(json.dumps({"summary": asdict(summary)}))
        return 0
    print(json.dumps({"error": out}))
    return 3


def _preload() -> None:
    """What a finalize imports (the job, Parquet, audio encoding, loudness, FLAC tags), done before the job
    comes: its chapter processes, forked from it, then import none of them."""
    import importlib

    from jobs.chapter_pool import PRELOAD

    for name in ["pyarrow.parquet"] + [m for m in PRELOAD if m != "__main__"]:
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


_ready: tuple[int, subprocess.Popen] | None = None
_ready_lock = threading.Lock()


def _waiting(ready: tuple[int, subprocess.Popen] | None) -> bool:
    """``ready`` was started by this process (not a copy inherited through a fork) and still waits."""
    return ready is not None and ready[0] == os.getpid() and ready[1].poll() is None


def _spare() -> tuple[int, subprocess.Popen] | None:
    try:
        return os.getpid(), _start(["--stdin"])
    except OSError:  # no process to spare now: the next finalize starts its own
        return None


def _take_ready() -> subprocess.Popen | None:
    """The process started ahead for the next finalize, if it is still waiting; another is started
    for the one after."""
    global _ready
    with _ready_lock:
        ready, _ready = _ready, _spare()
    return ready[1] if _waiting(ready) else None


def start_ready() -> None:
    """Start the process for the next finalize now, if none is waiting (a worker's start)."""
    global _ready
    with _ready_lock:
        if not _waiting(_ready):
            _ready = _spare()


def close_ready() -> None:
    """Let the process started ahead exit (end of its standard input); a worker's shutdown."""
    global _ready
    with _ready_lock:
        ready, _ready = _ready, None
    if ready is not None and ready[0] == os.getpid():
        try:
            ready[1].communicate(input="", timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            ready[1].kill()


def run(job_dir: str, processes: int | None = None, ahead: bool = True, job_id: str | None = None):
    """Finalize ``job_dir`` in a child process; its :class:`~jobs.pipeline.FinalizeSummary`.
    ``job_id``: refuse (:class:`JobError`) if the directory now holds another job.
    :class:`~core.errors.BatchesNotDone` names the batches without a record.
    ``processes``: at most this many processes of its own write the chapters (0: threads).
    ``ahead``: use the process started ahead for it, whose imports are done (a second or more of a
    finalize's time on a busy host), and start one for the next finalize."""
    from core.errors import BatchesNotDone, DiskFullError, JobError, StorageError
    from jobs.pipeline import FinalizeSummary

    proc = _take_ready() if ahead else None
    if proc is not None:
        request = json.dumps({"job_dir": str(job_dir), "job_id": job_id, "processes": processes}) + "\n"
    else:
        proc = _start([str(job_dir)] + ([] if job_id is None else ["--job-id", str(job_id)])
                      + ([] if processes is None else ["--processes", str(int(processes))]))
        request = ""
    try:
        out, _ = proc.communicate(input=request)
    except OSError:  # it died before reading its job (a broken pipe): its result is missing below
        out = ""
        proc.wait()
    lines = [line for line in (out or "").splitlines() if line.startswith("{")]
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise ChildProcessError(_errno.ECHILD, f"the finalize process of {job_dir} ended without a result "
                                               f"(exit status {proc.returncode}; its log is the worker's)") from None
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
