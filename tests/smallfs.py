"""A small real filesystem for full-disk tests: a tmpfs of a few MiB, mounted for one test.

Mounting needs root (CAP_SYS_ADMIN); elsewhere the test is skipped with the reason shown (the
privilege-free tests, which write through /dev/full, cover the same error mapping in-process).
A file-size limit (RLIMIT_FSIZE) was not used instead: it gives EFBIG and SIGXFSZ, not the ENOSPC
of a full disk, so it would test another error path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path: Path, size_kib: int):
    """Mount a tmpfs of ``size_kib`` KiB on ``path`` (created) for the ``with`` block, or skip."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    why = None
    if shutil.which("mount") is None:
        why = "no `mount` command"
    else:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "booktts-test", str(path)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            why = (res.stderr.strip() or f"exit code {res.returncode}").splitlines()[0]
    if why:
        pytest.skip(f"a real full filesystem needs `mount -t tmpfs` (root / CAP_SYS_ADMIN), not permitted here "
                    f"({why}); the /dev/full tests cover the same error mapping without privileges")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave_bytes: int, name: str = "filler.bin") -> Path:
    """Write a file into ``path``'s filesystem so that about ``leave_bytes`` stay free."""
    f = Path(path) / name
    size = free_bytes(path) - leave_bytes
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        block = b"\0" * (1 << 16)
        while size > 0:
            size -= os.write(fd, block[: min(len(block), size)])
    finally:
        os.close(fd)
    return f
