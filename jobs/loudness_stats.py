"""Loudness statistics of one utterance, made where its audio is made, and their sum over a chapter.

A chapter's gain (``--loudness ebu|acx``) needs its BS.1770 integrated loudness, its true peak and
its RMS. A chapter is its utterances laid end to end with silent pauses of known length, so each of
these follows from figures of the single utterances, computed right after synthesis (on the device
for GPU engines, with NumPy/SciPy on the host for CPU engines) and kept in the batch record; finalize
only combines them (:func:`combine`) and never holds a chapter's signal.

The statistics of one utterance (:class:`UtteranceStats`, JSON in the batch record's item):

* ``k``: the K-weighted energy (sum of squares of the K-weighted signal, full scale 1.0, pyloudnorm's
  filters and passband gains) in sub-blocks of :func:`sub_samples` (25 ms) counted from the
  utterance's first sample, over the utterance and :data:`TAIL_S` (50 ms) of silence after it. The
  filter starts from rest at the utterance's start: after a pause the previous utterance's ringing
  has died out (its K-weighted impulse response falls under 1e-6 of its start within 50 ms), and the
  50 ms tail carries this utterance's own ringing into the pause. Where a pause is shorter than the
  tail (``--clause-pause 0``) the two ringings overlap and their cross term, far under the speech
  around it, is left out. Stored in 0.01 dB steps (a relative error under 0.12 % per sub-block).
* ``ss``: the plain sum of squares (ACX's RMS); ``tp``: the 4x-oversampled true peak (the
  :func:`jobs.loudness._oversampled_abs` filter, silence on both sides: exact for pauses of at least
  6 samples); ``sp``: the sample peak.

Combining (:func:`combine`): BS.1770 gates 400 ms blocks that start every 100 ms on the CHAPTER's
timeline. An utterance starts anywhere on that grid, so its 25 ms sub-blocks are placed at its offset
and the chapter's cumulative K-weighted energy is read at each block edge, a sub-block that straddles
an edge counted in proportion to the part on each side (as if its energy were even within it). Every
sample's energy is counted once; only its split between two neighbouring blocks is approximate,
which moves the gated mean by a few thousandths of an LU on speech (tests/jobs/test_loudness_stats.py
checks 0.1 LU against pyloudnorm on the joined chapter). True peak and sample peak combine by max,
sums of squares by sum.

One definition, two implementations: :func:`utterance_stats` (NumPy: SciPy's ``sosfilt``) and
:func:`utterance_stats_torch` (a batch of device tensors: the same filter as its 50 ms impulse
response applied by FFT, the true-peak filter as a ``conv1d``); both run in CPU-only CI and are
checked against each other and against pyloudnorm.

ACX resamples the chapter to 44.1 kHz in finalize (:mod:`jobs.loudness_stream`, a block at a time);
its RMS is taken here at the voice's rate (resampling keeps the energy of speech, which has next
to nothing near the voice's Nyquist frequency) and its peaks are checked again on the resampled
stream by the limiter.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

#: Sub-block of the K-weighted energies (seconds): a quarter of BS.1770's 100 ms block step.
SUB_S = 0.025
#: Silence after an utterance whose K-weighted ringing is counted with it (seconds).
TAIL_S = 0.05
#: BS.1770 gating: 400 ms blocks every 100 ms, absolute gate -70 LUFS, relative gate -10 LU.
BLOCK_S = 0.4
STEP_S = 0.1
ABS_GATE_LUFS = -70.0
REL_GATE_LU = -10.0
#: Energies are kept in the record as dB in these steps; zero energy as this floor.
DB_STEP = 0.01
DB_FLOOR = -400.0
#: Samples a NumPy pass reads at a time (as jobs.loudness: a few MiB of float64).
CHUNK = 1 << 18
#: Record format version (an item's ``loudness`` of another version is measured again).
VERSION = 1


def sub_samples(sample_rate: int) -> int:
    return max(1, int(round(sample_rate * SUB_S)))


def tail_samples(sample_rate: int) -> int:
    return int(math.ceil(sample_rate * TAIL_S))


def n_sub(samples: int, sample_rate: int) -> int:
    """Sub-blocks of an utterance of ``samples`` (its tail included); 0 for an empty one."""
    if samples <= 0:
        return 0
    return -(-(samples + tail_samples(sample_rate)) // sub_samples(sample_rate))


@dataclass
class UtteranceStats:
    samples: int
    sample_rate: int
    k: np.ndarray
    """float64 [n_sub]: K-weighted energy per sub-block."""
    ss: float
    tp: float
    sp: float

    def scaled(self, g: float) -> "UtteranceStats":
        """The statistics of the same audio times ``g`` (peak normalisation after the engine)."""
        g = float(g)
        return UtteranceStats(self.samples, self.sample_rate, self.k * (g * g), self.ss * g * g,
                              self.tp * abs(g), self.sp * abs(g))

    def to_json(self) -> dict:
        with np.errstate(divide="ignore"):
            db = 10.0 * np.log10(self.k)
        db = np.where(np.isfinite(db), np.maximum(db, DB_FLOOR), DB_FLOOR)
        return {"v": VERSION, "sub": sub_samples(self.sample_rate),
                "k": np.rint(db / DB_STEP).astype(np.int64).tolist(),
                "ss": float(self.ss), "tp": float(self.tp), "sp": float(self.sp)}

    @classmethod
    def from_json(cls, d, samples: int, sample_rate: int) -> "UtteranceStats | None":
        """The statistics kept in a record, or None where they are missing or do not fit ``samples``
        at ``sample_rate`` (a record of another version or of another layout: measure instead)."""
        if not isinstance(d, dict) or d.get("v") != VERSION or d.get("sub") != sub_samples(sample_rate):
            return None
        k = d.get("k")
        if not isinstance(k, list) or len(k) != n_sub(samples, sample_rate):
            return None
        try:
            db = np.asarray(k, dtype=np.float64) * DB_STEP
            energy = np.where(db <= DB_FLOOR, 0.0, 10.0 ** (db / 10.0))
            return cls(int(samples), int(sample_rate), energy, float(d["ss"]), float(d["tp"]), float(d["sp"]))
        except (KeyError, TypeError, ValueError):
            return None


def _as_float(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == np.int16:
        return x.astype(np.float32) * np.float32(1.0 / 32768.0)
    return x.astype(np.float32, copy=False)


@functools.lru_cache(maxsize=8)
def k_filter(sample_rate: int) -> tuple[np.ndarray, float]:
    """The K-weighting (pyloudnorm's two stages) as second-order sections, and their passband gain."""
    from jobs.loudness import _k_weighting_sos

    return _k_weighting_sos(sample_rate)


@functools.lru_cache(maxsize=8)
def k_impulse(sample_rate: int) -> np.ndarray:
    """The K-weighting's impulse response (passband gain included) over :data:`TAIL_S`: the FIR the
    torch implementation applies."""
    from scipy.signal import sosfilt

    sos, gain = k_filter(sample_rate)
    imp = np.zeros(tail_samples(sample_rate) + 1)
    imp[0] = 1.0
    return sosfilt(sos, imp) * gain


def utterance_stats(x: np.ndarray, sample_rate: int) -> UtteranceStats:
    """The statistics of one utterance (int16, or float in [-1, 1]), on the host."""
    from scipy.signal import sosfilt

    from jobs.loudness import _oversampled_abs

    xf = _as_float(x)
    n = len(xf)
    sub = sub_samples(sample_rate)
    ns = n_sub(n, sample_rate)
    if n == 0:
        return UtteranceStats(0, sample_rate, np.zeros(0), 0.0, 0.0, 0.0)
    sos, gain = k_filter(sample_rate)
    padded = np.zeros(ns * sub, np.float64)
    padded[:n] = xf
    y = sosfilt(sos, padded)
    y *= gain
    np.square(y, out=y)
    k = y.reshape(ns, sub).sum(axis=1)
    ss = float(np.einsum("i,i->", xf, xf, dtype=np.float64))
    sp = float(np.abs(xf).max())
    tp = float(_oversampled_abs(xf).max()) if sp > 0 else 0.0
    return UtteranceStats(n, sample_rate, k, ss, tp, sp)


# --------------------------------------------------------------------------- torch (GPU or CPU tensors)


def _torch_fir(torch, sample_rate: int, device, n_fft: int):
    h = torch.as_tensor(k_impulse(sample_rate), dtype=torch.float32, device=device)
    return torch.fft.rfft(h, n=n_fft)


def _torch_peak_weight(torch, device):
    from jobs.loudness import _true_peak_phases

    phases = _true_peak_phases()
    w = np.stack([h[::-1] for h in phases])[:, None, :]  # conv1d correlates: the taps reversed
    return torch.as_tensor(np.ascontiguousarray(w), dtype=torch.float32, device=device)


def utterance_stats_torch(audio, lengths, sample_rate: int) -> list[UtteranceStats]:
    """The statistics of each row of ``audio`` (a torch tensor ``[B, S]``, int16 or float in
    [-1, 1], on any device; row i is its first ``lengths[i]`` samples, the rest ignored), computed
    on that device; only the small per-sub-block sums come back to the host."""
    hook = TorchStats(sample_rate)
    return hook.host(hook.device(audio, lengths), lengths)


class TorchStats:
    """:func:`utterance_stats_torch` in two halves, for an engine that keeps its device busy:
    :meth:`device` queues the work on the device (no synchronisation) and returns device tensors;
    :meth:`host` turns them into :class:`UtteranceStats` once the engine has synchronised. A GPU
    engine calls both when the job layer gives it one (``TorchEngine.item_stats``)."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._consts: dict = {}

    def _const(self, torch, dev, n_fft: int):
        key = (str(dev), n_fft)
        if key not in self._consts:
            self._consts[key] = (_torch_fir(torch, self.sample_rate, dev, n_fft), _torch_peak_weight(torch, dev))
        return self._consts[key]

    def device(self, audio, lengths) -> dict:
        import torch

        sample_rate = self.sample_rate
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        b = len(lengths)
        if b == 0:
            return {}
        dev = audio.device
        with torch.no_grad():
            x = audio[:b].float() * (1.0 / 32768.0) if audio.dtype == torch.int16 else audio[:b].float()
            s = x.shape[1]
            lens = torch.from_numpy(lengths)
            if dev.type == "cuda":  # an asynchronous copy: the engine's stream is not waited for
                lens = lens.pin_memory().to(dev, non_blocking=True)
            inside = torch.arange(s, device=dev)[None, :] < lens[:, None]
            x = torch.where(inside, x, 0.0)
            sub, tail = sub_samples(sample_rate), tail_samples(sample_rate)
            ns_max = n_sub(int(lengths.max()), sample_rate)
            total = ns_max * sub  # >= s + tail for the longest row
            m = tail + 1  # FIR length
            # overlap-save: frames of n_fft samples, each giving n_fft - (m - 1) outputs
            n_fft = 1 << max(12, int(math.ceil(math.log2(4 * m))))
            hop = n_fft - (m - 1)
            n_frames = -(-total // hop)
            fir, peak_w = self._const(torch, dev, n_fft)
            xp = torch.nn.functional.pad(x, (m - 1, n_frames * hop - s))  # [B, m - 1 + n_frames * hop]
            frames = xp.unfold(1, n_fft, hop)  # [B, n_frames, n_fft]
            y = torch.fft.irfft(torch.fft.rfft(frames, n=n_fft) * fir, n=n_fft)
            y = y[:, :, m - 1:].reshape(b, -1)[:, :total]
            k = (y * y).reshape(b, ns_max, sub).sum(dim=2)
            ss = (x * x).sum(dim=1)
            ax = x.abs()
            sp = ax.amax(dim=1)
            xt = torch.nn.functional.pad(x, (6, 6))[:, None, :]
            # cuDNN's autotuning off (the engine's stage B runs with it on): every chunk brings a new
            # width, and each new shape would be timed over all of cuDNN's algorithms first; no TF32
            with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, benchmark=False,
                                            deterministic=False, allow_tf32=False):
                over = torch.nn.functional.conv1d(xt, peak_w)[:, :, :s].abs().amax(dim=1)
            # per sample: itself and the 3 interpolated values after it, as jobs.loudness._oversampled_abs
            tp = torch.maximum(torch.where(inside, over, 0.0), ax).amax(dim=1)
        return {"k": k, "ss": ss, "sp": sp, "tp": tp}

    def host(self, pending: dict, lengths) -> list[UtteranceStats]:
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        if len(lengths) == 0:
            return []
        k, ss, sp, tp = (pending[n].cpu().numpy() for n in ("k", "ss", "sp", "tp"))
        out = []
        for i, n in enumerate(lengths.tolist()):
            ns = n_sub(n, self.sample_rate)
            out.append(UtteranceStats(int(n), self.sample_rate, k[i, :ns].astype(np.float64), float(ss[i]),
                                      float(tp[i]) if n else 0.0, float(sp[i]) if n else 0.0))
        return out


# --------------------------------------------------------------------------- a chapter


@dataclass
class ChapterStats:
    """What a chapter's gain needs, from its utterances (:func:`combine`) or its stream (:class:`StreamMeter`)."""

    sample_rate: int
    samples: int
    blocks: np.ndarray
    """float64: each gating block's K-weighted mean square (BS.1770's z), pyloudnorm's block layout."""
    ss: float
    tp: float
    sp: float

    def integrated_lufs(self) -> float:
        """BS.1770-4 gated loudness; -inf for silence or under one block."""
        z = self.blocks
        if self.samples < BLOCK_S * self.sample_rate or len(z) == 0:
            return -math.inf
        with np.errstate(divide="ignore"):
            level = -0.691 + 10.0 * np.log10(z)
        above = z[level >= ABS_GATE_LUFS]
        if len(above) == 0:
            return -math.inf
        relative = -0.691 + 10.0 * math.log10(float(above.mean())) + REL_GATE_LU
        gated = z[(level > relative) & (level > ABS_GATE_LUFS)]
        return float(-0.691 + 10.0 * math.log10(float(gated.mean()))) if len(gated) else -math.inf

    def rms_db(self) -> float:
        ms = self.ss / self.samples if self.samples else 0.0
        return 10.0 * math.log10(ms) if ms > 0 else -math.inf

    def true_peak_db(self) -> float:
        return 20.0 * math.log10(self.tp) if self.tp > 0 else -math.inf

    def sample_peak_db(self) -> float:
        return 20.0 * math.log10(self.sp) if self.sp > 0 else -math.inf


def block_edges(samples: int, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the gating blocks of a chapter of ``samples``: pyloudnorm's count
    (``round((T - 0.4) / 0.1) + 1``, the last one cut at the end), on the 100 ms grid."""
    if samples < BLOCK_S * sample_rate:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n_blocks = int(np.round((samples / sample_rate - BLOCK_S) / STEP_S)) + 1
    j = np.arange(n_blocks)
    lo = np.floor(j * STEP_S * sample_rate + 1e-6).astype(np.int64)
    hi = np.minimum(np.floor((j * STEP_S + BLOCK_S) * sample_rate + 1e-6).astype(np.int64), samples)
    return lo, hi


def _blocks_from_cumulative(energy_at, samples: int, sample_rate: int) -> np.ndarray:
    lo, hi = block_edges(samples, sample_rate)
    if len(lo) == 0:
        return np.zeros(0)
    edges = np.unique(np.concatenate([lo, hi]))
    at = energy_at(edges.astype(np.float64))
    e_lo = at[np.searchsorted(edges, lo)]
    e_hi = at[np.searchsorted(edges, hi)]
    return np.maximum(e_hi - e_lo, 0.0) / (BLOCK_S * sample_rate)


def combine(parts, samples: int, sample_rate: int) -> ChapterStats:
    """The statistics of a chapter of ``samples`` samples from ``parts``: (offset in samples,
    :class:`UtteranceStats`) of each utterance in it (silence elsewhere)."""
    sub = sub_samples(sample_rate)
    starts, energy = [], []
    ss = tp = sp = 0.0
    for offset, st in parts:
        if st.samples == 0:
            continue
        starts.append(offset + sub * np.arange(len(st.k), dtype=np.float64))
        energy.append(st.k)
        ss += st.ss
        tp = max(tp, st.tp)
        sp = max(sp, st.sp)
    s = np.concatenate(starts) if starts else np.zeros(0)
    e = np.concatenate(energy) if energy else np.zeros(0)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    ce = np.concatenate([[0.0], np.cumsum(e)])
    ces = np.concatenate([[0.0], np.cumsum(e * s)])

    def energy_at(q: np.ndarray) -> np.ndarray:
        # sum over sub-blocks of e * clip((q - start) / sub, 0, 1): whole ones before q, and the
        # partial ones (starts in (q - sub, q)) in proportion; all sub-blocks are equally long, so
        # both sets are contiguous in start order
        whole = np.searchsorted(s, q - sub, side="right")
        begun = np.searchsorted(s, q, side="left")
        part_e = ce[begun] - ce[whole]
        part_es = ces[begun] - ces[whole]
        return ce[whole] + (q * part_e - part_es) / sub

    blocks = _blocks_from_cumulative(energy_at, samples, sample_rate)
    return ChapterStats(sample_rate, int(samples), blocks, ss, tp, sp)


class StreamMeter:
    """The same statistics measured on a chapter's signal as it streams past (exact: the K-weighting
    runs over the whole chapter), a chunk at a time: for chapters whose records lack them, and for
    the output where the limiter changed it. ``loudness``/``true_peak``: measure those too."""

    def __init__(self, sample_rate: int, loudness: bool = True, true_peak: bool = True) -> None:
        self.sample_rate = sample_rate
        self.loudness = loudness
        self.true_peak = true_peak
        self.n = 0
        self.ss = 0.0
        self.sp = 0.0
        self.tp = 0.0
        self._hop = STEP_S * sample_rate
        self._cum: list[float] = [0.0]  # cumulative K-weighted energy at each 100 ms grid point
        self._total = 0.0
        self._zi = None
        self._ctx = np.zeros(0, np.float32)  # for the true peak: samples before the pending ones
        self._pending = np.zeros(0, np.float32)

    def feed(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.dtype == np.int16 and not (self.loudness or self.true_peak):  # sums on the int16 samples, no copy
            if len(x):
                self.ss += float(np.einsum("i,i->", x, x, dtype=np.float64)) / 32768.0 ** 2
                self.sp = max(self.sp, max(int(x.max()), -int(x.min())) / 32768.0)
                self.n += len(x)
            return
        xf = _as_float(x)
        for a in range(0, len(xf), CHUNK):
            self._feed(xf[a:a + CHUNK])

    def _feed(self, x: np.ndarray) -> None:
        n = len(x)
        if n == 0:
            return
        self.ss += float(np.einsum("i,i->", x, x, dtype=np.float64))
        self.sp = max(self.sp, float(np.abs(x).max()))
        if self.loudness:
            from scipy.signal import sosfilt

            sos, gain = k_filter(self.sample_rate)
            if self._zi is None:
                self._zi = np.zeros((len(sos), 2))
            y, self._zi = sosfilt(sos, x.astype(np.float64), zi=self._zi)
            y *= gain
            np.square(y, out=y)
            cs = np.cumsum(y)
            cs += self._total
            # grid points in (self.n, self.n + n]
            k0 = len(self._cum)
            k1 = int(math.floor((self.n + n) / self._hop + 1e-9)) + 1
            if k1 > k0:
                pts = np.floor(np.arange(k0, k1) * self._hop + 1e-6).astype(np.int64) - self.n
                self._cum.extend(cs[np.maximum(pts - 1, 0)].tolist())
            self._total = float(cs[-1])
        if self.true_peak:
            self._peaks(x, final=False)
        self.n += n

    def _peaks(self, x: np.ndarray, final: bool) -> None:
        from jobs.loudness import _oversampled_abs

        # a sample's value reads 6 on either side: the last 6 wait for the next chunk
        ctx, pend = self._ctx, np.concatenate([self._pending, x])
        keep = 0 if final else min(len(pend), 6)
        ready = len(pend) - keep
        if ready > 0:
            w = np.concatenate([ctx, pend])
            vals = _oversampled_abs(w)[len(ctx):len(ctx) + ready]
            self.tp = max(self.tp, float(vals.max()))
            done = np.concatenate([ctx, pend[:ready]])
            self._ctx = done[-8:].copy()
        self._pending = pend[ready:].copy()

    def result(self) -> ChapterStats:
        if self.true_peak:
            self._peaks(np.zeros(0, np.float32), final=True)
        blocks = np.zeros(0)
        if self.loudness:
            cum = np.asarray(self._cum + [self._total])
            grid = np.floor(np.arange(len(self._cum)) * self._hop + 1e-6).astype(np.int64)
            pos = np.concatenate([grid, [self.n]]).astype(np.float64)

            def energy_at(q: np.ndarray) -> np.ndarray:
                return np.interp(q, pos, cum)  # every q is a grid point or the end: exact

            blocks = _blocks_from_cumulative(energy_at, self.n, self.sample_rate)
        return ChapterStats(self.sample_rate, self.n, blocks, self.ss, self.tp if self.true_peak else self.sp,
                            self.sp)


# --------------------------------------------------------------------------- records


def wanted(jobs) -> bool:
    """Whether statistics are worth making for units of ``jobs``: some job applies a loudness
    (``--loudness none`` reports only a sample peak and RMS, summed in finalize)."""
    return any(j.config.loudness != "none" for j in jobs)


def gpu_stats_at() -> str:
    """Where a GPU engine's units get their statistics (``BOOKTTS_GPU_LOUDNESS_STATS``): ``device``
    (the default: the engine's hook, :class:`TorchStats`), ``finalize`` (finalize meters the
    chapter's stream in its own processes) or ``writer`` (the unit writers, in the engine's process)."""
    from core import settings

    return settings.get("BOOKTTS_GPU_LOUDNESS_STATS")


def engine_hook(engine, sample_rate: int, on: bool) -> None:
    """Give an engine that computes statistics on its device (``item_stats``) the hook, or take it
    away (``on`` False, or the device not chosen by :func:`gpu_stats_at`); other engines are left
    alone."""
    if not hasattr(engine, "item_stats"):
        return
    if not on or gpu_stats_at() != "device":
        engine.item_stats = None
    elif not isinstance(engine.item_stats, TorchStats) or engine.item_stats.sample_rate != sample_rate:
        engine.item_stats = TorchStats(sample_rate)


def measured_by_writer(device: str, engine_stats: list | None) -> bool:
    """Whether the unit writer records statistics for a unit made on ``device`` (the engine's
    ``EngineInfo.device``): always for a CPU engine (its speed leaves the writer time to spare) and
    where the engine gave them; for a GPU engine only where :func:`gpu_stats_at` says ``writer``. A
    unit without them is metered by finalize from the chapter's stream."""
    if engine_stats is not None and any(s is not None for s in engine_stats):
        return True
    if not str(device).startswith("cuda"):
        return True
    return gpu_stats_at() == "writer"


def unit_stats(written: list[np.ndarray], engine_items: list[np.ndarray], engine_stats: list | None,
               normalized: bool, sample_rate: int) -> list[dict]:
    """The record form of each item's statistics: the engine's (computed on its device; scaled as
    peak normalisation scaled the item) where it gave them, else measured on the host from the
    samples as written."""
    out = []
    for i, audio in enumerate(written):
        st = engine_stats[i] if engine_stats is not None and i < len(engine_stats) else None
        if st is not None and st.samples == len(audio):
            if normalized:
                peak = max(int(engine_items[i].max()), -int(engine_items[i].min())) if len(engine_items[i]) else 0
                if peak:
                    st = st.scaled(32767.0 / peak)
        else:
            st = utterance_stats(audio, sample_rate)
        out.append(st.to_json())
    return out


def chapter_from_records(entries, samples: int, sample_rate: int) -> ChapterStats | None:
    """A chapter's statistics from its utterances' records: ``entries`` are (offset, the record's
    item dict) of each spoken utterance; None where one of them lacks usable statistics (a job
    written by an older version, or with ``--loudness none``): the chapter is measured instead."""
    parts = []
    for offset, item in entries:
        st = UtteranceStats.from_json(item.get("loudness"), int(item["samples"]), sample_rate)
        if st is None:
            return None
        parts.append((offset, st))
    return combine(parts, samples, sample_rate)
