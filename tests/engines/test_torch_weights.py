"""Weights: ONNX -> state dict, safetensors export/round trip, engine without the ONNX file, errors."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")

from engines import EngineSpec  # noqa: E402
from engines.base import Scales, SynthesisBatch  # noqa: E402
from core.errors import DeterministicEngineError, EngineUnavailable, InputError, VoiceError  # noqa: E402

# phoneme ids of "Oh dear!" and a short made-up sequence: no phonemizer needed here
IDS = [[1, 0, 27, 0, 100, 0, 74, 0, 3, 0, 17, 0, 59, 0, 120, 0, 88, 0, 4, 0, 2],
       [1, 0, 31, 0, 120, 0, 14, 0, 3, 0, 26, 0, 51, 0, 2]]
DETERMINISTIC = Scales(0.0, 1.0, 0.0)


@pytest.fixture(scope="module")
def state_hp(voice):
    from engines.tools.weights import onnx_state_and_hparams

    return onnx_state_and_hparams(voice.model_path)


@pytest.fixture(scope="module")
def exported(voice, tmp_path_factory):
    from engines.tools.weights import export_weights

    d = tmp_path_factory.mktemp("w")
    return export_weights(voice, d / "joe32.safetensors", dtype="fp32"), export_weights(voice, d / "joe16.safetensors")


@pytest.fixture(scope="module")
def onnx_engine_out(voice):
    from engines.torch_engine import TorchEngine

    eng = TorchEngine(voice, EngineSpec(name="torch"))
    return eng.synthesize(SynthesisBatch.from_sequences(IDS, DETERMINISTIC))


def test_state_dict_names_and_hparams(state_hp):
    sd, hp = state_hp
    # generated initializer names were mapped through their consuming nodes
    assert not any(k.startswith("onnx::") or k.startswith("/") for k in sd)
    assert sd["enc_p.emb.weight"].shape == (256, 192)
    assert sd["flow.flows.6.enc.in_layers.0.weight"].shape == (384, 192, 5)
    assert "dp.flows.0.logs" in sd and all(v.dtype == np.float32 for v in sd.values())
    assert hp["upsample_rates"] == [8, 8, 4] and hp["upsample_kernel_sizes"] == [16, 16, 8]
    assert hp["resblock"] == "2" and hp["resblock_dilations"] == [[1, 2], [2, 6], [3, 12]]
    assert (hp["n_layers"], hp["n_heads"], hp["window_size"], hp["ffn_kernel_size"]) == (6, 2, 4, 3)
    assert hp["dp_num_bins"] == 10 and hp["flow_n_flows"] == 4 and hp["flow_mean_only"]


def test_export_metadata(voice, exported):
    from safetensors import safe_open

    f32, f16 = exported
    with safe_open(str(f16), framework="numpy") as f:
        meta = f.metadata()
        assert f.get_tensor("dec.conv_pre.weight").dtype == np.float16
        assert f.get_tensor("enc_p.encoder.attn_layers.0.conv_q.weight").dtype == np.float32  # stage A stays fp32
    assert meta["sample_rate"] == "22050" and meta["hop_length"] == "256" and meta["dtype"] == "fp16"
    assert meta["source_sha256"] == voice.model_sha256()
    assert json.loads(meta["hparams"])["upsample_rates"] == [8, 8, 4]
    assert f16.stat().st_size < 0.8 * f32.stat().st_size
    assert not list(f32.parent.glob("*.tmp"))  # written atomically, nothing left behind


def test_fp32_safetensors_gives_same_audio(voice, exported, onnx_engine_out):
    from engines.torch_engine import TorchEngine

    eng = TorchEngine(voice, EngineSpec(name="torch"), weights_path=exported[0])
    res = eng.synthesize(SynthesisBatch.from_sequences(IDS, DETERMINISTIC))
    assert np.array_equal(res.audio, onnx_engine_out.audio)
    assert np.array_equal(res.sample_lengths, onnx_engine_out.sample_lengths)


def test_fp16_safetensors_without_onnx(exported, onnx_engine_out):
    """A host with neither the ONNX file nor piper: the voice is rebuilt from the file's metadata."""
    from engines.torch_engine import TorchEngine
    from core.voice import voice_from_weights

    v = voice_from_weights(exported[1])
    assert v.sample_rate == 22050 and v.noise_w == pytest.approx(0.8)
    res = TorchEngine(v, EngineSpec(name="torch")).synthesize(SynthesisBatch.from_sequences(IDS, DETERMINISTIC))
    # fp16-rounded flow/decoder weights, fp32 arithmetic: same lengths, audio within 1% of fp32 weights
    assert np.array_equal(res.sample_lengths, onnx_engine_out.sample_lengths)
    for i in range(len(IDS)):
        ref = onnx_engine_out.item(i).astype(np.float64)
        assert np.linalg.norm(res.item(i) - ref) / np.linalg.norm(ref) < 0.01


def test_export_errors(voice, tmp_path):
    from engines.tools.weights import export_weights, read_weights

    with pytest.raises(InputError, match="fp16 or fp32"):
        export_weights(voice, tmp_path / "a.safetensors", dtype="int4")
    with pytest.raises(InputError, match="does not exist"):
        export_weights(voice, tmp_path / "nope" / "a.safetensors")
    with pytest.raises(InputError, match=".safetensors"):
        export_weights(voice, tmp_path / "a.bin")
    with pytest.raises(VoiceError):
        export_weights("/nonexistent/voice.onnx", tmp_path / "a.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(VoiceError, match="export it again"):
        read_weights(tmp_path / "bad.safetensors")


def test_engine_errors(voice):
    from engines.torch_engine import TorchEngine

    with pytest.raises(EngineUnavailable, match="fp32"):
        TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device="cpu"))
    with pytest.raises(EngineUnavailable):
        TorchEngine(voice, EngineSpec(name="torch", precision="int8", device="cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(EngineUnavailable, match="--device cpu"):
            TorchEngine(voice, EngineSpec(name="torch", device="cuda:0"))
    eng = TorchEngine(voice, EngineSpec(name="torch"))
    with pytest.raises(DeterministicEngineError, match="phoneme ids"):
        eng.synthesize(SynthesisBatch.from_sequences([[1, 5000, 2]], DETERMINISTIC))
