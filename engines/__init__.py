"""Synthesis backends behind one protocol (:mod:`engines.base`), declared in :mod:`engines.registry`.

Backends are chosen by name and imported lazily: a CPU node never imports torch,
CUDA or TensorRT.
"""

from __future__ import annotations

from core.errors import EngineUnavailable
from engines import registry
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
    """The registry entry's builder for the spec's precision, called with ``(voice, spec)``."""
    return registry.get(spec.name).builder(spec.precision)(voice, spec)
