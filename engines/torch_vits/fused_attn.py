"""The text encoder's windowed relative attention of one layer as one Triton kernel.

For each row ``n`` of ``q``, ``k``, ``v`` ``[H*B, T, d]`` (head ``n // B``, item ``n % B``, whose
real positions are ``0 .. lengths[n % B] - 1``) and each query ``i``, over the item's real keys
``j``::

    logit(i, j) = q_i . k_j + (q_i . ek_t[:, j - i + w]  if |j - i| <= w  else 0)
    p(i, .)     = softmax of logit(i, .) over the real keys (other keys get exactly 0)
    out_i       = sum_j p(i, j) v_j + sum_{|j - i| <= w} p(i, j) ev[j - i + w]

with the relative-key embeddings ``ek_t`` ``[d, 2w+1]`` and the relative-value embeddings ``ev``
``[2w+1, d]`` (``1/sqrt(d)`` is already in ``q``). That is
:meth:`engines.torch_vits.fast_stage_a.FastStageA._attend` (see that module's docstring): there
an additive key mask is copied into a ``[H*B, T, T + 2w]`` logit buffer, two ``baddbmm_`` add
the products, a softmax and a ``bmm`` and ``baddbmm_`` follow, six float32 cuBLAS/PyTorch
kernels a layer that write and read the whole logit matrix. :func:`relative_attention` does it in
one kernel, flash-attention style: a program holds one tile of ``BLOCK_M`` queries, walks the
item's real keys in blocks of ``BLOCK_N`` with an online softmax (running row maximum and sum,
the accumulator rescaled as the maximum grows), and never writes the logits. The relative terms:
``q_i . ek_t[:, r]`` for the ``2w+1`` offsets is one small product per query tile, added to the
logits of the key blocks that meet the band ``|j - i| <= w`` (for the others it is 0); the band's
probabilities ``p(i, i + r - w)`` are picked out of those blocks' probabilities into a
``[BLOCK_M, 2w+1]`` tile rescaled along with the accumulator, and multiplied by ``ev`` at the end.
Key blocks past the item's length are not visited; a query tile wholly past it writes zeros.
Query rows at or past the length but in a tile that is not are computed as real ones (finite;
they never reach a real position).

Precision (:data:`PRECISION`, default ``"fp16x3"``, below): with ``"tf32x3"`` the products run
through ``tl.dot`` on float32 operands with ``input_precision="tf32x3"``: each operand is split into a TF32 high part and
a TF32 remainder and three tensor-core products are summed in float32, about 22 significant bits
(the dropped remainder x remainder term is ``~2**-22`` of each product), near float32 as stage A
needs (durations are the ``ceil`` of its output). Its range is float32's (unlike the float16
split of :mod:`engines.torch_vits.fused_gemm`, which loses relative precision on values below
float16's normal range, as most probabilities of a peaked softmax are). The softmax (maximum,
``exp``, sums, the final division) is float32. ``"ieee"`` (exact float32 products on the CUDA
cores) is the accurate fallback for an A/B run.

``"fp16x3"`` (the default, faster in the whole model than ``"tf32x3"``: docs/PERFORMANCE.md) runs the
same near-float32 products on the float16 tensor cores (twice TF32's rate, half the operand
registers): each float32 tile ``x`` is multiplied by a power of two ``S``, split
into ``hi = (x*S).to(fp16)`` and the unscaled remainder ``lo = (x*S - hi).to(fp16)``, and
``a @ b = (a_hi@b_hi + a_hi@b_lo + a_lo@b_hi) / (S_a*S_b)``, the three products into one float32
accumulator (about 22 significant bits; the dropped ``a_lo@b_lo`` is ``~2**-22`` of each product;
the scalings are exact). ``q``, ``k``, ``v``, ``ek_t`` and ``ev`` get ``S = 2**6``: their values,
of order 1-10 for the voice, stay far below float16's largest 65504 (up to ~1000 fits), and the
remainders of values of order 1 stay above float16's smallest normal number ``2**-14`` (a
subnormal remainder would lose bits), so the logits are their accumulator times ``2**-12``. The
probabilities (in ``[0, 1]``, the running maximum's being 1) and the band's get ``S = 2**14``:
the largest is 16384, and high parts stay normal down to ``p ~ 2**-28`` (4e-9), where the
float16 split of :mod:`engines.torch_vits.fused_gemm` without a scale would go subnormal below
``6e-5``; smaller probabilities, and subnormal remainders, are off by at most ``2**-39``
absolutely, nothing next to a row's sum (at least 1). The output accumulators thus carry
``2**20``, removed with ``1/l`` at the end; the online softmax's rescaling by ``exp(m_old -
m_new)`` is unchanged. Under the interpreter the float16 products are exact, so the tests check
the split and scales there; the tensor cores' rounding is the GPU's to measure.

Tiles: ``d`` (96 for the voice, not a power of two) is held as two power-of-two column tiles,
``DA`` (the largest power of two below ``d``, at least 16) and ``DB`` (the rest rounded up to a
power of two, at least 16; columns ``>= d`` masked): 64 + 32 for the voice, no wasted columns,
where one 128-wide tile would compute a quarter more. The query and key tiles are :data:`BLOCK`.

What it does not know: the model, text, which layer it runs. It needs Triton and CUDA tensors
(or ``TRITON_INTERPRET=1`` and CPU tensors, which is how the tests run it; there the products
are exact float32).
"""

from __future__ import annotations

import torch

from engines.torch_vits.launch import KernelLaunch, launch, pow2
from engines.torch_vits.tiles import DEFAULT as _TILES

#: (BLOCK_M queries, BLOCK_N keys, warps, stages) of a program. Tests under the interpreter pass
#: smaller tiles (several programs and key blocks a row, ragged tails). The default is the fastest
#: tile timed on the GPU, alone on ``[1024, 128, 96]`` / ``[128, 416, 96]`` q/k/v and in the whole
#: model (docs/PERFORMANCE.md, "Figures behind the engine's defaults"):
#:
#: * "fp16x3": 64 x 32 with 4 warps and 2 stages (the default), ahead of 64 x 16 / 4 / 2,
#:   64 x 64 / 4 / 2 and 128 x 32 / 8 / 2, all of them faster than "tf32x3".
#: * "tf32x3": best at 64 x 16 / 4 / 2; "ieee" is slower still; plain TF32 is 4e-3 off.
#: * **A 64-row tile with 8 warps ended in an illegal memory access** on sm_90 (Triton 3.6) with
#:   either tensor-core precision (64 x 32 and 64 x 64), not with "ieee" (no tensor
#:   cores) nor with 128 x 32 / 8 warps: do not use 8 warps with 64-row tiles.
#:
#: Registers (ptxas-blackwell -v for sm_90a on Triton 3.9's PTX, compiled without a device): every
#: tile sits at 255 registers; spill stores in bytes, "fp16x3": 64 x 32 / 4 / 2 180, 64 x 16 / 4 / 2
#: 0, 64 x 64 / 4 / 2 528; "tf32x3": 64 x 16 / 4 / 2 648, 64 x 64 / 4 / 2 1724.
BLOCK = _TILES.attn_block
#: ``tl.dot``'s input precision for every product: "fp16x3" (three float16 products of scaled split
#: operands, about 22 bits, see above; the default), "tf32x3" (near float32) or "ieee" (exact float32
#: products on the CUDA cores)
PRECISION = _TILES.attn_precision
#: the values :data:`PRECISION` and ``precision=`` accept
PRECISIONS = ("tf32x3", "ieee", "fp16x3")


def _kernel():
    """The jitted kernel, imported on first use (see :mod:`engines.torch_vits.fused_conv`)."""
    from engines.torch_vits._attn_kernel import relative_attention_kernel

    return relative_attention_kernel


def column_tiles(d: int) -> tuple[int, int]:
    """The two power-of-two column tiles (``DA``, ``DB``) a head width ``d`` is held in."""
    da = 1 << ((d - 1).bit_length() - 1) if d > 16 else 16  # the largest power of two below d
    return da, pow2(d - da, 16)


def relative_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ek_t: torch.Tensor, ev: torch.Tensor,
                       lengths: torch.Tensor, w: int, out: torch.Tensor, *, block: tuple | None = None,
                       precision: str | None = None) -> torch.Tensor:
    """The windowed relative attention of one layer (see the module docstring) into ``out``, returned.

    ``q``, ``k``, ``v``, ``out``: contiguous float32 ``[H*B, T, d]`` (row ``n``: head ``n // B``, item
    ``n % B``; ``1/sqrt(d)`` folded into ``q``); ``ek_t``: contiguous float32 ``[d, 2w+1]``; ``ev``:
    contiguous float32 ``[2w+1, d]``; ``lengths``: ``[B]`` integers, each in ``1 .. T`` (not checked: that
    would wait for the device). Rows of ``out`` at or past their item's length hold finite values.
    ``block``: :data:`BLOCK`'s tuple (default :data:`BLOCK`); ``precision``: one of :data:`PRECISIONS`
    (default :data:`PRECISION`)."""
    precision = precision or PRECISION
    if precision not in PRECISIONS:
        raise ValueError(f"relative_attention: precision {precision!r} is not one of {PRECISIONS}")
    w = int(w)
    if w < 0:
        raise ValueError(f"relative_attention: window {w} must be >= 0")
    r = 2 * w + 1
    if q.dim() != 3:
        raise ValueError(f"relative_attention: q must be [H*B, T, d], not {tuple(q.shape)}")
    hb, t, d = q.shape
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        if tuple(x.shape) != (hb, t, d) or x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"relative_attention: {name} must be a contiguous float32 [H*B, T, d] = "
                             f"{[hb, t, d]} tensor, not {x.dtype} {tuple(x.shape)}")
    for name, x, shape in (("ek_t", ek_t, (d, r)), ("ev", ev, (r, d))):
        if tuple(x.shape) != shape or x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"relative_attention: {name} must be a contiguous float32 {list(shape)} tensor "
                             f"(d = {d}, window {w}), not {x.dtype} {tuple(x.shape)}")
    if lengths.dim() != 1 or lengths.dtype not in (torch.int32, torch.int64) or lengths.shape[0] < 1 \
            or hb % lengths.shape[0]:
        raise ValueError(f"relative_attention: lengths must be [B] int32/int64 with B dividing H*B = {hb}, not "
                         f"{lengths.dtype} {tuple(lengths.shape)}")
    devices = {x.device for x in (q, k, v, ek_t, ev, lengths, out)}
    if len(devices) != 1:
        raise ValueError(f"relative_attention: tensors on several devices {sorted(map(str, devices))}")
    b = lengths.shape[0]
    da, db = column_tiles(d)
    bm, bn, warps, stages = block or BLOCK
    launch(KernelLaunch(_kernel(), (-(-t // bm), b, hb // b), (q, k, v, ek_t, ev, lengths, out, t),
                        dict(D=d, DA=da, DB=db, W=w, RP=pow2(r, 16), BLOCK_M=bm, BLOCK_N=bn,
                             PRECISION=precision, num_warps=warps, num_stages=stages)))
    return out


def relative_attention_reference(q, k, v, ek_t, ev, lengths, w):
    """What :func:`relative_attention` computes, in float64 with explicit masks (rows past each length
    are 0): ``[H*B, T, d]``."""
    hb, t, d = q.shape
    b = lengths.shape[0]
    q, k, v, ek_t, ev = (x.double().cpu() for x in (q, k, v, ek_t, ev))
    lengths = lengths.cpu()
    i = torch.arange(t)
    rel = i[None, :] - i[:, None] + w  # [T, T]: j - i + w
    inband = (rel >= 0) & (rel <= 2 * w)
    out = torch.zeros(hb, t, d, dtype=torch.float64)
    for n in range(hb):
        n_len = int(lengths[n % b])
        qe = q[n] @ ek_t  # [T, 2w+1]
        logits = q[n] @ k[n].T + torch.where(inband, qe.gather(1, rel.clamp(0, 2 * w)), 0.0)
        logits[:, n_len:] = float("-inf")
        p = torch.softmax(logits, dim=-1)
        o = p @ v[n]
        # the relative-value term: for each offset r, p(i, i + r - w) ev[r]
        for r_ in range(2 * w + 1):
            pr = torch.where(rel == r_, p, 0.0).sum(dim=1)  # [T]
            o += pr[:, None] * ev[r_][None, :]
        out[n, :n_len] = o[:n_len]
    return out
