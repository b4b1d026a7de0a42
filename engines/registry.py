"""Every synthesis backend, declared once: its name, where it is built, what it runs on, what it can do.

Adding an engine is one :class:`EngineEntry` in :data:`ENGINES` plus its module (docs/DESIGN.md,
"Add an engine"). The command line's ``--engine`` choices (:func:`engines.spec.offered_engines`), whether
a job's batch defaults are a GPU's (:func:`jobs.config.runs_on_gpu`), which engines take ``--speaker``,
and :func:`engines.load_engine` all read this table.

An entry names its module by a string and nothing here imports it: a CPU node never imports torch, CUDA
or TensorRT. This module imports no backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from core.errors import EngineUnavailable

#: Where an engine runs: on the CPU only, on the device its spec names (``cpu`` or ``cuda:N``), or on a
#: GPU whatever the spec says.
CPU, BY_DEVICE, GPU = "cpu", "cpu or cuda", "cuda"


@dataclass(frozen=True)
class EngineEntry:
    """One backend."""

    name: str
    """``--engine NAME``; also :attr:`engines.base.EngineInfo.name` of what it builds."""
    build: str
    """``module:callable`` taking ``(voice, spec)`` and returning an :class:`engines.base.Engine`;
    imported only when an engine is built."""
    runs_on: str
    """:data:`CPU`, :data:`BY_DEVICE` or :data:`GPU`."""
    precisions: tuple[str, ...]
    """The ``--precision`` values it builds."""
    speakers: bool = False
    """Passes a speaker id to a multi-speaker voice (``--speaker``); others refuse such a job."""
    per_item_scales: bool = False
    """Takes batches that mix jobs of different scales (:attr:`engines.base.EngineInfo.per_item_scales`
    says the same of a built engine)."""
    durations: tuple[str, ...] = ()
    """The precisions at which it returns each phoneme id's duration
    (:attr:`engines.base.SynthesisResult.durations`); captions are timed without them elsewhere."""
    options: str | None = None
    """``module:Class`` of its start-up options (carried in :attr:`engines.spec.EngineSpec.options`,
    with ``from_dict``, ``to_dict`` and ``from_env``); None: it has none."""
    warm_up: bool = True
    """A worker synthesizes one tiny batch with it once built, so that the first real batch does not pay
    for lazy initialisation (False for the fake engine: its test hooks count every call)."""
    offered: bool = True
    """Offered on the command line; False: only where the test suite's switch is set
    (:data:`engines.spec.TEST_ENGINES_ENV`)."""
    summary: str = ""
    """One line for the docs."""
    calibrated: tuple[str, ...] = ()
    """The precisions whose model is made, on first use, from calibration utterances the caller gives
    (:func:`engines.load_engine`'s ``calibration``, passed to the builder as ``calibration=``): the
    engines phonemize no text."""
    build_at: tuple[tuple[str, str], ...] = ()
    """``(precision, module:callable)``: another builder at that precision (the onnx engine's int8 runs
    the exported stages)."""

    def on_gpu(self, device: str | None) -> bool:
        """Whether an engine of this kind on ``device`` runs on a GPU."""
        return self.runs_on == GPU or (device or "").startswith("cuda")

    def builder(self, precision: str | None = None):
        """The callable that builds this engine at ``precision`` (:attr:`build_at`, else :attr:`build`);
        imports its module (ImportError where it cannot load)."""
        return _resolve(dict(self.build_at).get(precision or "", self.build))

    def options_type(self):
        """The class :attr:`options` names, or None."""
        return None if self.options is None else _resolve(self.options)


def _resolve(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


TORCH_OPTIONS = "engines.torch_options:TorchOptions"
#: Every ``--precision`` value, in the order ``--help`` lists them; each entry's :attr:`EngineEntry.precisions`
#: are some of these.
PRECISIONS = ("fp32", "fp16", "bf16", "int8")

ENGINES: dict[str, EngineEntry] = {e.name: e for e in (
    EngineEntry("onnx", "engines.onnx_cpu:OnnxEngine", CPU, ("fp32", "int8"), speakers=True, durations=("int8",),
                calibrated=("int8",), build_at=(("int8", "engines.onnx_staged:OnnxStagedEngine"),), summary="ONNX Runtime on CPU (the Piper model; int8: the exported stages with a calibrated stage B)"),
    EngineEntry("torch", "engines.torch_engine:TorchEngine", BY_DEVICE, ("fp32", "fp16", "bf16"),
                per_item_scales=True, durations=("fp32", "fp16", "bf16"), options=TORCH_OPTIONS,
                summary="the PyTorch port, on CPU or a CUDA GPU"),
    EngineEntry("tensorrt", "engines.tensorrt_engine:TensorRTEngine", GPU, ("fp16", "int8", "fp32"),
                calibrated=("int8",), summary="TensorRT plans of the exported stages, on a CUDA GPU"),
    EngineEntry("fake", "engines.fake:build", BY_DEVICE, ("fp32",), speakers=True, per_item_scales=True,
                durations=("fp32",), warm_up=False, offered=False,
                summary="test tones of exact lengths (the test suite's)"),
)}

#: Every engine's name, in the table's order.
ENGINE_NAMES = tuple(ENGINES)


def get(name: str) -> EngineEntry:
    """The entry of ``name``; an unknown name is :class:`EngineUnavailable` naming the choices."""
    try:
        return ENGINES[name]
    except KeyError:
        raise EngineUnavailable(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None


def find(name: str | None) -> EngineEntry | None:
    """The entry of ``name``, or None."""
    return ENGINES.get(name or "")


def speaker_engines() -> tuple[str, ...]:
    """The engines that take ``--speaker``."""
    return tuple(e.name for e in ENGINES.values() if e.speakers)
