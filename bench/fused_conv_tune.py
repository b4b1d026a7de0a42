"""One resblock convolution of the decoder, fused Triton kernel against the PyTorch/cuDNN sequence.

    python bench/fused_conv_tune.py [--json out.json]

For each decoder stage of the voice (channels 128 / 64 / 32 at 8 / 64 / 256 samples a
frame; 64 items of 512 frames, the decoder-alone workload of bench/gpu_throughput.py)
and each resblock kernel size (3, 5, 7), times ``residual + conv(leaky_relu(x) * mask)``:

* ``cudnn``: the decoder's unfused NHWC path (leaky ReLU, mask multiply, ``conv2d`` in
  channels-last layout with cuDNN autotuning, residual addition), fp16;
* ``fused BxW``: :func:`engines.torch_vits.fused_conv.resconv` with ``B`` time positions a
  program and ``W`` warps.

CUDA events around 20 launches, after 5 warm-up launches; the median of 5 such runs.
TFLOP/s counts the convolution's multiply-adds only; GB/s counts one read of the input and
residual and one write of the output (the fused kernel's minimum traffic).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from engines.torch_vits import fused_conv  # noqa: E402

STAGES = [(128, 8), (64, 64), (32, 256)]  # (channels, samples per frame)
KERNELS = [(3, 1), (5, 2), (7, 3)]  # (kernel size, dilation)
BLOCKS = [(64, 4), (128, 4), (128, 8), (256, 4), (256, 8)]


def timed(fn, reps: int = 20) -> float:
    for _ in range(5):
        fn()
    runs = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        runs.append(s.elapsed_time(e) / 1000 / reps)
    return statistics.median(runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--frames", type=int, default=512)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda:0")
    rows_out = []
    torch.backends.cudnn.benchmark = True
    for c, per_frame in STAGES:
        t = a.frames * per_frame
        x = torch.randn(a.rows, t, c, device=dev, dtype=torch.float16)
        lengths = torch.full((a.rows,), a.frames, device=dev, dtype=torch.long)
        lengths[-1] = a.frames // 2
        for k, d in KERNELS:
            w = torch.randn(c, c, k, device=dev, dtype=torch.float16) / (c * k) ** 0.5
            b = torch.randn(c, device=dev, dtype=torch.float16)
            wk = fused_conv.pack_weight(w)
            w4 = w.unsqueeze(2).contiguous(memory_format=torch.channels_last)
            x4 = x.transpose(1, 2).unsqueeze(2)  # [B, C, 1, T] channels-last view of the same memory
            mask = (torch.arange(t, device=dev)[None] < (lengths * per_frame)[:, None]).to(x.dtype)[:, None, None]

            def cudnn():
                h = F.leaky_relu(x4, 0.1) * mask
                return x4 + F.conv2d(h, w4, b, padding=(0, d * (k - 1) // 2), dilation=(1, d))

            flops = 2 * a.rows * t * c * c * k
            traffic = 3 * x.numel() * x.element_size()
            ref = cudnn().squeeze(2).transpose(1, 2).float()
            cands = [("cudnn", cudnn)]
            for bt, wp in BLOCKS:
                cands.append((f"fused {bt}x{wp}", lambda bt=bt, wp=wp: fused_conv.resconv(
                    x, wk, b, lengths, per_frame, d, residual=x, block=(bt, wp))))
            for name, fn in cands:
                try:
                    y = fn()
                    y = y.squeeze(2).transpose(1, 2).float() if y.dim() == 4 else y.float()
                    err = float((y - ref).abs().max())
                    sec = timed(fn)
                except Exception as exc:  # a block shape the compiler rejects: report it
                    print(f"C={c:3} k={k} {name:14} failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                    continue
                row = {"channels": c, "kernel": k, "dilation": d, "time_steps": t, "rows": a.rows, "impl": name,
                       "us": round(sec * 1e6, 1), "tflops": round(flops / sec / 1e12, 1),
                       "gbs": round(traffic / sec / 1e9, 0), "max_err": err}
                rows_out.append(row)
                print(f"C={c:3} k={k} d={d} T={t:6} {name:14} {sec * 1e6:9.1f} us  {row['tflops']:6.1f} TFLOP/s "
                      f"{row['gbs']:6.0f} GB/s  err {err:.3g}", flush=True)
    best = {}
    for r in rows_out:
        if r["impl"].startswith("fused"):
            key = (r["channels"], r["kernel"])
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    print("\nbest fused block per (channels, kernel):")
    for (c, k), r in sorted(best.items()):
        base = next(x for x in rows_out if x["channels"] == c and x["kernel"] == k and x["impl"] == "cudnn")
        print(f"  C={c:3} k={k}: {r['impl']:14} {r['us']:8.1f} us vs cudnn {base['us']:8.1f} us "
              f"({base['us'] / r['us']:.2f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows_out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
