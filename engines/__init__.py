"""Synthesis backends behind one protocol (:mod:`engines.base`).

Backends are chosen by name and imported lazily: a CPU node never imports torch,
CUDA or TensorRT.
"""

from __future__ import annotations

from core.errors import EngineUnavailable
from engines.spec import ENGINE_NAMES, EngineSpec

__all__ = ["ENGINE_NAMES", "EngineSpec", "load_engine"]


def load_engine(spec: EngineSpec, voice):
    """Build the engine named by ``spec`` for ``voice`` (a :class:`core.voice.VoiceConfig`).

    A backend whose module (or a package it needs) cannot be imported is :class:`EngineUnavailable`.
    """
    try:
        return _build(spec, voice)
    except ImportError as exc:
        raise EngineUnavailable(f"engine {spec.name!r} cannot be loaded here: {exc}; "
                                f"install the backend's packages or choose another --engine") from exc


def _build(spec: EngineSpec, voice):
    if spec.name == "onnx":
        if spec.precision == "int8":  # the exported stages with a calibrated Q/DQ stage B
            from engines.onnx_staged import OnnxStagedEngine

            return OnnxStagedEngine(voice, spec)
        from engines.onnx_cpu import OnnxEngine

        return OnnxEngine(voice, spec)
    if spec.name == "torch":
        from engines.torch_engine import TorchEngine

        return TorchEngine(voice, spec)
    if spec.name == "tensorrt":
        from engines.tensorrt_engine import TensorRTEngine

        return TensorRTEngine(voice, spec)
    if spec.name == "fake":
        from engines.fake import FakeEngine, hooks_from_env

        return FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length, max_batch=spec.max_batch,
                          **hooks_from_env())
    raise EngineUnavailable(f"unknown engine {spec.name!r}; choose one of {', '.join(ENGINE_NAMES)}")
