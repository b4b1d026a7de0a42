"""How the commands show a run's progress and its end.

:class:`Progress` is a tqdm bar on a terminal and, where stderr is not one (a log file, a pipe, a
container's log), a ``progress:`` line every few seconds: percent, what is done of what, speed, ETA.
:func:`fmt_duration` writes seconds the way people read them ("35m18s", "1h35m"); :func:`audio_lines`
says where the delivered audio is. This module only prints; it does not know how a job runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

#: Seconds between two ``progress:`` lines when stderr is not a terminal.
LOG_INTERVAL_S = 5.0


def fmt_duration(secs: float | None) -> str:
    """``42s``, ``35m18s``, ``1h35m`` (hours and minutes from 1 h on), ``-`` for None."""
    if secs is None:
        return "-"
    secs = int(round(max(float(secs), 0.0)))
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """Progress over ``total`` (seconds of audio, or batches: ``unit``), shown on ``stream``.

    :meth:`advance` adds, :meth:`set` sets what is done; ``eta_s`` and ``note`` given to :meth:`set` are
    shown as they are (else the ETA follows from the speed so far). On a terminal this is a tqdm bar;
    elsewhere a line at the first update, then at most one every ``interval_s``, and one when done.
    """

    def __init__(self, total: float, unit: str = "s audio", *, stream=None, interval_s: float = LOG_INTERVAL_S,
                 terminal: bool | None = None, clock=time.monotonic, real_time: bool = True) -> None:
        self.total = float(total)
        self.unit = unit
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.clock = clock
        self.real_time = real_time
        self.done = 0.0
        self.audio_s = 0.0
        self.t0 = clock()
        self.last_line: float | None = None
        self.shown: float | None = None
        """What the last line showed as done."""
        self.eta_s: float | None = None
        self.note = ""
        self.terminal = _is_terminal(self.stream) if terminal is None else terminal
        self.bar = None
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=round(self.total, 1), file=self.stream, dynamic_ncols=True,
                            bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} " + unit + " [{elapsed}<{remaining}{postfix}]")

    def advance(self, n: float) -> None:
        self.set(self.done + n, audio_s=self.audio_s + n if self.unit == "s audio" else None)

    def set(self, done: float, *, audio_s: float | None = None, eta_s: float | None = None, note: str = "") -> None:
        self.done = float(done)
        if audio_s is not None:
            self.audio_s = float(audio_s)
        self.eta_s, self.note = eta_s, note
        elapsed = self.clock() - self.t0
        speed = self.audio_s / elapsed if self.real_time and elapsed > 0 and self.audio_s > 0 else None
        if self.bar is not None:
            self.bar.n = round(self.done, 1)
            post = [f"{speed:.1f}x real-time" if speed else "", note, f"ETA {fmt_duration(eta_s)}" if eta_s else ""]
            self.bar.set_postfix_str(", ".join(p for p in post if p), refresh=False)
            self.bar.refresh()
            return
        now = self.clock()
        finished = self.total > 0 and self.done >= self.total
        if self.last_line is not None and now - self.last_line < self.interval_s and not finished:
            return
        self.last_line = now
        self.shown = self.done
        self._line(elapsed, speed, finished)

    def _line(self, elapsed: float, speed: float | None, finished: bool) -> None:
        pct = 100.0 * self.done / self.total if self.total > 0 else 100.0
        eta = self.eta_s
        if eta is None and not finished and self.done > 0 and elapsed > 0:
            eta = (self.total - self.done) * elapsed / self.done
        parts = [f"progress: {min(pct, 100.0):.0f}% ({self.done:.0f} of {self.total:.0f} {self.unit}"
                 + (f", {fmt_duration(self.audio_s)} of audio" if self.unit != "s audio" and self.audio_s else "")
                 + ")"]
        if speed:
            parts.append(f"{speed:.1f}x real-time")
        if self.note:
            parts.append(self.note)
        parts.append(f"elapsed {fmt_duration(elapsed)}")
        if not finished and eta is not None:
            parts.append(f"ETA {fmt_duration(eta)}")
        click.echo(", ".join(parts), file=self.stream)
        try:
            self.stream.flush()
        except (AttributeError, ValueError, OSError):
            pass

    def close(self) -> None:
        """End the bar; without one, a last line if there was progress since the last line."""
        if self.bar is not None:
            self.bar.close()
        elif self.shown is not None and self.done != self.shown:
            elapsed = self.clock() - self.t0
            speed = self.audio_s / elapsed if self.real_time and elapsed > 0 and self.audio_s > 0 else None
            self.shown = self.done
            self._line(elapsed, speed, True)


def audio_lines(out_dir, files: list[str], audio_format: str) -> list[str]:
    """Where the delivered audio is: ``audio: PATH`` for one file, else a line per directory with its
    file count and first and last file."""
    if not files:
        return []
    root = Path(out_dir)
    if len(files) == 1:
        return [f"audio: {root / files[0]}"]
    by_dir: dict[str, list[str]] = {}
    for f in files:
        by_dir.setdefault(os.path.dirname(f), []).append(os.path.basename(f))
    kind = audio_format.upper()
    return [f"audio: {root / d if d else root}{os.sep} ({len(names)} {kind} files: {names[0]} ... {names[-1]})"
            if len(names) > 1 else f"audio: {root / d / names[0]}" for d, names in by_dir.items()]
