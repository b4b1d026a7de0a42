"""How batches form: units planned for a job, what joins one engine call, how a call splits.

The words (docs/DESIGN.md, "Words"): a *unit* is a planned group of one job's utterances (its
:class:`jobs.plan.BatchInfo`, recorded as a batch); an *engine call* is what one
``Engine.synthesize`` call gets, the utterances of one or more units; its *capacity* is the limit it
respects: most utterances, and most padded phoneme ids (utterances x the longest).

Everything here is pure (no files, no Redis, no engine); its callers bring the data:

- :func:`pack_units` when a job is planned (:func:`jobs.prepare.prepare_job`), under the job's
  ``max_batch``, ``max_batch_phonemes`` and ``batch_order`` (their defaults per engine:
  :func:`jobs.config.batch_defaults`);
- :func:`fill_call` when a worker adds queued units to its engine call (:func:`workers.batcher.gather`
  reads the candidates from Redis, in the order it wants them, and leases those chosen);
- :func:`halve` and :func:`group_by_scales` when an engine call is split
  (:func:`jobs.synthesize.synthesize_units`: in two on out-of-memory, by scales for an engine that
  takes one set per call);
- :func:`run_order` when a local run orders its pending units (:func:`jobs.runner.run_local`).
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, Sequence, TypeVar

from jobs.plan import BatchInfo, PlannedUtterance

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

#: Orders in which a local run takes its pending units: ``plan`` (unit id order), ``chapters`` (the
#: units of chapter 1 first, then those of chapter 2 not run yet, ...: chapters complete in reading order).
RUN_ORDERS = ("plan", "chapters")


def pack_units(rows: list[PlannedUtterance], max_batch: int, max_batch_phonemes: int,
               order: str = "length") -> list[BatchInfo]:
    """Pack the speakable ``rows`` into units: assign each its ``batch_id``/``batch_pos`` and return
    the units. ``order`` ``length``: shortest first, the phoneme budget counting padded ids (items x
    longest); ``reading``: in reading order, the budget counting real ids (the engine pads per length
    bucket inside the call). A unit holds at most ``max_batch`` rows."""
    speakable = [r for r in rows if r.utt.speakable]
    if order == "reading":
        return _pack_reading(sorted(speakable, key=lambda r: r.key), max_batch, max_batch_phonemes)
    if order != "length":
        raise ValueError(f"unknown batch order {order!r}")
    todo = sorted(speakable, key=lambda r: (len(r.utt.phoneme_ids), r.key))
    units: list[BatchInfo] = []
    current: list[PlannedUtterance] = []

    def close() -> None:
        if current:
            b = BatchInfo(len(units), len(current), len(current[-1].utt.phoneme_ids),
                          sum(len(r.utt.phoneme_ids) for r in current))
            for pos, r in enumerate(current):
                r.batch_id, r.batch_pos = b.batch_id, pos
            units.append(b)
            current.clear()

    for r in todo:
        n = len(r.utt.phoneme_ids)
        if current and (len(current) >= max_batch or (len(current) + 1) * n > max_batch_phonemes):
            close()
        current.append(r)
    close()
    return units


def _pack_reading(todo: list[PlannedUtterance], max_batch: int, max_batch_phonemes: int) -> list[BatchInfo]:
    units: list[BatchInfo] = []
    start, real = 0, 0
    for i, r in enumerate(todo + [None]):
        n = len(r.utt.phoneme_ids) if r is not None else 0
        if i > start and (r is None or i - start >= max_batch or real + n > max_batch_phonemes):
            part = todo[start:i]
            b = BatchInfo(len(units), len(part), max(len(p.utt.phoneme_ids) for p in part), real)
            for pos, p in enumerate(part):
                p.batch_id, p.batch_pos = b.batch_id, pos
            units.append(b)
            start, real = i, 0
        real += n
    return units


def padding_efficiency(units: list[BatchInfo]) -> float:
    """Real phoneme ids over padded ids (each unit padded to its longest), over all ``units``."""
    padded = sum(b.padded_ids for b in units)
    return (sum(b.real_ids for b in units) / padded) if padded else 1.0


def fill_call(candidates: Iterable[T], shape_of: Callable[[T], tuple[int, int] | None], items: int, longest: int,
              max_items: int, max_padded: int) -> tuple[list[tuple[T, int, int]], list[T]]:
    """The ``candidates`` (units, in the order they are wanted) that join an engine call holding
    ``items`` utterances, the longest of ``longest`` phoneme ids, within its capacity: at most
    ``max_items`` utterances and ``max_padded`` padded ids (utterances x the longest) in the call.

    ``shape_of(candidate)``: its (utterances, longest in ids), or None to pass it by (it can never
    join this call). Each candidate that fits is taken, in order, and the call grows by it; one that
    does not fit is skipped, and a later, smaller one may still fit. Returns (chosen, each with its
    shape; the candidates that did not fit, in order, which a later round may offer again)."""
    chosen: list[tuple[T, int, int]] = []
    rest: list[T] = []
    for c in candidates:
        shape = shape_of(c)
        if shape is None:
            continue
        n, length = shape
        width = max(longest, length)
        if items + n > max_items or (items + n) * width > max_padded:
            rest.append(c)
            continue
        chosen.append((c, n, length))
        items, longest = items + n, width
    return chosen, rest


def halve(seq: Sequence[T]) -> tuple[Sequence[T], Sequence[T]]:
    """An engine call out of memory, split in two: the first half (the shorter, for an odd length)
    and the rest."""
    half = len(seq) // 2
    return seq[:half], seq[half:]


def group_by_scales(item_scales: Sequence[K]) -> dict[K, list[int]]:
    """An engine call for an engine that takes one set of scales per call, split by scales: per
    distinct set, in order of first appearance, the positions of its items."""
    groups: dict[K, list[int]] = {}
    for i, sc in enumerate(item_scales):
        groups.setdefault(sc, []).append(i)
    return groups


def run_order(pending: list[int], chapter_units: Iterable[Iterable[int]], order: str = "plan") -> list[int]:
    """The ``pending`` unit ids in the order a local run takes them (:data:`RUN_ORDERS`).
    ``chapter_units``: per chapter the run delivers, in reading order, the ids of the units its
    utterances are in (read only for ``chapters``)."""
    if order == "plan":
        return list(pending)
    if order != "chapters":
        raise ValueError(f"unknown batch order {order!r}; choose one of {', '.join(RUN_ORDERS)}")
    left, out = set(pending), []
    for ids in chapter_units:
        for b in sorted(set(ids) & left):
            out.append(b)
            left.discard(b)
    return out + sorted(left)
