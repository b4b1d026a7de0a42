"""ONNX Runtime engine: real batches, exact lengths, and equivalence with Piper's own output."""

import numpy as np
import pytest

from engines.base import Engine, Scales, SynthesisBatch

SENTENCES = [
    "Alice was beginning to get very tired of sitting by her sister on the bank.",
    "So she was considering in her own mind.",
    "Oh dear!",
    "There was nothing so very remarkable in that; nor did Alice think it so very much out of the way.",
]
DETERMINISTIC = Scales(noise_scale=0.0, length_scale=1.0, noise_w=0.0)
#: How far back from an item's end padding can reach. The decoder's receptive field spans a few
#: frames; with zero-padding beyond the end (single) vs masked frames (batched) the last ~2048
#: samples (93 ms) may differ slightly. We check the body tightly and the tail loosely.
TAIL_SAMPLES = 2048


@pytest.fixture(scope="module")
def piper_voice(voice):
    from piper import PiperVoice

    return PiperVoice.load(str(voice.model_path))


@pytest.fixture(scope="module")
def ids(piper_voice):
    return [piper_voice.phonemes_to_ids(piper_voice.phonemize(s)[0]) for s in SENTENCES]


def test_engine_implements_protocol(onnx_engine):
    assert isinstance(onnx_engine, Engine)
    assert onnx_engine.info.sample_rate == 22050


@pytest.fixture(scope="module")
def batched_engine(voice):
    """Real batches through one session (the default runs items one per session, in parallel)."""
    from engines import EngineSpec
    from engines.onnx_cpu import OnnxEngine

    return OnnxEngine(voice, EngineSpec(threads=2), micro_batch=len(SENTENCES), sessions=1)


@pytest.mark.parametrize("which", ["batched", "default"], ids=["one-padded-batch", "parallel-sessions"])
def test_batched_output_matches_piper_single_utterance(which, batched_engine, onnx_engine, piper_voice, ids):
    from piper.config import SynthesisConfig

    engine = batched_engine if which == "batched" else onnx_engine
    res = engine.synthesize(SynthesisBatch.from_sequences(ids, DETERMINISTIC))
    assert res.audio.dtype == np.int16 and res.audio.shape[0] == len(ids)
    cfg = SynthesisConfig(noise_scale=0.0, length_scale=1.0, noise_w_scale=0.0, normalize_audio=False)
    for i, seq in enumerate(ids):
        ref = piper_voice.phoneme_ids_to_audio(seq, cfg)  # Piper's own single-utterance float output
        ref16 = np.clip(ref * 32767.0, -32767, 32767)
        got = res.item(i).astype(np.float64)
        # exact length: the graph's own frame count x hop, never guessed from silence
        assert len(got) == len(ref16), (i, len(got), len(ref16))
        body = slice(0, len(got) - TAIL_SAMPLES)
        rel_body = np.linalg.norm(got[body] - ref16[body]) / np.linalg.norm(ref16[body])
        rel_all = np.linalg.norm(got - ref16) / np.linalg.norm(ref16)
        assert rel_body < 1e-3, (i, rel_body)
        assert rel_all < 5e-3, (i, rel_all)
        # what lies past the item's length is padding of the batch, not part of the item
        assert res.audio.shape[1] >= len(got)


def test_lengths_scale_with_length_scale(onnx_engine, ids):
    a = onnx_engine.synthesize(SynthesisBatch.from_sequences(ids[:2], DETERMINISTIC))
    b = onnx_engine.synthesize(SynthesisBatch.from_sequences(ids[:2], Scales(0.0, 1.5, 0.0)))
    ratio = b.sample_lengths / a.sample_lengths
    assert np.all((ratio > 1.35) & (ratio < 1.65)), ratio


def test_bad_ids_are_a_deterministic_engine_error(onnx_engine):
    from core.errors import DeterministicEngineError

    with pytest.raises(DeterministicEngineError):
        onnx_engine.synthesize(SynthesisBatch.from_sequences([[1, 0, 9999, 0, 2]], DETERMINISTIC))


def test_patched_graph_is_written_to_the_voice_cache_once_and_reused(voice, tmp_path, monkeypatch):
    from engines import onnx_cpu

    calls = []
    real = onnx_cpu.patched_model_bytes
    monkeypatch.setattr(onnx_cpu, "patched_model_bytes", lambda p: calls.append(p) or real(p))
    first = onnx_cpu.patched_model(voice, tmp_path)
    second = onnx_cpu.patched_model(voice, tmp_path)
    assert first == second == tmp_path / voice.model_sha256() / onnx_cpu.PATCHED_NAME
    assert len(calls) == 1, "patched once, then read from the cache"
    assert first.read_bytes() == real(voice.model_path)
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]


def test_patched_graph_is_made_in_memory_where_the_cache_cannot_be_written(voice, tmp_path):
    from engines import onnx_cpu

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    got = onnx_cpu.patched_model(voice, blocked)
    assert isinstance(got, bytes) and onnx_cpu.LENGTHS_OUTPUT.encode() in got


def test_a_cached_graph_that_is_not_the_patched_one_is_refused_with_the_fix(voice, tmp_path, monkeypatch):
    from core.errors import VoiceError
    from engines import EngineSpec, onnx_cpu

    wrong = tmp_path / voice.model_sha256() / onnx_cpu.PATCHED_NAME
    wrong.parent.mkdir(parents=True)
    wrong.write_bytes(voice.model_path.read_bytes())  # the voice's own graph: no frame-length output
    monkeypatch.setenv("BOOKTTS_CACHE", str(tmp_path))
    with pytest.raises(VoiceError, match="delete it"):
        onnx_cpu.OnnxEngine(voice, EngineSpec(threads=1), sessions=1)


def test_a_damaged_cached_graph_gets_one_line_naming_the_file_and_the_fix(voice, tmp_path, monkeypatch):
    from core.errors import VoiceError
    from engines import EngineSpec, onnx_cpu

    bad = tmp_path / voice.model_sha256() / onnx_cpu.PATCHED_NAME
    bad.parent.mkdir(parents=True)
    bad.write_bytes(onnx_cpu.patched_model_bytes(voice.model_path)[:100_000])  # cut short
    monkeypatch.setenv("BOOKTTS_CACHE", str(tmp_path))
    with pytest.raises(VoiceError, match="cannot be read.*delete it") as err:
        onnx_cpu.OnnxEngine(voice, EngineSpec(threads=1), sessions=1)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
