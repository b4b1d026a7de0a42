"""INT8: the Q/DQ stage B (structure, per-channel weights, calibrated activations, per-layer choice),
its quality against fp32 on real utterances, artefacts, and the pieces it is built from.

Shares the session cache of test_export.py (built there on first use with a tiny calibration set);
run alone, this module builds it itself.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install -e '.[torch]' to export the stages")
pytest.importorskip("onnxscript", reason="onnxscript (torch's ONNX exporter) is not installed")
pytest.importorskip("onnxruntime")

from engines import EngineSpec  # noqa: E402
from engines.base import Engine, Scales, SynthesisBatch  # noqa: E402
from engines.tools.export import FILES, STAGE_B_INPUTS, example_inputs, ort_session, rel_l2  # noqa: E402
from engines.tools import quantize as Q  # noqa: E402
from jobs.calibration import CalibrationCorpus  # noqa: E402

#: One pytest-xdist process runs this module and the other one (test_export.py, test_quantize.py), so
#: the cache under its base temporary directory is built once (each process has a base directory of its own).
pytestmark = pytest.mark.xdist_group("onnx-staged-cache")

SENTENCES = [  # chapter I of Alice: not in the calibration corpus (chapters VIII-XII)
    "So she was considering in her own mind, as well as she could, whether the pleasure of making a daisy-chain "
    "would be worth the trouble.",
    "Down, down, down. Would the fall never come to an end?",
]
DEFAULT = Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8)
TINY_CALIBRATION = CalibrationCorpus(n_utterances=3, scan_utterances=1, max_ids=40)


@pytest.fixture(scope="module")
def cache(tmp_path_factory, voice):
    from engines.tools.quantize import ensure_int8

    directory = tmp_path_factory.getbasetemp() / "booktts-cache" / voice.model_sha256()
    ensure_int8(voice, directory, TINY_CALIBRATION, threads=2)
    return directory


@pytest.fixture(scope="module")
def engines(cache, voice):
    from engines.onnx_staged import OnnxStagedEngine

    return {p: OnnxStagedEngine(voice, EngineSpec(precision=p, threads=2), cache_dir=cache) for p in ("fp32", "int8")}


@pytest.fixture(scope="module")
def ids(voice):
    from jobs.phonemize import Phonemizer

    ph = Phonemizer(voice)
    return [ph(s).ids for s in SENTENCES]


def test_qdq_model_structure(cache):
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load(str(cache / FILES["int8"]))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") >= 1 and ops.count("DequantizeLinear") > ops.count("QuantizeLinear")
    inits = {i.name: i for i in model.graph.initializer}
    int8_weights = [n for n, i in inits.items() if n.endswith(".weight__int8")]
    assert int8_weights and all(inits[n].data_type == TensorProto.INT8 for n in int8_weights)
    for n in int8_weights:  # per-channel: one scale per output channel
        w = numpy_helper.to_array(inits[n])
        scale = numpy_helper.to_array(inits[n.replace("__int8", "__wscale")])
        assert scale.ndim == 1 and scale.size in (w.shape[0], w.shape[1]) and scale.size > 1
    act_scales = [n for n in inits if n.endswith("__qscale")]
    assert act_scales and all(numpy_helper.to_array(inits[n]).shape == () for n in act_scales)

    rep = json.loads((cache / FILES["int8"]).with_suffix(".json").read_text())
    sites = {s["name"]: s for s in rep["sites"]}
    assert rep["int8_sites"] == sum(s["int8"] for s in sites.values()) >= 1
    assert any(s["kind"] == "add" for s in sites.values()), "residual additions are scanned too"
    assert all("alone_mcd_db" in s for s in sites.values())
    # measured sensitivity keeps the full-rate output layer in float, and every int8 site was
    # within the target when measured alone
    assert not sites["dec.conv_post"]["int8"] and sites["dec.conv_post"]["alone_mcd_db"] > rep["target_mcd_db"]
    assert all(s["alone_mcd_db"] <= rep["target_mcd_db"] for s in sites.values() if s["int8"])


def test_int8_engine_quality_and_no_artefacts(engines, ids):
    mcd = Q.mcd_function()
    batch = SynthesisBatch.from_sequences(ids, DEFAULT, seed=11)
    ref = engines["fp32"].synthesize(batch)
    got = engines["int8"].synthesize(batch)
    assert isinstance(engines["int8"], Engine) and engines["int8"].info.precision == "int8"
    np.testing.assert_array_equal(got.sample_lengths, ref.sample_lengths)
    for i in range(len(ids)):
        x = got.item(i).astype(np.float64) / 32768.0
        assert np.all(np.isfinite(x))
        assert np.mean(np.abs(x) >= 32767 / 32768) < 1e-4, "clipping"
        assert abs(x.mean()) < 2e-3, "DC offset"
        assert mcd(ref.item(i), got.item(i)) <= 3.0  # loose CI bound; the measured table is in docs
        assert not np.any(got.audio[i, int(got.sample_lengths[i]):])


def test_simulation_equals_the_real_qdq_graph(cache, voice):
    """The scan scores a site through the gated simulation graph; the written Q/DQ graph must give
    the same audio for the same choice of sites."""
    import onnx

    model = onnx.load(str(cache / FILES["fp32"]))
    sites = Q.find_sites(model)
    hp = json.loads((cache / FILES["meta"]).read_text())["hparams"]
    _, b_in = example_inputs(hp, 2, 8, 24, seed=5)
    feeds = [dict(zip(STAGE_B_INPUTS, b_in))]
    stats = Q.collect_ranges(model, sites, feeds, threads=2)
    clips = {t: stats.clip(t, "mse") for t in stats.tensors}
    chosen = {s.name for s in sites[::7]} | {next(s.name for s in sites if s.kind == "add")}
    gates = np.array([1.0 if s.name in chosen else 0.0 for s in sites], dtype=np.float32)
    sim = ort_session(Q.build_sim_model(model, sites, clips).SerializeToString(), 2)
    real = ort_session(Q.build_qdq_model(model, sites, clips, chosen).SerializeToString(), 2)
    a = sim.run(["audio"], {**feeds[0], Q.GATE_INPUT: gates})[0]
    b = real.run(["audio"], feeds[0])[0]
    fp32 = ort_session(cache / FILES["fp32"], 2).run(["audio"], feeds[0])[0]
    # x + 1 * (DQ(Q(x)) - x) is DQ(Q(x)) up to float rounding, which can move a later rounding by one
    # step: the two agree far more closely than either agrees with fp32
    assert rel_l2(a, b) <= 0.05 * rel_l2(b, fp32) and rel_l2(a, b) <= 5e-3
    zero = sim.run(["audio"], {**feeds[0], Q.GATE_INPUT: np.zeros_like(gates)})[0]
    assert rel_l2(zero, fp32) <= 1e-5  # all gates 0: the fp32 graph (up to kernel choice)


def test_quantize_weight_per_channel():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3)).astype(np.float32) * np.arange(1, 9, dtype=np.float32)[:, None, None]
    q, s = Q.quantize_weight(w, 0)
    assert q.dtype == np.int8 and s.shape == (8,) and np.abs(q).max() <= 127
    assert np.all(np.abs(q * s[:, None, None] - w) <= s[:, None, None] / 2 + 1e-7)
    qt, st = Q.quantize_weight(np.transpose(w, (1, 0, 2)), 1)  # ConvTranspose layout [in, out, k]
    assert st.shape == (8,) and np.allclose(st, s)


def test_range_statistics():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(2_000_000).astype(np.float32)
    x[0] = 40.0  # one outlier
    st = Q.RangeStats(["t"])
    st.update("t", x)
    assert st.clip("t", "max") == pytest.approx(40.0)
    assert 4.0 < st.clip("t", "mse") < 20.0  # the lone outlier is clipped, the bulk is not
    assert 3.5 < st.clip("t", "percentile", 99.99) < 5.0
    with pytest.raises(Exception):
        st.update("t", np.array([np.nan], dtype=np.float32))


def test_shipped_calibration_corpus(voice):
    from jobs import calibration as C

    sents = C.corpus_sentences()
    assert len(sents) >= 300
    cal = C.corpus_ids(voice, n=200)
    assert len(cal) == 200 and all(12 <= len(s) <= 300 for s in cal)
    scan = C.corpus_ids(voice, n=4)
    held_out = C.corpus_ids(voice, n=200, skip=4)
    assert not any(s in held_out for s in scan)


def test_without_calibration_utterances_a_missing_int8_model_is_one_line(cache, voice, tmp_path):
    """The engines phonemize no text: a caller that gives no calibration utterances gets the cached model,
    or one line saying how to make it (never a traceback from a phonemizer)."""
    import shutil

    from core.errors import EngineUnavailable
    from engines.tools.export import FILES
    from engines.tools.quantize import ensure_int8

    assert ensure_int8(voice, cache) == cache / FILES["int8"]  # made already: no utterances needed
    bare = tmp_path / "bare"
    bare.mkdir()
    for key in ("stage_a", "fp32", "meta"):
        shutil.copy2(cache / FILES[key], bare / FILES[key])
    with pytest.raises(EngineUnavailable, match=r"has no INT8 model in .* nothing was given to calibrate it on"):
        ensure_int8(voice, bare)
    assert not (bare / FILES["int8"]).exists()


def test_calibration_set_comes_from_the_caller(voice):
    from jobs.calibration import CalibrationCorpus

    got = CalibrationCorpus(n_utterances=5, scan_utterances=2, max_ids=60)(voice)
    assert len(got.ids) == 5 and len(got.scan_ids) == 2 and not any(s in got.ids for s in got.scan_ids)
    assert all(isinstance(i, int) for s in got.ids for i in s) and got.source[0].endswith(".txt")
