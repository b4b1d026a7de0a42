"""Cases for test_fused_conv.py, run in a child process (see there why) or in-process on CUDA.

``python tests/engines/fused_conv_cases.py [cpu|cuda]`` prints one JSON object:
case id -> {"err": max |kernel - reference|, "scale": max |reference|, ...}.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from engines.torch_vits import fused_conv as F  # noqa: E402

# (id, channels, kernel, dilation, dtype, residual, accumulate, out_scale, post_slope)
KERNEL_CASES = [
    ("c32-k3-d1-fp16-plain", 32, 3, 1, "float16", False, False, 1.0, None),
    ("c32-k5-d2-fp16-residual", 32, 5, 2, "float16", True, False, 1.0, None),
    ("c64-k7-d12-fp16-residual+sum/3", 64, 7, 12, "float16", True, True, 1 / 3, None),
    ("c128-k3-d6-bf16-residual", 128, 3, 6, "bfloat16", True, False, 1.0, None),
    ("c16-k1-d1-fp32-sum", 16, 1, 1, "float32", False, True, 0.5, None),
    # the last convolution of a decoder stage: leaky ReLU and the mask on the way out
    ("c32-k7-d3-fp16-sum/3+post", 32, 7, 3, "float16", True, True, 1 / 3, 0.01),
    ("c16-k3-d2-fp32-sum/3+post", 16, 3, 2, "float32", True, True, 1 / 3, 0.1),
]


def kernel_cases(device: str) -> dict:
    out = {}
    g = torch.Generator().manual_seed(0)
    for cid, c, k, d, dt, has_res, has_acc, scale, post in KERNEL_CASES:
        if device == "cuda" and dt == "float32":
            continue  # tl.dot rounds fp32 to tf32 on the GPU; the engine never runs the kernel in fp32
        if device == "cpu" and dt == "bfloat16":
            continue  # Triton's CPU interpreter returns garbage for bf16 (numpy has no bf16), even for 1x1
        dtype = getattr(torch, dt)
        b, t = 3, 200
        x = torch.randn(b, t, c, generator=g).to(dtype)
        w = (torch.randn(c, c, k, generator=g) / (c * k) ** 0.5).to(dtype)
        bias = torch.randn(c, generator=g).to(dtype)
        # a full item, a short one, and one whose scaled length runs past T (clipped to T)
        lengths = torch.tensor([t // 2, 19, t // 2 + 7])
        res = torch.randn(b, t, c, generator=g).to(dtype) if has_res else None
        acc = torch.randn(b, t, c, generator=g).to(dtype) if has_acc else None
        ref = F.resconv_reference(x, w, bias, lengths, 2, d, residual=res, accumulate=acc, out_scale=scale,
                                  post_slope=post)
        mv = lambda z: None if z is None else z.to(device)  # noqa: E731
        y = F.resconv(x.to(device), F.pack_weight(w).to(device), bias.to(device), lengths.to(device), 2, d,
                      residual=mv(res), accumulate=mv(acc), out_scale=scale, post_slope=post).cpu()
        out[cid] = {"err": float((y.float() - ref.float()).abs().max()), "scale": float(ref.float().abs().max()),
                    "dtype": dt}
    return out


def postconv_cases(device: str) -> dict:
    """The last-layer + PCM kernel alone against PyTorch (conv, tanh, mask, scale, clamp, truncate)."""
    g = torch.Generator().manual_seed(2)
    dt = torch.float32 if device == "cpu" else torch.float16
    b, t, c, k = 3, 300, 32, 7
    x = torch.randn(b, t, c, generator=g)
    lengths = torch.tensor([t // 4, 150 // 4, 7])
    mask = (torch.arange(t)[None, :] < lengths[:, None] * 4).float()
    x = (x * mask[:, :, None]).to(dt)  # its input is masked already
    w = (torch.randn(1, c, k, generator=g) * 0.3).to(dt)
    y = torch.nn.functional.conv1d(x.transpose(1, 2).float(), w.float(), padding=k // 2)[:, 0].to(dt).float()
    y = torch.tanh(y).to(dt).float() * mask
    ref = (y * 32767.0).clamp(-32767.0, 32767.0).to(torch.int16)
    got = F.postconv_pcm(x.to(device), F.pack_post_weight(w).to(device), lengths.to(device), 4, 32767.0).cpu()
    d = (got.int() - ref.int()).abs()
    return {"postconv-pcm": {"max_step": int(d.max()), "share_off": float((d > 0).float().mean()),
                             "tail": int(max(got[i, int(lengths[i]) * 4:].abs().max() if lengths[i] * 4 < t else 0
                                             for i in range(b))),
                             "dtype": str(dt)}}


def upsample_cases(device: str) -> dict:
    """The polyphase transposed-convolution kernel against F.conv_transpose1d (HiFi-GAN's shapes:
    kernel 2u, padding u/2; 256 input channels as the voice's first layer has)."""
    out = {}
    g = torch.Generator().manual_seed(3)
    dt = torch.float32 if device == "cpu" else torch.float16
    for ci, co, u, t in ((32, 16, 4, 37), (256, 128, 8, 9), (64, 32, 2, 70)):
        x = torch.randn(2, t, ci, generator=g).to(dt)
        w = (torch.randn(ci, co, 2 * u, generator=g) / (ci * 2) ** 0.5).to(dt)
        bias = torch.randn(co, generator=g).to(dt)
        ref = torch.nn.functional.conv_transpose1d(x.transpose(1, 2).float(), w.float(), bias.float(), stride=u,
                                                   padding=u // 2).transpose(1, 2)
        got = F.upsample(x.to(device), F.pack_up_weight(w).to(device), bias.to(device), u, u // 2).cpu().float()
        out[f"upsample-{ci}to{co}-x{u}"] = {"err": float((got - ref).abs().max()) if got.shape == ref.shape else 1e9,
                                            "scale": float(ref.abs().max()), "dtype": str(dt).split(".")[-1]}
        # with lengths (the decoder's way): zero at and past each item's output length, tiles wholly
        # past it skipped (an item of length 1 leaves most tiles to the skip path)
        lengths = torch.tensor([t - 3, 1])
        keep = (torch.arange(t * u)[None, :] < lengths[:, None] * u).float()[:, :, None]
        got = F.upsample(x.to(device), F.pack_up_weight(w).to(device), bias.to(device), u, u // 2,
                         lengths=lengths.to(device), len_scale=u).cpu().float()
        out[f"upsample-{ci}to{co}-x{u}-lengths"] = {
            "err": float((got - ref * keep).abs().max()) if got.shape == ref.shape else 1e9,
            "scale": float(ref.abs().max()), "dtype": str(dt).split(".")[-1]}
    return out


def _decoder():
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.modules import Generator
    if os.environ.get("BOOKTTS_TORCH_WEIGHTS"):  # a GPU host without the voice package
        from engines.tools.weights import read_weights

        state, hp, _ = read_weights(os.environ["BOOKTTS_TORCH_WEIGHTS"])
    else:
        from engines.tools.weights import onnx_state_and_hparams
        from core.voice import resolve_voice

        state, hp = onnx_state_and_hparams(resolve_voice().model_path)
    gen = Generator(VitsHParams.from_dict(hp))
    gen.load_state_dict({k[4:]: torch.from_numpy(np.array(v, dtype=np.float32))
                         for k, v in state.items() if k.startswith("dec.")})
    return gen.eval()


def generator_cases(device: str) -> dict:
    """The voice's own decoder, fused against plain, fp32 on CPU (fp16 on CUDA, both sides)."""
    dtype = torch.float32 if device == "cpu" else torch.float16
    plain = _decoder().to(device, dtype)
    fused = copy.deepcopy(plain).use_fused_resblocks()
    g = torch.Generator().manual_seed(1)
    frames = 12 if device == "cpu" else 300
    short = frames * 7 // 12
    x = torch.randn(2, plain.conv_pre.in_channels, frames, generator=g)
    x[1, :, short:] = 0
    x = x.to(device, dtype)
    lengths = torch.tensor([frames, short], device=device)
    hop = int(np.prod(plain.upsample_rates))
    with torch.no_grad():
        ref = plain(x, lengths).float().cpu()
        y = fused(x, lengths).float().cpu()
        alone = fused(x[1:, :, :short].contiguous(), lengths[1:]).float().cpu()
        # int16 output: the fused path's last layer + PCM conversion kernel against PyTorch's
        pcm_ref = plain(x, lengths, pcm_scale=32767.0).cpu()
        pcm = fused(x, lengths, pcm_scale=32767.0).cpu()
    rel = float((y - ref).norm() / ref.norm())
    pr = pcm_ref.float()
    return {
        "decoder-fused-pcm-vs-plain": {"rel_l2": float((pcm.float() - pr).norm() / pr.norm()),
                                       "dtype": str(pcm.dtype), "tail": int(pcm[1, short * hop:].abs().max())},
        "decoder-fused-vs-plain": {"rel_l2": rel, "dtype": str(dtype)},
        "decoder-fused-tail-zero": {"err": float(y[1, short * hop:].abs().max()), "scale": 1.0},
        "decoder-fused-padding-independent": {
            "rel_l2": float((y[1, :short * hop] - alone[0]).norm() / alone[0].norm())},
    }


def main(device: str) -> None:
    print(json.dumps({**kernel_cases(device), **postconv_cases(device), **upsample_cases(device), **generator_cases(device)}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
