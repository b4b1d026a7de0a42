"""The engine protocol: the one interface every synthesis backend implements.

An engine is *text-blind*: it knows nothing of books, sentences or phonemes as
symbols. It receives a padded batch of phoneme ids with their true lengths and
the synthesis scales, and returns padded 16-bit PCM with each item's true
sample count. It does not know about files, queues, retries or chapters.

Backends are selected by a string (``onnx``, ``torch``, ``tensorrt``) through
:func:`engines.load_engine`, which imports them lazily so a CPU node never
imports CUDA or TensorRT.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

#: Piper's conversion of float audio in [-1, 1] to int16.
MAX_WAV_VALUE = 32767.0
#: Longest utterance in phoneme ids that jobs are planned with by default (longer sentences are split
#: before they reach an engine); engines that build fixed shape profiles size them for it.
DEFAULT_MAX_PHONEMES = 400


@dataclass(frozen=True)
class Scales:
    """The three VITS synthesis scales (Piper's ``scales`` input, in that order)."""

    noise_scale: float
    """Scale of the prior noise (voice variability); 0 makes the flow deterministic."""
    length_scale: float
    """Speaking-rate factor: > 1 is slower."""
    noise_w: float
    """Scale of the duration-predictor noise; 0 makes durations deterministic."""

    def as_array(self) -> np.ndarray:
        return np.array([self.noise_scale, self.length_scale, self.noise_w], dtype=np.float32)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Scales":
        return cls(float(d["noise_scale"]), float(d["length_scale"]), float(d["noise_w"]))


@dataclass
class SynthesisBatch:
    """A padded batch of phoneme-id sequences."""

    phoneme_ids: np.ndarray
    """int64 [B, T], right-padded with 0 (Piper's pad id)."""
    lengths: np.ndarray
    """int64 [B], true length of each row."""
    scales: Scales
    """Synthesis scales for every item of the batch."""
    seed: int | None = None
    """Seed for the noise, where the backend can take one (ONNX Runtime cannot)."""
    speaker_ids: np.ndarray | None = None
    """int64 [B]: the speaker of each item, for multi-speaker voices (Piper's ``sid`` input); None:
    a single-speaker voice (or speaker 0)."""
    item_scales: np.ndarray | None = None
    """float32 [B, 3]: each item's own scales (``Scales.as_array`` order), for a batch that mixes jobs
    of different speaking rates or noise settings; None: every item uses :attr:`scales`. Only an engine
    whose :attr:`EngineInfo.per_item_scales` is true receives such a batch (the pipeline gives the
    others one batch per set of scales)."""

    def __post_init__(self) -> None:
        self.phoneme_ids = np.asarray(self.phoneme_ids, dtype=np.int64)
        self.lengths = np.asarray(self.lengths, dtype=np.int64)
        if self.phoneme_ids.ndim != 2 or self.lengths.shape != (self.phoneme_ids.shape[0],):
            raise ValueError(
                f"phoneme_ids must be [B, T] and lengths [B], got {self.phoneme_ids.shape} and {self.lengths.shape}"
            )
        if self.speaker_ids is not None:
            self.speaker_ids = np.asarray(self.speaker_ids, dtype=np.int64)
            if self.speaker_ids.shape != self.lengths.shape:
                raise ValueError(f"speaker_ids must be [B], got {self.speaker_ids.shape}")
        if self.item_scales is not None:
            self.item_scales = np.asarray(self.item_scales, dtype=np.float32)
            if self.item_scales.shape != (len(self.lengths), 3):
                raise ValueError(f"item_scales must be [B, 3], got {self.item_scales.shape}")

    def scales_of(self, i: int) -> Scales:
        """The scales item ``i`` is synthesized with (as float32 values when they are per item)."""
        if self.item_scales is None:
            return self.scales
        return Scales(*(float(v) for v in self.item_scales[i]))

    def scale_column(self, k: int) -> np.ndarray:
        """float32 [B]: scale ``k`` (0 noise_scale, 1 length_scale, 2 noise_w) of every item."""
        if self.item_scales is None:
            return np.full(len(self.lengths), self.scales.as_array()[k], dtype=np.float32)
        return self.item_scales[:, k]

    @classmethod
    def from_sequences(cls, seqs: list[list[int]], scales: Scales, seed: int | None = None,
                       speaker_ids: list[int] | None = None,
                       item_scales: list[Scales] | None = None) -> "SynthesisBatch":
        """A batch of ``seqs``; ``item_scales``: each item's scales when they are not all ``scales``
        (kept only if they differ, so a uniform batch stays the plain kind)."""
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        ids = np.zeros((len(seqs), int(lengths.max(initial=1))), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
        per = None
        if item_scales is not None and any(s != scales for s in item_scales):
            per = np.stack([s.as_array() for s in item_scales])
        return cls(ids, lengths, scales, seed, None if speaker_ids is None else np.asarray(speaker_ids, np.int64),
                   per)

    def __len__(self) -> int:
        return int(self.phoneme_ids.shape[0])

    def validate(self, n_vocab: int) -> None:
        """Refuse what no engine can synthesize: an empty batch, lengths outside the padded width,
        ids outside the voice's vocabulary (:class:`DeterministicEngineError`: retrying won't help)."""
        from core.errors import DeterministicEngineError

        ids, lengths = self.phoneme_ids, self.lengths
        if len(self) == 0:
            raise DeterministicEngineError("empty batch: nothing to synthesize")
        if lengths.min() < 1 or lengths.max() > ids.shape[1]:
            raise DeterministicEngineError(f"phoneme lengths must be in 1..{ids.shape[1]}, got {lengths.min()}..{lengths.max()}")
        if ids.min() < 0 or ids.max() >= n_vocab:
            raise DeterministicEngineError(f"phoneme ids must be in 0..{n_vocab - 1} for this voice, "
                                           f"got {ids.min()}..{ids.max()}")

    def slice(self, start: int, stop: int) -> "SynthesisBatch":
        """Items ``start:stop``, re-padded to their own longest row."""
        lengths = self.lengths[start:stop]
        return SynthesisBatch(self.phoneme_ids[start:stop, : int(lengths.max(initial=1))], lengths, self.scales, self.seed,
                              None if self.speaker_ids is None else self.speaker_ids[start:stop],
                              None if self.item_scales is None else self.item_scales[start:stop])


class SynthesisResult:
    """int16 PCM of each item of a batch and its exact sample count, in one of two layouts
    behind one interface (:meth:`item`, :attr:`audio`):

    * padded: ``audio`` int16 ``[B, S]``; item i is ``audio[i, :sample_lengths[i]]`` and the
      samples past it are padding;
    * packed: ``packed`` int16 1-D and ``offsets`` int64 ``[B]``; item i is
      ``packed[offsets[i] : offsets[i] + sample_lengths[i]]``. A GPU engine returns this: one
      device-to-host copy of the chunks it computed, instead of a ``[B, S]`` array padded to the
      longest item (five times the audio for a batch of book sentences). ``audio`` is then
      built on first access.
    """

    def __init__(self, audio: np.ndarray | None, sample_lengths: np.ndarray, infer_ms: float = 0.0, *,
                 packed: np.ndarray | None = None, offsets: np.ndarray | None = None,
                 durations: np.ndarray | None = None, stats: list | None = None) -> None:
        self.sample_lengths = np.asarray(sample_lengths, dtype=np.int64)
        """int64 [B]: the exact sample count of each item."""
        self.infer_ms = float(infer_ms)
        """Wall time the engine spent on the batch, in milliseconds."""
        if (audio is None) == (packed is None) or (packed is not None and offsets is None):
            raise ValueError("SynthesisResult takes either audio [B, S] or packed + offsets")
        self._audio = audio
        self.durations = None if durations is None else np.asarray(durations, dtype=np.float32)
        """Optional float32 ``[B, T]``: samples each phoneme id of item i lasts (the duration
        predictor's frames x hop), where the engine exposes them; None otherwise."""
        self.packed = packed
        self.offsets = None if offsets is None else np.asarray(offsets, dtype=np.int64)
        self.stats = stats
        """Optional, per item: what the engine's ``item_stats`` hook made of its audio where the caller
        gave it one (the loudness statistics, computed on the device); None otherwise."""

    @property
    def audio(self) -> np.ndarray:
        """int16 [B, S] padded with zeros (built from the packed layout on first access)."""
        if self._audio is None:
            n = len(self.sample_lengths)
            audio = np.zeros((n, int(self.sample_lengths.max(initial=0))), dtype=np.int16)
            for i in range(n):
                audio[i, : int(self.sample_lengths[i])] = self.item(i)
            self._audio = audio
        return self._audio

    def item(self, i: int) -> np.ndarray:
        """Item i's samples (a view, not a copy)."""
        n = int(self.sample_lengths[i])
        if self.packed is not None:
            o = int(self.offsets[i])
            return self.packed[o:o + n]
        return self._audio[i, :n]

    def item_durations(self, i: int, n_ids: int) -> np.ndarray | None:
        """Samples per phoneme id of item i (its first ``n_ids``), or None if the engine gave none."""
        return None if self.durations is None else self.durations[i, :n_ids]

    def __len__(self) -> int:
        return len(self.sample_lengths)


@dataclass(frozen=True)
class EngineInfo:
    """What an engine serves, for logs and the manifest."""

    name: str
    precision: str
    device: str
    sample_rate: int
    max_batch: int
    extra: dict = field(default_factory=dict)
    per_item_scales: bool = False
    """Whether :meth:`Engine.synthesize` takes batches with :attr:`SynthesisBatch.item_scales` (jobs of
    different speaking rates in one call); the pipeline splits batches for engines that do not."""


@runtime_checkable
class Engine(Protocol):
    """A synthesis backend: one method, plus a description of itself."""

    info: EngineInfo

    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        """Synthesize every item of ``batch``; raise only :class:`core.errors.EngineError` subclasses."""
        ...


@runtime_checkable
class PreparesShapes(Protocol):
    """An engine that runs shapes it was prepared for faster (the torch engine captures CUDA graphs of
    its chunk shapes). Its worker keeps the shapes the engine met on the node, and has the next
    engine of the same settings prepare them before its first batch. Shapes are tensor sizes only:
    nothing of the text."""

    def shape_profile(self) -> dict:
        """The shapes met so far with their counts (JSON-able)."""
        ...

    def prepare_shapes(self, profile: dict, budget_s: float) -> dict:
        """Prepare the shapes of ``profile``, most frequent first, for at most about ``budget_s``
        seconds; returns counts for the start-up log (``captured``, ``skipped``, ``seconds``)."""
        ...


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    """Piper's float -> int16 conversion (scale by 32767, clip)."""
    return np.clip(audio * MAX_WAV_VALUE, -MAX_WAV_VALUE, MAX_WAV_VALUE).astype(np.int16)
