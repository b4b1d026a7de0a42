"""Synthesis backends behind one protocol (:mod:`engines.base`).

Backends are chosen by name and imported lazily: a CPU node never imports torch,
CUDA or TensorRT.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import EngineUnavailable

ENGINE_NAMES = ("onnx", "torch", "tensorrt", "fake")


@dataclass(frozen=True)
class EngineSpec:
    """Which backend to build, on what, at which precision."""

    name: str = "onnx"
    """Backend: ``onnx`` (ONNX Runtime, CPU), ``torch`` (PyTorch port), ``tensorrt``, ``fake`` (tests)."""
    precision: str = "fp32"
    """``fp32``, ``fp16``, ``bf16`` or ``int8``, where the backend supports it."""
    device: str = "cpu"
    """``cpu`` or ``cuda:N``."""
    max_batch: int = 32
    """Largest batch the engine is asked to take."""
    threads: int | None = None
    """CPU threads for the backend (None: the backend's default)."""
    workload_s: float | None = None
    """Seconds of audio this engine is expected to make in its life (None: unknown, as for a worker).
    A hint for start-up investments that pay off only on long jobs (the torch engine's cuDNN
    autotuning). Not part of :meth:`to_dict`: it does not change what a job produces."""

    def to_dict(self) -> dict:
        return dict(name=self.name, precision=self.precision, device=self.device,
                    max_batch=self.max_batch, threads=self.threads)

    @classmethod
    def from_dict(cls, d: dict) -> "EngineSpec":
        return cls(**{k: d[k] for k in ("name", "precision", "device", "max_batch", "threads") if k in d})


def load_engine(spec: EngineSpec, voice):
    """Build the engine named by ``spec`` for ``voice`` (a :class:`jobs.voice.VoiceConfig`).

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
        from engines.fake import FakeEngine

        return FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length, max_batch=spec.max_batch)
    raise EngineUnavailable(f"unknown engine {spec.name!r}; choose one of {', '.join(ENGINE_NAMES)}")
