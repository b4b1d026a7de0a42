"""Cases for test_fused_wn.py, run in a child process (see test_fused_conv.py why) or in-process on CUDA.

``python tests/engines/fused_wn_cases.py [cpu|cuda]`` prints one JSON object:
case id -> {"err": max |kernel - reference|, "scale": max |reference|, "tail": max |output past length|, ...}.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from engines.torch_vits import fused_wn as W  # noqa: E402

# Under the CPU interpreter a program costs ~0.2 s whatever its size, so the cases keep few
# programs; the kernel cases still use 64-position tiles so that items span several tiles.
CPU_KERNEL_BLOCK = (64, 4)
CPU_FLOW_BLOCK = (128, 4)

# (id, hidden, kernel, dilation, in-layer dtype, first layer, last layer, T, lengths) and why each exists:
KERNEL_CASES = [
    # the voice's layer shape (H=192, k=5, d=1), fp32 everywhere; first layer: skip is written, not read.
    # Lengths: the full T, a short item ending inside a tile, one ending exactly on a tile edge.
    ("h192-k5-d1-fp32-first", 192, 5, 1, "float32", True, False, 150, [150, 37, 64]),
    # the engine's mixed precision: fp16 convolution, fp32 stream/skip; a middle layer (skip read and written)
    ("h192-k5-d1-fp16-middle", 192, 5, 1, "float16", False, False, 150, [150, 37, 64]),
    # the last layer: res_skip has H outputs, all of them go to skip, no residual output
    ("h192-k5-d1-fp16-last", 192, 5, 1, "float16", False, True, 100, [100, 70]),
    # other Piper-like widths and dilations: H=128 (two channel blocks), k=3, dilation 4 reaching across tiles
    ("h128-k3-d4-fp32-middle", 128, 3, 4, "float32", False, False, 100, [100, 58]),
    # H=256 (four blocks, the widest supported), k=7, dilation 2, last layer
    ("h256-k7-d2-fp16-last", 256, 7, 2, "float16", False, True, 80, [80, 21]),
    # bf16 convolution (GPU only: the interpreter computes bf16 wrongly)
    ("h192-k5-d1-bf16-middle", 192, 5, 1, "bfloat16", False, False, 150, [150, 37, 64]),
]


def _worst(*values: float) -> float:
    """The largest value, NaN if any is NaN (Python's max would hide a NaN that comes second)."""
    return float("nan") if any(v != v for v in values) else max(values)


def kernel_cases(device: str, block=None) -> dict:
    out = {}
    g = torch.Generator().manual_seed(0)
    if block is None and device == "cpu":
        block = CPU_KERNEL_BLOCK
    for cid, h, k, d, dt, first, last, t, lens in KERNEL_CASES:
        if device == "cpu" and dt == "bfloat16":
            continue  # Triton's CPU interpreter returns garbage for bf16 (numpy has no bf16)
        dtype = getattr(torch, dt)
        b = len(lens)
        r = h if last else 2 * h
        lengths = torch.tensor(lens)
        x = torch.randn(b, t, h, generator=g)
        x *= (torch.arange(t)[None, :] < lengths[:, None])[:, :, None]  # as in the flow: zero past the length
        w_in = (torch.randn(2 * h, h, k, generator=g) / (h * k) ** 0.5).to(dtype)
        b_in = (0.1 * torch.randn(2 * h, generator=g)).to(dtype)
        w_rs = torch.randn(r, h, 1, generator=g) / h ** 0.5
        b_rs = 0.1 * torch.randn(r, generator=g)
        skip0 = torch.randn(b, t, h, generator=g)  # not zero past the lengths: the kernel must write 0 there
        x_ref, s_ref = W.wn_layer_reference(x, w_in, b_in, w_rs, b_rs, lengths, d, None if first else skip0,
                                            last=last)
        # NaN-filled outputs: an element the kernel does not write shows up as NaN in the error
        skip = torch.full_like(skip0, float("nan")) if first else skip0.clone()
        skip = skip.to(device)
        x_out = None if last else torch.full((b, t, h), float("nan"), device=device)
        xc_out = None if last or dt == "float32" else torch.full((b, t, h), float("nan"), device=device, dtype=dtype)
        layer = {k_: v.to(device) if torch.is_tensor(v) else v
                 for k_, v in W.pack_layer(w_in, b_in, w_rs, b_rs, d).items()}
        y, yc = W.wn_layer(x.to(device), layer, lengths.to(device), skip, first=first, last=last, x_out=x_out,
                           xc_out=xc_out, block=block)
        skip = skip.cpu()
        past = (torch.arange(t)[None, :] >= lengths[:, None])[:, :, None]
        err = float((skip - s_ref).abs().max())
        scale = float(s_ref.abs().max())
        tail = float(skip.masked_fill(~past, 0).abs().max())
        if not last:
            y = y.cpu()
            err = _worst(err, float((y - x_ref).abs().max()))
            scale = max(scale, float(x_ref.abs().max()))
            tail = _worst(tail, float(y.masked_fill(~past, 0).abs().max()))
            # the next layer's convolution input: exactly the new stream rounded to the convolution's dtype
            xc_err = float((yc.cpu().float() - y.to(dtype).float()).abs().max())
        out[cid] = {"err": err, "scale": scale, "tail": tail, "dtype": dt}
        if not last:
            out[cid]["xc_err"] = xc_err
    return out


def load_flow(weights=None):
    """The voice's own flow (float32 modules), from ``weights`` or $BOOKTTS_TORCH_WEIGHTS (safetensors),
    else the voice's ONNX file."""
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.modules import ResidualCouplingBlock
    weights = weights or os.environ.get("BOOKTTS_TORCH_WEIGHTS")
    if weights:  # a GPU host without the voice package
        from engines.tools.weights import read_weights

        state, hp, _ = read_weights(weights)
    else:
        from engines.tools.weights import onnx_state_and_hparams
        from core.voice import resolve_voice

        state, hp = onnx_state_and_hparams(resolve_voice().model_path)
    flow = ResidualCouplingBlock(VitsHParams.from_dict(hp))
    flow.load_state_dict({k[5:]: torch.from_numpy(np.array(v, dtype=np.float32))
                          for k, v in state.items() if k.startswith("flow.")})
    return flow.eval()


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def flow_cases(device: str, block=None, weights=None) -> dict:
    """The voice's whole flow (4 couplings x 4 WN layers), fused against its PyTorch path."""
    from engines.torch_vits.modules import mixed_precision_flow

    if block is None and device == "cpu":
        block = CPU_FLOW_BLOCK
    plain32 = load_flow(weights).to(device)
    fused32 = copy.deepcopy(plain32).use_fused(block=block)
    plain16 = mixed_precision_flow(copy.deepcopy(plain32), torch.float16)
    fused16 = copy.deepcopy(plain16).use_fused(block=block)
    g = torch.Generator().manual_seed(1)
    t = 100 if device == "cpu" else 700
    short = t * 61 // 100
    c = 2 * plain32.flows[0].half
    # z_p as the engine makes it: nonzero past the short item's length (the prior noise is drawn there too)
    x = torch.randn(2, c, t, generator=g).to(device)
    lengths = torch.tensor([t, short], device=device)
    mask = (torch.arange(t, device=device)[None] < lengths[:, None]).float()[:, None]
    out = {}
    with torch.no_grad():
        ref32 = plain32.reverse(x, mask).cpu()
        y32 = fused32.reverse(x, mask, lengths).cpu()
        alone = fused32.reverse(x[1:, :, :short].contiguous(), mask[1:, :, :short]).cpu()  # lengths from the mask
        # an input already [B, T, C] in memory (as the engine's stage-B input kernel writes it): worked in a copy,
        # and with overwrite=True in place
        # (the short item alone, as `alone`: each run costs seconds here)
        x_s = x[1:, :, :short]
        x_btc = x_s.transpose(1, 2).contiguous().transpose(1, 2)
        kept = fused32.reverse(x_btc, mask[1:, :, :short], lengths[1:])
        unchanged = bool(torch.equal(x_btc, x_s))
        inplace = fused32.reverse(x_btc, mask[1:, :, :short], lengths[1:], overwrite=True)
        layout = {"copy_equal": bool(torch.equal(kept.cpu(), alone)), "input_unchanged": unchanged,
                  "overwrite_in_place": inplace.data_ptr() == x_btc.data_ptr(),
                  "overwrite_equal": bool(torch.equal(inplace.cpu(), alone))}
        # fp16: the full item only (the masking is the same code as at fp32; each item costs seconds here)
        ref16 = plain16.reverse(x[:1], mask[:1]).cpu()
        y16 = fused16.reverse(x[:1], mask[:1], lengths[:1]).cpu()
    out["flow-fp32-fused-vs-plain"] = {"rel_l2": _rel(y32, ref32)}
    # fp16 in_layers on both sides; the fused side keeps the convolution's output in fp32 (the plain
    # one rounds it to fp16), so its distance to the all-fp32 flow should be no larger
    out["flow-fp16-fused-vs-plain"] = {"rel_l2": _rel(y16, ref16), "fused_vs_fp32": _rel(y16, ref32[:1]),
                                       "plain_vs_fp32": _rel(ref16, ref32[:1])}
    # every channel is updated (and masked) by two of the four couplings: the output past a length is 0
    out["flow-fused-tail-zero"] = {"err": float(y32[1, :, short:].abs().max()),
                                   "plain": float(ref32[1, :, short:].abs().max())}
    out["flow-fused-padding-independent"] = {"rel_l2": _rel(y32[1, :, :short], alone[0])}
    out["flow-fused-btc-input"] = layout
    return out


def prior_cases(device: str) -> dict:
    """Stage B's input kernel (:func:`engines.torch_vits.fused_prior.sample_prior`) against the PyTorch
    operations it replaces, on a chunk of three of five items with padding rows."""
    from engines.torch_vits import fused_prior as P

    g = torch.Generator().manual_seed(2)
    b, c, t = 5, 192, 23
    m_p = torch.randn(b, c, t, generator=g)
    logs_p = 0.3 * torch.randn(b, c, t, generator=g)
    lens = torch.tensor([23, 10, 1, 17, 5])
    dur = torch.randint(0, 5, (b, t), generator=g).float() * (torch.arange(t)[None] < lens[:, None])
    dur[2] = 0.0  # an item with no frames at all: every frame takes m = logs = 0
    items = torch.tensor([3, 0, 2])
    eps = torch.randn(4, c, 40, generator=g)
    eps_rows = torch.tensor([1, 3, 0])
    out = {}
    # 64 frames: past every item's total and past the noise's 40 frames; 30: some items cut short
    for frames in (64, 30):
        for ns in (0.0, 0.667):
            args = [x.to(device) for x in (m_p, logs_p, dur, items)] + [frames, 4, eps.to(device),
                                                                        eps_rows.to(device), ns]
            got = P.sample_prior(*args).cpu()
            want = P.sample_prior_reference(*args).cpu()
            out[f"prior-f{frames}-noise{ns}"] = {"err": float((got - want).abs().max()),
                                                 "scale": float(want.abs().max()),
                                                 "pad_rows_zero": bool(not got[3:].any())}
    return out


def engine_cases(device: str) -> dict:
    """The engine's switch: BOOKTTS_TORCH_FUSED_FLOW=1 (fp32 on CPU under the interpreter) against =0."""
    if device != "cpu":
        return {}
    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.torch_engine import TorchEngine
    from engines.torch_options import ENV

    FUSED_FLOW_ENV = ENV["fused_flow"]
    from core.voice import resolve_voice

    voice = resolve_voice()
    ids = [[1, 0, 20, 0, 35, 0, 14, 0, 27, 0, 2]]  # one short item: stage B's flow costs seconds here
    batch = SynthesisBatch.from_sequences(ids, Scales(0.667, 1.0, 0.8), seed=3)
    res = {}
    for flag in ("0", "1"):
        os.environ[FUSED_FLOW_ENV] = flag
        eng = TorchEngine(voice, EngineSpec(name="torch", precision="fp32", device="cpu", max_batch=4))
        r = eng.synthesize(batch)
        res[flag] = (eng.info.extra["fused_flow"], [r.item(i).astype(np.float64) for i in range(len(r))])
    os.environ.pop(FUSED_FLOW_ENV)
    (off, a0), (on, a1) = res["0"], res["1"]
    diff = max(float(np.abs(x - y).max()) for x, y in zip(a0, a1))
    return {"engine-fused-flow-switch": {"off": off, "on": on, "max_int16_diff": diff,
                                         "same_lengths": [len(x) for x in a0] == [len(y) for y in a1]}}


def main(device: str) -> None:
    if device == "cuda":  # true fp32 on the plain side, as the engine's stage B runs it
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    out = {**kernel_cases(device), **flow_cases(device), **prior_cases(device), **engine_cases(device)}
    out["elapsed_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
