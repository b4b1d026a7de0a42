"""Which engine to build: :class:`EngineSpec`, the one record every layer passes around.

Knows no backend: :func:`engines.load_engine` turns a spec into an engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.torch_options import TorchOptions

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
    options: TorchOptions | None = None
    """The torch engine's start-up options; None: :meth:`TorchOptions.from_env` when the engine is
    built. Other engines ignore them."""

    def to_dict(self) -> dict:
        d = dict(name=self.name, precision=self.precision, device=self.device,
                 max_batch=self.max_batch, threads=self.threads)
        if self.options is not None:
            d["options"] = self.options.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "EngineSpec":
        kw = {k: d[k] for k in ("name", "precision", "device", "max_batch", "threads") if k in d}
        if isinstance(d.get("options"), dict):
            kw["options"] = TorchOptions.from_dict(d["options"])
        return cls(**kw)
