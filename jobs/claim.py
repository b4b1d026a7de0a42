"""Who owns a job directory, and who is synthesizing into it right now.

``OUTDIR/.work/claim.json`` (the claim)
    names the one job that owns the directory: ``{"job_id", "claimed_at", "host", "pid"}``.
    :func:`jobs.prepare.prepare_job` creates it before it writes anything else of the job, and
    it stays for the directory's life: another job, at the same time or later, is refused.

``OUTDIR/.work/run.lock`` (the run lock)
    held by a local run (:func:`jobs.runner.run_local`) while it synthesizes and finalizes, so
    that two identical ``cli.py run`` into one directory do not both write it (with different
    engines, say, their chapter files and manifest could mix).

``OUTDIR/.work/submitted.json`` (the submit mark)
    written by a distributed ``submit`` or ``resume`` (:func:`mark_submitted`) before it queues the
    job's batches, and removed when the job is finalized or cancelled (:func:`clear_submitted`). A
    local run refuses a directory that has it (a local run cannot ask Redis: it may not reach it), and
    a submit refuses a directory whose run lock a live local run holds. Each side writes its own
    marker first and then looks for the other's, so of two that start together at least one sees
    the other.

Both are created atomically, in a way that also holds on NFS: the content is written to a unique
temporary file, which is then hard-linked to the final name. ``link(2)`` fails if the name exists;
where a retransmitted NFS request reports a failure for a link that was made, the temporary
file's link count (2) tells (the open(2) man page's recipe for lock files). On a filesystem
without hard links, ``O_CREAT|O_EXCL`` is used instead. ``flock`` is not used: it is not reliable
on NFS.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Iterator

from core.errors import JobError
from core.files import TMP_MARK

WORK_DIR = ".work"
CLAIM_FILE = "claim.json"
RUN_LOCK = "run.lock"
SUBMIT_MARK = "submitted.json"
#: link(2) errors meaning "no hard links on this filesystem": fall back to O_CREAT|O_EXCL.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def _now_iso() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def claim_path(out_dir: Path) -> Path:
    return Path(out_dir) / WORK_DIR / CLAIM_FILE


def run_lock_path(out_dir: Path) -> Path:
    return Path(out_dir) / WORK_DIR / RUN_LOCK


def submit_mark_path(out_dir: Path) -> Path:
    return Path(out_dir) / WORK_DIR / SUBMIT_MARK


def create_exclusive(path: Path, data: dict) -> bool:
    """Create ``path`` holding ``data`` (JSON) if no file has that name. True if this call made it."""
    text = json.dumps(data, sort_keys=True)
    for _ in range(3):  # the folder may be removed by a refused attempt between mkdir and write
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{TMP_MARK}{uuid.uuid4().hex[:12]}-{path.name}")
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except FileNotFoundError:
            continue
        try:
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return os.stat(tmp).st_nlink == 2  # NFS: our link was made, its reply was lost
            except OSError as exc:
                if exc.errno not in _NO_LINKS:
                    raise
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as f:  # readers retry while it is empty
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            return True
        finally:
            tmp.unlink(missing_ok=True)
    raise JobError(f"cannot create {path}: its folder keeps disappearing; is another process deleting it?")


def read_marker(path: Path, wait_s: float = 2.0) -> dict | None:
    """The JSON of a claim or lock file; None if there is none. A file that stays unreadable (empty,
    not JSON) for ``wait_s`` is a JobError naming it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            if isinstance(d, dict) and isinstance(d.get("job_id"), str):
                return d
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise JobError(f"{path} is unreadable (not a claim written by this tool); if no job is being "
                           f"planned or run in {Path(path).parent.parent}, delete it")
        time.sleep(0.05)


def _who(d: dict) -> str:
    return f"pid {d.get('pid', '?')} on {d.get('host', '?')}, since {d.get('claimed_at') or d.get('started_at', '?')}"


def refusal(out_dir: Path, other: dict, job_id: str) -> JobError:
    return JobError(f"{out_dir} holds another job, {other['job_id']} (claimed by {_who(other)}); this is job "
                    f"{job_id} (other books or settings): choose another -o directory, or delete {out_dir} if "
                    f"job {other['job_id']} is no longer wanted")


def read_claim(out_dir: Path) -> dict | None:
    return read_marker(claim_path(out_dir))


def check_claim(out_dir: Path, job_id: str) -> None:
    """Refuse (JobError) if ``out_dir`` is claimed by another job. Creates nothing."""
    other = read_claim(out_dir)
    if other is not None and other["job_id"] != job_id:
        raise refusal(out_dir, other, job_id)


def claim(out_dir: Path, job_id: str) -> bool:
    """Claim ``out_dir`` for ``job_id``; True if this call created the claim, False if the job
    already held it. Another job's claim is a JobError."""
    mine = {"job_id": job_id, "claimed_at": _now_iso(), "host": socket.gethostname(), "pid": os.getpid()}
    if create_exclusive(claim_path(out_dir), mine):
        return True
    other = read_claim(out_dir)
    if other is None:  # removed in between by a refused attempt: try once more
        if create_exclusive(claim_path(out_dir), mine):
            return True
        other = read_claim(out_dir)
    if other is not None and other["job_id"] != job_id:
        raise refusal(out_dir, other, job_id)
    return False


def release_claim(out_dir: Path, job_id: str) -> None:
    """Remove the claim if ``job_id`` holds it (undo of a refused or failed attempt that made it)."""
    try:
        d = read_marker(claim_path(out_dir), wait_s=0)
    except JobError:
        return
    if d is not None and d["job_id"] == job_id:
        claim_path(out_dir).unlink(missing_ok=True)


# ------------------------------------------------------------------ the run lock


def process_gone(pid: int) -> bool:
    """True when process ``pid`` of this host has ended: no such process, or a zombie (it exited and
    its parent has not reaped it yet; ``/proc/PID/stat`` state ``Z``), which runs nothing. Not a
    process id (0 or less): False."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it exists; /proc still says whether it is a zombie
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return Path("/proc/self").exists()  # reaped since kill(); without /proc, kill() said it exists
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()  # the name (in parentheses) may hold spaces and ')'
    return bool(fields) and fields[0] in ("Z", "X")


def _holder_is_dead(d: dict) -> bool:
    """True only for a holder on this host whose process is gone (a zombie is gone)."""
    if d.get("host") != socket.gethostname():
        return False
    try:
        pid = int(d.get("pid", 0))
    except (ValueError, TypeError, OverflowError):
        return False
    if pid <= 0:
        return False
    try:
        return process_gone(pid)
    except OverflowError:
        return False


def busy_refusal(out_dir: Path, holder: dict) -> JobError:
    return JobError(f"{out_dir} is being synthesized by another `cli.py run` of job {holder['job_id']} "
                    f"({_who(holder)}); wait for it to finish, or, if that process is gone, delete "
                    f"{run_lock_path(out_dir)}")


def _break_stale(path: Path, seen: dict) -> None:
    """Remove a stale run lock, once, even when several processes find it stale at the same time."""
    breaker = path.with_name(path.name + ".break")
    if not create_exclusive(breaker, {"job_id": seen["job_id"], "pid": os.getpid(), "host": socket.gethostname()}):
        time.sleep(0.05)  # someone else is breaking it
        return
    try:
        cur = read_marker(path, wait_s=0)
        if cur is not None and cur.get("token") == seen.get("token"):
            path.unlink(missing_ok=True)
    finally:
        breaker.unlink(missing_ok=True)


def local_run_holder(out_dir: Path) -> dict | None:
    """The live holder of ``out_dir``'s run lock, or None (no lock, or its process is gone)."""
    d = read_marker(run_lock_path(out_dir))
    return None if d is None or _holder_is_dead(d) else d


@contextlib.contextmanager
def run_lock(out_dir: Path, job_id: str) -> Iterator[None]:
    """Hold ``out_dir``'s run lock for the block. A live holder is a JobError; a holder process
    that is gone (on this host) is taken over."""
    path = run_lock_path(out_dir)
    mine = {"job_id": job_id, "started_at": _now_iso(), "host": socket.gethostname(), "pid": os.getpid(),
            "token": uuid.uuid4().hex}
    for _ in range(100):
        if create_exclusive(path, mine):
            break
        holder = read_marker(path)
        if holder is None:
            continue
        if not _holder_is_dead(holder):
            raise busy_refusal(out_dir, holder)
        _break_stale(path, holder)
    else:
        raise JobError(f"cannot take the run lock {path} (a stale {path.name}.break?); if no run is going on "
                       f"in {out_dir}, delete {path} and {path.name}.break")
    try:
        submitted = submitted_to_workers(out_dir)
        if submitted is not None:  # after taking the lock: a submit that starts now sees the lock
            raise submitted_refusal(out_dir, submitted)
        yield
    finally:
        try:
            cur = read_marker(path, wait_s=0)
        except JobError:
            cur = None
        if cur is not None and cur.get("token") == mine["token"]:
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------ the submit mark


def submitted_to_workers(out_dir: Path) -> dict | None:
    """The submit mark of ``out_dir`` (its job is queued on or being run by workers), or None."""
    return read_marker(submit_mark_path(out_dir))


def submitted_refusal(out_dir: Path, mark: dict) -> JobError:
    job_id = mark["job_id"]
    return JobError(f"{out_dir} holds job {job_id}, which is queued on or being run by workers ({mark.get('by', 'submit')} "
                    f"from {_who(mark)}); wait for it (`cli.py status {job_id}`), or `cli.py cancel {job_id}` first to "
                    f"run it here; if Redis lost the job and no worker runs it, delete {submit_mark_path(out_dir)}")


def mark_submitted(out_dir: Path, job_id: str, by: str = "submit"):
    """Mark ``out_dir`` as handed to workers for ``job_id``, then refuse (:func:`busy_refusal`, the
    mark taken back) if a live local run holds its run lock. Returns the undo of a mark this call
    made (None if the directory had one for this job already)."""
    from core.files import write_json

    path = submit_mark_path(out_dir)
    try:
        had = read_marker(path, wait_s=0)
    except JobError:
        had = None  # unreadable: replaced by ours
    mine = {"job_id": job_id, "submitted_at": _now_iso(), "host": socket.gethostname(), "pid": os.getpid(), "by": by}
    made_dirs = [d for d in (path.parent, Path(out_dir), *Path(out_dir).parents) if not d.exists()]  # innermost first
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, mine)

    def undo() -> None:
        clear_submitted(out_dir, job_id)
        for d in made_dirs:  # only those still empty
            with contextlib.suppress(OSError):
                d.rmdir()

    holder = local_run_holder(out_dir)
    if holder is not None:
        if had is None or had.get("job_id") != job_id:
            undo()
        raise busy_refusal(out_dir, holder)
    return None if had is not None and had.get("job_id") == job_id else undo


def clear_submitted(out_dir: Path, job_id: str) -> None:
    """Remove the submit mark if it names ``job_id`` (its job was finalized or cancelled)."""
    try:
        d = read_marker(submit_mark_path(out_dir), wait_s=0)
    except JobError:
        return
    if d is not None and d["job_id"] == job_id:
        submit_mark_path(out_dir).unlink(missing_ok=True)
