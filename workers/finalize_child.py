"""``python -m workers.finalize_child JOB_DIR [--processes N]``: one job's ``finalize`` in a process of its own.

A GPU worker assembles a finished job's chapters (batch audio, loudness, encoding, the manifest)
here rather than in a thread of its engine's process, where that work's Python would hold the
interpreter lock the engine's launch thread needs. Prints one JSON line: ``{"summary": {...}}``, or
``{"error": {...}}`` with the exception's kind, message and, for I/O errors, errno and file (exit
status 3). :func:`run` is the caller's side: it starts the process and gives back the summary, or
raises the error again as the same kind of exception (a full disk stays a retryable
:class:`~core.errors.DiskFullError`).
"""

from __future__ import annotations

import errno as _errno
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    import logging

    from core.errors import DiskFullError, JobError, StorageError, TTSError
    from jobs.pipeline import finalize, load_job

    # its log lines go to the worker's log (stderr is inherited), marked as this process's
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[%(asctime)s: %(levelname)s/finalize-{os.getpid()}] %(message)s")

    processes = None
    if len(argv) == 3 and argv[1] == "--processes" and argv[2].isdigit():
        processes = int(argv[2])
    elif len(argv) != 1:
        print(json.dumps({"error": {"kind": "usage",
                                    "message": "usage: python -m workers.finalize_child JOB_DIR [--processes N]"}}))
        return 2
    try:
        summary = finalize(load_job(Path(argv[0])), processes=processes)
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


def run(job_dir: str, processes: int | None = None):
    """Finalize ``job_dir`` in a child process; its :class:`~jobs.pipeline.FinalizeSummary`.
    ``processes``: at most this many processes of its own write the chapters (0: threads)."""
    from core.errors import DiskFullError, JobError, StorageError
    from jobs.pipeline import FinalizeSummary

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    extra = [] if processes is None else ["--processes", str(int(processes))]
    proc = subprocess.run([sys.executable, "-m", "workers.finalize_child", str(job_dir), *extra], stdout=subprocess.PIPE,
                          stderr=None, text=True, env=env, cwd=str(ROOT))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
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
    if kind == "job":
        raise JobError(msg)
    raise RuntimeError(f"{err.get('type', 'error')}: {msg}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
