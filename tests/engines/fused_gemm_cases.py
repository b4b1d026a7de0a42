"""Cases for test_fused_gemm.py, run in a child process (see test_fused_conv.py why) or on CUDA.

``python tests/engines/fused_gemm_cases.py [cpu|cuda]`` prints one JSON object:
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

from engines.torch_vits import fused_gemm as G  # noqa: E402
from engines.torch_vits.launch import observe  # noqa: E402
from engines.torch_vits.precompile import enumerate_stage_a  # noqa: E402
from engines.torch_vits.tiles import StageATiles  # noqa: E402

PRECISIONS = ("fp16x3", "fp16x3u")
# small tiles under the interpreter: several programs along M and N, and a K loop with a ragged tail;
# LayerNorm's 40 columns as three column blocks of 16, the last one partial (the whole stage A
# below runs it as one block)
CPU_BLOCKS = {"plain": (16, 16, 32, 4, 2), "ln": (16, 16, 32, 4, 2)}
# few, large tiles for the whole stage A under the interpreter (its time grows with the program count), and the
# attention's: one program a (head, item) row, one key block, for the stage A case's widths (<= 128)
CPU_STAGE_A_TILES = StageATiles(gemm_plain=(512, 256, 256, 4, 1), gemm_ln=(512, 256, 256, 4, 1),
                                attn_block=(128, 128, 4, 1))

CASE_IDS = ["plain", "relu+mask", "residual+ln-in-place", "heads-in-heads-out", "im2col-in-channel-first-out",
            "ln+gelu+post-residual+mask"]
# the DDSConv prologue kernel (engines.torch_vits.fused_dds): (id, channels, kernel, dilation, pad, rows)
DDS_CASES = [("dds-c40-k3-d1", 40, 3, 1, 9, 37),  # 40 channels: masked lanes up to 64; several programs
             ("dds-c192-k3-d9-edge", 192, 3, 9, 9, 20)]  # the voice's width and widest dilation: taps at the edges
# the relative attention kernel (engines.torch_vits.fused_attn): (id, heads, d, window, T, lengths, block,
# std of the logits q . k), each run in every precision of ATTN_PRECISIONS (case ids "<id>@<precision>")
ATTN_PRECISIONS = ("tf32x3", "fp16x3")
ATTN_CASES = [
    # the voice's head width and window; T = 75 with 16 x 16 tiles: five query tiles and up to five key
    # blocks a row, the last of each ragged; lengths T (every key), 1 (one key, band at the edge), 40 (a
    # length inside a tile, tiles past it skipped) and 17 (one key of the second block)
    ("attn-d96-w4-t75", 2, 96, 4, 75, [75, 1, 40, 17], (16, 16, 4, 1), 2.5),
    # d = 40: columns masked in the second channel tile (32 + 16); query tiles of 32 against key blocks
    # of 16, so a band spans three key blocks; window 4 at T = 37
    ("attn-d40-w4-t37-32x16", 2, 40, 4, 37, [37, 1, 23], (32, 16, 4, 1), 2.5),
    # one tile wider than the chunk (T = 32 in a 64 x 64 tile, the GPU's default), one head, window 1
    ("attn-d96-w1-t32-one-tile", 1, 96, 1, 32, [32, 5], (64, 64, 4, 1), 2.5),
    # peaked softmaxes: logits q . k with std 5, a row's spanning ~22 (up to 36), so probabilities go down
    # to ~1e-10 (1e-16): fp16x3's high parts of p * 2**14 subnormal, and its remainders. (Larger logits
    # leave float32 rounding of the logits themselves, times |v|, above the tolerance in any precision.)
    ("attn-d96-w4-t50-peaked", 2, 96, 4, 50, [50, 29], (16, 16, 4, 1), 5.0),
]


def kernel_cases(device: str, precision: str) -> dict:
    g = torch.Generator().manual_seed(0)
    b, t, k, n = 3, 37, 200, 40
    rnd = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc)  # noqa: E731
    a, w, bias = rnd(b, t, k, sc=3.0), rnd(k, n, sc=0.05), rnd(n)
    a[0, 0, :5] = 1e-5  # below float16's normal range: the remainder path
    lengths = torch.tensor([t, 20, 5])
    res, gamma, beta = rnd(b, t, n), rnd(n), rnd(n)
    dev = lambda z: z.to(device)  # noqa: E731
    blocks = CPU_BLOCKS if device == "cpu" else None  # (a GPU: the defaults)
    out = {}

    def record(cid, got, want):
        out[cid] = {"err": float((got.cpu() - want).abs().max()), "scale": float(want.abs().max())}

    def run(a_, w_, b_, out_, **kw):
        kw = {key: dev(v) if isinstance(v, torch.Tensor) else v for key, v in kw.items()}
        return G.gemm(dev(a_), G.pack(dev(w_), precision), dev(b_), out_, precision=precision, blocks=blocks, **kw)

    record("plain", run(a, w, bias, dev(torch.empty(b, t, n))), G.gemm_reference(a, w, bias))
    record("relu+mask", run(a, w, bias, dev(torch.empty(b, t, n)), act="relu", lengths=lengths),
           G.gemm_reference(a, w, bias, act="relu", lengths=lengths))
    o = dev(res.clone())
    record("residual+ln-in-place", run(a, w, bias, o, residual=o, ln=(dev(gamma), dev(beta), 1e-5)),
           G.gemm_reference(a, w, bias, residual=res, ln=(gamma, beta, 1e-5)))
    # the attention's layouts: [heads, B, T, d] in (merged by head) and out (split by head)
    h, d = 2, 24
    a4, w4, b4 = rnd(h, b, t, d), rnd(h * d, 3 * h * d, sc=0.1), rnd(3 * h * d)
    o4 = dev(torch.empty(3 * h, b, t, d))
    run(a4, w4, b4, o4)
    record("heads-in-heads-out", o4.permute(1, 2, 0, 3).reshape(b, t, -1), G.gemm_reference(a4, w4, b4))
    # an im2col window over a padded buffer in, a channel-first [B, N, T] tensor out
    buf = rnd(b, t + 2, 16)
    cols = dev(buf).as_strided((b, t, 48), ((t + 2) * 16, 16, 1))
    w3, b3 = rnd(48, 10, sc=0.2), rnd(10)
    ocf = dev(torch.empty(b, 10, t))
    G.gemm(cols, G.pack(dev(w3), precision), dev(b3), ocf.transpose(1, 2), precision=precision, blocks=blocks)
    record("im2col-in-channel-first-out", ocf.transpose(1, 2), G.gemm_reference(cols.cpu().contiguous(), w3, b3))
    o = dev(res.clone())
    record("ln+gelu+post-residual+mask",
           run(a, w, bias, o, residual=o, post_residual=True, ln=(dev(gamma), dev(beta), 1e-5), act="gelu",
               lengths=lengths),
           G.gemm_reference(a, w, bias, residual=res, post_residual=True, ln=(gamma, beta, 1e-5), act="gelu",
                            lengths=lengths))
    return out


def dds_cases(device: str) -> dict:
    """:func:`~engines.torch_vits.fused_dds.sepconv_ln_gelu` against the PyTorch operations it replaces."""
    from engines.torch_vits import fused_dds as D

    out = {}
    g = torch.Generator().manual_seed(5)
    for cid, c, k, dil, pad, t in DDS_CASES:
        buf = torch.randn(2, t + 2 * pad, c, generator=g)
        taps, bias = torch.randn(k, c, generator=g) * 0.5, torch.randn(c, generator=g)
        ln = (torch.randn(c, generator=g), torch.randn(c, generator=g), 1e-5)
        want = D.sepconv_ln_gelu_reference(buf, pad, dil, taps, bias, ln)
        got = D.sepconv_ln_gelu(buf.to(device), pad, dil, taps.to(device), bias.to(device),
                                (ln[0].to(device), ln[1].to(device), ln[2]), block=(16, 4)).cpu()
        out[cid] = {"err": float((got - want).abs().max()), "scale": float(want.abs().max())}
    return out


def spline_cases(device: str) -> dict:
    """:func:`~engines.torch_vits.fused_dds.spline_inverse` against the PyTorch spline it replaces (times
    the mask), on inputs inside and outside the tail bound, from a strided ``[B, T]`` view, with a
    padded tail and a row of length 0."""
    from engines.torch_vits import fused_dds as D
    from engines.torch_vits.fast_stage_a import spline_inverse

    g = torch.Generator().manual_seed(6)
    nb, tail, b, t = 10, 5.0, 3, 150
    z = torch.randn(b, 2, t, generator=g) * 3.0  # some beyond +-5: the identity outside
    z[0, 1, :4] = torch.tensor([-5.0, 5.0, 0.0, -4.999])  # on and near the bounds
    st = torch.randn(b, t, 3 * nb - 1, generator=g) * 2.0
    st[1, :, 2 * nb:] += 25.0  # derivatives through softplus's linear branch
    lengths = torch.tensor([t, 77, 0])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    want = spline_inverse(z[:, 1], st, nb, tail) * mask
    got = D.spline_inverse(z.to(device)[:, 1], st.to(device), lengths.to(device), nb, tail, block=(32, 4)).cpu()
    return {"spline": {"err": float((got - want).abs().max()), "scale": float(want.abs().max()),
                       "tail_zero": bool(not got[1, 77:].any() and not got[2].any())}}


def attn_cases(device: str) -> dict:
    """:func:`~engines.torch_vits.fused_attn.relative_attention` against
    :meth:`~engines.torch_vits.fast_stage_a.FastStageA._attend` (float32 PyTorch, the path it replaces;
    ``err``) and against a float64 reference with explicit masks (``err64``), on the real rows; padding
    rows must be finite."""
    from types import SimpleNamespace

    from engines.torch_vits import fused_attn as A
    from engines.torch_vits.fast_stage_a import FastStageA

    out = {}
    g = torch.Generator().manual_seed(7)
    for cid, h, d, w, t, lens, block, logit_std in ATTN_CASES:
        b = len(lens)
        lengths = torch.tensor(lens)
        # logits q . k with std logit_std (2.5: a few units, as the voice's; 1/sqrt(d) folded into q)
        q, k, v = (torch.randn(h * b, t, d, generator=g) * sc
                   for sc in (logit_std / 5.0 / d ** 0.25, 5.0 / d ** 0.25, 1.0))
        ek_t, ev = torch.randn(d, 2 * w + 1, generator=g), torch.randn(2 * w + 1, d, generator=g)
        me = SimpleNamespace(H=h, d=d, w=w)
        want = FastStageA._attend(me, {"ek_t": ek_t, "ev": ev}, q, k, v, FastStageA._key_bias(me, lengths, t, q.dtype),
                                  torch.empty(h * b, t, d))
        exact = A.relative_attention_reference(q, k, v, ek_t, ev, lengths, w)
        dev = [x.to(device) for x in (q, k, v, ek_t, ev, lengths)]
        real = (torch.arange(t)[None, :] < lengths[:, None]).repeat(h, 1)  # [H*B, T]
        for precision in ATTN_PRECISIONS:
            got = A.relative_attention(*dev[:6], w, torch.full((h * b, t, d), float("nan"), device=device),
                                       block=block, precision=precision).cpu()
            out[f"{cid}@{precision}"] = {"err": float((got - want)[real].abs().max()),
                                         "scale": float(want[real].abs().max()),
                                         "err64": float((got.double() - exact)[real].abs().max()),
                                         "pad_finite": bool(torch.isfinite(got).all())}
    return out


def stage_a_case(device: str) -> dict:
    """The voice's stage A (fp32 weights from its ONNX file) on real sentences: the kernel path
    against the cuBLAS/CPU GEMM path of the same FastStageA."""
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer
    from engines.tools.weights import onnx_state_and_hparams
    from core.voice import resolve_voice

    if os.environ.get("BOOKTTS_TORCH_WEIGHTS"):  # a GPU host without the voice package: the exported
        from engines.tools.weights import read_weights  # weights (stage A's stay float32 in an fp16 export)

        state, hp, _ = read_weights(os.environ["BOOKTTS_TORCH_WEIGHTS"])
        state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in state.items()}
    else:
        state, hp = onnx_state_and_hparams(resolve_voice().model_path)
        state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()}
    ref = VitsSynthesizer(VitsHParams.from_dict(hp))
    ref.load_weights(state)
    ref = ref.eval().to(device).use_fast_stage_a()
    tiles = CPU_STAGE_A_TILES if device == "cpu" else None  # the device's own on a GPU
    tc = copy.deepcopy(ref).use_fast_stage_a(kernels=True, tiles=tiles)
    d = np.load(ROOT / "bench" / "data" / "alice_ids.npz")
    off = d["offsets"]
    seqs = [d["ids"][off[i]:off[i + 1]].astype(np.int64) for i in range(len(off) - 1)]
    rng = np.random.default_rng(3)
    pool = [s for s in seqs if 20 <= len(s) <= 120]
    pick = [pool[i] for i in rng.choice(len(pool), size=6, replace=False)] + [min(seqs, key=len)]
    t = max(len(s) for s in pick)
    ids = torch.zeros(len(pick), t, dtype=torch.long)
    for i, s in enumerate(pick):
        ids[i, :len(s)] = torch.from_numpy(s)
    lengths = torch.tensor([len(s) for s in pick])
    noise = torch.randn(len(pick), 2, t, generator=torch.Generator().manual_seed(0)) * 0.8
    args = (ids.to(device), lengths.to(device), noise.to(device), 1.0)
    launched = []
    with torch.inference_mode():
        m0, l0, d0, f0 = (z.cpu() for z in ref.stage_a(*args))
        with observe(launched.append):  # recorded and run
            m1, l1, d1, f1 = (z.cpu() for z in tc.stage_a(*args))
    # what the engine's precompile would compile (dry runs of other lengths) must cover what ran
    enumerated = [kl for batch in enumerate_stage_a(tc.stage_a, device) for kl in batch]
    ran = {spec_key(kl) for kl in launched}
    missing = ran - {spec_key(kl) for kl in enumerated}
    pad = torch.arange(t)[None, :] >= lengths[:, None]
    return {"kernels": tc.stage_a_kernels, "prior_rel": float((m1 - m0).abs().max() / m0.abs().max()),
            "logs_rel": float((l1 - l0).abs().max() / l0.abs().max()),
            "durations_changed": int((d1 != d0).sum()), "phonemes": int(lengths.sum()),
            "frames_equal": bool(torch.equal(f1, f0)),
            "pad_zero": bool(not m1.permute(1, 0, 2)[:, pad].any() and not d1[pad].any()),
            "launches": len(launched), "specializations": len(ran), "not_enumerated": len(missing)}


def spec_key(kl) -> tuple:
    """What Triton compiles a launch of the GEMM kernel as: constexprs and options, each tensor's
    dtype and 16-byte alignment, and each specialized integer's "is 1" and "divisible by 16"."""
    from engines.torch_vits._gemm_kernel import UNSPECIALIZED

    names = kl.kernel.arg_names
    args = []
    for name, a in zip(names, kl.args):
        if isinstance(a, torch.Tensor):
            args.append((str(a.dtype), a.data_ptr() % 16 == 0))
        elif isinstance(a, int) and name not in UNSPECIALIZED:
            args.append((a == 1, a % 16 == 0))
    return kl.name, tuple(args), tuple(sorted(kl.options.items()))


def main(device: str) -> dict:
    out = {f"{cid}@{p}": r for p in PRECISIONS for cid, r in kernel_cases(device, p).items()}
    out.update(dds_cases(device))
    out.update(spline_cases(device))
    out.update(attn_cases(device))
    out["stage-a"] = stage_a_case(device)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "cpu")))
