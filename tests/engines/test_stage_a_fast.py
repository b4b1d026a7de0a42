"""Stage A's channels-last fast path (engines.torch_vits.fast_stage_a) against the channel-first
path, on CPU in fp32 with the voice's real weights and real sentences.

The fast path computes the same function in another order (GEMMs instead of convolutions, a
banded relative-attention buffer instead of gathers, fewer masks), so the float results may
differ by rounding only: ``m_p``/``logs_p`` within 1e-5 (relative to the largest value), and
the integer durations -- ``ceil`` of the predictor's output, what the listener hears -- must
be the same on every phoneme. The GPU runs the fast path by default; these tests are what
says it is the same model.
"""

import copy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")

from engines import EngineSpec  # noqa: E402

ALICE = Path(__file__).resolve().parents[2] / "bench" / "data" / "alice_ids.npz"
RTOL = 1e-5


@pytest.fixture(scope="module")
def models(voice):
    """(channel-first reference, fast copy) of the voice's fp32 weights, read from its ONNX file."""
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer
    from engines.tools.weights import onnx_state_and_hparams

    state, hp = onnx_state_and_hparams(voice.model_path)
    ref = VitsSynthesizer(VitsHParams.from_dict(hp))
    ref.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    ref.eval()
    fast = copy.deepcopy(ref).use_fast_stage_a()
    assert not ref.fast_stage_a and fast.fast_stage_a
    return ref, fast


@pytest.fixture(scope="module")
def batch():
    """32 real sentences (Alice, phonemized for this voice) of 20..300 ids and the shortest one, padded to the longest:
    most items carry padding, some a lot of it, as in the engine's stage-A chunks."""
    d = np.load(ALICE)
    off = d["offsets"]
    seqs = [d["ids"][off[i]:off[i + 1]].astype(np.int64) for i in range(len(off) - 1)]
    rng = np.random.default_rng(3)
    pool = [s for s in seqs if 20 <= len(s) <= 300]
    pick = [pool[i] for i in rng.choice(len(pool), size=32, replace=False)]
    pick.append(min(seqs, key=len))  # the shortest sentence of the book: padding on most of its row
    t = max(len(s) for s in pick)
    ids = torch.zeros(len(pick), t, dtype=torch.long)
    for i, s in enumerate(pick):
        ids[i, :len(s)] = torch.from_numpy(s)
    lengths = torch.tensor([len(s) for s in pick])
    assert lengths.min() < 15 and lengths.max() > 150
    return ids, lengths


def noise_for(ids, seed, noise_w):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(ids.shape[0], 2, ids.shape[1], generator=gen) * noise_w


def run(model, ids, lengths, noise, length_scale=1.0):
    with torch.inference_mode():
        return model.stage_a(ids, lengths, noise, length_scale)


def rel_err(got, want):
    return float((got - want).abs().max() / want.abs().max())


@pytest.fixture(scope="module")
def outputs(models, batch):
    """Both paths on the batch for each noise case, computed once."""
    ref, fast = models
    ids, lengths = batch
    out = {}
    for seed, nw in CASES:
        noise = noise_for(ids, seed, nw)
        out[seed, nw] = run(ref, ids, lengths, noise), run(fast, ids, lengths, noise)
    return out


# noise_w 0.8 is the voice's default (three noise draws: the spline flows see different inputs);
# noise_w 0 is the deterministic setting (--noise-w 0, the ONNX comparison tests): the flows run
# on zeros, so the durations depend on the encoder alone
CASES = [(0, 0.8), (1, 0.8), (2, 0.8), (0, 0.0)]


@pytest.mark.parametrize("seed, noise_w", CASES)
def test_prior_matches(outputs, batch, seed, noise_w):
    # m_p and logs_p feed stage B directly: rounding-level differences only, and exact zeros
    # past each item's length (the engine copies the whole padded chunk row)
    (m0, l0, _, _), (m1, l1, _, _) = outputs[seed, noise_w]
    _, lengths = batch
    assert m1.shape == m0.shape and l1.shape == l0.shape
    assert rel_err(m1, m0) <= RTOL and rel_err(l1, l0) <= RTOL, (rel_err(m1, m0), rel_err(l1, l0))
    pad = torch.arange(m0.shape[-1])[None, :] >= lengths[:, None]
    assert not m1.permute(1, 0, 2)[:, pad].any() and not l1.permute(1, 0, 2)[:, pad].any()


@pytest.mark.parametrize("seed, noise_w", CASES)
def test_durations_identical(outputs, batch, seed, noise_w):
    # durations are ceil() of exp(logw): any real difference in the predictor shows up as a
    # changed integer somewhere in ~4,000 phonemes; rounding-level differences should not
    (_, _, d0, f0), (_, _, d1, f1) = outputs[seed, noise_w]
    _, lengths = batch
    assert d1.dtype == d0.dtype and f1.dtype == f0.dtype == torch.long
    changed = (d1 != d0).nonzero().tolist()
    assert not changed, f"{len(changed)} durations differ, first at (item, phoneme) {changed[:5]}"
    assert torch.equal(f1, f0)
    pad = torch.arange(d0.shape[-1])[None, :] >= lengths[:, None]
    assert not d1[pad].any()  # no duration past an item's length


def test_length_scale(models, batch):
    # length_scale multiplies before the ceil: a slower voice rounds other values up
    ref, fast = models
    ids, lengths = batch
    noise = noise_for(ids, 5, 0.8)
    a, b = run(ref, ids, lengths, noise, 1.37), run(fast, ids, lengths, noise, 1.37)
    assert torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])


def test_items_do_not_depend_on_padding(models, batch):
    # an item alone (no padding), in the batch, and in the batch padded 37 columns wider must
    # give the same durations: padding keys get probability exactly 0 and every convolution's
    # input is masked, so only rounding of differently shaped GEMMs may differ
    _, fast = models
    ids, lengths = batch
    noise = noise_for(ids, 7, 0.8)
    m_b, l_b, d_b, f_b = run(fast, ids, lengths, noise)
    wide = torch.nn.functional.pad(ids, (0, 37), value=5)  # junk ids past the lengths, not zeros
    wide_noise = torch.nn.functional.pad(noise, (0, 37), value=1.0)
    m_w, _, d_w, f_w = run(fast, wide, lengths, wide_noise)
    assert torch.equal(d_w[:, :ids.shape[1]], d_b) and not d_w[:, ids.shape[1]:].any() and torch.equal(f_w, f_b)
    assert rel_err(m_w[..., :ids.shape[1]], m_b) <= RTOL
    for i in [int(lengths.argmin()), int(lengths.argmax()), 0, 5]:
        n = int(lengths[i])
        m1, l1, d1, f1 = run(fast, ids[i:i + 1, :n], lengths[i:i + 1], noise[i:i + 1, :, :n])
        assert torch.equal(d1[0], d_b[i, :n]) and int(f1) == int(f_b[i]), i
        assert rel_err(m1[0], m_b[i, :, :n]) <= RTOL and rel_err(l1[0], l_b[i, :, :n]) <= RTOL, i


def test_state_dict_unchanged_and_repacked(models, batch):
    # the fast path only adds packed copies: parameter names and shapes stay, so weights load
    # as before; the copies follow a dtype/device move (.to) and a later load_weights
    ref, fast = models
    sd_ref, sd_fast = ref.state_dict(), fast.state_dict()
    assert list(sd_ref) == list(sd_fast)
    assert all(sd_ref[k].shape == sd_fast[k].shape and torch.equal(sd_ref[k], sd_fast[k]) for k in sd_ref)
    ids, lengths = batch
    ids, lengths = ids[:3, :int(lengths[:3].max())], lengths[:3]
    noise = noise_for(ids, 1, 0.8)
    f64 = copy.deepcopy(fast).to(torch.float64)
    r64 = copy.deepcopy(ref).to(torch.float64)
    a, b = run(r64, ids, lengths, noise.double()), run(f64, ids, lengths, noise.double())
    assert b[0].dtype == torch.float64 and rel_err(b[0], a[0]) <= 1e-12 and torch.equal(a[2], b[2])
    # new weights through load_weights: the packed matrices must not be stale
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    state["enc_p.encoder.ffn_layers.2.conv_1.weight"] *= 1.5
    state["dp.flows.3.proj.bias"] += 0.3
    r2, f2 = copy.deepcopy(ref), copy.deepcopy(fast)
    r2.load_weights(state)
    f2.load_weights(state)
    a, b = run(r2, ids, lengths, noise), run(f2, ids, lengths, noise)
    assert rel_err(b[0], a[0]) <= RTOL and torch.equal(a[2], b[2])
    assert rel_err(b[0], run(fast, ids, lengths, noise)[0]) > 1e-3  # the change did reach the fast path


@pytest.mark.parametrize("arg, want", [
    (None, False),   # CPU default: the channel-first path (CUDA: always channels-last)
    (True, True),
    (False, False),
], ids=["cpu-default", "arg-on", "arg-off"])
def test_engine_switch(voice, arg, want):
    from engines.torch_engine import TorchEngine

    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1), fast_stage_a=arg)
    assert eng.fast_stage_a is want and eng.info.extra["fast_stage_a"] is want
    assert eng.model.fast_stage_a is want


@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0, 20.0])
def test_spline_same_arithmetic(scale):
    # the fast spline regroups rq_spline_inverse's kernels but keeps its arithmetic value for value,
    # so on CPU it is bit-identical; inputs on the tail bounds, past them, and (large scale) with
    # bins of nearly zero width test the bin search at its edges
    from engines.torch_vits.fast_stage_a import spline_inverse
    from engines.torch_vits.modules import rq_spline_inverse

    gen = torch.Generator().manual_seed(11)
    k, tb = 10, 5.0
    st = torch.randn(6, 41, 3 * k - 1, generator=gen) * scale
    x = torch.randn(6, 41, generator=gen) * 3
    x[0, :6] = torch.tensor([-tb, tb, 4.9999995, -7.0, 6.0, 0.0])
    st[1] = 0.0  # a padding row: the projection is masked to 0 there
    want = rq_spline_inverse(x, st[..., :k], st[..., k:2 * k], st[..., 2 * k:], tb)
    got = spline_inverse(x, st, k, tb)
    assert torch.equal(got, want), float((got - want).abs().max())
