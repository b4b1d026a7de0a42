"""Finding a voice: by installed package name or by .onnx path; clear errors otherwise."""

import shutil

import pytest

from core.errors import VoiceError
from core.voice import resolve_voice


def test_default_voice_package():
    v = resolve_voice()
    assert v.sample_rate == 22050 and v.hop_length == 256 and v.espeak_voice == "en-us"
    assert v.phoneme_id_map["^"] == [1] and v.num_speakers == 1


def test_voice_by_onnx_path_loads_the_same_config(tmp_path):
    pkg = resolve_voice()
    # another Piper voice is an .onnx with its .onnx.json beside it; a symlink stands in for a copy
    (tmp_path / "my-voice.onnx").symlink_to(pkg.model_path)
    shutil.copy(pkg.config_path, tmp_path / "my-voice.onnx.json")
    v = resolve_voice(str(tmp_path / "my-voice.onnx"))
    assert v.model_path == tmp_path / "my-voice.onnx"
    assert (v.sample_rate, v.noise_scale, v.length_scale, v.noise_w) == (
        pkg.sample_rate, pkg.noise_scale, pkg.length_scale, pkg.noise_w)


@pytest.mark.parametrize("setup,needle", [
    ("missing-model", "does not exist"),
    ("missing-config", ".onnx.json"),
    ("bad-config", "not a valid Piper config"),
    ("unknown-package", "pip install"),
])
def test_voice_errors_are_one_line(tmp_path, setup, needle):
    onnx = tmp_path / "v.onnx"
    if setup != "missing-model":
        onnx.write_bytes(b"x")
    if setup == "bad-config":
        (tmp_path / "v.onnx.json").write_text('{"audio": {}}')
    name = "no-such-voice-package" if setup == "unknown-package" else str(onnx)
    with pytest.raises(VoiceError) as err:
        resolve_voice(name)
    assert needle in str(err.value) and "\n" not in str(err.value)
