"""Synthesis backends behind one protocol (:mod:`engines.base`), declared in :mod:`engines.registry`.

Backends are chosen by name and imported lazily: a CPU node never imports torch,
CUDA or TensorRT.
"""

from __future__ import annotations

from core.errors import EngineUnavailable
from engines import registry
from engines.spec import ENGINE_NAMES, EngineSpec

__all__ = ["ENGINE_NAMES", "EngineSpec", "load_engine"]


def load_engine(spec: EngineSpec, voice, calibration=None):
    """Build the engine named by ``spec`` for ``voice`` (a :class:`core.voice.VoiceConfig`).

    ``calibration``: where an INT8 model is made on first use (the registry entry's ``calibrated``
    precisions), what makes its utterances' phoneme ids for a voice
    (:data:`engines.tools.quantize.CalibrationSource`; the command line's is
    :class:`jobs.calibration.CalibrationCorpus`). A backend whose module (or a package it needs)
    cannot be imported is :class:`EngineUnavailable`.
    """
    try:
        return _build(spec, voice, calibration)
    except ImportError as exc:
        raise EngineUnavailable(f"engine {spec.name!r} cannot be loaded here: {exc}; "
                                f"install the backend's packages or choose another --engine") from exc


def _build(spec: EngineSpec, voice, calibration=None):
    """The registry entry's builder for the spec's precision, called with ``(voice, spec)`` (and the
    ``calibration`` at a precision the entry makes from one)."""
    entry = registry.get(spec.name)
    kw = {"calibration": calibration} if spec.precision in entry.calibrated else {}
    return entry.builder(spec.precision)(voice, spec, **kw)
