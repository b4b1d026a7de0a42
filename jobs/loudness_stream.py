"""A chapter's loudness applied while it streams to the encoder: gain, ACX resampling, limiter.

:func:`process` takes a chapter as a re-startable source of int16 pieces (its utterances and pauses,
in order) and its :class:`jobs.loudness_stats.ChapterStats` (combined from the utterances' records;
measured in one streaming pass where a record lacks them), chooses the gain as :mod:`jobs.loudness`
defines it, and hands the encoder the processed audio a block at a time: memory is the blocks in
flight, not the chapter.

* EBU without a peak over the ceiling (the usual case): one pass, gain and rounding to int16; the
  output's figures are the input's plus the gain (a gain shifts each of them by exactly its dB).
* ACX: resampled to 44.1 kHz here, a block at a time (:class:`StreamResampler`, the same samples as
  SciPy's ``resample_poly`` over the whole chapter), and its output metered as it streams.
* Where the combined true peak plus the gain passes the ceiling (or after ACX's resampling could):
  :class:`StreamLimiter` (the same gain curve as :func:`jobs.loudness.limit`, computed on windows
  with enough context on either side that every sample's gain is the one the whole signal gives)
  lowers the samples around those peaks, and the output is metered; if limiting moved the level more
  than :data:`RETRY_LU` off the target, the chapter is written again with the gain
  corrected (as :func:`jobs.loudness.process` does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict

import numpy as np

from core.errors import InputError
from jobs import loudness as L
from jobs.config import LOUDNESS_MODES
from jobs.loudness_stats import ChapterStats, StreamMeter

#: Samples the stream is cut into between its pieces and the encoder.
BLOCK = 1 << 16
#: Limiter stages in a row: the second catches what the first one's own gain curve left over.
LIMIT_STAGES = 2
#: Resampling can read a peak this much (dB) above the voice-rate true peak: ACX checks the limiter
#: from this far under the ceiling.
RESAMPLE_PEAK_DB = 0.5
#: After limiting, a level this far (LU, or dB of RMS) off the target has the chapter written again
#: with the gain corrected (the whole-signal path of jobs.loudness allows RETRY_LU = 0.2).
RETRY_LU = 0.05
#: Passes at most of a metered chapter (the last one's output stays, whatever its level).
MAX_PASSES = 4
#: Seconds at a chapter's start on which ACX reads how resampling changes its RMS (before writing).
SHIFT_SAMPLE_S = 60.0


def rechunk(pieces: Iterable[np.ndarray], size: int = BLOCK) -> Iterator[np.ndarray]:
    """The pieces' samples (int16) in blocks of ``size`` (the last one shorter)."""
    buf = np.empty(size, np.int16)
    fill = 0
    for p in pieces:
        p = np.asarray(p)
        k = 0
        while fill == 0 and len(p) - k >= size:  # whole blocks of a long piece: views, not copies
            yield p[k:k + size]
            k += size
        while k < len(p):
            take = min(size - fill, len(p) - k)
            buf[fill:fill + take] = p[k:k + take]
            fill += take
            k += take
            if fill == size:
                yield buf.copy()
                fill = 0
    if fill:
        yield buf[:fill].copy()


class StreamResampler:
    """``resample_poly`` from ``from_rate`` to ``to_rate`` a block at a time: each block is resampled
    with enough input on either side (a multiple of the decimation, so the output grid stays the
    whole signal's) that its output samples are those of the whole signal; the output lags that much."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        g = math.gcd(from_rate, to_rate)
        self.up, self.down = to_rate // g, from_rate // g
        half = 10 * max(self.up, self.down)  # resample_poly's filter half-length (upsampled samples)
        ctx = -(-half // self.up) + 2
        self.ctx = -(-ctx // self.down) * self.down
        self.left = np.zeros(self.ctx, np.float32)
        self.pending = np.zeros(0, np.float32)

    def _run(self, seg: np.ndarray, n_in: int, n_out: int) -> np.ndarray:
        from scipy.signal import resample_poly

        y = resample_poly(seg, self.up, self.down)
        o = self.ctx * self.up // self.down
        return y[o:o + n_out].astype(np.float32)

    def push(self, x: np.ndarray) -> np.ndarray:
        self.pending = np.concatenate([self.pending, x.astype(np.float32, copy=False)])
        usable = (len(self.pending) - self.ctx) // self.down * self.down
        if usable <= 0:
            return np.zeros(0, np.float32)
        seg = np.concatenate([self.left, self.pending[:usable + self.ctx]])
        out = self._run(seg, usable, usable * self.up // self.down)
        self.left = np.concatenate([self.left, self.pending[:usable]])[-self.ctx:]
        self.pending = self.pending[usable:]
        return out

    def finish(self) -> np.ndarray:
        rest = self.pending
        if len(rest) == 0:
            return np.zeros(0, np.float32)
        seg = np.concatenate([self.left, rest, np.zeros(self.ctx, np.float32)])
        self.pending = np.zeros(0, np.float32)
        return self._run(seg, len(rest), -(-len(rest) * self.up // self.down))


class StreamLimiter:
    """:func:`jobs.loudness.limit`'s gain curve on a stream: each window is computed with
    :attr:`ctx` samples of context on either side (more than the gain curve's reach plus the
    true-peak filter's), so every output sample gets the gain the whole signal would give it; the
    output lags :attr:`ctx` samples. Silence is assumed before the start and after the end."""

    def __init__(self, sample_rate: int, ceiling_db: float) -> None:
        self.reach = max(1, int(L.LIMITER_REACH_S * sample_rate))
        self.w = 2 * self.reach + 1
        self.ctx = 2 * self.w + 4 * L.PEAK_BLOCK
        self.ceiling = 10 ** ((ceiling_db - L.LIMITER_MARGIN_DB) / 20)
        self.threshold = 10 ** ((ceiling_db - L.LIMITER_MARGIN_DB / 2) / 20)
        self.buf = np.zeros(self.ctx, np.float32)
        self.limited = False

    def _process(self, buf: np.ndarray) -> np.ndarray:
        """``buf`` (context, samples to emit, context) -> the samples to emit, limited."""
        from scipy.ndimage import minimum_filter1d, uniform_filter1d

        mid = buf[self.ctx:len(buf) - self.ctx]
        # once engaged (the chapter has a peak over the threshold), every peak over the ceiling the
        # gain curve aims at is lowered, as jobs.loudness.limit does: decided per sample, not per window
        peaks = L._oversampled_abs(buf, floor=self.ceiling)
        if float(peaks.max(initial=0.0)) <= self.ceiling:
            return mid.copy()
        need = np.minimum(1.0, self.ceiling / np.maximum(peaks, 1e-12)).astype(np.float32)
        if float(need[self.ctx - 2 * self.w:len(buf) - self.ctx + 2 * self.w].min()) >= 1.0:
            return mid.copy()
        g = minimum_filter1d(need, size=self.w, mode="nearest")
        g = np.minimum(uniform_filter1d(g, size=self.w, mode="nearest"), g)
        gm = g[self.ctx:len(buf) - self.ctx]
        if float(gm.min()) < 1.0:
            self.limited = True
        return mid * gm

    def push(self, x: np.ndarray) -> np.ndarray:
        self.buf = np.concatenate([self.buf, x.astype(np.float32, copy=False)])
        if len(self.buf) < 3 * self.ctx:
            return np.zeros(0, np.float32)
        out = self._process(self.buf)
        self.buf = self.buf[len(self.buf) - 2 * self.ctx:]
        return out

    def finish(self) -> np.ndarray:
        buf = np.concatenate([self.buf, np.zeros(self.ctx, np.float32)])
        self.buf = np.zeros(self.ctx, np.float32)
        return self._process(buf) if len(buf) > 2 * self.ctx else np.zeros(0, np.float32)


def _to_int16_scaled(block: np.ndarray, gain: np.float32) -> np.ndarray:
    y = block.astype(np.float32)
    y *= gain
    np.rint(y, out=y)
    np.clip(y, -32768, 32767, out=y)
    return y.astype(np.int16)


def render(pieces: Iterable[np.ndarray], sample_rate: int, out_rate: int, gain: float, ceiling_db: float | None,
           meter: StreamMeter | None = None, limiters: list | None = None) -> Iterator[np.ndarray]:
    """int16 blocks of the chapter at ``out_rate``: ``pieces`` (int16 at ``sample_rate``) times
    ``gain``, resampled, limited under ``ceiling_db`` (None: no limiter), metered by ``meter``.
    ``limiters``: filled with the limiter stages (their ``limited`` says whether they acted)."""
    g = np.float32(gain)
    if out_rate == sample_rate and ceiling_db is None and meter is None:  # the usual EBU chapter
        for blk in rechunk(pieces):
            yield _to_int16_scaled(blk, g) if g != 1 else blk
        return
    stages: list = []
    if out_rate != sample_rate:
        stages.append(StreamResampler(sample_rate, out_rate))
    if ceiling_db is not None:
        lims = [StreamLimiter(out_rate, ceiling_db) for _ in range(LIMIT_STAGES)]
        stages.extend(lims)
        if limiters is not None:
            limiters.extend(lims)
    scale = np.float32(gain / 32768.0)

    def emit(x: np.ndarray):
        if len(x):
            if meter is not None:
                meter.feed(x)
            return L.to_int16(x)
        return None

    def through(x: np.ndarray, first: int) -> np.ndarray:
        for st in stages[first:]:
            x = st.push(x)
        return x

    for blk in rechunk(pieces):
        x = blk.astype(np.float32)
        x *= scale
        out = emit(through(x, 0))
        if out is not None:
            yield out
    for i, st in enumerate(stages):  # drain each stage through the ones after it
        out = emit(through(st.finish(), i + 1))
        if out is not None:
            yield out


def _shifted(m: L.Measurement, db: float) -> L.Measurement:
    return L.Measurement(*(v + db if v is not None else None
                           for v in (m.integrated_lufs, m.true_peak_dbtp, m.sample_peak_dbfs, m.rms_db)))


def _of(stats: ChapterStats, loudness: bool = True) -> L.Measurement:
    return L.Measurement(stats.integrated_lufs() if loudness else None, stats.true_peak_db(),
                         stats.sample_peak_db(), stats.rms_db())


def _resampled_rms_shift(pieces: Iterable[np.ndarray], sample_rate: int, out_rate: int) -> float:
    """How much resampling changes the RMS (dB; its filter takes the energy near the voice's Nyquist
    frequency away), read on the chapter's first :data:`SHIFT_SAMPLE_S` seconds."""
    want = int(SHIFT_SAMPLE_S * sample_rate)
    got, n = [], 0
    for p in pieces:
        got.append(np.asarray(p)[:want - n])
        n += len(got[-1])
        if n >= want:
            break
    x = np.concatenate(got).astype(np.float32) / 32768.0 if got else np.zeros(0, np.float32)
    before, after = L.rms_db(x), L.rms_db(L.resample(x, sample_rate, out_rate))
    return after - before if math.isfinite(before) and math.isfinite(after) else 0.0


def measure_stream(pieces: Iterable[np.ndarray], sample_rate: int, loudness: bool = True) -> ChapterStats:
    """A chapter's statistics measured from its samples (for records that lack them); without
    ``loudness`` only its sample peak and RMS (``--loudness none`` reports those)."""
    m = StreamMeter(sample_rate, loudness=loudness, true_peak=loudness)
    for p in pieces:
        m.feed(p)
    return m.result()


def process(pieces: Callable[[], Iterable[np.ndarray]], sample_rate: int, mode: str, stats: ChapterStats | None,
            write: Callable[[Iterable[np.ndarray], int], None]) -> tuple[L.ChapterLoudness, int]:
    """Apply ``mode`` to the chapter that ``pieces()`` yields (int16 pieces at ``sample_rate``; called
    again for each pass) and pass the result to ``write(blocks, rate)`` (which may be called again,
    and then replaces what it wrote). ``stats``: the chapter's combined statistics (None: measured
    here, one more pass). Returns (the report, the output's samples)."""
    if mode not in LOUDNESS_MODES:
        raise InputError(f"--loudness {mode!r} is not supported; choose {', '.join(LOUDNESS_MODES)}")
    out_rate = L.output_rate(mode, sample_rate)
    count = [0]

    def counted(blocks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        count[0] = 0
        for b in blocks:
            count[0] += len(b)
            yield b

    if stats is None:
        stats = measure_stream(pieces(), sample_rate, loudness=mode != "none")
    if mode == "none":
        before = L._rounded(L.Measurement(None, None, stats.sample_peak_db(), stats.rms_db()))
        write(counted(rechunk(pieces())), out_rate)
        report = L.ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(before), 0.0, 1.0, False,
                                   "none")
        return report, count[0]
    src = _of(stats)
    if mode == "ebu":
        lufs = stats.integrated_lufs()
        gain_db = L.EBU_TARGET_LUFS - lufs if math.isfinite(lufs) else 0.0
        target, ceiling, want = (f"{L.EBU_TARGET_LUFS:g} LUFS, <= {L.EBU_CEILING_DBTP:g} dBTP", L.EBU_CEILING_DBTP,
                                 L.EBU_TARGET_LUFS)
    else:
        rms = stats.rms_db()
        gain_db = L.ACX_TARGET_RMS_DB - rms if math.isfinite(rms) else 0.0
        target, ceiling, want = (f"RMS {L.ACX_TARGET_RMS_DB:g} dB, <= {L.ACX_CEILING_DBTP:g} dBFS peak",
                                 L.ACX_CEILING_DBTP, L.ACX_TARGET_RMS_DB)
    if out_rate != sample_rate and mode == "acx":
        gain_db -= _resampled_rms_shift(pieces(), sample_rate, out_rate)
    threshold_db = ceiling - L.LIMITER_MARGIN_DB / 2
    allowance = RESAMPLE_PEAK_DB if out_rate != sample_rate else 0.0
    peak_db = stats.true_peak_db()
    needs_limit = math.isfinite(peak_db) and peak_db + gain_db > threshold_db - allowance
    if not needs_limit and out_rate == sample_rate:
        gain = float(np.float32(10 ** (gain_db / 20)))
        write(counted(render(pieces(), sample_rate, out_rate, gain, None)), out_rate)
        before, after = L._rounded(src), L._rounded(_shifted(src, gain_db))
        report = L.ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(after), round(gain_db, 2),
                                   gain, False, target)
        return report, count[0]
    # metered passes: the limiter (or resampling) decides the output's figures
    limited = False
    tried: list[tuple[float, float]] = []  # (gain dB, level) of each pass
    for _ in range(MAX_PASSES):
        gain = float(np.float32(10 ** (gain_db / 20)))
        meter = StreamMeter(out_rate, loudness=True, true_peak=True)
        lims: list = []
        write(counted(render(pieces(), sample_rate, out_rate, gain, ceiling if needs_limit or allowance else None,
                             meter, lims)), out_rate)
        out = meter.result()
        limited = any(lim.limited for lim in lims)
        level = out.integrated_lufs() if mode == "ebu" else out.rms_db()
        if not math.isfinite(level) or abs(level - want) <= RETRY_LU:
            break
        tried.append((gain_db, level))
        # the limiter takes part of any more gain: step by the slope the last two passes showed
        slope = 1.0
        if len(tried) >= 2 and tried[-1][0] != tried[-2][0]:
            slope = min(1.5, max(0.2, (tried[-1][1] - tried[-2][1]) / (tried[-1][0] - tried[-2][0])))
        gain_db += (want - level) / slope
    before, after = L._rounded(src), L._rounded(_of(out))
    report = L.ChapterLoudness(mode, sample_rate, out_rate, asdict(before), asdict(after), round(gain_db, 2), gain,
                               limited, target)
    return report, count[0]
