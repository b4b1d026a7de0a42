"""TensorRT: one clear line where it cannot run (CI: no tensorrt, no NVIDIA GPU), the pure-Python
parts (profiles, plan keys, the builder's calls against a recording stand-in for ``tensorrt``),
and, where TensorRT and a GPU exist, real plans against the torch engine."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from core.errors import EngineUnavailable

ROOT = Path(__file__).resolve().parents[2]


def _trt_runs_here() -> bool:
    try:
        import tensorrt  # noqa: F401
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


no_trt = pytest.mark.skipif(_trt_runs_here(), reason="TensorRT and a GPU are present: the 'missing' message is not shown")


def _cli(*args, tmp_path):
    env = dict(os.environ, BOOKTTS_CACHE=str(tmp_path / "cache"))
    env.pop("BOOKTTS_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=120)


def _one_clear_line(proc):
    assert proc.returncode == EngineUnavailable.exit_code, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert "TensorRT" in line and "install" in line
    return line


@no_trt
def test_build_engine_without_tensorrt_is_one_clear_line(tmp_path):
    proc = _cli("build-engine", "--precision", "int8", "--max-batch", "8", "--out", str(tmp_path / "eng"),
                tmp_path=tmp_path)
    _one_clear_line(proc)
    assert not (tmp_path / "cache").exists(), "nothing is exported or calibrated before the check"


@no_trt
def test_run_with_engine_tensorrt_without_tensorrt_is_one_clear_line(tmp_path):
    book = tmp_path / "b.txt"
    book.write_text("CHAPTER I.\nA Test\n\nOh dear! It was late.\n", encoding="utf-8")
    proc = _cli("run", str(book), "-o", str(tmp_path / "out"), "--engine", "tensorrt", "--precision", "fp16",
                tmp_path=tmp_path)
    _one_clear_line(proc)


@no_trt
def test_require_tensorrt_raises_engine_unavailable():
    from engines.tensorrt_engine import require_tensorrt

    with pytest.raises(EngineUnavailable) as info:
        require_tensorrt("cuda:0")
    assert "\n" not in str(info.value)


def test_profile_shapes_and_plan_keys():
    from engines.tensorrt_engine import Profile, plan_key

    p = Profile(max_batch=16, max_phonemes=300, max_frames=1024)
    for stage in ("stage_a", "stage_b"):
        for name, (lo, opt, hi) in p.shapes(stage, 192).items():
            assert len(lo) == len(opt) == len(hi)
            assert all(a <= b <= c for a, b, c in zip(lo, opt, hi)), name
    assert p.shapes("stage_b", 192)["z_p"][2] == (16, 192, 1024)
    assert p.shapes("stage_a", 192)["input"][2] == (16, 300)
    base = plan_key("abc", "NVIDIA H200", "10.9.0", "int8", p)
    assert base.startswith("int8-b16-p300-f1024-")
    assert len({base, plan_key("abd", "NVIDIA H200", "10.9.0", "int8", p),
                plan_key("abc", "NVIDIA A100", "10.9.0", "int8", p), plan_key("abc", "NVIDIA H200", "11.0.0", "int8", p),
                plan_key("abc", "NVIDIA H200", "10.9.0", "fp16", p),
                plan_key("abc", "NVIDIA H200", "10.9.0", "int8", Profile(8, 300, 1024))}) == 6


class _Recorder:
    """A stand-in for the ``tensorrt`` module that records what the builder is asked to do.
    It checks our calls against the documented API's names; it is not TensorRT."""

    def __init__(self, version: str):
        self.calls: list = []
        rec = self

        class Obj:
            def __init__(self, name):
                self._name = name

            def __getattr__(self, attr):
                def method(*args, **kwargs):
                    rec.calls.append((f"{self._name}.{attr}", args))
                    return rec.result(f"{self._name}.{attr}", args)
                return method

        self.Obj = Obj
        self.__version__ = version
        self.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda s, level=None: None})
        self.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=0)
        self.MemoryPoolType = types.SimpleNamespace(WORKSPACE="WORKSPACE")
        self.Builder = lambda logger: Obj("builder")
        self.OnnxParser = lambda network, logger: Obj("parser")

    def result(self, name, args):
        if name == "builder.create_network":
            net = self.Obj("network")
            net.num_inputs = 2
            net.get_input = lambda i: types.SimpleNamespace(name=["z_p", "frame_lengths"][i])
            return net
        if name in ("builder.create_builder_config",):
            return self.Obj("config")
        if name == "builder.create_optimization_profile":
            return self.Obj("profile")
        if name == "config.create_timing_cache":
            return self.Obj("cache")
        if name == "config.get_timing_cache":
            cache = self.Obj("cache")
            cache.serialize = lambda: b"timing"
            return cache
        if name == "builder.build_serialized_network":
            return b"PLAN"
        if name == "parser.parse_from_file":
            return True
        return None


@pytest.mark.parametrize("version,flags", [("10.9.0", 1), ("11.4.0", 0)])
def test_builder_calls(tmp_path, version, flags):
    from engines.tensorrt_engine import Profile, build_plan

    trt = _Recorder(version)
    timing = tmp_path / "timing.cache"
    plan = build_plan(trt, tmp_path / "stage_b.int8.onnx", Profile(8, 100, 512).shapes("stage_b", 192), 1 << 30, timing)
    assert plan == b"PLAN" and timing.read_bytes() == b"timing"
    calls = dict((n, a) for n, a in trt.calls)
    assert calls["builder.create_network"] == (flags,)  # strongly typed: flag on 10.x, implicit on 11.x
    assert calls["config.set_memory_pool_limit"] == ("WORKSPACE", 1 << 30)
    shapes = [a for n, a in trt.calls if n == "profile.set_shape"]
    assert ("z_p", (1, 192, 2), (4, 192, 512), (8, 192, 512)) in shapes
    assert ("frame_lengths", (1,), (4,), (8,)) in shapes
    assert "config.add_optimization_profile" in calls and "config.set_timing_cache" in calls
    assert not any(n == "config.set_flag" for n, _ in trt.calls), "no weak-typing builder flags (removed in 11)"


# --------------------------------------------------------------------------- with TensorRT and a GPU
def test_tensorrt_plans_against_the_torch_engine(tmp_path, voice):
    pytest.importorskip("tensorrt", reason="TensorRT is not installed on this host (CI has no NVIDIA GPU)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no NVIDIA GPU visible (CI has none)")
    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.tensorrt_engine import Profile, TensorRTEngine
    from engines.torch_engine import TorchEngine
    from jobs.calibration import CalibrationCorpus
    from jobs.phonemize import Phonemizer

    ph = Phonemizer(voice)
    ids = [ph(s).ids for s in ("Alice was beginning to get very tired.", "Oh dear!", "Down, down, down.")]
    batch = SynthesisBatch.from_sequences(ids, Scales(0.667, 1.0, 0.8), seed=3)
    ref = TorchEngine(voice, EngineSpec(name="torch", device="cuda:0"), compile=False, warmup=False).synthesize(batch)
    mcd = __import__("engines.tools.quantize", fromlist=["mcd_function"]).mcd_function()
    for prec, bound in (("fp32", 0.5), ("fp16", 1.2), ("int8", 1.8)):
        eng = TensorRTEngine(voice, EngineSpec(name="tensorrt", precision=prec, device="cuda:0", max_batch=4),
                             engine_dir=tmp_path / "plans", profile=Profile(4, 128, 512), calibration=CalibrationCorpus())
        got = eng.synthesize(batch)
        np.testing.assert_array_equal(got.sample_lengths, ref.sample_lengths)
        for i in range(len(ids)):
            assert mcd(ref.item(i), got.item(i)) <= bound, (prec, i)
