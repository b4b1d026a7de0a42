"""How a finalize encodes when the job leaves it to the node (``--flac-level auto``, the default): the
FLAC level and how many chapters it encodes at once, from how busy the host's CPUs are and whether
engines have work waiting.

FLAC is lossless: every level decodes to the same samples, a level only trades the encoder's CPU time
against the file's size (docs/PERFORMANCE.md, "Finalize: encoders"). So where CPU time is what the
node lacks (engines with work waiting on a busy host, or a host busy anyway) a finalize encodes at
level 0; where nothing waits for the CPUs it spends them on smaller files (level 8); in between,
libFLAC's own default (5). :func:`choose` is the whole rule, a pure function; the callers measure
(:mod:`core.host_load`) and say what was chosen and why in their log. A job that sets a level
(``--flac-level N``) gets that level whatever the load. ``job.json`` keeps ``auto`` (its bytes do
not depend on the node): the level each chapter got is in its loudness record
(``.work/loudness/*.json``), and the finalize's choice in ``.work/finalized.json``.

| engines have work waiting | host CPUs busy | FLAC level |
|---|---|---|
| yes | unknown, or >= 50 % | 0 |
| yes | < 50 % | 5 |
| no | >= 75 % | 0 |
| no | 50-75 % | 5 |
| no | unknown, or < 50 % | 8 |

Chapters encoded at once on threads: the finalize's share of the cores (the host's cores over the
finalizes running on it, :mod:`workers.finalize_slots`), at most :data:`MAX_THREADS`, whatever the load:
threads of one process cost no CPU time of their own (a busy host only runs them slower, at the
finalize's low priority), unlike chapter *processes*, whose number the idle cores also bound
(:func:`workers.finalize_slots.chapter_processes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: ``--flac-level auto``: chosen at finalize time by :func:`choose`.
AUTO = "auto"
#: The levels :func:`choose` picks: CPU time short, libFLAC's default, CPU time to spare.
FAST_LEVEL, DEFAULT_LEVEL, SMALL_LEVEL = 0, 5, 8
#: Busy shares of the host's CPUs: at or above BUSY_SHARE (with no engine waiting) the host is busy;
#: under IDLE_SHARE it has CPU time to spare.
IDLE_SHARE, BUSY_SHARE = 0.5, 0.75
#: Most chapters one finalize encodes at once on threads.
MAX_THREADS = 8


@dataclass(frozen=True)
class Encoding:
    """What :func:`choose` chose: ``flac_level`` for a job whose level is ``auto``, ``threads``
    chapters at once, and ``why`` (one phrase for the log)."""

    flac_level: int
    threads: int
    why: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Encoding":
        return cls(int(d["flac_level"]), max(1, int(d["threads"])), str(d.get("why", "")))


def choose(busy: float | None, engines_waiting: bool, cores: int, running: int = 1) -> Encoding:
    """The FLAC level and chapters at once for a finalize (the module's table).

    ``busy``: the share (0..1) of the host's CPUs busy now (None: unknown); ``engines_waiting``:
    synthesis has work queued that CPU time spent here would delay (the job's or other jobs' batches,
    or the job's own synthesis still running: chapters written early); ``cores``: the host's;
    ``running``: finalizes running on the host now, this one included."""
    cores = max(1, int(cores))
    share = max(1, min(MAX_THREADS, cores // max(1, running)))
    load = "load unknown" if busy is None else f"host {100 * busy:.0f} % busy"
    if engines_waiting:
        if busy is None or busy >= IDLE_SHARE:
            level, why = FAST_LEVEL, f"engines have work waiting, {load}"
        else:
            level, why = DEFAULT_LEVEL, f"engines have work waiting but the {load}"
    elif busy is not None and busy >= BUSY_SHARE:
        level, why = FAST_LEVEL, f"no engine waiting, {load}"
    elif busy is not None and busy >= IDLE_SHARE:
        level, why = DEFAULT_LEVEL, f"no engine waiting, {load}"
    else:
        level, why = SMALL_LEVEL, f"no engine waiting, {load}"
    return Encoding(level, share, why)


#: Test knob: ``auto`` writes this level whatever was chosen (the suite's files then compare byte for byte).
TEST_LEVEL_ENV = "BOOKTTS_TEST_FLAC_LEVEL"


def pinned_level() -> int | None:
    """The test suite's level for ``auto`` (:data:`TEST_LEVEL_ENV`), else None."""
    from core import settings

    level = settings.get(TEST_LEVEL_ENV)
    return None if level is None else min(SMALL_LEVEL, int(level))


def flac_level(configured, chosen: Encoding | None) -> int:
    """The level a FLAC file is written at: the job's ``configured`` level (``--flac-level N``), or
    for ``auto`` the ``chosen`` one (None: libFLAC's default)."""
    if configured != AUTO:
        return int(configured)
    pinned = pinned_level()
    if pinned is not None:
        return pinned
    return chosen.flac_level if chosen is not None else DEFAULT_LEVEL


def describe(configured, chosen: Encoding, audio_format: str = "flac") -> str:
    """One phrase for the log: the level and why, and the chapters at once."""
    at_once = f"up to {chosen.threads} chapter{'' if chosen.threads == 1 else 's'} at once"
    if audio_format != "flac":
        return f"{at_once} ({chosen.why})"
    if configured != AUTO:
        return f"FLAC level {int(configured)} (--flac-level {int(configured)}), {at_once} ({chosen.why})"
    return f"FLAC level {chosen.flac_level} (auto: {chosen.why}), {at_once}"
