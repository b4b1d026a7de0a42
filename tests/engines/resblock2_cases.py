"""Cases for test_resblock2_pair.py, run in a child process (see test_fused_conv.py why) or on CUDA.

``python tests/engines/resblock2_cases.py [cpu|cuda]`` prints one JSON object:
case id -> {"err": max |kernel - reference|, "scale": max |reference|, "dtype": ..., "tail": ...}.
The reference is :func:`resconv_reference` applied twice (the two steps of a ResBlock2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engines.torch_vits import fused_conv as F  # noqa: E402

# (id, channels, kernel, (dilation1, dilation2), T, lengths (frames), len_scale, block, span, programs,
#  accumulate, out_scale, post_slope, out is accumulate)
# The voice's ResBlock2 kernels and dilations: 3 / (1, 2), 5 / (2, 6), 7 / (3, 12).
PAIR_CASES = [
    # spans of two 16-row chunks; item 1's length (80) is no multiple of the chunk
    ("c16-k3-d1,2-plain", 16, 3, (1, 2), 150, (75, 40), 2, (16, 4), 32, None, False, 1.0, None, False),
    # a length past T (clipped), T no multiple of the chunk or span, one chunk of lag, a ring of 4
    ("c32-k5-d2,6-sum/3", 32, 5, (2, 6), 203, (30, 200), 2, (32, 4), 64, None, True, 1 / 3, None, False),
    # item 0 is 18 positions long: whole chunks and whole spans lie past it; lag 5, ring of 8;
    # out is accumulate, as the decoder calls it; the post-activation epilogue
    ("c16-k7-d3,12-sum/3+post-short", 16, 7, (3, 12), 250, (9, 125), 2, (16, 4), 48, None, True, 1 / 3, 0.01,
     True),
    # the default chunk (64) and span (one span per item here), post without accumulate
    ("c32-k7-d3,12-default-post", 32, 7, (3, 12), 300, (37, 150), 2, None, None, None, False, 0.5, 0.1, False),
    # one span longer than T
    ("c16-k3-d1,2-sum+post-one-span", 16, 3, (1, 2), 97, (48, 13), 2, (16, 4), 512, None, True, 1.0, 0.1, False),
    # a single program walks every span of both items (the ring reused across spans and items)
    ("c32-k5-d2,6-one-program", 32, 5, (2, 6), 130, (17, 65), 2, (32, 4), 32, 1, True, 1 / 3, None, True),
]


def pair_cases(device: str) -> dict:
    out = {}
    g = torch.Generator().manual_seed(4)
    dt = torch.float32 if device == "cpu" else torch.float16  # tl.dot rounds fp32 to tf32 on the GPU
    for cid, c, k, (d1, d2), t, frames, scale, block, span, programs, has_acc, out_scale, post, alias in PAIR_CASES:
        b = len(frames)
        x = torch.randn(b, t, c, generator=g).to(dt)
        w1 = (torch.randn(c, c, k, generator=g) / (c * k) ** 0.5).to(dt)
        w2 = (torch.randn(c, c, k, generator=g) / (c * k) ** 0.5).to(dt)
        b1 = torch.randn(c, generator=g).to(dt)
        b2 = torch.randn(c, generator=g).to(dt)
        lengths = torch.tensor(frames)
        acc = torch.randn(b, t, c, generator=g).to(dt) if has_acc else None
        h1 = F.resconv_reference(x, w1, b1, lengths, scale, d1, residual=x)
        ref = F.resconv_reference(h1, w2, b2, lengths, scale, d2, residual=h1, accumulate=acc, out_scale=out_scale,
                                  post_slope=post).float()
        acc_d = acc.to(device) if acc is not None else None
        y = F.resblock2_pair(x.to(device), F.pack_weight(w1).to(device), b1.to(device), F.pack_weight(w2).to(device),
                             b2.to(device), lengths.to(device), scale, d1, d2, accumulate=acc_d, out_scale=out_scale,
                             post_slope=post, out=acc_d if alias else None, block=block, span=span,
                             programs=programs).cpu().float()
        n = torch.tensor(frames) * scale
        tail = max(float(y[i, int(n[i]):].abs().max()) if n[i] < t else 0.0 for i in range(b))
        # compared inside the lengths: the reference (as resconv) is zero past them, the pair kernel
        # leaves its sums there unless post_slope asks for the mask ("tail" checks that case)
        inside = (torch.arange(t)[None, :] < n[:, None])[:, :, None]
        out[cid] = {"err": float(((y - ref) * inside).abs().max()), "scale": float(ref.abs().max()),
                    "dtype": str(dt)[6:],
                    "tail": tail if post is not None else None}
    return out


def main(device: str) -> None:
    print(json.dumps(pair_cases(device)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
