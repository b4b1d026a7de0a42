"""A voice's own inference settings (its ``.onnx.json``) are held to the command line's ranges, and an
utterance the engine makes far too long is one clear error (issue 31, finding 6)."""

from __future__ import annotations

import json
import shutil

import pytest

from core.errors import DeterministicEngineError, VoiceError
from core.voice import resolve_voice
from tests.test_cli import assert_one_line_error, cli


def _voice_with(tmp_path, section: str | None, field: str, value) -> str:
    """A copy of the default voice (its ONNX linked, its config copied) with one config value changed."""
    pkg = resolve_voice()
    onnx = tmp_path / "edited.onnx"
    onnx.symlink_to(pkg.model_path)
    cfg = json.loads(pkg.config_path.read_text(encoding="utf-8"))
    (cfg.setdefault(section, {}) if section else cfg)[field] = value
    (tmp_path / "edited.onnx.json").write_text(json.dumps(cfg), encoding="utf-8")
    return str(onnx)


@pytest.mark.parametrize("section,field,value,allowed", [
    ("inference", "length_scale", 0, "0.1 to 10"),
    ("inference", "length_scale", -1.0, "0.1 to 10"),
    ("inference", "length_scale", 1e6, "0.1 to 10"),
    ("inference", "noise_scale", -0.5, "0 to 10"),
    ("inference", "noise_w", 1000, "0 to 10"),
    ("audio", "sample_rate", 0, "8000 to 192000"),
    (None, "hop_length", 0, "1 to 4096"),
])
def test_out_of_range_voice_settings_are_refused_naming_file_and_field(tmp_path, section, field, value, allowed):
    path = _voice_with(tmp_path, section, field, value)
    with pytest.raises(VoiceError) as err:
        resolve_voice(path)
    msg = str(err.value)
    assert "edited.onnx.json" in msg and (f"{section}.{field}" if section else field) in msg and allowed in msg
    assert "\n" not in msg


def test_cli_refuses_a_voice_whose_length_scale_is_zero(tmp_path, short_book):
    path = _voice_with(tmp_path, "inference", "length_scale", 0)
    res = cli("run", short_book, "-o", tmp_path / "out", "--voice", path, "--engine", "fake")
    assert_one_line_error(res, "edited.onnx.json", "inference.length_scale", "0.1 to 10")
    assert not (tmp_path / "out" / "manifest.parquet").exists()


def test_voice_settings_in_range_still_load(tmp_path):
    v = resolve_voice(_voice_with(tmp_path, "inference", "length_scale", 1.3))
    assert v.length_scale == 1.3


def test_an_utterance_past_the_frame_cap_is_one_clear_error(short_book, tmp_path, voice):
    """An engine that makes far more frames per phoneme than speech has (a broken or hostile model)
    fails the batch with one line, instead of writing (or allocating) the audio."""
    from engines.fake import FakeEngine
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.synthesize import MAX_FRAMES_PER_ID, run_batch

    job = prepare_job([short_book], tmp_path / "out", JobConfig(length_scale=1.0))
    runaway = FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length,
                         frames_per_phoneme=MAX_FRAMES_PER_ID * 4)
    with pytest.raises(DeterministicEngineError) as err:
        run_batch(job, 0, runaway)
    msg = str(err.value)
    assert "frames per phoneme id" in msg and "\n" not in msg
    assert job.batch_record(0) is None
    # the same job at a sane rate is written
    sane = FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length, frames_per_phoneme=8)
    assert run_batch(job, 0, sane).items
