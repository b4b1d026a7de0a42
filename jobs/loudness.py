"""Per-chapter loudness: measure (ITU-R BS.1770 via pyloudnorm), gain to a target, limit true peaks.

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
    (a lower bound, under ``floor``). An interpolated value is a sum of 12 neighbours weighted by
    one phase of the filter, so it is at most that phase's L1 norm times the neighbours' largest
    magnitude: samples whose neighbourhood cannot reach ``floor`` are skipped (most of speech).
    Default: the sample peak, which keeps the maximum (the true peak) exact."""
    x = np.asarray(x, dtype=np.float32)
    if len(x) == 0:
        return np.zeros(0, np.float32)
    out = np.abs(x)
    phases = _true_peak_phases()
    half = 12 // 2
    if floor is None:
        floor = float(out.max())
    l1 = max(float(np.abs(h).sum()) for h in phases)
    # blocks of 16 samples whose own or neighbouring blocks' largest |x| (which covers n-6..n+6)
    # could reach the floor: their samples are the candidates
    blk = 16
    nb = -(-len(x) // blk)
    bmax = np.zeros(nb * blk, np.float32)
    bmax[:len(x)] = out
    bmax = bmax.reshape(nb, blk).max(axis=1)
    near = bmax.copy()
    near[1:] = np.maximum(near[1:], bmax[:-1])
    near[:-1] = np.maximum(near[:-1], bmax[1:])
    blocks = np.flatnonzero(near * l1 >= floor)
    cand = (blocks[:, None] * blk + np.arange(blk)[None, :]).ravel()
    cand = cand[cand < len(x)]
    if len(cand) > len(x) // 8:  # too many to pick out: the whole signal, four convolutions
        for h in phases:
            y = np.convolve(x, h)[half - 1:half - 1 + len(x)]
            np.maximum(out, np.abs(y), out=out)
        return out
    pad = 12
    xp = np.concatenate([np.zeros(pad, np.float32), x, np.zeros(pad, np.float32)])
    best = out[cand].copy()
    for h in phases:  # y[n] = sum_k h[k] x[n + half - 1 - k], as np.convolve's slice above
        y = np.zeros(len(cand), np.float32)
        for k in range(len(h)):
            y += h[k] * xp[cand + (half - 1 - k) + pad]
        np.maximum(best, np.abs(y), out=best)
    out[cand] = best
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
    ms = float(np.mean(np.square(x, dtype=np.float64)))
    return 10 * math.log10(ms) if ms > 0 else -math.inf


@functools.lru_cache(maxsize=4)
def _k_weighting_sos(sample_rate: int) -> tuple[np.ndarray, float]:
    """pyloudnorm's K-weighting stages (the high shelf, then the high pass) as second-order
    sections, and the product of their passband gains."""
    stages = list(_meter(sample_rate)._filters.values())
    sos = np.array([np.concatenate([st.b / st.a[0], st.a / st.a[0]]) for st in stages], dtype=np.float64)
    return sos, float(np.prod([st.passband_gain for st in stages]))


def _k_weighted(y: np.ndarray, sample_rate: int) -> np.ndarray:
    """The K-weighted signal: pyloudnorm's filters applied in one pass (``sosfilt``, float64; the same
    cascade as its two ``lfilter`` calls, several times faster)."""
    from scipy.signal import sosfilt

    sos, gain = _k_weighting_sos(sample_rate)
    out = sosfilt(sos, y)
    if gain != 1.0:
        out *= gain
    return out


def integrated_lufs(x: np.ndarray, sample_rate: int) -> float:
    """ITU-R BS.1770-4 gated integrated loudness of mono audio; -inf for silence or under 400 ms.

    pyloudnorm's K-weighting filters, and its gating equations evaluated with cumulative sums
    (its own block loop takes seconds per minute of audio); ``tests/jobs/test_formats.py`` checks
    that both agree."""
    if len(x) < MIN_MEASURE_S * sample_rate or not np.any(x):
        return -math.inf
    y = _k_weighted(np.asarray(x, dtype=np.float64), sample_rate)
    meter = _meter(sample_rate)
    t_g, step = meter.block_size, 1.0 - meter.overlap
    n_blocks = int(np.round((len(y) / sample_rate - t_g) / (t_g * step))) + 1
    j = np.arange(n_blocks)
    lo = (t_g * (j * step) * sample_rate).astype(np.int64)
    hi = np.minimum((t_g * (j * step + 1) * sample_rate).astype(np.int64), len(y))
    hop = t_g * step * sample_rate
    per = int(round(t_g / (t_g * step)))  # hops per block
    if n_blocks > 0 and float(hop).is_integer() and np.all(lo == np.arange(n_blocks) * int(hop)) \
            and np.all(hi - lo == per * int(hop)):
        # blocks on a grid of hops (100 ms at common rates): sums of hop-sized pieces, no cumulative sum
        h = int(hop)
        n_hops = n_blocks + per - 1
        sq = np.square(y[:n_hops * h]).reshape(n_hops, h).sum(axis=1)
        win = np.convolve(sq, np.ones(per))[per - 1:per - 1 + n_blocks]
        z = win / (t_g * sample_rate)
    else:
        cs = np.concatenate([[0.0], np.cumsum(np.square(y))])
        z = (cs[hi] - cs[lo]) / (t_g * sample_rate)
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
        gain = minimum_filter1d(need, size=2 * reach + 1, mode="nearest")
        gain = np.minimum(uniform_filter1d(gain, size=2 * reach + 1, mode="nearest"), gain)
        x = (x * gain).astype(np.float32)
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
