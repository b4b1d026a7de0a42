"""A damaged or absurdly nested JSON file the tool reads (a job's ``job.json``, a voice's
``.onnx.json``) is one line naming the file, never a traceback (issue 31, finding 10's class)."""

from __future__ import annotations

import pytest

from core.errors import VoiceError
from core.voice import resolve_voice
from tests.jobs.test_voice_limits import _voice_with
from tests.test_cli import assert_one_line_error, cli

NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content", ["{", NESTED, "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")],
                         ids=["truncated", "nested-100000", "not-utf8"])
def test_a_damaged_job_json_is_one_line_naming_it(tmp_path, short_book, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / "job.json").write_text(content, encoding="latin-1" if content.startswith("\xed") else "utf-8")
    res = cli("run", short_book, "-o", out, "--engine", "fake")
    assert_one_line_error(res, "job.json", "restore it")
    assert not (out / "manifest.parquet").exists()


def test_a_voice_config_nested_100000_deep_is_one_line(tmp_path):
    path = _voice_with(tmp_path, "inference", "length_scale", 1.0)
    (tmp_path / "edited.onnx.json").write_text(NESTED, encoding="utf-8")
    with pytest.raises(VoiceError) as err:
        resolve_voice(path)
    assert "edited.onnx.json" in str(err.value) and "\n" not in str(err.value)
