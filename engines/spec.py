"""Which engine to build: :class:`EngineSpec`, the one record every layer passes around.

Knows no backend: :func:`engines.load_engine` turns a spec into an engine. Also says which engines
the command line offers (:func:`offered_engines`) and what of an engine makes a job's samples what
they are (:func:`engine_identity`); it records and checks nothing itself (:mod:`jobs.pipeline` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.torch_options import TorchOptions

ENGINE_NAMES = ("onnx", "torch", "tensorrt", "fake")
#: The engines the command line offers users; ``fake`` (test tones) only with :data:`TEST_ENGINES_ENV`.
USER_ENGINES = ("onnx", "torch", "tensorrt")
#: Set (to anything but ``""``/``0``) by the test suite: the command line then also offers ``--engine fake``.
TEST_ENGINES_ENV = "BOOKTTS_TEST_ENGINES"


def offered_engines(allow_fake: bool | None = None, env=None) -> tuple[str, ...]:
    """The ``--engine`` choices: :data:`USER_ENGINES`, plus ``fake`` where ``allow_fake`` (None: where
    :data:`TEST_ENGINES_ENV` is set in ``env``, default this process's environment)."""
    if allow_fake is None:
        from core import settings

        allow_fake = settings.get(TEST_ENGINES_ENV, env)
    return USER_ENGINES + (("fake",) if allow_fake else ())


def engine_identity(name: str, precision: str) -> dict:
    """What of an engine decides the samples it makes: the backend and its precision (the fake engine
    has one). Not the device (any GPU of a kind, or CPU threads, make the same job) nor the batch size."""
    return {"name": name, "precision": "fp32" if name == "fake" else precision}


def describe_identity(identity: dict) -> str:
    """An engine identity as the options that choose it: ``--engine torch --precision fp16``."""
    return f"--engine {identity.get('name')} --precision {identity.get('precision')}"


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

    def identity(self) -> dict:
        """:func:`engine_identity` of this spec: a job's batches all come from one."""
        return engine_identity(self.name, self.precision)

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
