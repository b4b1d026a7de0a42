"""What bounds the decoder's resblock convolution kernel: variants that each change one piece of it.

    python bench/resconv_variants.py [--variants a0m@64x4,a1m@64x4,...] [--channels 32,64,128] [--json OUT]

For each decoder stage of the voice (channels 128 / 64 / 32 at 8 / 64 / 256 samples a frame; 64
items of 512 frames, the last one half as long, as ``bench/resconv_sweep.py``) and each resblock
kernel size (3, 5, 7 at dilations 2, 6, 12: the second convolution's), it times one convolution with
its residual, ``out = x + conv(lrelu(x) * mask) + b``, through ``bench/_resconv_variants_kernel.py``.

A variant is ``a<ACT><m|b>[i][s]@<BLOCK_T>x<WARPS>``: leaky ReLU in float32 (``a0``, the engine's),
in fp16 as ``max(x, x*slope)`` (``a1``) or none (``a2``, timing only); loads masked by the item's
length (``m``, the engine's) or only by the tensor's bounds (``b``: the input is zero past the
length, and the output is stored so); ``i``: the taps as one im2col dot; ``s``: store zeros past the
length (implied by ``b``). ``engine`` is :func:`engines.torch_vits.fused_conv.resconv` itself.

Each exact variant is checked against :func:`~engines.torch_vits.fused_conv.resconv_reference`
(within ``2**-7 * max(1, max |reference|)``; with ``b``, on the zero-past-length input, compared
inside the lengths). Timing: CUDA events around 20 launches after 5 warm-up launches, the median of
5 such runs; ``ratio`` is the time over ``engine``'s on the same shape.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

STAGES = {128: 8, 64: 64, 32: 256}  # channels -> samples per frame
KERNELS = [(3, 2), (5, 6), (7, 12)]  # (kernel, dilation of the resblock's second convolution)
DEFAULT = "engine,a0m@64x4,a1m@64x4,a2m@64x4,a0b@64x4,a1b@64x4,a2b@64x4,a1bi@64x4,a1bi@128x4,a1b@128x4,a1b@128x8"


def parse(v: str) -> dict:
    m = re.fullmatch(r"a([012])([mb])(i?)(s?)@(\d+)x(\d+)", v)
    if not m:
        raise SystemExit(f"bad variant {v!r}: expected e.g. a1b@64x4 or engine")
    return dict(ACT=int(m.group(1)), LMASK=m.group(2) == "m", IM2COL=bool(m.group(3)),
                STORE_MASK=bool(m.group(4)) or m.group(2) == "b", BLOCK_T=int(m.group(5)), warps=int(m.group(6)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--channels", default="32,64,128")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--frames", type=int, default=512)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    import torch

    from _resconv_variants_kernel import resconv_variant
    from engines.torch_vits import fused_conv

    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(0)
    rows_out = []
    t_start = time.time()
    for c in [int(v) for v in a.channels.split(",")]:
        per = STAGES[c]
        t = a.frames * per
        lengths = torch.full((a.rows,), a.frames, dtype=torch.int32, device=dev)
        lengths[-1] = a.frames // 2
        x = torch.randn(a.rows, t, c, device=dev, generator=g, dtype=torch.float32).half()
        mask = (torch.arange(t, device=dev)[None, :] < (lengths.long() * per)[:, None])
        xz = x * mask[:, :, None].half()
        for k, dil in KERNELS:
            w = (torch.randn(c, c, k, device=dev, generator=g) / (c * k) ** 0.5).half()
            bias = (torch.randn(c, device=dev, generator=g) * 0.1).half()
            w_kio = fused_conv.pack_weight(w)
            ref = fused_conv.resconv_reference(x, w, bias, lengths, per, dil, residual=x).float()
            tol = 2 ** -7 * max(1.0, ref.abs().max().item())
            base_s = None
            for v in a.variants.split(","):
                if v == "engine":
                    def fn(out=torch.empty_like(x)):
                        return fused_conv.resconv(x, w_kio, bias, lengths, per, dil, residual=x, out=out)
                    exact, inp = True, x
                else:
                    p = parse(v)
                    inp = x if p["LMASK"] else xz
                    kp = 1
                    while kp < k:
                        kp *= 2
                    out = torch.empty_like(x)

                    def fn(p=p, inp=inp, out=out, kp=kp):
                        resconv_variant[(-(-t // p["BLOCK_T"]), a.rows)](
                            inp, w_kio, bias, inp, out, lengths, t, per, dil, 0.1, C=c, K=k, KP=kp,
                            BLOCK_T=p["BLOCK_T"], ACT=p["ACT"], LMASK=p["LMASK"], STORE_MASK=p["STORE_MASK"],
                            IM2COL=p["IM2COL"], num_warps=p["warps"])
                        return out
                    exact = p["ACT"] != 2
                row = dict(channels=c, kernel=k, dilation=dil, rows=a.rows, time_steps=t, variant=v)
                try:
                    y = fn()
                    torch.cuda.synchronize()
                    if exact:
                        err = ((y.float() - ref).abs() * mask[:, :, None]).max().item()  # inside the lengths
                        row.update(err=err, ok=err <= tol)
                    runs = []
                    for _ in range(5):
                        for _ in range(5):
                            fn()
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        for _ in range(a.reps):
                            fn()
                        e.record()
                        e.synchronize()
                        runs.append(s.elapsed_time(e) / a.reps)
                    ms = statistics.median(runs)
                    base_s = ms if v == "engine" else base_s
                    flops = 2 * c * c * k * a.rows * t
                    row.update(us=round(ms * 1000, 1), tflops=round(flops / ms / 1e9, 1),
                               ratio=round(ms / base_s, 3) if base_s else None)
                except Exception as exc:  # a variant that does not compile or run is recorded, the sweep goes on
                    row.update(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
                rows_out.append(row)
                print(json.dumps(row), flush=True)
    res = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), gpu=torch.cuda.get_device_name(),
               torch=torch.__version__, elapsed_s=round(time.time() - t_start, 1), rows=rows_out)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
