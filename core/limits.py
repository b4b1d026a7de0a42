"""Allowed ranges of numeric settings, shared by the job settings and a voice's own config.

:class:`Limit` describes one range; :data:`SCALE_LIMITS` are the synthesis scales, which a job
may set on the command line (``jobs.config.LIMITS``) and a voice sets in its ``.onnx.json``
(:mod:`core.voice`), so both are held to one definition. This module checks nothing by itself and
knows nothing of options, files or engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """The allowed range of one numeric setting (the CLI's option types are built from these)."""

    option: str
    """The command-line option that sets it (named in errors)."""
    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    """``lo`` itself is not allowed (the value must be more than ``lo``)."""

    def describe(self) -> str:
        return f"more than {self.lo:g} and at most {self.hi:g}" if self.lo_open else f"{self.lo:g} to {self.hi:g}"

    def allows(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        return (value > self.lo if self.lo_open else value >= self.lo) and value <= self.hi


#: The synthesis scales, by their name in a job config and in a voice config's ``inference`` section.
SCALE_LIMITS: dict[str, Limit] = {
    "length_scale": Limit("--length-scale", 0.1, 10.0),
    "noise_scale": Limit("--noise-scale", 0.0, 10.0),
    "noise_w": Limit("--noise-w", 0.0, 10.0),
}

#: A voice config's audio framing: its sample rate (``audio.sample_rate``) and samples per decoder
#: frame (``hop_length``).
SAMPLE_RATE_LIMIT = Limit("audio.sample_rate", 8000, 192000, integer=True)
HOP_LENGTH_LIMIT = Limit("hop_length", 1, 4096, integer=True)
