"""The finalizes running on this node, counted across all its worker processes.

A finalize writes its chapters in processes of its own when it has the cores to itself, and on
threads of its finalize process when several finalizes share them: each chapter process costs a
fork, copy-on-write faults and an exit (about 0.15-0.2 s of CPU on the CPU machine, more on a
sandboxed host), which buys wall time for one finalize but, when many run at once on a busy node,
only takes cores from the engines (docs/PERFORMANCE.md). A worker holds a *slot* while its
finalize runs: a file under ``<state_dir>/finalizing/`` locked with ``flock``. Counting the slots
counts the locked files, so a finalize whose worker died (its lock released by the kernel) stops
counting at once, and its file is removed by the next count.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import Iterator

log = logging.getLogger("booktts.finalize_slots")

#: Directory of the slot files under the node's state directory.
SLOTS_DIR = "finalizing"


def _dir(state_dir: str | Path) -> Path:
    d = Path(state_dir) / SLOTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def hold(state_dir: str | Path) -> Iterator[int]:
    """Hold a slot while the block runs; yields how many finalizes run on the node now, this one included.

    The file is locked under a hidden name and then renamed into view, so a count never sees it
    unlocked (and takes it for a dead finalize's)."""
    fd = None
    try:
        d = _dir(state_dir)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        hidden, path = d / f".{name}", d / name
        fd = os.open(hidden, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as exc:  # no writable state directory: the finalize runs as if alone, as before slots
        log.warning("finalize slots: cannot write under %s (%s); this finalize is not counted", state_dir, exc)
    if fd is None:
        yield 1
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        try:
            yield max(1, count(state_dir))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hidden)


def count(state_dir: str | Path) -> int:
    """Finalizes running on the node: slot files whose lock is held (0 where the directory cannot be
    read). Removes the files of dead ones."""
    try:
        d = _dir(state_dir)
        entries = list(d.iterdir())
    except OSError:
        return 0
    n = 0
    for p in entries:
        if p.name.startswith("."):
            continue
        try:
            fd = os.open(p, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            n += 1  # held (by any process, this one included: flock locks belong to the open file)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()  # its finalize ended without removing it (killed)
        finally:
            os.close(fd)
    return n


def chapter_processes(cores: int, running: int, min_cores: int) -> int:
    """Chapter processes for one finalize when ``running`` finalizes (it included) share ``cores``:
    its share of the cores, or 0 (threads) when the share is under ``min_cores``."""
    share = cores // max(1, running)
    return share if share >= min_cores else 0
