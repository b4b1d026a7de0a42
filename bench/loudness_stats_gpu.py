"""What the loudness statistics cost on a GPU (``jobs.loudness_stats.TorchStats``), per hour of speech.

    PYTHONPATH=.:carry/pylib python3 bench/loudness_stats_gpu.py [--batch 1024] [--reps 10] [--json F]

A batch of ``--batch`` utterances of speech-like int16 noise (lengths 1-10 s, seed 0) on the device;
each part of ``TorchStats.device`` (the K-weighting by FFT, the 4x true peak by ``conv1d``, the sums)
and the whole of it then ``host``, timed with CUDA events: median of ``--reps`` after one untimed
pass, as milliseconds per hour of audio. The engine makes an hour of speech in about 170 ms
(docs/PERFORMANCE.md), so these figures say what share of it the statistics would add.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _timed(torch, dev, fn) -> float:
    """Milliseconds of ``fn`` on ``dev``: CUDA events on a GPU, the wall clock on the CPU (a rehearsal)."""
    if dev.type != "cuda":
        import time

        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1000
    torch.cuda.synchronize(dev)
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    fn()
    t1.record()
    torch.cuda.synchronize(dev)
    return t0.elapsed_time(t1)


def main(argv=None) -> int:
    import torch

    from jobs import loudness_stats as S

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    sr = 22050
    rng = np.random.default_rng(0)
    lengths = (rng.uniform(1.0, 10.0, a.batch) * sr).astype(np.int64)
    s = int(lengths.max())
    dev = torch.device(a.device)
    x = torch.zeros(a.batch, s, dtype=torch.int16, device=dev)
    for i, n in enumerate(lengths.tolist()):
        env = torch.sin(torch.linspace(0, float(rng.uniform(3, 30)), n, device=dev)).abs()
        x[i, :n] = (torch.randn(n, device=dev) * 3000 * env).clamp(-32767, 32767).to(torch.int16)
    hours = float(lengths.sum()) / sr / 3600
    hook = S.TorchStats(sr)
    xf = x.float() * (1.0 / 32768.0)
    fir_len = S.tail_samples(sr) + 1
    n_fft = 8192
    fir, peak_w = hook._const(torch, dev, n_fft)

    def k_part():
        hop = n_fft - (fir_len - 1)
        n_frames = -(-s // hop)
        xp = torch.nn.functional.pad(xf, (fir_len - 1, n_frames * hop - s))
        frames = xp.unfold(1, n_fft, hop)
        return torch.fft.irfft(torch.fft.rfft(frames, n=n_fft) * fir, n=n_fft)

    def peak_part():
        xt = torch.nn.functional.pad(xf, (6, 6))[:, None, :]
        return torch.nn.functional.conv1d(xt, peak_w)[:, :, :s].abs().amax(dim=1)

    phases_fft = torch.fft.rfft(torch.flip(peak_w[:, 0, :], dims=[1]), n=n_fft)  # [4, n_fft/2+1]

    def peak_fft():  # the 4 phases applied to the same frames in the frequency domain
        hop = n_fft - 11
        n_frames = -(-s // hop)
        xp = torch.nn.functional.pad(xf, (11 - 5, n_frames * hop - s + 5))
        spec = torch.fft.rfft(xp.unfold(1, n_fft, hop), n=n_fft)  # [B, F, n_fft/2+1]
        best = None
        for ph in range(4):
            y = torch.fft.irfft(spec * phases_fft[ph], n=n_fft)[:, :, 11:].abs().amax(dim=2)
            best = y if best is None else torch.maximum(best, y)
        return best

    def peak_matmul():  # 12 neighbours of each sample as a strided view, times the 4 phases' taps
        xt = torch.nn.functional.pad(xf, (6, 5))
        return (xt.unfold(1, 12, 1) @ peak_w[:, 0, :].T).abs().amax(dim=2)

    widths = iter(range(s - 1, 0, -997))  # a new width at every call, as stage B's chunks give the hook

    def peak_conv1d_autotuned_new_shape():  # as inside the engine's stage B (cudnn.benchmark on)
        w = next(widths)
        with torch.backends.cudnn.flags(enabled=True, benchmark=True):
            xt = torch.nn.functional.pad(xf[:, :w], (6, 6))[:, None, :]
            return torch.nn.functional.conv1d(xt, peak_w)[:, :, :w].abs().amax(dim=1)

    def whole():
        return hook.host(hook.device(x, lengths), lengths)

    ref = peak_part().amax(dim=1)
    for name, fn in (("true_peak_fft", peak_fft), ("true_peak_matmul", peak_matmul)):
        got = fn().reshape(a.batch, -1).amax(dim=1)
        print(f"{name}: largest difference of the rows' true peaks from conv1d's {float((got - ref).abs().max()):.2e}")
    parts = {"k_weighting_fft": k_part, "true_peak_conv1d": peak_part, "true_peak_fft": peak_fft,
             "true_peak_matmul": peak_matmul, "true_peak_conv1d_autotuned_new_shape": peak_conv1d_autotuned_new_shape,
             "device_and_host": whole}
    rows = {}
    for name, fn in parts.items():
        fn()
        times = []
        for _ in range(a.reps):
            times.append(_timed(torch, dev, fn))
        med = statistics.median(times)
        rows[name] = {"median_ms": round(med, 3), "ms_per_hour": round(med / hours, 2)}
        print(f"{name:38} median {med:9.3f} ms for {hours * 3600:8.1f} s of audio = {med / hours:8.2f} ms per hour")
    if dev.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB; batch {a.batch} x {s} samples")
    if a.json:
        Path(a.json).write_text(json.dumps({"batch": a.batch, "samples": s, "hours": hours, "rows": rows,
                                            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
