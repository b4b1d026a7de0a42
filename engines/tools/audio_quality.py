"""Audio quality measures shared by the engines' INT8 calibration and the benchmarks.

SNR (dB), per utterance: ``10 log10( sum ref^2 / sum (x - ref)^2 )`` over the item's samples.

MCD (dB), per utterance (mel-cepstral distortion, Kubichek 1993 form), exactly:

* audio: int16 / 32768, 22050 Hz;
* frames: 1024-sample periodic Hann window, hop 256, no padding (frame k covers
  samples ``[256k, 256k + 1024)``); power spectrum ``|rfft(frame, 1024)|^2``;
* mel filterbank: 80 triangular filters, HTK mel scale ``2595 log10(1 + f/700)``,
  edges equally spaced in mel between 0 Hz and 8000 Hz (HiFi-GAN's mel range at
  22.05 kHz), each with peak 1;
* log-amplitude mel spectrum: ``0.5 * ln(max(mel_power, 1e-10))``;
* mel-cepstrum: orthonormal DCT-II of that, coefficients ``c_0..c_24``;
  ``c_0`` (energy) is excluded, ``c_1..c_24`` (24 coefficients) are used;
* frame distance: ``(10 * sqrt(2) / ln 10) * sqrt( sum_{d=1..24} (c_d - c'_d)^2 )``;
* MCD = mean frame distance over speech frames: frames whose reference mel energy
  (sum of mel power) is within 40 dB of the utterance's loudest frame.

Also reported: ``mcd_full_band`` (the same with the filterbank up to 11025 Hz; the voice has
almost no energy above 8 kHz, and there int16 rounding alone moves the cepstrum: +-0.5 LSB
of uniform noise scores ~0.7 dB), and ``mcd_floor`` (the primary MCD of the fp32 output
against itself plus +-0.5 LSB of uniform noise: the resolution of the measure on int16 audio).
"""

from __future__ import annotations

import math

import numpy as np

SR = 22050
N_FFT, HOP, N_MELS, N_CEP = 1024, 256, 80, 24
FMAX = 8000.0
MCD_CONST = 10.0 * math.sqrt(2.0) / math.log(10.0)


def _mel(f):
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def _mel_inv(m):
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(sr: int = SR, n_fft: int = N_FFT, n_mels: int = N_MELS, fmax: float = FMAX) -> np.ndarray:
    """[n_mels, n_fft//2+1] triangular filters, HTK mel scale, 0..fmax, peak 1."""
    freqs = np.arange(n_fft // 2 + 1) * sr / n_fft
    pts = _mel_inv(np.linspace(0.0, _mel(fmax), n_mels + 2))
    fb = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, c, hi = pts[i], pts[i + 1], pts[i + 2]
        up = (freqs - lo) / (c - lo)
        down = (hi - freqs) / (hi - c)
        fb[i] = np.clip(np.minimum(up, down), 0.0, None)
    return fb


def _dct2_ortho(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    m = np.cos(np.pi * k * (2 * i + 1) / (2 * n)) * math.sqrt(2.0 / n)
    m[0] /= math.sqrt(2.0)
    return m  # [n_out, n_in]


_FB = mel_filterbank()
_FB_FULL = mel_filterbank(fmax=SR / 2)
_DCT = _dct2_ortho(N_MELS)[: N_CEP + 1]
_WIN = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann


def mel_cepstrum(audio_int16: np.ndarray, fb: np.ndarray = _FB) -> tuple[np.ndarray, np.ndarray]:
    """(mel-cepstra c_0..c_24 [frames, 25], mel energy [frames]) of int16 audio."""
    x = np.asarray(audio_int16, dtype=np.float64) / 32768.0
    if len(x) < N_FFT:
        x = np.pad(x, (0, N_FFT - len(x)))
    n = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP][:n] * _WIN
    power = np.abs(np.fft.rfft(frames, N_FFT, axis=-1)) ** 2
    melp = power @ fb.T
    logamp = 0.5 * np.log(np.maximum(melp, 1e-10))
    return logamp @ _DCT.T, melp.sum(axis=-1)


def mcd(ref_int16: np.ndarray, test_int16: np.ndarray, full_band: bool = False) -> float:
    """Mel-cepstral distortion in dB (definition in the module docstring); same-length signals."""
    fb = _FB_FULL if full_band else _FB
    c_ref, e_ref = mel_cepstrum(ref_int16, fb)
    c_test, _ = mel_cepstrum(test_int16, fb)
    speech = 10 * np.log10(np.maximum(e_ref, 1e-20)) >= 10 * np.log10(max(e_ref.max(), 1e-20)) - 40.0
    d = c_ref[:, 1:] - c_test[:, 1:]
    return float(MCD_CONST * np.sqrt((d**2).sum(axis=-1))[speech].mean())


def snr_db(ref: np.ndarray, test: np.ndarray) -> float:
    ref = np.asarray(ref, dtype=np.float64)
    err = np.asarray(test, dtype=np.float64) - ref
    return float(10 * np.log10((ref**2).sum() / max((err**2).sum(), 1e-30)))
