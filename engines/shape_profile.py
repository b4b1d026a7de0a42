"""Shape profiles: the tensor shapes an engine met (:class:`engines.base.PreparesShapes`), kept in a
JSON file so that the next engine of the same settings prepares them before its first batch.

A profile is ``{"stage_a": [[rows, size, calls], ...], "stage_b": [...]}``: sizes and counts only,
nothing of the text. A worker keeps one per engine setting in the node's state directory
(:mod:`workers.runtime`); ``cli.py serve`` keeps one in the cache directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from engines.spec import EngineSpec

log = logging.getLogger("booktts.shapes")

#: Shapes kept per stage in a profile (the most frequent).
SHAPES_KEPT = 256


def file_name(spec: EngineSpec, voice) -> str:
    """The profile's file name for engines of ``spec`` (any device index) and ``voice``'s model."""
    ident = {**spec.to_dict(), "device": spec.device.split(":")[0], "voice": Path(str(voice.model_path)).name}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return f"{spec.name}-{spec.precision}-{digest}.json"


def read(path: Path) -> dict:
    """The profile at ``path``; {} where it is missing or damaged."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def merge(path: Path, mine: dict, kept: int = SHAPES_KEPT) -> None:
    """Write ``mine`` into the profile at ``path``: per shape the larger count, the ``kept`` most
    frequent per stage; a write that fails costs only the profile (a warning)."""
    from core.files import write_json

    old = read(path)
    merged: dict = {}
    for stage in sorted(set(mine) | set(old)):
        counts: dict[tuple[int, int], int] = {}
        for e in list(old.get(stage) or []) + list(mine.get(stage) or []):
            try:
                rows, size, n = (int(v) for v in e)
            except (TypeError, ValueError):
                continue
            counts[(rows, size)] = max(counts.get((rows, size), 0), n)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:kept]
        merged[stage] = [[r, w, n] for (r, w), n in top]
    if merged == old:
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_json(path, merged)
    except OSError as exc:
        log.warning("the shape profile %s was not written (%s: %s)", path, type(exc).__name__, exc)


def prepare(engine, path: Path, budget_s: float) -> dict | None:
    """Have ``engine`` prepare the shapes of the profile at ``path`` within ``budget_s``; what it
    reported, or None (not an engine that prepares shapes, no profile, a budget of 0, or a failure,
    which is a warning: preparing is a speed-up only)."""
    from engines.base import PreparesShapes

    if budget_s <= 0 or not isinstance(engine, PreparesShapes):
        return None
    profile = read(path)
    if not profile:
        return None
    try:
        return engine.prepare_shapes(profile, budget_s)
    except Exception as exc:  # noqa: BLE001 - a speed-up only: the engine runs without it
        log.warning("preparing the recorded shapes of %s failed, running without them: %s: %s", path,
                    type(exc).__name__, exc)
        return None
