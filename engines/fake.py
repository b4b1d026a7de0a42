"""A tiny deterministic engine for fast unit tests of planning, batching and writing.

It does not speak: each phoneme id becomes ``frames_per_phoneme`` frames of a
tone whose pitch depends on the id, so outputs are deterministic, depend on the
input, and have exactly known lengths. It can be told to fail, to exercise the
error paths of the runners.
"""

from __future__ import annotations

import time

import numpy as np

from engines.base import EngineInfo, SynthesisBatch, SynthesisResult, float_to_int16
from core.errors import DeterministicEngineError, EngineOutOfMemory, TransientEngineError


#: The test hooks a process takes from its environment (core.settings' test-only section): variable -> argument.
HOOK_ENV = {
    "BOOKTTS_FAKE_FAIL_ID": "fail_on_id",
    "BOOKTTS_FAKE_OOM_OVER": "oom_over",
    "BOOKTTS_FAKE_TRANSIENT_FIRST": "transient_first",
    "BOOKTTS_FAKE_DELAY_S": "delay_s",
}


def hooks_from_env(env=None) -> dict:
    """The :class:`FakeEngine` arguments the ``BOOKTTS_FAKE_*`` variables of ``env`` (default: this
    process's) set, through :mod:`core.settings`."""
    from core import settings

    return {arg: settings.get(var, env) for var, arg in HOOK_ENV.items() if settings.is_set(var, env)}


class FakeEngine:
    """Deterministic tones with exact lengths; knows nothing of text.

    ``fail_on_id``: raise :class:`DeterministicEngineError` for a batch containing this phoneme id.
    ``oom_over``: raise :class:`EngineOutOfMemory` for batches larger than this.
    ``transient_first``: the first N calls in this process raise :class:`TransientEngineError` (a lost
    device, say), to exercise retries.
    ``delay_s``: sleep this long per batch, to let tests kill workers mid-batch.

    Tests that start worker or ``run`` processes set these through the environment
    (:func:`hooks_from_env`, read where engines are built from a spec).
    """

    def __init__(self, sample_rate: int = 22050, hop_length: int = 256, frames_per_phoneme: int = 2,
                 max_batch: int = 64, fail_on_id: int | None = None, oom_over: int | None = None,
                 delay_s: float = 0.0, transient_first: int = 0) -> None:
        self.hop_length = hop_length
        self.frames_per_phoneme = frames_per_phoneme
        self.fail_on_id = fail_on_id
        self.oom_over = oom_over
        self.delay_s = float(delay_s)
        self.transient_left = transient_first
        self.info = EngineInfo("fake", "fp32", "cpu", sample_rate, max_batch, per_item_scales=True)

    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        t0 = time.perf_counter()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.transient_left > 0:
            self.transient_left -= 1
            raise TransientEngineError("fake engine: the device went away (transient)")
        if self.oom_over is not None and len(batch) > self.oom_over:
            raise EngineOutOfMemory(f"fake engine: batch of {len(batch)} exceeds {self.oom_over}")
        if self.fail_on_id is not None and bool((batch.phoneme_ids == self.fail_on_id).any()):
            raise DeterministicEngineError(f"fake engine: phoneme id {self.fail_on_id} is refused")
        # per-item speaking rates as the float32 the batch carries them in, rounded back to the value
        # they were given as (so an item's length does not depend on sharing a call with other rates)
        scale = (batch.scale_column(1).astype(np.float64).round(6) if batch.item_scales is not None
                 else batch.scales.length_scale)
        lengths = batch.lengths * self.frames_per_phoneme * self.hop_length * scale
        lengths = np.maximum(lengths.astype(np.int64), self.hop_length)
        audio = np.zeros((len(batch), int(lengths.max(initial=1))), dtype=np.int16)
        durations = np.zeros(batch.phoneme_ids.shape, dtype=np.float32)
        sr = self.info.sample_rate
        for i in range(len(batch)):
            n = int(lengths[i])
            ids = batch.phoneme_ids[i, : int(batch.lengths[i])]
            each = -(-n // max(len(ids), 1))
            per = np.repeat(ids, each)[:n].astype(np.float64)
            # samples of each id: ``each``, the last ones cut where the item ends
            durations[i, : len(ids)] = np.clip(n - each * np.arange(len(ids)), 0, each)
            t = np.arange(n) / sr
            audio[i, :n] = float_to_int16(0.3 * np.sin(2 * np.pi * (100.0 + 5.0 * per) * t))
        return SynthesisResult(audio, lengths, (time.perf_counter() - t0) * 1000.0, durations=durations)


def build(voice, spec) -> FakeEngine:
    """The fake engine of ``spec`` for ``voice`` (:data:`engines.registry.ENGINES`), with the test hooks of
    this process's environment (:func:`hooks_from_env`)."""
    return FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length, max_batch=spec.max_batch,
                      **hooks_from_env())
