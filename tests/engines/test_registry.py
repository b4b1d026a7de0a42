"""The engine registry (engines/registry.py): every layer that needs an engine's name or capabilities
reads it, so one entry (plus its module) is all an engine takes."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner

from core.errors import EngineUnavailable
from engines import EngineSpec, load_engine, registry
from engines.fake import FakeEngine
from engines.spec import engine_identity, offered_engines
from engines.torch_options import TorchOptions
from jobs.config import runs_on_gpu


def test_each_entry_names_a_module_that_exists_and_is_not_imported_to_list_it():
    for e in registry.ENGINES.values():
        module, _, attr = e.build.partition(":")
        assert attr and importlib.util.find_spec(module) is not None, e.name
        assert e.runs_on in (registry.CPU, registry.BY_DEVICE, registry.GPU)
        assert set(e.durations) <= set(e.precisions)
        assert set(e.calibrated) <= set(e.precisions)
        for precision, target in e.build_at:
            assert precision in e.precisions and importlib.util.find_spec(target.partition(":")[0]) is not None
    # reading the table imports no backend
    import subprocess
    import sys

    code = ("import sys, engines, commands.options; "
            "print(sorted(m for m in ('torch', 'tensorrt', 'onnxruntime', 'engines.torch_engine', "
            "'engines.onnx_cpu', 'engines.fake') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_choices_follow_the_registry_and_hide_test_engines(monkeypatch):
    assert offered_engines(allow_fake=False) == ("onnx", "torch", "tensorrt")
    assert offered_engines(env={"BOOKTTS_TEST_ENGINES": "1"}) == ("onnx", "torch", "tensorrt", "fake")
    assert offered_engines(env={"BOOKTTS_TEST_ENGINES": "0"}) == ("onnx", "torch", "tensorrt")
    tones = registry.EngineEntry("tones", "engines.fake:build", registry.BY_DEVICE, ("fp32",))
    monkeypatch.setitem(registry.ENGINES, "tones", tones)
    assert offered_engines(allow_fake=False)[-1] == "tones"

    from cli import main

    monkeypatch.delenv("BOOKTTS_TEST_ENGINES")
    res = CliRunner().invoke(main, ["run", "--help"])
    assert "onnx|torch|tensorrt|tones" in res.output and "fake" not in res.output.split("--engine")[1][:40]


def test_a_new_entry_is_built_by_load_engine(monkeypatch, voice):
    monkeypatch.setitem(registry.ENGINES, "tones",
                        registry.EngineEntry("tones", "engines.fake:build", registry.BY_DEVICE, ("fp32",)))
    eng = load_engine(EngineSpec(name="tones", max_batch=7), voice)
    assert isinstance(eng, FakeEngine) and eng.info.max_batch == 7


def test_unknown_engine_is_one_line():
    with pytest.raises(EngineUnavailable, match=r"unknown engine 'nope'; choose one of onnx, torch, tensorrt, fake"):
        load_engine(EngineSpec(name="nope"), None)


def test_runs_on_gpu_reads_where_the_engine_runs(monkeypatch):
    assert runs_on_gpu(EngineSpec(name="tensorrt", device="cpu"))
    assert runs_on_gpu(EngineSpec(name="torch", device="cuda:1"))
    assert not runs_on_gpu(EngineSpec(name="torch", device="cpu"))
    assert not runs_on_gpu(EngineSpec(name="onnx")) and not runs_on_gpu(None)
    monkeypatch.setitem(registry.ENGINES, "gpuonly",
                        registry.EngineEntry("gpuonly", "engines.fake:build", registry.GPU, ("fp32",)))
    assert runs_on_gpu(EngineSpec(name="gpuonly", device="cpu"))


def test_capabilities_agree_with_the_built_engine(voice):
    fake = load_engine(EngineSpec(name="fake"), voice)
    assert fake.info.per_item_scales == registry.get("fake").per_item_scales
    assert registry.speaker_engines() == ("onnx", "fake")
    assert [e.name for e in registry.ENGINES.values() if e.per_item_scales] == ["torch", "fake"]
    assert [e.name for e in registry.ENGINES.values() if not e.warm_up] == ["fake"]


def test_options_type_comes_from_the_entry():
    assert registry.get("torch").options_type() is TorchOptions
    assert registry.get("onnx").options_type() is None
    spec = EngineSpec(name="torch", options=TorchOptions(compile="off"))
    back = EngineSpec.from_dict(spec.to_dict())
    assert back == spec and isinstance(back.options, TorchOptions)
    # an engine without an options type keeps none, whatever the record says
    assert EngineSpec.from_dict({"name": "onnx", "options": {"compile": "off"}}).options is None


def test_engine_identity_of_a_one_precision_engine():
    assert engine_identity("fake", "fp16") == {"name": "fake", "precision": "fp32"}
    assert engine_identity("torch", "fp16") == {"name": "torch", "precision": "fp16"}


def test_the_precision_choices_cover_the_registry():
    from commands.options import PRECISIONS

    assert PRECISIONS == registry.PRECISIONS
    assert set(PRECISIONS) == {p for e in registry.ENGINES.values() for p in e.precisions}


def test_the_onnx_engine_at_int8_is_the_staged_one():
    onnx = registry.get("onnx")
    assert onnx.builder("fp32").__name__ == "OnnxEngine" and onnx.builder("int8").__name__ == "OnnxStagedEngine"
    assert registry.get("torch").builder("fp16").__name__ == "TorchEngine"


def test_the_cpu_engines_build_from_their_entries(voice):
    for name in ("onnx", "fake"):
        assert load_engine(EngineSpec(name=name, threads=1), voice).info.name == name


def test_load_engine_gives_calibration_only_where_the_entry_makes_a_model_from_one(monkeypatch):
    seen = []
    monkeypatch.setattr(registry.EngineEntry, "builder",
                        lambda self, precision=None: lambda voice, spec, **kw: seen.append((spec.name, spec.precision, kw)))
    source = object()
    for name, precision in (("onnx", "int8"), ("onnx", "fp32"), ("tensorrt", "int8"), ("torch", "fp16")):
        load_engine(EngineSpec(name=name, precision=precision), None, calibration=source)
    assert seen == [("onnx", "int8", {"calibration": source}), ("onnx", "fp32", {}),
                    ("tensorrt", "int8", {"calibration": source}), ("torch", "fp16", {})]
