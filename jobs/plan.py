"""A job's plan: its utterances, each with its unit (planned batch), and the plan file (``plan.parquet``).

How utterances are packed into units is :mod:`jobs.batching`'s (:func:`jobs.batching.pack_units`).
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
