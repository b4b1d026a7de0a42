"""The finalizes running on this node, counted across all its worker processes.

A finalize writes its chapters in processes of its own when it has the cores to itself, and on
threads of its finalize process when several finalizes share them: each chapter process costs a
fork, copy-on-write faults and an exit (about 0.15-0.2 s of CPU on the CPU machine, more on a
sandboxed host), which buys wall time for one finalize but, when many run at once on a busy node,
only takes cores from the engines (docs/PERFORMANCE.md). A worker holds a *slot* while its
finalize runs (:mod:`core.slots`: a file under ``<state_dir>/finalizing/`` locked with ``flock``;
a finalize whose worker died stops counting at once).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from core import slots

#: Directory of the slot files under the node's state directory.
SLOTS_DIR = "finalizing"


@contextlib.contextmanager
def hold(state_dir: str | Path) -> Iterator[int]:
    """Hold a slot while the block runs; yields how many finalizes run on the node now, this one included
    (1 where the state directory cannot be written: counted as alone, as before slots)."""
    with slots.hold(Path(state_dir) / SLOTS_DIR, "finalize") as running:
        yield running


def count(state_dir: str | Path) -> int:
    """Finalizes running on the node (0 where the directory cannot be read); removes dead ones' files."""
    return slots.count(Path(state_dir) / SLOTS_DIR)


def chapter_processes(cores: int, running: int, min_cores: int, idle_cores: float | None = None) -> int:
    """Chapter processes for one finalize when ``running`` finalizes (it included) share ``cores``:
    its share of the cores, no more than the cores idle now (``idle_cores``, :mod:`core.host_load`;
    None: unknown, counted as all), or 0 (threads) when that is under ``min_cores``.

    On a node whose engines keep its CPUs busy, the finalizes so write on threads (they finish as
    fast in all, and leave the engines the CPU time that processes would spend); the last ones, with
    the engines idle, take the idle cores."""
    n = slots.share(cores, running, min_cores)
    if idle_cores is not None:
        n = min(n, int(idle_cores + 0.5))
    return n if n >= min_cores else 0
