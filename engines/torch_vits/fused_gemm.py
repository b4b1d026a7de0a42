"""Near-float32 GEMMs on the tensor cores, with the layouts and epilogues of the text encoder.

Stage A (text encoder and duration predictor, :mod:`engines.torch_vits.fast_stage_a`) must stay
float32: durations are the ``ceil`` of its output, and TF32 or half precision move some of
them. In true float32 its GEMMs run on the CUDA cores (cuBLAS
``ffma`` kernels, the larger part of stage A's kernel time). :func:`gemm`
runs them on the tensor cores in near-float32 precision, by default (``"fp16x3"``) as three
float16 products: each operand is split into a float16 high part and a float16 remainder
scaled by ``2**11`` (the weights once, by :func:`pack`; the activations in registers), and
``a_hi @ w_hi + (a_hi @ w_lo + a_lo @ w_hi) / 2**11`` is summed in float32. That keeps about
22 significant bits (the dropped ``lo @ lo`` term is ``2**-22`` of the product). It needs
``|a| < 65504`` (float16's range; stage A's activations are LayerNorm'd or come from those
through a few layers) and loses relative precision only on values below float16's normal
range (``6e-5``), whose share of a sum is that small. ``"tf32x3"`` (Triton's own three-TF32
split, float32's range) is slower than cuBLAS's float32 (docs/PERFORMANCE.md).

It also does the work around each GEMM that would otherwise be separate passes over memory:

* operands and outputs are ``[B, T, width]`` views with any row strides, so an im2col window
  (``T`` overlapping rows of a padded buffer) is read in place, and an output can go straight
  into the middle rows of a padded buffer or, through a column stride, into a channel-first
  ``[B, width, T]`` tensor;
* a 4-D ``[heads, B, T, d]`` view is read or written as ``[B, T, heads*d]`` (column ``j`` is
  head ``j // d``, channel ``j % d``): the attention's q/k/v split and merge need no copies;
* epilogue, in order: ``+ bias``; ``+ residual`` (or at the end: ``post_residual``); LayerNorm
  over the row (needs the whole row in one tile: ``N <= 256``); ReLU or exact GELU; and
  zeroing rows at or past their item's length.

What it does not know: the model, text, which layer it runs. It needs Triton and CUDA tensors
(or ``TRITON_INTERPRET=1`` and CPU tensors, which is how the tests run it; there the products
are exact float32).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from engines.torch_vits.fused_conv import available  # noqa: F401  (re-exported: same requirement)
from engines.torch_vits.launch import KernelLaunch, launch
from engines.torch_vits.tiles import DEFAULT as _TILES

#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) by kind of call, when a call names none (stage A passes
#: its :class:`~engines.torch_vits.tiles.StageATiles`). With LayerNorm a program holds the whole row as
#: ``ceil(N / BLOCK_N)`` column blocks of ``BLOCK_N`` (at most :data:`MAX_COLUMN_BLOCKS`): 192 columns are
#: three blocks of 64, where one power-of-two tile of 256 computed a quarter of it for nothing.
BLOCKS = _TILES.gemm_blocks()

#: "fp16x3": three float16 products of split operands (near float32, see above); otherwise a
#: ``tl.dot`` input precision for float32 operands: "tf32x3" (near float32), "tf32" (one
#: product: not accurate enough for durations), "ieee" (exact float32 on the CUDA cores).
PRECISION = _TILES.gemm_precision
#: "fp16x3u": the same three products with unscaled remainders into one accumulator (half the
#: accumulator registers; a remainder below float16's normal range keeps an absolute precision
#: of ``2**-25``, about 19 significant bits for a weight of 0.01).
SPLITS = {"fp16x3": 1, "fp16x3u": 2}
#: the scale of the float16 remainders (2**11: float16 keeps 11 significant bits)
LO_SCALE = 2048.0

#: the widest row LayerNorm can normalize in one program
LN_MAX_N = 256
#: column blocks one program can hold (the kernel's accumulators are unrolled up to this many)
MAX_COLUMN_BLOCKS = 4


def _kernel():
    """The jitted kernel, imported on first use (see :mod:`engines.torch_vits.fused_conv`)."""
    from engines.torch_vits._gemm_kernel import gemm_kernel

    return gemm_kernel


def _layout(x: torch.Tensor, name: str):
    """(rows per item T, item stride, row stride, column stride, head width, head stride) of a
    ``[B, T, W]`` or ``[heads, B, T, d]`` view."""
    if x.dim() == 3:
        return x.shape[1], x.stride(0), x.stride(1), x.stride(2), 0, 0
    if x.dim() == 4:
        return x.shape[2], x.stride(1), x.stride(2), x.stride(3), x.shape[3], x.stride(0)
    raise ValueError(f"gemm: {name} must be a [B, T, W] or [heads, B, T, d] view, not {tuple(x.shape)}")


def _width(x: torch.Tensor) -> int:
    return x.shape[-1] * (x.shape[0] if x.dim() == 4 else 1)


def _items(x: torch.Tensor) -> int:
    return x.shape[1] if x.dim() == 4 else x.shape[0]


#: activation codes of the kernel's ``ACT``
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2}


class Packed(NamedTuple):
    """A weight as :func:`gemm` reads it (from :func:`pack`)."""

    w: torch.Tensor  # [K, N] contiguous: float32, or the float16 high half for a split precision
    lo: torch.Tensor | None  # the float16 remainder (split precisions), else None
    precision: str


def pack(w_kn: torch.Tensor, precision: str | None = None) -> Packed:
    """A ``[K, N]`` float32 weight as :func:`gemm` reads it, for ``precision`` (default
    :data:`PRECISION`): float16 halves ``w = w_hi + w_lo / 2**11`` for "fp16x3" (``w_hi + w_lo``
    for "fp16x3u"), else the float32 matrix; contiguous."""
    w = w_kn.detach().float().contiguous()
    precision = precision or PRECISION
    if precision not in SPLITS:
        return Packed(w, None, precision)
    hi = w.half()
    return Packed(hi, ((w - hi.float()) * (LO_SCALE if precision == "fp16x3" else 1.0)).half(), precision)


def gemm(a: torch.Tensor, w_kn, bias: torch.Tensor, out: torch.Tensor, *, act: str | None = None,
         residual: torch.Tensor | None = None, post_residual: bool = False, ln: tuple | None = None,
         lengths: torch.Tensor | None = None, precision: str | None = None, block: tuple | None = None,
         blocks: dict | None = None) -> torch.Tensor:
    """``out = epilogue(a @ w_kn + bias)`` for float32 ``a`` ``[B, T, K]`` (or ``[heads, B, T, d]``
    with ``heads*d = K``) and ``w_kn`` from :func:`pack` (or a ``[K, N]`` tensor, packed here for
    ``precision``, default :data:`PRECISION`; a packed weight brings its own); ``out`` is a ``[B, T, N]`` (or
    ``[heads, B, T, d]``) view that is written in place and returned. Epilogue: ``+ residual``
    (``[B, T, N]``, unit column stride; may be ``out`` itself: each element is read before it is
    written, by the same program); LayerNorm over ``N`` with ``ln`` = ``(gamma, beta, eps)``;
    ``act`` (None, ``"relu"`` or ``"gelu"``); the residual here instead when ``post_residual``;
    rows ``t >= lengths[b]`` set to 0 when ``lengths`` is given.
    ``a``'s columns must have unit stride. ``block``: ``(BLOCK_M, BLOCK_N, BLOCK_K, warps,
    stages)``; else ``blocks`` (by kind, ``"plain"``/``"ln"``, as :meth:`StageATiles.gemm_blocks`), else
    :data:`BLOCKS`."""
    if not isinstance(w_kn, Packed):
        w_kn = pack(w_kn, precision)
    if precision is not None and precision != w_kn.precision:
        raise ValueError(f"gemm: the weight was packed for {w_kn.precision!r}, not {precision!r}; pack it again")
    w_kn, w_lo, precision = w_kn
    t, a_sb, a_st, a_sc, a_head, a_hs = _layout(a, "a")
    t_o, o_sb, o_st, o_sc, o_head, o_hs = _layout(out, "out")
    b = _items(a)
    k, n = _width(a), _width(out)
    if a_sc != 1 or tuple(w_kn.shape) != (k, n) or not w_kn.is_contiguous() or (t_o, _items(out)) != (t, b):
        raise ValueError(f"gemm: a {tuple(a.shape)} (unit column stride), w {tuple(w_kn.shape)} (contiguous "
                         f"[K, N]) and out {tuple(out.shape)} do not fit")
    if act not in ACTIVATIONS:
        raise ValueError(f"gemm: act must be one of {sorted(k for k in ACTIVATIONS if k)} or None, not {act!r}")
    if ln is not None and n > LN_MAX_N:
        raise ValueError(f"gemm: LayerNorm over {n} columns; one tile holds at most {LN_MAX_N}")
    r_sb = r_st = 0
    if residual is not None:
        if residual.dim() != 3 or residual.stride(2) != 1 or tuple(residual.shape) != (b, t, n):
            raise ValueError(f"gemm: residual must be a [B, T, N] view with unit column stride, not "
                             f"{tuple(residual.shape)}")
        r_sb, r_st = residual.stride(0), residual.stride(1)
    bm, bn, bk, warps, stages = block or (blocks or BLOCKS)["ln" if ln is not None else "plain"]
    nb = -(-n // bn) if ln is not None else 1  # column blocks a program holds: the whole row for LayerNorm
    if nb > MAX_COLUMN_BLOCKS:
        raise ValueError(f"gemm: LayerNorm over {n} columns needs BLOCK_N >= {-(-n // MAX_COLUMN_BLOCKS)}, not {bn}")
    m = b * t
    gamma, beta, eps = ln if ln is not None else (bias, bias, 0.0)
    dummy = bias  # never read when its flag is off
    grid = (-(-m // bm), -(-n // (bn * nb)))
    launch(KernelLaunch(_kernel(), grid, (
        a, w_kn, w_lo if w_lo is not None else w_kn, bias, residual if residual is not None else dummy, gamma, beta,
        lengths if lengths is not None else dummy, out,
        m, n, k, t, float(eps), a_sb, a_st, a_hs, o_sb, o_st, o_sc, o_hs, r_sb, r_st), dict(
        A_HEAD=a_head, O_HEAD=o_head, ACT=ACTIVATIONS[act], RES=0 if residual is None else 2 if post_residual else 1,
        LN=ln is not None,
        ROW_MASK=lengths is not None, PRECISION="ieee" if precision in SPLITS else precision,
        SPLIT=SPLITS.get(precision, 0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NB=nb, num_warps=warps, num_stages=stages)))
    return out


def _rows(x: torch.Tensor) -> torch.Tensor:
    """A ``[B, T, W]`` or ``[heads, B, T, d]`` view as a ``[B, T, heads*d]`` tensor (a copy)."""
    if x.dim() == 4:
        return x.permute(1, 2, 0, 3).reshape(x.shape[1], x.shape[2], -1)
    return x


def gemm_reference(a, w_kn, bias, *, act=None, residual=None, post_residual=False, ln=None,
                   lengths=None) -> torch.Tensor:
    """What :func:`gemm` computes, in plain float32 PyTorch, as a new ``[B, T, N]`` tensor."""
    y = _rows(a).float() @ w_kn.float() + bias.float()
    if residual is not None and not post_residual:
        y = y + residual.float()
    if ln is not None:
        g, be, eps = ln
        y = torch.nn.functional.layer_norm(y, (y.shape[-1],), g.float(), be.float(), eps)
    if act == "relu":
        y = torch.relu(y)
    elif act == "gelu":
        y = torch.nn.functional.gelu(y)
    if residual is not None and post_residual:
        y = y + residual.float()
    if lengths is not None:
        keep = torch.arange(y.shape[1], device=y.device)[None, :] < lengths[:, None]
        y = y * keep[:, :, None]
    return y
