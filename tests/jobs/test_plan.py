"""Packing units (jobs.batching.pack_units): budgets, length sorting, padding efficiency; the Parquet round trip."""

import pytest
from pathlib import Path

import random

from jobs.batching import pack_units as pack_batches, padding_efficiency
from jobs.plan import PlannedUtterance, from_table, to_table
from jobs.segment import PauseKind, Utterance

DATA = Path(__file__).resolve().parents[1] / "data"


def rows(lengths, speakable=True):
    return [PlannedUtterance(Utterance(0, 1, i, 0, i, f"u{i}", [1] + [5] * (n - 2) + [2], 0, PauseKind.SENTENCE,
                                       speakable)) for i, n in enumerate(lengths)]


def test_budgets_are_respected_and_every_row_is_planned_once():
    random.seed(1)
    rs = rows([random.randint(5, 400) for _ in range(500)])
    batches = pack_batches(rs, max_batch=16, max_batch_phonemes=2000)
    assert all(b.size <= 16 and b.padded_ids <= 2000 for b in batches)
    assert sorted((r.batch_id, r.batch_pos) for r in rs) == sorted({(r.batch_id, r.batch_pos) for r in rs})
    assert sum(b.size for b in batches) == 500


def test_length_sorting_keeps_padding_small():
    random.seed(2)
    rs = rows([random.randint(5, 400) for _ in range(2000)])
    eff = padding_efficiency(pack_batches(rs, 32, 8000))
    assert eff > 0.9, eff


def test_unspeakable_rows_get_no_batch():
    rs = rows([10, 12]) + rows([3], speakable=False)
    pack_batches(rs, 4, 100)
    assert [r.batch_id for r in rs] == [0, 0, -1]


def test_oversized_single_item_still_gets_a_batch():
    # an utterance longer than the phoneme budget must not be lost
    rs = rows([500])
    batches = pack_batches(rs, 8, 100)
    assert len(batches) == 1 and rs[0].batch_id == 0


def test_parquet_round_trip(tmp_path):
    import pyarrow.parquet as pq

    rs = rows([10, 20, 30])
    pack_batches(rs, 2, 100)
    pq.write_table(to_table(rs), tmp_path / "p.parquet")
    back = from_table(pq.read_table(tmp_path / "p.parquet"))
    assert [(r.key, r.batch_id, r.batch_pos, r.utt.phoneme_ids, r.utt.pause) for r in back] == \
        [(r.key, r.batch_id, r.batch_pos, r.utt.phoneme_ids, r.utt.pause) for r in rs]


def test_reading_order_batches_are_consecutive_and_within_budget(voice):
    """--batch-order reading: every speakable utterance once, batches of consecutive utterances in
    reading order, at most max_batch items and max_batch_phonemes real ids each."""
    from jobs.ingest import load_book
    from jobs.phonemize import Phonemizer
    from jobs.batching import pack_units as pack_batches
    from jobs.plan import PlannedUtterance
    from jobs.segment import Segmenter

    book = load_book(DATA / "alice-pg11.txt")
    seg = Segmenter(Phonemizer(voice), 400)
    rows = [PlannedUtterance(u) for ch in book.chapters[:3] for u in seg.chapter_utterances(0, ch)]
    batches = pack_batches(rows, 64, 4000, order="reading")
    planned = [r for r in rows if r.batch_id >= 0]
    assert len(planned) == sum(r.utt.speakable for r in rows) == sum(b.size for b in batches)
    order = [(r.batch_id, r.batch_pos) for r in sorted(planned, key=lambda r: r.key)]
    assert order == sorted(order), "reading order = batch order"
    for b in batches:
        mine = [r for r in planned if r.batch_id == b.batch_id]
        assert len(mine) == b.size <= 64 and sum(len(r.utt.phoneme_ids) for r in mine) == b.real_ids <= 4000
        assert sorted(r.batch_pos for r in mine) == list(range(b.size))
    assert len(batches) > 3 and any(b.size < 64 for b in batches[:-1]), "the id budget cut some batches"
    with pytest.raises(ValueError):
        pack_batches(rows, 64, 4000, order="random")
