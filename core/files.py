"""Atomic file writes and safe output paths.

Every output is written under a temporary name in its final directory and
renamed into place, so a crash never leaves a file that looks complete and is
not. Output names are built from slugs, and :func:`inside` refuses any path
that would leave the output directory.

A writer holds a shared ``flock`` on its temporary file until the rename, so
:func:`sweep_temp_files` can tell the temporary files of killed writers (no lock
held: removed) from those of live ones, even stopped ones (locked: kept). A
full disk is raised as :class:`~core.errors.DiskFullError` naming the final path.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
import unicodedata
import uuid
from pathlib import Path
from typing import Iterator

from core.errors import DiskFullError, StorageError, TTSError, UnsafePathError

try:
    import fcntl
except ImportError:  # not POSIX: no liveness locks; sweeping falls back to the age rule
    fcntl = None

TMP_MARK = ".tmp-"
#: The names :func:`atomic_path` gives its temporary files (and the only names the sweep removes).
TMP_NAME = re.compile(r"^\.tmp-[0-9a-f]{12}-.+")
#: errno values that mean "the filesystem is full" (a quota counts as full).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Where locks cannot be taken (a filesystem without lock support), a temporary file is only
#: swept when it has not been modified for this long.
UNLOCKED_TMP_STALE_S = 3600.0


def sha256_file(path) -> str:
    """Hex SHA-256 of a file's contents, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def free_bytes(directory) -> int | None:
    """Bytes an unprivileged writer may still use in ``directory``'s filesystem (None if unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_error(final: Path, code: int | None, detail: str) -> StorageError:
    """A failed write of ``final`` as the documented error: :class:`DiskFullError` when ``code`` is
    ENOSPC/EDQUOT (or, with no usable errno, when the filesystem has no space left), else
    :class:`StorageError`."""
    final = Path(final)
    if code in DISK_FULL_ERRNOS:
        return DiskFullError(final, "no space left on device" if code == errno.ENOSPC else "disk quota exceeded",
                             code)
    if not code and free_bytes(final.parent) == 0:
        return DiskFullError(final)
    return StorageError(final, detail, code or errno.EIO)


def _create_locked(final: Path) -> tuple[Path, int]:
    """Create a new temporary file beside ``final`` holding a shared lock on it (kept until the
    writer is done). Returns (path, fd). Without lock support the file is simply created.

    A sweeper may lock (exclusively) and remove a file between its creation and our lock; then
    the lock is refused or lands on a removed inode, and another name is tried."""
    while True:
        tmp = final.with_name(f"{TMP_MARK}{uuid.uuid4().hex[:12]}-{final.name}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        if fcntl is None:
            return tmp, fd
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError:  # ENOLCK, EOPNOTSUPP: this filesystem has no locks
            return tmp, fd
        mine = os.fstat(fd)
        try:
            now = os.stat(tmp, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return tmp, fd
        os.close(fd)


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` if the block succeeds.

    The temporary file exists (empty) when the block starts and is locked until the rename (see
    :func:`sweep_temp_files`). An ``OSError`` meaning a full disk becomes :class:`DiskFullError`.
    """
    final = Path(final)
    tmp, fd = None, None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp, fd = _create_locked(final)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        if isinstance(exc, TTSError) or exc.errno not in DISK_FULL_ERRNOS:
            raise
        raise storage_error(final, exc.errno, exc.strerror or str(exc)) from exc
    finally:
        try:
            if tmp is not None and tmp.exists():
                tmp.unlink()
        finally:
            if fd is not None:
                os.close(fd)


def sweep_temp_files(directories, min_age_s: float = 0.0) -> list[Path]:
    """Remove the temporary files of dead writers from ``directories`` (not recursively).

    Only regular files named like :func:`atomic_path`'s temporaries are considered, and only those
    whose lock nobody holds: a live writer (also one that is stopped) keeps its shared lock until
    it renames the file, a killed one lost it with its process. Where locks are not available a
    file must also be unmodified for :data:`UNLOCKED_TMP_STALE_S`. ``min_age_s``: keep files
    modified more recently than this in any case. Returns the removed paths.
    """
    removed: list[Path] = []
    now = time.time()
    for d in directories:
        try:
            entries = list(os.scandir(d))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if not TMP_NAME.match(e.name) or not e.is_file(follow_symlinks=False):
                continue
            path = Path(e.path)
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:  # gone already (renamed by its writer), or not ours to open
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < min_age_s:
                    continue
                locked = False
                if fcntl is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        locked = True
                    except BlockingIOError:
                        continue  # a live writer holds it
                    except OSError:
                        pass  # no locks on this filesystem
                if not locked and now - st.st_mtime < UNLOCKED_TMP_STALE_S:
                    continue
                try:
                    cur = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if (cur.st_dev, cur.st_ino) != (st.st_dev, st.st_ino):
                    continue  # replaced meanwhile: not the file we checked
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                continue
            finally:
                os.close(fd)
    return removed


def write_json(final: Path, obj) -> None:
    with atomic_path(final) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True), encoding="utf-8")


class _Placed(Exception):
    """Leaves :func:`atomic_path` without its rename: :func:`create_json` linked the file itself."""

    def __init__(self, created: bool) -> None:
        super().__init__()
        self.created = created


def create_json(final: Path, obj, compact: bool = False) -> bool:
    """Write ``obj`` to ``final`` only if no file is there yet, atomically (a complete file or none):
    of two writers racing for the name, exactly one wins. False, leaving ``final`` as it was, when it
    exists. Written through :func:`atomic_path` (its temporary file, locks and errors), then hard-linked
    into place; where hard links are not supported, renamed into place after an existence check.
    ``compact``: no indentation (for large machine-read files: the JSON encoder's C path, several
    times faster)."""
    final = Path(final)
    if final.exists():
        return False
    try:
        with atomic_path(final) as tmp:
            text = (json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True) if compact
                    else json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True))
            tmp.write_text(text, encoding="utf-8")
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise _Placed(False) from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
                if final.exists():
                    raise _Placed(False) from None
                return True  # atomic_path renames it into place
            raise _Placed(True)  # linked; atomic_path removes the temporary name
    except _Placed as placed:
        return placed.created


def read_json(path: Path):
    """The JSON document in ``path``. A document nested too deeply for the parser is a ``ValueError``,
    like any other malformed JSON (not a ``RecursionError``), so callers handle both the same way."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply") from None


def slug(text: str, fallback: str, max_len: int = 60) -> str:
    """ASCII slug of ``text`` (letters, digits, dashes) or ``fallback``; never contains a path separator."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    s = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:max_len].strip("-")
    return s or fallback


def real_directory(root: Path, relative: str | Path) -> Path:
    """``root / relative``, a directory that files may be written into: refuses (one
    :class:`UnsafePathError`) a symbolic link, or anything but a directory, at any of its components
    below ``root``, and a path that resolves outside ``root``. Components that do not exist yet pass
    (their writer makes them, with ``mkdir``, which follows no link). ``root`` itself may be a link
    (an output directory the user named so); this does not check it."""
    root = Path(root)
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise UnsafePathError(f"directory {str(relative)!r} would leave {root}; refusing to write into it")
    cur = root
    for part in rel.parts:
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(f"{cur} is a symbolic link (to {os.readlink(cur)}), not a directory of its job; "
                                  f"remove the link (nothing was written through it), then resume")
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"{cur} is not a directory; remove it, then resume")
    target = root / rel
    real_root, real = os.path.realpath(root), os.path.realpath(target)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePathError(f"{target} resolves to {real}, outside {real_root}; refusing to write into it")
    return target


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, refusing anything that resolves outside ``root``."""
    root = Path(root).resolve()
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"output path {relative!r} would escape the output directory {root}; refusing to write it")
    return target
