"""ONNX export of the two stages: equivalence with the PyTorch port, dynamic axes, no random ops, fp16,
and the staged ONNX Runtime engine building its cache on first use.

The whole session shares one cache directory (``<pytest base temp>/booktts-cache/<voice sha>``):
the first fixture here builds it from nothing the way ``--engine onnx --precision int8`` does on a
fresh host (export + INT8 calibration, with a tiny calibration set to keep CI fast), and every
other test of this module and of test_quantize.py reads what it wrote.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install -e '.[torch]' to export the stages")
pytest.importorskip("onnxscript", reason="onnxscript (torch's ONNX exporter) is not installed")
ort = pytest.importorskip("onnxruntime")

from engines import EngineSpec  # noqa: E402
from engines.base import Engine, Scales, SynthesisBatch  # noqa: E402
from engines.tools.export import (FILES, STAGE_A_INPUTS, STAGE_A_OUTPUTS, STAGE_B_INPUTS, example_inputs,  # noqa: E402
                            ort_session, prior_on_frames, random_ops, rel_l2)

SENTENCES = [
    "Alice was beginning to get very tired of sitting by her sister on the bank.",
    "Oh dear!",
    "There was nothing so very remarkable in that.",
]
DETERMINISTIC = Scales(noise_scale=0.0, length_scale=1.0, noise_w=0.0)
DEFAULT = Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8)
from jobs.calibration import CalibrationCorpus  # noqa: E402

#: One pytest-xdist process runs this module and the other one (test_export.py, test_quantize.py), so
#: the cache under its base temporary directory is built once (each process has a base directory of its own).
pytestmark = pytest.mark.xdist_group("onnx-staged-cache")

#: Tiny calibration for CI (the real default is 200 utterances and a 4-utterance scan).
TINY_CALIBRATION = CalibrationCorpus(n_utterances=3, scan_utterances=1, max_ids=40)


def shared_cache(tmp_path_factory, voice):
    return tmp_path_factory.getbasetemp() / "booktts-cache" / voice.model_sha256()


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def first_use(tmp_path_factory, voice):
    """The int8 staged engine built into an empty cache: export + calibration happen here."""
    from engines.onnx_staged import OnnxStagedEngine

    cache = shared_cache(tmp_path_factory, voice)
    existed = {k: (cache / f).is_file() for k, f in FILES.items()}
    handler = _Collect()
    logger = logging.getLogger("booktts")
    logger.addHandler(handler)
    try:
        engine = OnnxStagedEngine(voice, EngineSpec(precision="int8", threads=2), cache_dir=cache,
                                  calibration=TINY_CALIBRATION)
    finally:
        logger.removeHandler(handler)
    return {"engine": engine, "cache": cache, "existed": existed, "messages": handler.messages}


@pytest.fixture(scope="module")
def port(voice):
    from engines.tools.export import load_port

    return load_port(voice)


@pytest.fixture(scope="module")
def ids(voice):
    from jobs.phonemize import Phonemizer

    ph = Phonemizer(voice)
    return [ph(s).ids for s in SENTENCES]


def test_first_use_creates_the_cache_and_says_so(first_use):
    cache = first_use["cache"]
    for key in ("stage_a", "fp32", "int8", "meta"):
        assert (cache / FILES[key]).is_file(), key
    assert (cache / FILES["int8"]).with_suffix(".json").is_file()
    msgs = " | ".join(first_use["messages"])
    if not first_use["existed"]["stage_a"]:
        assert "exporting the staged ONNX graphs" in msgs
    if not first_use["existed"]["int8"]:
        assert "creating the INT8 model" in msgs and "calibration corpus" in msgs
    assert first_use["engine"].info.precision == "int8"


def test_no_random_ops_and_noise_is_an_input(first_use):
    import onnx

    for key in ("stage_a", "fp32", "int8"):
        model = onnx.load(str(first_use["cache"] / FILES[key]))
        assert random_ops(model) == set(), key
    a = onnx.load(str(first_use["cache"] / FILES["stage_a"]))
    assert [i.name for i in a.graph.input] == list(STAGE_A_INPUTS)
    assert [o.name for o in a.graph.output] == list(STAGE_A_OUTPUTS)


def _run_port(port, a_in, b_in):
    from engines.tools.export import _stage_modules

    sa, sb = _stage_modules(port, "fp32")
    with torch.no_grad():
        ra = [t.numpy() for t in sa(*(torch.from_numpy(x) for x in a_in))]
        rb = sb(*(torch.from_numpy(x) for x in b_in))
    return ra, [t.numpy() for t in rb]


def test_fp32_stages_match_the_port_on_real_utterances(first_use, port, ids):
    """Stage A on a padded batch of real phoneme ids, then stage B on the prior it gives (same noise)."""
    cache = first_use["cache"]
    batch = SynthesisBatch.from_sequences(ids, DEFAULT)
    rng = np.random.default_rng(0)
    dp = rng.standard_normal((len(ids), 2, batch.phoneme_ids.shape[1]), dtype=np.float32)
    a_in = (batch.phoneme_ids, batch.lengths, DEFAULT.as_array(), dp)
    got_a = ort_session(cache / FILES["stage_a"], 2).run(None, dict(zip(STAGE_A_INPUTS, a_in)))
    m_p, logs_p, dur, frames = got_a
    n = int(frames.max())
    z = prior_on_frames(m_p, logs_p, dur, n, rng.standard_normal((len(ids), m_p.shape[1], n), dtype=np.float32), 0.667)
    b_in = (z, frames)
    ref_a, ref_b = _run_port(port, a_in, b_in)
    for name, g, r in zip(STAGE_A_OUTPUTS, got_a, ref_a):
        assert rel_l2(g, r) <= 1e-3, name
    np.testing.assert_array_equal(frames, ref_a[3])
    audio, samples = ort_session(cache / FILES["fp32"], 2).run(None, dict(zip(STAGE_B_INPUTS, b_in)))
    assert rel_l2(audio, ref_b[0]) <= 1e-3
    np.testing.assert_array_equal(samples, frames * 256)
    for i, f in enumerate(frames):  # exactly zero past each item's samples
        assert not np.any(audio[i, int(f) * 256:])


@pytest.mark.parametrize("batch,phonemes,frames", [(1, 5, 7), (3, 37, 64), (6, 90, 150)])
def test_dynamic_axes(first_use, port, batch, phonemes, frames):
    cache = first_use["cache"]
    a_in, b_in = example_inputs(port.hp.to_dict(), batch, phonemes, frames, seed=batch)
    ref_a, ref_b = _run_port(port, a_in, b_in)
    got_a = ort_session(cache / FILES["stage_a"], 2).run(None, dict(zip(STAGE_A_INPUTS, a_in)))
    got_b = ort_session(cache / FILES["fp32"], 2).run(None, dict(zip(STAGE_B_INPUTS, b_in)))
    assert got_a[0].shape == (batch, port.hp.inter_channels, phonemes)
    assert got_b[0].shape == (batch, frames * 256)
    for g, r in zip(got_a + got_b, ref_a + ref_b):
        assert rel_l2(g, r) <= 1e-3


def test_staged_fp32_engine_matches_the_torch_engine(first_use, voice, ids):
    """Whole pipeline, deterministic scales: the staged ORT engine against the PyTorch engine."""
    from engines.onnx_staged import OnnxStagedEngine
    from engines.torch_engine import TorchEngine

    staged = OnnxStagedEngine(voice, EngineSpec(precision="fp32", threads=2), cache_dir=first_use["cache"])
    assert isinstance(staged, Engine) and staged.info.name == "onnx" and staged.info.extra["staged"]
    batch = SynthesisBatch.from_sequences(ids, DETERMINISTIC, seed=0)
    ours = staged.synthesize(batch)
    ref = TorchEngine(voice, EngineSpec(name="torch", threads=2)).synthesize(batch)
    np.testing.assert_array_equal(ours.sample_lengths, ref.sample_lengths)
    for i in range(len(ids)):
        assert rel_l2(ours.item(i), ref.item(i).astype(np.float64)) <= 1e-3
        assert not np.any(ours.audio[i, int(ours.sample_lengths[i]):])


def test_staged_engine_seeds(first_use, voice, ids):
    from engines.onnx_staged import OnnxStagedEngine

    e = OnnxStagedEngine(voice, EngineSpec(precision="fp32", threads=2), cache_dir=first_use["cache"])
    b = SynthesisBatch.from_sequences(ids[:2], DEFAULT, seed=7)
    r1, r2 = e.synthesize(b), e.synthesize(b)
    np.testing.assert_array_equal(r1.audio, r2.audio)
    r3 = e.synthesize(SynthesisBatch.from_sequences(ids[:2], DEFAULT, seed=8))
    assert not np.array_equal(r1.audio, r3.audio)
    # micro-batching does not change an item's noise (only float rounding: other kernel shapes)
    e.micro_batch = 1
    r4 = e.synthesize(b)
    np.testing.assert_array_equal(r4.sample_lengths, r1.sample_lengths)
    assert np.abs(r4.audio.astype(np.int32) - r1.audio).max() <= 4


def test_fp16_export_is_a_half_precision_graph(first_use, voice, port):
    import onnx
    from onnx import TensorProto

    from engines.tools.export import ensure_exported

    staged = ensure_exported(voice, ("fp16",), first_use["cache"])
    model = onnx.load(str(staged.stage_b["fp16"]))
    types = {i.data_type for i in model.graph.initializer}
    assert TensorProto.FLOAT16 in types
    assert any(n.op_type == "Cast" for n in model.graph.node)
    assert random_ops(model) == set()
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT, TensorProto.INT64]
    _, b_in = example_inputs(port.hp.to_dict(), 2, 10, 40, seed=3)
    half = ort_session(staged.stage_b["fp16"], 2).run(["audio"], dict(zip(STAGE_B_INPUTS, b_in)))[0]
    full = ort_session(staged.stage_b["fp32"], 2).run(["audio"], dict(zip(STAGE_B_INPUTS, b_in)))[0]
    assert np.all(np.isfinite(half)) and rel_l2(half, full) <= 2e-2
