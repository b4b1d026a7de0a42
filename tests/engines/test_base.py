"""SynthesisResult's two layouts (padded and packed) give the same items."""

import numpy as np
import pytest

from engines.base import SynthesisResult


def _packed_example():
    # three items stored out of batch order in two blocks, with padding inside each block,
    # the way the torch engine lays out its chunks
    lengths = np.array([5, 2, 4])
    packed = np.zeros(2 * 6 + 1 * 4, dtype=np.int16)
    packed[0:4] = [1, 2, 3, 4]          # item 2 (block 1, row 0, width 6)
    packed[6:11] = [5, 6, 7, 8, 9]       # item 0 (block 1, row 1)
    packed[12:14] = [10, 11]             # item 1 (block 2, width 4)
    packed[5] = packed[11] = 99          # padding inside a block must never show
    return SynthesisResult(None, lengths, 1.5, packed=packed, offsets=np.array([6, 12, 0]))


def test_packed_items_are_views_in_batch_order():
    r = _packed_example()
    assert r.item(0).tolist() == [5, 6, 7, 8, 9]
    assert r.item(1).tolist() == [10, 11]
    assert r.item(2).tolist() == [1, 2, 3, 4]
    assert np.shares_memory(r.item(0), r.packed)  # no copy per item
    assert len(r) == 3 and r.infer_ms == 1.5


def test_packed_audio_is_the_padded_layout():
    r = _packed_example()
    want = np.array([[5, 6, 7, 8, 9], [10, 11, 0, 0, 0], [1, 2, 3, 4, 0]], dtype=np.int16)
    np.testing.assert_array_equal(r.audio, want)  # zero past each length, not the block padding


def test_padded_layout_unchanged():
    audio = np.arange(12, dtype=np.int16).reshape(2, 6)
    r = SynthesisResult(audio, np.array([6, 3]))
    assert r.audio is audio and r.item(1).tolist() == [6, 7, 8]


@pytest.mark.parametrize("kw", [dict(audio=None), dict(audio=np.zeros((1, 2), np.int16), packed=np.zeros(2, np.int16),
                                                     offsets=np.zeros(1)),
                                dict(audio=None, packed=np.zeros(2, np.int16))],
                         ids=["neither", "both", "packed-without-offsets"])
def test_one_layout_exactly(kw):
    audio = kw.pop("audio")
    with pytest.raises(ValueError):
        SynthesisResult(audio, np.array([2]), **kw)
