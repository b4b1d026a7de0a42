"""The torch engine's options: one frozen record, from the environment or flags, carried in the spec."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from core.errors import EngineUnavailable
from core.settings import SettingError
from engines import EngineSpec
from engines.torch_options import ENV, TorchOptions


def test_defaults_are_auto_and_serialise_to_nothing():
    o = TorchOptions()
    assert all(v == "auto" for v in o.__dict__.values())
    assert o.to_dict() == {} and o.to_env() == {}
    assert o.flag("compile") is None


def test_environment_spellings():
    o = TorchOptions.from_env({ENV["compile"]: "0", ENV["cuda_graphs"]: "1", ENV["warmup"]: "FULL",
                               ENV["autotune"]: "", ENV["precompile"]: ""})
    assert (o.compile, o.cuda_graphs, o.warmup, o.autotune, o.precompile) == ("off", "on", "full", "auto", "auto")
    assert TorchOptions.from_env(o.to_env()) == o  # what a child process reads back
    # anything else is one line naming the variable (core.settings), not a silent auto
    for var, bad in ((ENV["warmup"], "eager"), (ENV["precompile"], "yes"), (ENV["autotune"], "maybe")):
        with pytest.raises(SettingError, match=var):
            TorchOptions.from_env({var: bad})


def test_invalid_values_and_frozen():
    with pytest.raises(EngineUnavailable, match="cuda_graphs"):
        TorchOptions(cuda_graphs="sometimes")
    with pytest.raises(Exception):
        TorchOptions().compile = "on"  # frozen: a live engine's options do not change


def test_kernels_off_and_changed():
    o = TorchOptions().kernels_off()
    assert (o.fused_decoder, o.fused_flow, o.stage_a_gemm, o.precompile) == ("off",) * 4
    assert TorchOptions().changed(compile="on", warmup=None).to_dict() == {"compile": "on"}


def test_the_spec_carries_them_through_json():
    spec = EngineSpec(name="torch", device="cuda:0", options=TorchOptions(cuda_graphs="off", warmup="lazy"))
    back = EngineSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    assert "options" not in EngineSpec(name="onnx").to_dict()  # other engines: the spec as it always was


def test_worker_settings_carry_them(monkeypatch):
    from workers.runtime import WorkerSettings

    spec = EngineSpec(name="torch", device="cpu", options=TorchOptions(autotune="off"))
    env = WorkerSettings(engine=spec).to_env()
    assert WorkerSettings.from_env(env).engine.options == TorchOptions(autotune="off")


def _spec_of(args, env=None):
    """The EngineSpec ``run`` would build from ``args`` (its options decorator alone)."""
    import click

    from commands.options import engine_options

    seen = {}

    @click.command()
    @engine_options
    def probe(engine_spec):
        seen["spec"] = engine_spec

    res = CliRunner().invoke(probe, args, env=env or {}, catch_exceptions=False, standalone_mode=False)
    return seen.get("spec"), res


def test_flags_win_over_the_environment():
    spec, _ = _spec_of(["--engine", "torch", "--cuda-graphs", "off", "--kernels", "off"],
                       env={ENV["cuda_graphs"]: "1", ENV["compile"]: "0"})
    o = spec.options
    assert o.cuda_graphs == "off" and o.compile == "off" and o.fused_decoder == "off" and o.stage_a_gemm == "off"


def test_torch_flags_with_another_engine_are_refused():
    import click

    with pytest.raises(click.BadParameter, match="--cuda-graphs.*--engine torch"):
        _spec_of(["--engine", "onnx", "--cuda-graphs", "off"])


def test_the_engine_takes_the_spec_options(voice):
    pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0")
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    from engines.torch_engine import TorchEngine

    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, max_batch=2,
                                        options=TorchOptions(autotune="off", warmup="lazy")))
    assert eng.autotune is False and eng.info.extra["options"] == {"autotune": "off", "warmup": "lazy"}
    assert eng.resolved.autotune is False and eng.resolved.stage_a_graphs is False
    with pytest.raises(EngineUnavailable, match="CUDA"):  # graphs asked for on a CPU device: one clear line
        TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, options=TorchOptions(cuda_graphs="on")),
                    fast_stage_a=True)
