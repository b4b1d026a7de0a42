"""PyTorch port vs the voice's own ONNX graph (ONNX Runtime), on CPU in fp32.

Padded tail: in a batch, samples past an item's ``sample_lengths[i]`` are exactly 0,
and every convolution of the flow and decoder sees its input masked to the item's
frames, so the item's samples do not depend on the padding: a padded item matches
the ONNX single-utterance reference as tightly as an unpadded one (no tail tolerance).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is needed for the ONNX reference")
pytest.importorskip("piper", reason="piper-tts is needed to phonemize the test sentences")

from engines import EngineSpec  # noqa: E402
from engines.base import Engine, Scales, SynthesisBatch, float_to_int16  # noqa: E402

SENTENCES = [
    "Alice was beginning to get very tired of sitting by her sister on the bank.",
    "Oh dear!",
    "There was nothing so very remarkable in that.",
]
DETERMINISTIC = Scales(noise_scale=0.0, length_scale=1.0, noise_w=0.0)
DEFAULT = Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8)


@pytest.fixture(scope="module")
def ids(voice):
    from piper import PiperVoice

    pv = PiperVoice.load(str(voice.model_path))
    return [pv.phonemes_to_ids(pv.phonemize(s)[0]) for s in SENTENCES]


@pytest.fixture(scope="module", params=[False, True], ids=["stage-a-channel-first", "stage-a-fast"])
def engine(voice, request):
    """Both stage-A paths: channel-first (the CPU default) and channels-last (the CUDA default,
    engines.torch_vits.fast_stage_a), each against ONNX Runtime."""
    from engines.torch_engine import TorchEngine

    return TorchEngine(voice, EngineSpec(name="torch", precision="fp32", device="cpu", threads=2),
                       fast_stage_a=request.param)


@pytest.fixture(scope="module")
def session(voice):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(voice.model_path), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def onnx_refs(session, ids):
    """ONNX Runtime's int16 output of the original model, one utterance at a time."""
    out = []
    for seq in ids:
        audio = session.run(None, {"input": np.array([seq], dtype=np.int64),
                                   "input_lengths": np.array([len(seq)], dtype=np.int64),
                                   "scales": DETERMINISTIC.as_array()})[0]
        out.append(float_to_int16(audio.reshape(-1)).astype(np.float64))
    return out


@pytest.fixture(scope="module")
def batched(engine, ids):
    return engine.synthesize(SynthesisBatch.from_sequences(ids, DETERMINISTIC, seed=0))


def rel_l2(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def test_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.info.extra["fast_stage_a"] is engine.fast_stage_a
    assert engine.info.name == "torch" and engine.info.precision == "fp32" and engine.info.sample_rate == 22050


def test_single_utterance_matches_onnx(engine, ids, onnx_refs):
    res = engine.synthesize(SynthesisBatch.from_sequences([ids[0]], DETERMINISTIC))
    assert res.audio.dtype == np.int16
    assert int(res.sample_lengths[0]) == len(onnx_refs[0])
    assert rel_l2(res.item(0), onnx_refs[0]) <= 1e-3


def test_batched_items_match_onnx_singles(batched, onnx_refs):
    for i, ref in enumerate(onnx_refs):
        got = batched.item(i)
        assert len(got) == len(ref), (i, len(got), len(ref))  # identical sample counts
        assert rel_l2(got, ref) <= 1e-3, i  # the whole item, tail included
        assert not batched.audio[i, len(got):].any(), i  # padding past the item is exactly zero


def test_seeded_runs_reproduce(engine, ids):
    batch = SynthesisBatch.from_sequences(ids[1:], DEFAULT, seed=1234)
    a, b = engine.synthesize(batch), engine.synthesize(batch)
    assert np.array_equal(a.audio, b.audio) and np.array_equal(a.sample_lengths, b.sample_lengths)
    c = engine.synthesize(SynthesisBatch.from_sequences(ids[1:], DEFAULT, seed=4321))
    assert not (c.audio.shape == a.audio.shape and np.array_equal(c.audio, a.audio))


def test_duration_distribution_close_to_onnx(engine, voice, ids):
    """Mean frame count over many noise draws (noise_w 0.8) within 3% of ONNX Runtime's."""
    import onnx

    sub = onnx.utils.Extractor(onnx.load(str(voice.model_path))).extract_model(
        ["input", "input_lengths", "scales"], ["/Clip_output_0"])
    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    n = 48
    gen = torch.Generator().manual_seed(0)
    for seq in (ids[0], ids[2]):
        ref = [float(sess.run(None, {"input": np.array([seq]), "input_lengths": np.array([len(seq)]),
                                     "scales": DEFAULT.as_array()})[0][0]) for _ in range(n)]
        with torch.inference_mode():
            x = torch.tensor([seq] * n)
            noise = torch.randn(n, 2, len(seq), generator=gen) * DEFAULT.noise_w
            frames = engine.model.stage_a(x, torch.full((n,), len(seq)), noise, 1.0)[3].float().numpy()
        assert abs(frames.mean() - np.mean(ref)) <= 0.03 * np.mean(ref), (frames.mean(), np.mean(ref))


def test_lengths_follow_length_scale(engine, session, ids):
    slow = Scales(0.0, 1.5, 0.0)
    res = engine.synthesize(SynthesisBatch.from_sequences(ids[1:], slow))
    for i, seq in enumerate(ids[1:]):
        ref = session.run(None, {"input": np.array([seq]), "input_lengths": np.array([len(seq)]),
                                 "scales": slow.as_array()})[0]
        assert int(res.sample_lengths[i]) == ref.size
