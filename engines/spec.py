"""Which engine to build: :class:`EngineSpec`, the one record every layer passes around.

Knows no backend: :func:`engines.load_engine` turns a spec into an engine (the backends are declared in
:mod:`engines.registry`). Also says which engines the command line offers (:func:`offered_engines`) and
what of an engine makes a job's samples what they are (:func:`engine_identity`); it records and checks
nothing itself (:mod:`jobs.job` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engines import registry
from engines.registry import ENGINE_NAMES

#: Set (to anything but ``""``/``0``) by the test suite: the command line then also offers ``--engine fake``.
TEST_ENGINES_ENV = "BOOKTTS_TEST_ENGINES"


def offered_engines(allow_fake: bool | None = None, env=None) -> tuple[str, ...]:
    """The ``--engine`` choices: the registry's offered engines, plus the others (``fake``, test tones)
    where ``allow_fake`` (None: where :data:`TEST_ENGINES_ENV` is set in ``env``, default this process's
    environment)."""
    if allow_fake is None:
        from core import settings

        allow_fake = settings.get(TEST_ENGINES_ENV, env)
    return tuple(e.name for e in registry.ENGINES.values() if e.offered or allow_fake)


def engine_identity(name: str, precision: str) -> dict:
    """What of an engine decides the samples it makes: the backend and its precision (an engine of one
    precision, as the fake engine, has that one). Not the device (any GPU of a kind, or CPU threads, make
    the same job) nor the batch size."""
    entry = registry.find(name)
    return {"name": name, "precision": entry.precisions[0] if entry and len(entry.precisions) == 1 else precision}


def describe_identity(identity: dict) -> str:
    """An engine identity as the options that choose it: ``--engine torch --precision fp16``."""
    return f"--engine {identity.get('name')} --precision {identity.get('precision')}"


class EngineOptions(Protocol):
    """An engine's start-up options (the registry's :attr:`~engines.registry.EngineEntry.options`, as
    :class:`engines.torch_options.TorchOptions`): a frozen record, JSON-able."""

    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class EngineSpec:
    """Which backend to build, on what, at which precision."""

    name: str = "onnx"
    """Backend: a name of :data:`engines.registry.ENGINES` (``onnx``, ``torch``, ``tensorrt``, ``fake``)."""
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
    options: EngineOptions | None = None
    """The engine's start-up options, of its registry entry's options type (the torch engine's:
    :class:`~engines.torch_options.TorchOptions`); None: the engine reads its defaults (the torch engine:
    ``TorchOptions.from_env``) when it is built. Engines without options ignore them."""

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
        entry = registry.find(kw.get("name", cls.name))
        if isinstance(d.get("options"), dict) and entry is not None and entry.options is not None:
            kw["options"] = entry.options_type().from_dict(d["options"])
        return cls(**kw)
