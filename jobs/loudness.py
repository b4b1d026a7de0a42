"""Per-chapter loudness: measure (ITU-R BS.1770 via pyloudnorm), gain to a target, limit true peaks.

This module defines the targets and the whole-signal functions (the reference the tests hold the
rest to). Finalize does not call :func:`process` on a chapter any more: it combines the utterances'
statistics (:mod:`jobs.loudness_stats`) and applies gain, limiter and resampling as the chapter
streams to the encoder (:mod:`jobs.loudness_stream`), with this module's filters and constants.

Targets (``--loudness``):

* ``ebu``: EBU R128, integrated loudness -23 LUFS, true peak at most -1 dBTP.
* ``acx``: ACX (Audible) submission levels: RMS -20 dB (inside the required -23..-18 dB),
  peaks at most -3 dBFS (true peak, so that no inter-sample peak exceeds it either), 44.1 kHz.
* ``none``: the audio as synthesized (its values are still measured and reported).

The true peak is estimated on a 4x oversampled signal (polyphase FIR, as BS.1770 Annex 2
describes). When the gain would push it over the ceiling, a look-ahead limiter lowers only the
samples around those peaks: a gain curve that is a moving average of a moving minimum of the
gain each sample needs, so it never exceeds what any sample in reach needs and never jumps.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from jobs.config import LOUDNESS_MODES
from core.errors import InputError

EBU_TARGET_LUFS = -23.0
EBU_CEILING_DBTP = -1.0
ACX_TARGET_RMS_DB = -20.0
ACX_RMS_RANGE_DB = (-23.0, -18.0)
ACX_CEILING_DBTP = -3.0
ACX_SAMPLE_RATE = 44100
#: Oversampling of the true-peak estimate (BS.1770-4: at least 4x for 48 kHz).
OVERSAMPLE = 4
#: The limiter reaches this far around a peak (seconds): 5 ms attack/release.
LIMITER_REACH_S = 0.005
#: The limiter aims this far under the ceiling (dB), and leaves no estimated true peak above
#: ``ceiling - LIMITER_MARGIN_DB / 2``: room for another meter's interpolation to read a bit higher.
LIMITER_MARGIN_DB = 0.4
#: After limiting, a level this far (LU) off the target gets another pass with more gain.
RETRY_LU = 0.2
#: Shortest audio BS.1770 can gate (one 400 ms block).
MIN_MEASURE_S = 0.4
#: Samples the measurements read at a time (a few MiB of float64: the passes stay in cache).
CHUNK = 1 << 18
#: Samples per block of the true-peak search (a block is interpolated whole, or not at all).
PEAK_BLOCK = 16


def _meter(sample_rate: int):
    try:
        import pyloudnorm
    except ImportError:
        raise InputError("--loudness ebu/acx needs the pyloudnorm package to measure loudness: "
                         "pip install pyloudnorm (or pass --loudness none)") from None
    return pyloudnorm.Meter(sample_rate)


def check_available(mode: str) -> None:
    """Raise :class:`InputError` naming the package if ``mode`` cannot run on this host."""
    if mode not in LOUDNESS_MODES:
        raise InputError(f"--loudness {mode!r} is not supported; choose {', '.join(LOUDNESS_MODES)}")
    # presence only: importing SciPy takes about a second, which a run spends where the first
    # chapter is written, not before its engine starts
    if importlib.util.find_spec("scipy") is None:
        raise InputError("--loudness needs SciPy for resampling and true-peak estimation: "
                         "pip install scipy (or pass --loudness none)")
    if mode != "none" and importlib.util.find_spec("pyloudnorm") is None:
        raise InputError("--loudness ebu/acx needs the pyloudnorm package to measure loudness: "
                         "pip install pyloudnorm (or pass --loudness none)")


def output_rate(mode: str, sample_rate: int) -> int:
    """The sample rate chapter files get: 44.1 kHz for ACX, the voice's otherwise."""
    return ACX_SAMPLE_RATE if mode == "acx" else sample_rate


def describe(mode: str, sample_rate: int) -> str:
    """One line for ``plan``: what will be applied."""
    if mode == "ebu":
        return f"EBU R128: {EBU_TARGET_LUFS:g} LUFS integrated per chapter, true peak <= {EBU_CEILING_DBTP:g} dBTP"
    if mode == "acx":
        return (f"ACX: RMS {ACX_TARGET_RMS_DB:g} dB per chapter (allowed {ACX_RMS_RANGE_DB[0]:g} to "
                f"{ACX_RMS_RANGE_DB[1]:g}), peaks <= {ACX_CEILING_DBTP:g} dBFS, resampled "
                f"{sample_rate} -> {ACX_SAMPLE_RATE} Hz")
    return "none: audio as synthesized (peak-normalised per utterance if --normalize); measured only"


def resample(x: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Polyphase (Kaiser-windowed FIR) resampling of float audio; exact 2x for 22050 -> 44100."""
    if from_rate == to_rate or len(x) == 0:
        return x
    from scipy.signal import resample_poly

    g = math.gcd(from_rate, to_rate)
    return resample_poly(x, to_rate // g, from_rate // g).astype(np.float32)


@functools.lru_cache(maxsize=1)
def _true_peak_phases() -> tuple[np.ndarray, ...]:
    """The 4 phases of a 48-tap interpolation filter (12 taps each, as BS.1770-4 Annex 2 uses)."""
    from scipy.signal import firwin

    h = firwin(12 * OVERSAMPLE, 0.9 / OVERSAMPLE, window=("kaiser", 8.0)) * OVERSAMPLE
    return tuple(np.ascontiguousarray(h[p::OVERSAMPLE], dtype=np.float32) for p in range(OVERSAMPLE))


def _oversampled_abs(x: np.ndarray, floor: float | None = None) -> np.ndarray:
    """Per original sample, the largest |value| of the 4x oversampled signal around it (the sample
    itself and the 3 interpolated values after it).

    ``floor``: the values are exact wherever they can reach ``floor``; elsewhere they are ``|x|``
    or the exact value (either way a lower bound, under ``floor``). An interpolated value is a sum
    of 12 neighbours weighted by one phase of the filter, so it is at most that phase's L1 norm
    times the neighbours' largest magnitude: only blocks of :data:`PEAK_BLOCK` samples whose own or
    neighbouring blocks could reach ``floor`` are interpolated (most of speech is not). Default:
    the sample peak, which keeps the maximum (the true peak) exact. The signal is read
    :data:`CHUNK` samples at a time, so that a long chapter's passes stay in the processor's cache."""
    x = np.asarray(x, dtype=np.float32)
    n = len(x)
    out = np.abs(x)
    if n == 0:
        return out
    phases = _true_peak_phases()
    if floor is None:
        floor = float(out.max())
    reach = floor / max(float(np.abs(h).sum()) for h in phases)
    taps, blk = len(phases[0]), PEAK_BLOCK
    before = taps // 2  # y[m] = sum_k h[k] x[m + before - 1 - k]: x[m - 6] .. x[m + 5]
    width = blk + taps - 1  # a block's samples and the neighbours they read
    halo = blk  # one block either side of a chunk: its neighbour blocks and the filter's reach
    offsets = np.arange(blk)
    xp = np.zeros(CHUNK + 2 * halo, np.float32)
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        lo, hi = max(0, a - halo), min(n, b + halo)
        xp[:] = 0.0
        xp[halo - (a - lo):halo + (hi - a)] = x[lo:hi]
        nb = -(-(b - a) // blk)
        bmax = np.abs(xp[:(nb + 2) * blk]).reshape(nb + 2, blk).max(axis=1)  # blocks -1 .. nb
        near = np.maximum(np.maximum(bmax[:-2], bmax[1:-1]), bmax[2:])
        blocks = np.flatnonzero(near >= reach)
        if len(blocks) == 0:
            continue
        start = halo - before
        win = sliding_window_view(xp[start:start + (nb - 1) * blk + width], width)[::blk][blocks]
        best = np.abs(win[:, before:before + blk])
        for h in phases:
            y = np.zeros((len(blocks), blk), np.float32)
            for k in range(taps):
                o = 2 * before - 1 - k
                y += h[k] * win[:, o:o + blk]
            np.maximum(best, np.abs(y), out=best)
        idx = (blocks[:, None] * blk + offsets[None, :]).ravel()
        keep = idx < b - a
        out[a + idx[keep]] = best.ravel()[keep]
    return out


def true_peak_db(x: np.ndarray) -> float:
    peak = float(_oversampled_abs(x).max(initial=0.0))
    return 20 * math.log10(peak) if peak > 0 else -math.inf


def sample_peak_db(x: np.ndarray) -> float:
    peak = float(np.abs(x).max(initial=0.0))
    return 20 * math.log10(peak) if peak > 0 else -math.inf


def rms_db(x: np.ndarray) -> float:
    if len(x) == 0:
        return -math.inf
    ms = float(np.einsum("i,i->", x, x, dtype=np.float64)) / len(x)  # float64 sum, no float64 copy
    return 10 * math.log10(ms) if ms > 0 else -math.inf


@functools.lru_cache(maxsize=4)
def _k_weighting_sos(sample_rate: int) -> tuple[np.ndarray, float]:
    """pyloudnorm's K-weighting stages (the high shelf, then the high pass) as second-order
    sections, and the product of their passband gains."""
    stages = list(_meter(sample_rate)._filters.values())
    sos = np.array([np.concatenate([st.b / st.a[0], st.a / st.a[0]]) for st in stages], dtype=np.float64)
    return sos, float(np.prod([st.passband_gain for st in stages]))


def integrated_lufs(x: np.ndarray, sample_rate: int) -> float:
    """ITU-R BS.1770-4 gated integrated loudness of mono audio; -inf for silence or under 400 ms.

    pyloudnorm's K-weighting filters and its blocks' bounds and gating equations (its own block loop
    takes seconds per minute of audio); ``tests/jobs/test_formats.py`` checks that both agree. The
    signal is filtered and its squares summed :data:`CHUNK` samples at a time (the filters' state
    carried over), reading the running sum at the blocks' edges: no signal-length float64 arrays."""
    if len(x) < MIN_MEASURE_S * sample_rate or not np.any(x):
        return -math.inf
    from scipy.signal import sosfilt

    sos, gain = _k_weighting_sos(sample_rate)
    meter = _meter(sample_rate)
    t_g, step, n = meter.block_size, 1.0 - meter.overlap, len(x)
    n_blocks = int(np.round((n / sample_rate - t_g) / (t_g * step))) + 1
    j = np.arange(n_blocks)
    lo = (t_g * (j * step) * sample_rate).astype(np.int64)
    hi = np.minimum((t_g * (j * step + 1) * sample_rate).astype(np.int64), n)
    edges = np.unique(np.concatenate([lo, hi]))
    summed = np.empty(len(edges), np.float64)  # sum of the squares before each edge
    zi = np.zeros((len(sos), 2))
    total, e0 = 0.0, 0
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        y, zi = sosfilt(sos, np.asarray(x[a:b], dtype=np.float64), zi=zi)
        np.square(y, out=y)
        cs = np.cumsum(y)
        cs += total
        e1 = int(np.searchsorted(edges, b, side="right"))
        at = edges[e0:e1]
        summed[e0:e1] = np.where(at > a, cs[np.maximum(at - a - 1, 0)], total)
        total, e0 = float(cs[-1]), e1
    summed[e0:] = total
    z = (summed[np.searchsorted(edges, hi)] - summed[np.searchsorted(edges, lo)]) * (gain * gain) / (t_g * sample_rate)
    with np.errstate(divide="ignore"):
        block = -0.691 + 10.0 * np.log10(z)
        above = z[block >= -70.0]
        if len(above) == 0:
            return -math.inf
        relative = -0.691 + 10.0 * np.log10(above.mean()) - 10.0
        gated = z[(block > relative) & (block > -70.0)]
        return float(-0.691 + 10.0 * np.log10(gated.mean())) if len(gated) else -math.inf


def limit(x: np.ndarray, sample_rate: int, ceiling_db: float,
          peaks: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Lower the samples around true peaks over ``ceiling_db``; (audio, whether anything was lowered).
    ``peaks``: :func:`_oversampled_abs` of ``x`` when the caller has it."""
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    ceiling = 10 ** ((ceiling_db - LIMITER_MARGIN_DB) / 20)
    reach = max(1, int(LIMITER_REACH_S * sample_rate))
    limited = False
    threshold = 10 ** ((ceiling_db - LIMITER_MARGIN_DB / 2) / 20)
    for k in range(4):  # the limited signal's own inter-sample peaks: check again
        if k or peaks is None:  # exact wherever a value could pass the ceiling the gain is built from
            peaks = _oversampled_abs(x, floor=min(ceiling, threshold))
        if float(peaks.max(initial=0.0)) <= threshold:
            break
        limited = True
        need = np.minimum(1.0, ceiling / np.maximum(peaks, 1e-12)).astype(np.float32)
        # The gain at a sample reads `need` within 2 * reach of it: computed a chunk at a time with
        # that much on either side, the same values as over the whole signal; a chunk with nothing
        # to lower within reach keeps gain 1 (the filters of ones are ones).
        w, n = 2 * reach + 1, len(x)
        gain = np.ones(n, np.float32)
        for a in range(0, n, CHUNK):
            b = min(n, a + CHUNK)
            lo, hi = max(0, a - 2 * w), min(n, b + 2 * w)
            seg = need[lo:hi]
            if float(seg.min()) >= 1.0:
                continue
            g = minimum_filter1d(seg, size=w, mode="nearest")
            g = np.minimum(uniform_filter1d(g, size=w, mode="nearest"), g)
            gain[a:b] = g[a - lo:b - lo]
        x = x * gain
    return x, limited


@dataclass
class Measurement:
    integrated_lufs: float | None
    true_peak_dbtp: float | None
    sample_peak_dbfs: float | None
    rms_db: float | None


def _rounded(m: Measurement) -> Measurement:
    return Measurement(*(round(v, 2) if v is not None and math.isfinite(v) else None
                         for v in (m.integrated_lufs, m.true_peak_dbtp, m.sample_peak_dbfs, m.rms_db)))


def measure(x: np.ndarray, sample_rate: int, loudness: bool = True) -> Measurement:
    def finite(v: float) -> float | None:
        return round(v, 2) if math.isfinite(v) else None

    return Measurement(finite(integrated_lufs(x, sample_rate)) if loudness else None,
                       finite(true_peak_db(x)), finite(sample_peak_db(x)), finite(rms_db(x)))


@dataclass
class ChapterLoudness:
    """What :func:`process` did to one chapter (JSON-able: ``loudness.json``)."""

    mode: str
    sample_rate_in: int
    sample_rate_out: int
    input: dict
    output: dict
    gain_db: float
    gain: float
    """The linear gain applied (before any limiting), exactly."""
    limited: bool
    target: str

    def to_dict(self) -> dict:
        return asdict(self)


def process(pcm: np.ndarray, sample_rate: int, mode: str) -> tuple[np.ndarray, int, ChapterLoudness]:
    """``pcm`` (int16 or float in [-1, 1]) -> (float32 audio at the output rate, that rate, report);
    with ``none`` an int16 ``pcm`` comes back as it is."""
    if mode not in LOUDNESS_MODES:
        raise InputError(f"--loudness {mode!r} is not supported; choose {', '.join(LOUDNESS_MODES)}")
    out_rate = output_rate(mode, sample_rate)
    if mode == "none" and pcm.dtype == np.int16 and len(pcm):
        # reported, not changed: sample peak and RMS, read off the int16 samples without converting them
        peak = max(int(pcm.max()), -int(pcm.min())) / 32768.0
        ms = float(np.einsum("i,i->", pcm, pcm, dtype=np.float64)) / len(pcm) / 32768.0 ** 2
        before = _rounded(Measurement(None, None, 20 * math.log10(peak) if peak else -math.inf,
                                      10 * math.log10(ms) if ms else -math.inf))
        report = ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(before), 0.0, 1.0, False, "none")
        return pcm, out_rate, report
    x = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
    if mode == "none":
        before = _rounded(Measurement(None, None, sample_peak_db(x), rms_db(x)))
        report = ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(before), 0.0, 1.0, False, "none")
        return np.clip(x, -1.0, 32767 / 32768), out_rate, report
    # Each measure once on the source, at the output rate: a gain shifts every one of them by
    # exactly its dB, so without limiting the output's values follow (with it, they are measured).
    src = resample(x, sample_rate, out_rate)
    lufs, sp_db, rms = integrated_lufs(src, out_rate), sample_peak_db(src), rms_db(src)
    if mode == "ebu":
        gain_db = EBU_TARGET_LUFS - lufs if math.isfinite(lufs) else 0.0
        target = f"{EBU_TARGET_LUFS:g} LUFS, <= {EBU_CEILING_DBTP:g} dBTP"
        ceiling = EBU_CEILING_DBTP
    else:
        gain_db = ACX_TARGET_RMS_DB - rms if math.isfinite(rms) else 0.0
        target = f"RMS {ACX_TARGET_RMS_DB:g} dB, <= {ACX_CEILING_DBTP:g} dBFS peak"
        ceiling = ACX_CEILING_DBTP
    # the source's oversampled peaks, exact wherever a gain up to 6 dB over this one could take them
    # past the limiter's ceiling (and at the true peak): computed again if the gain grows past that
    limit_at = 10 ** ((ceiling - LIMITER_MARGIN_DB) / 20)

    def peaks_for(g_db: float) -> tuple[np.ndarray, float]:
        covered = g_db + 6.0
        floor = min(10 ** (sp_db / 20) if math.isfinite(sp_db) else 0.0, limit_at / 10 ** (covered / 20))
        return _oversampled_abs(src, floor=floor), covered

    src_peaks, covered_db = peaks_for(gain_db)
    tp = float(src_peaks.max(initial=0.0))
    src_m = Measurement(lufs, 20 * math.log10(tp) if tp > 0 else -math.inf, sp_db, rms)
    before = measure(x, sample_rate) if out_rate != sample_rate else src_m
    for _ in range(4):  # limiting lowers the level a little: raise the gain and limit again
        if gain_db > covered_db:
            src_peaks, covered_db = peaks_for(gain_db)
        gain = np.float32(10 ** (gain_db / 20))
        x, limited = limit((src * gain).astype(np.float32), out_rate, ceiling, peaks=src_peaks * gain)
        if not limited:
            break
        level = integrated_lufs(x, out_rate) if mode == "ebu" else rms_db(x)
        want = EBU_TARGET_LUFS if mode == "ebu" else ACX_TARGET_RMS_DB
        if not math.isfinite(level) or abs(level - want) <= RETRY_LU:
            break
        gain_db += want - level
    if limited:
        after = measure(x, out_rate)
    else:
        after = Measurement(*(v + gain_db for v in (src_m.integrated_lufs, src_m.true_peak_dbtp,
                                                    src_m.sample_peak_dbfs, src_m.rms_db)))
    before, after = _rounded(before), _rounded(after)
    report = ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(after), round(gain_db, 2), float(gain), limited,
                             target)
    return x, out_rate, report


def to_int16(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.int16:
        return x
    return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16)
