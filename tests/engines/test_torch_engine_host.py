"""TorchEngine's row padding (round_rows), its warm-up shapes and warm-up modes, on CPU.

The CUDA paths (device-side assembly, warm-up runs) need a GPU; here the padding is switched
on for a CPU engine (``pad_rows``) to check that it leaves the audio unchanged (up to one int16
step of float rounding) and that every shape stage B sees is one ``warmup_shapes`` lists.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")

from engines import EngineSpec  # noqa: E402
from engines.base import Scales, SynthesisBatch  # noqa: E402
from engines.torch_engine import (  # noqa: E402
    DEFAULT_BUCKETS, TorchEngine, resolve_warmup, round_rows)
from core.errors import EngineUnavailable  # noqa: E402
from core.settings import SettingError  # noqa: E402
from engines.torch_options import ENV, TorchOptions  # noqa: E402


def allowed_sizes(limit):
    """1, 2, 3, 4, 6, 8, 12, ... up to ``limit``: powers of two and three times powers of two."""
    out, p = set(), 1
    while p <= limit:
        out.add(p)
        if 3 * p <= limit:
            out.add(3 * p)
        p *= 2
    return out


def test_round_rows_first_values():
    got = [round_rows(n) for n in range(1, 50)]
    want = [1, 2, 3, 4, 6, 6, 8, 8] + [12] * 4 + [16] * 4 + [24] * 8 + [32] * 8 + [48] * 16 + [64]
    assert got == want


def test_round_rows_properties():
    sizes = allowed_sizes(1 << 14)
    prev = 0
    for n in range(1, 5000):
        r = round_rows(n)
        assert r >= n and r >= prev and r in sizes, n
        assert r - n <= 0.5 * n, n  # at most 50% padding
        assert r == min(s for s in sizes if s >= n), n  # the smallest allowed size
        prev = r
    assert {round_rows(n) for n in range(1, 1025)} == allowed_sizes(1024)


def test_round_rows_cap():
    for cap in (1, 5, 7, 64, 113, 409, 512):
        for n in range(1, cap + 1):
            r = round_rows(n, cap)
            assert n <= r <= cap and r == min(round_rows(n), cap), (n, cap)
    with pytest.raises(ValueError):
        round_rows(6, 5)
    with pytest.raises(ValueError):
        round_rows(0)


def shell_engine(max_frames_per_chunk, max_batch, buckets=DEFAULT_BUCKETS):
    """A TorchEngine without weights: enough for chunk_rows / padded_rows / warmup_shapes."""
    eng = TorchEngine.__new__(TorchEngine)
    eng.spec = EngineSpec(name="torch", device="cuda:0", max_batch=max_batch)
    eng.buckets = sorted(buckets)
    eng.max_frames_per_chunk = max_frames_per_chunk
    eng.pad_rows = True
    return eng


@pytest.mark.parametrize("max_frames, spec_batch, asked", [
    (131072, 512, 512), (131072, 1024, 1024), (131072, 1024, 100), (131072, 64, 1024),
    (8192, 32, 32), (1024, 8, 13), (100000, 300, 300),
])
def test_warmup_shapes_are_exactly_the_padded_shapes(max_frames, spec_batch, asked):
    eng = shell_engine(max_frames, spec_batch)
    shapes = eng.warmup_shapes(asked)
    assert shapes == sorted(set(shapes))
    for f in eng.buckets:
        cap = eng.chunk_rows(f)
        # every chunk _synthesize can make in this bucket has 1..min(cap, asked) items
        want = sorted({eng.padded_rows(n, f) for n in range(1, min(cap, asked) + 1)})
        assert [r for r, g in shapes if g == f] == want, f
        assert max(want) <= cap
    assert {g for _, g in shapes} == set(eng.buckets)


def test_shape_count_bounded():
    eng = shell_engine(131072, 1024)
    per_bucket = {}
    for r, f in eng.warmup_shapes(1024):
        per_bucket[f] = per_bucket.get(f, 0) + 1
    assert max(per_bucket.values()) <= 2 * 11 + 1  # about twice the powers of two up to 1024


def test_resolve_warmup():
    assert resolve_warmup(None, compiled=False) == "lazy"
    assert resolve_warmup(None, compiled=True) == "full"
    assert resolve_warmup(None, compiled=False, option="full") == "full"
    assert resolve_warmup(None, compiled=True, option="lazy") == "lazy"
    assert resolve_warmup(None, compiled=True, option="auto") == "full"
    assert resolve_warmup("lazy", compiled=True, option="full") == "lazy"  # the argument wins
    assert resolve_warmup(True, compiled=False, option="lazy") == "full"
    assert resolve_warmup(False, compiled=True) == "lazy"
    assert resolve_warmup([(4, 64)], compiled=True) == [(4, 64)]
    with pytest.raises(ValueError):
        resolve_warmup("eager", compiled=False)
    # the environment's spelling (any case) becomes the option; anything else is one clear error
    assert TorchOptions.from_env({ENV["warmup"]: "Lazy"}).warmup == "lazy"
    assert TorchOptions.from_env({ENV["warmup"]: ""}).warmup == "auto"
    with pytest.raises(SettingError, match=ENV["warmup"]):
        TorchOptions.from_env({ENV["warmup"]: "yes"})


@pytest.fixture(scope="module")
def small_chunk_engine(voice):
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    # small chunks: several buckets, chunks of 1..8 items, caps (5, 3, ...) that are not allowed sizes
    return TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=2, max_batch=8),
                       max_frames_per_chunk=1024)


def test_cpu_engine_reports_no_warmup(small_chunk_engine):
    assert small_chunk_engine.info.extra["warmup"] == "none"
    assert small_chunk_engine.pad_rows is False


def test_row_padding_changes_no_sample(small_chunk_engine):
    eng = small_chunk_engine
    rng = np.random.default_rng(0)
    seqs = [[int(x) for x in rng.integers(1, 120, size=int(rng.integers(5, 90)))] for _ in range(16)]
    batch = SynthesisBatch.from_sequences(seqs, Scales(0.667, 1.0, 0.8), seed=7)
    ref = eng.synthesize(batch)

    seen = []
    inner = eng._stage_b

    def recording(z, fr):
        seen.append((int(z.shape[0]), int(z.shape[-1]), int((fr > 0).sum())))
        return inner(z, fr)

    eng._stage_b, eng.pad_rows = recording, True
    try:
        got = eng.synthesize(batch)
    finally:
        eng._stage_b, eng.pad_rows = inner, False
    assert np.array_equal(got.sample_lengths, ref.sample_lengths)
    # items do not depend on the padding rows (masked); only float rounding of kernels picked per
    # batch size can differ: at most one int16 step at a few samples
    assert got.audio.shape == ref.audio.shape
    diff = np.abs(got.audio.astype(np.int32) - ref.audio)
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).sum())
    for i, n in enumerate(ref.sample_lengths):
        assert not got.audio[i, n:].any(), i  # padding past the item is exactly zero
    assert any(rows > items for rows, _, items in seen), seen  # padding did happen (7 -> 8 rows)
    sizes = allowed_sizes(1 << 10)
    assert any(rows == items == eng.chunk_rows(f) and rows not in sizes for rows, f, items in seen), seen  # 5: capped
    allowed = set(eng.warmup_shapes(len(seqs)))
    for rows, f, items in seen:
        assert (rows, f) in allowed and rows == round_rows(items, eng.chunk_rows(f)), (rows, f, items)


@pytest.mark.parametrize("workload_s, env, want", [
    (None, None, True),            # a worker: lifetime unknown, autotune (pays off on long runs)
    (3600.0, None, False),         # a one-off hour of audio: tuning would cost more than it saves
    (100 * 3600.0, None, True),    # a long one-off job
    (3600.0, "1", True),           # the environment overrides the hint either way
    (None, "0", False),
], ids=["worker", "short-job", "long-job", "env-on", "env-off"])
def test_autotune_follows_the_workload(voice, monkeypatch, workload_s, env, want):
    AUTOTUNE_ENV = ENV["autotune"]
    if env is None:
        monkeypatch.delenv(AUTOTUNE_ENV, raising=False)
    else:
        monkeypatch.setenv(AUTOTUNE_ENV, env)
    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, workload_s=workload_s))
    assert eng.autotune is want and eng.info.extra["autotune"] is want


def test_chunks_cover_every_item_once():
    # the engine and bench/gpu_throughput.py's profile share these plans; each item is synthesized once
    eng = shell_engine(max_frames_per_chunk=4096, max_batch=512)
    eng.max_phonemes_per_chunk = 2000
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=200)
    a = eng.stage_a_chunks(lengths, 310)
    assert sorted(np.concatenate([rows for rows, _ in a]).tolist()) == list(range(200))
    for rows, tc in a:
        assert lengths[rows].max() <= tc <= 310
        assert len(rows) == 1 or len(rows) * tc <= 2000
    frames = rng.integers(1, 3000, size=200)
    b = eng.stage_b_chunks(frames)
    assert sorted(i for rows, _ in b for i in rows) == list(range(200))
    for rows, f in b:
        assert frames[rows].max() <= f and len(rows) <= eng.chunk_rows(f)
