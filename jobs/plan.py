"""Utterances -> length-sorted batches, and the plan file (``plan.parquet``).

Batches are packed from utterances sorted by phoneme-id count, under two
budgets: at most ``max_batch`` items, and at most ``max_batch_phonemes`` padded
ids (items x longest item). Sorting keeps padding small; the padding efficiency
(real ids / padded ids) is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from jobs.segment import PauseKind, Utterance

#: Rough audio seconds per phoneme id at length scale 1 (measured on en_US-joe-medium:
#: 0.024-0.026 s/id on sentences of Alice in Wonderland); used only for estimates.
SECONDS_PER_PHONEME_ID = 0.0245

PLAN_SCHEMA = pa.schema([
    ("book_index", pa.int32()),
    ("chapter_index", pa.int32()),
    ("utterance_index", pa.int32()),
    ("paragraph_index", pa.int32()),
    ("sentence_index", pa.int32()),
    ("text", pa.string()),
    ("phoneme_ids", pa.list_(pa.int32())),
    ("phoneme_count", pa.int32()),
    ("missing_phonemes", pa.int32()),
    ("pause", pa.string()),
    ("speakable", pa.bool_()),
    ("batch_id", pa.int32()),
    ("batch_pos", pa.int32()),
    ("spoken_text", pa.string()),
])


@dataclass
class PlannedUtterance:
    """An utterance with its place in the batch plan (batch_id -1: nothing to synthesize)."""

    utt: Utterance
    batch_id: int = -1
    batch_pos: int = -1

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.utt.book_index, self.utt.chapter_index, self.utt.utterance_index)


@dataclass
class BatchInfo:
    batch_id: int
    size: int
    max_len: int
    real_ids: int

    @property
    def padded_ids(self) -> int:
        return self.size * self.max_len


def pack_batches(rows: list[PlannedUtterance], max_batch: int, max_batch_phonemes: int,
                 order: str = "length") -> list[BatchInfo]:
    """Assign ``batch_id``/``batch_pos`` to speakable rows; return the batches. ``order`` ``length``:
    shortest first, the phoneme budget counting padded ids (items x longest); ``reading``: in reading
    order, the budget counting real ids (the engine pads per length bucket inside the batch)."""
    speakable = [r for r in rows if r.utt.speakable]
    if order == "reading":
        return _pack_reading(sorted(speakable, key=lambda r: r.key), max_batch, max_batch_phonemes)
    if order != "length":
        raise ValueError(f"unknown batch order {order!r}")
    todo = sorted(speakable, key=lambda r: (len(r.utt.phoneme_ids), r.key))
    batches: list[BatchInfo] = []
    current: list[PlannedUtterance] = []

    def close() -> None:
        if current:
            b = BatchInfo(len(batches), len(current), len(current[-1].utt.phoneme_ids),
                          sum(len(r.utt.phoneme_ids) for r in current))
            for pos, r in enumerate(current):
                r.batch_id, r.batch_pos = b.batch_id, pos
            batches.append(b)
            current.clear()

    for r in todo:
        n = len(r.utt.phoneme_ids)
        if current and (len(current) >= max_batch or (len(current) + 1) * n > max_batch_phonemes):
            close()
        current.append(r)
    close()
    return batches


def _pack_reading(todo: list[PlannedUtterance], max_batch: int, max_batch_phonemes: int) -> list[BatchInfo]:
    batches: list[BatchInfo] = []
    start, real = 0, 0
    for i, r in enumerate(todo + [None]):
        n = len(r.utt.phoneme_ids) if r is not None else 0
        if i > start and (r is None or i - start >= max_batch or real + n > max_batch_phonemes):
            part = todo[start:i]
            b = BatchInfo(len(batches), len(part), max(len(p.utt.phoneme_ids) for p in part), real)
            for pos, p in enumerate(part):
                p.batch_id, p.batch_pos = b.batch_id, pos
            batches.append(b)
            start, real = i, 0
        real += n
    return batches


def padding_efficiency(batches: list[BatchInfo]) -> float:
    padded = sum(b.padded_ids for b in batches)
    return (sum(b.real_ids for b in batches) / padded) if padded else 1.0


def estimate_seconds(rows: list[PlannedUtterance], length_scale: float) -> float:
    return sum(len(r.utt.phoneme_ids) for r in rows if r.batch_id >= 0) * SECONDS_PER_PHONEME_ID * length_scale


def to_table(rows: list[PlannedUtterance]) -> pa.Table:
    cols: dict[str, list] = {f.name: [] for f in PLAN_SCHEMA}
    for r in rows:
        u = r.utt
        cols["book_index"].append(u.book_index)
        cols["chapter_index"].append(u.chapter_index)
        cols["utterance_index"].append(u.utterance_index)
        cols["paragraph_index"].append(u.paragraph_index)
        cols["sentence_index"].append(u.sentence_index)
        cols["text"].append(u.text)
        cols["phoneme_ids"].append(u.phoneme_ids)
        cols["phoneme_count"].append(len(u.phoneme_ids))
        cols["missing_phonemes"].append(u.missing_phonemes)
        cols["pause"].append(u.pause.value)
        cols["speakable"].append(u.speakable)
        cols["batch_id"].append(r.batch_id)
        cols["batch_pos"].append(r.batch_pos)
        cols["spoken_text"].append(u.spoken_text if u.spoken_text is not None else u.text)
    return pa.table(cols, schema=PLAN_SCHEMA)


def from_table(table: pa.Table) -> list[PlannedUtterance]:
    d = table.to_pydict()
    spoken = d.get("spoken_text") or [None] * table.num_rows  # plans written before spoken_text
    out = []
    for i in range(table.num_rows):
        u = Utterance(d["book_index"][i], d["chapter_index"][i], d["utterance_index"][i],
                      d["paragraph_index"][i], d["sentence_index"][i], d["text"][i],
                      list(d["phoneme_ids"][i]), d["missing_phonemes"][i], PauseKind(d["pause"][i]),
                      d["speakable"][i], spoken[i] if spoken[i] != d["text"][i] else None)
        out.append(PlannedUtterance(u, d["batch_id"][i], d["batch_pos"][i]))
    return out
