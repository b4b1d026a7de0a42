"""How busy this host's CPUs are now, from ``/proc/stat``, for work that chooses how many processes to start.

A pool of processes buys wall time for one piece of work only when cores are idle; on a busy node
(engines, other finalizes, planning) each extra process costs CPU time (a fork, copy-on-write faults,
its own reads of the same files) that the others needed, and the node does less in all
(docs/PERFORMANCE.md). :class:`HostLoad` keeps the busy share of the host's CPUs over the last
interval, sampled on a daemon thread, so that a caller asks it without waiting.

Where ``/proc/stat`` cannot be read (not Linux), the load is unknown and :meth:`HostLoad.idle_cores`
answers None: callers then decide as if the host were idle.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

#: Seconds between two samples of the sampler thread.
SAMPLE_S = 0.5
#: Fewest clock ticks (all CPUs together) between two readings for :class:`Since` to give a share.
MIN_TICKS = 8


def read_cpu_times(path: str | Path = "/proc/stat") -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from the ``cpu`` line of ``path``; None if unreadable.
    Idle time is ``idle`` plus ``iowait``."""
    try:
        with open(path, encoding="ascii") as f:
            first = f.readline().split()
    except (OSError, UnicodeDecodeError):
        return None
    if not first or first[0] != "cpu" or len(first) < 5:
        return None
    try:
        ticks = [int(x) for x in first[1:]]
    except ValueError:
        return None
    total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal (guest is counted in user)
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return total - idle, total


class HostLoad:
    """The busy share of the host's CPUs over the last :data:`SAMPLE_S` (or since the previous call
    of :meth:`sample`), kept by a daemon thread started at the first question.

    ``path``: the file to read (``/proc/stat``; tests give their own). ``cores``: the host's CPUs that the
    share is of (the caller's count: the cores this process may run on)."""

    def __init__(self, cores: int, path: str | Path = "/proc/stat", sample_s: float = SAMPLE_S) -> None:
        self.cores = max(1, cores)
        self.path = path
        self.sample_s = sample_s
        self._last = read_cpu_times(path)
        self._busy: float | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def sample(self) -> float | None:
        """Read the counters now; the busy share (0..1) since the previous reading, or None if unknown."""
        now = read_cpu_times(self.path)
        with self._lock:
            last, self._last = self._last, now
            if now is None or last is None or now[1] <= last[1]:
                return self._busy
            self._busy = min(1.0, max(0.0, (now[0] - last[0]) / (now[1] - last[1])))
            return self._busy

    def _run(self) -> None:
        while True:
            time.sleep(self.sample_s)
            self.sample()

    def busy(self) -> float | None:
        """The last sampled busy share; None until a sample exists or where the counters cannot be read."""
        with self._lock:
            if self._thread is None and self._last is not None:
                self._thread = threading.Thread(target=self._run, name="booktts-host-load", daemon=True)
                self._thread.start()
            return self._busy

    def idle_cores(self) -> float | None:
        """Cores idle over the last interval (``cores`` x the idle share), or None while unknown."""
        b = self.busy()
        return None if b is None else self.cores * (1.0 - b)


def _own_ticks() -> float:
    """This process's CPU time (all its threads, user + system) in the clock ticks of ``/proc/stat``."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        hz = 100
    return time.process_time() * hz


class Since:
    """The busy share of the host's CPUs since this object was made, without a thread: a caller that
    runs for a while (a local run's synthesis, a ``deliver``) makes one at its start and asks at the
    moment it chooses. ``others=True`` leaves this process's own CPU time out (its engine, which is
    done by then: what else keeps the host busy)."""

    def __init__(self, path: str | Path = "/proc/stat") -> None:
        self.path = path
        self.start = read_cpu_times(path)
        self.own = _own_ticks()

    def busy(self, others: bool = False) -> float | None:
        """The busy share (0..1) since the start; None where unreadable or under :data:`MIN_TICKS` ticks."""
        now = read_cpu_times(self.path)
        if now is None or self.start is None or now[1] - self.start[1] < MIN_TICKS:
            return None
        busy = now[0] - self.start[0] - ((_own_ticks() - self.own) if others else 0.0)
        return min(1.0, max(0.0, busy / (now[1] - self.start[1])))


def busy_now(seconds: float = 0.15, others: bool = False) -> float | None:
    """The host's busy share over the next ``seconds`` (waits that long); None where unknown."""
    s = Since()
    time.sleep(seconds)
    return s.busy(others)
