"""Counting the processes of a node that do one kind of CPU-heavy work at once (finalizes, planning).

A process holds a *slot* while it does the work: a file in the kind's directory locked with
``flock``. Counting the slots counts the locked files, so a holder that died (its lock released by
the kernel) stops counting at once, and its file is removed by the next count. Each holder then takes
its share of the node's cores (:func:`share`) instead of every one of them: a pool of processes per
holder buys wall time for one, but when many run at once on a busy node it only costs CPU time (forks,
imports, copy-on-write faults) that the others needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import Iterator

log = logging.getLogger("booktts.slots")


@contextlib.contextmanager
def hold(directory: str | Path, what: str = "work") -> Iterator[int]:
    """Hold a slot in ``directory`` while the block runs; yields how many hold one now, this one included
    (1 where the directory cannot be written: the work then runs as if alone, with a warning).

    The file is locked under a hidden name and then renamed into view, so a count never sees it
    unlocked (and takes it for a dead holder's)."""
    d = Path(directory)
    fd = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        hidden, path = d / f".{name}", d / name
        fd = os.open(hidden, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as exc:
        log.warning("%s slots: cannot write under %s (%s); this %s is not counted", what, d, exc, what)
    if fd is None:
        yield 1
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        try:
            yield max(1, count(d))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hidden)


def count(directory: str | Path) -> int:
    """Slots held in ``directory`` (0 where it cannot be read). Removes the files of dead holders."""
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return 0
    n = 0
    for p in entries:
        if p.name.startswith("."):
            continue
        try:
            fd = os.open(p, os.O_RDWR)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            n += 1  # held (by any process, this one included: flock locks belong to the open file)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()  # its holder ended without removing it (killed)
        finally:
            os.close(fd)
    return n


def share(cores: int, running: int, min_cores: int) -> int:
    """Processes for one holder when ``running`` holders (it included) share ``cores``: its share of
    the cores, or 0 (no pool: threads, or this process alone) when the share is under ``min_cores``."""
    s = cores // max(1, running)
    return s if s >= min_cores else 0
