"""Fused WaveNet (``WN``) layers of the VITS residual-coupling flow, as a Triton kernel.

One WN layer (reverse pass; ``mask`` keeps ``t < length``) is::

    a    = in_layer(x)                        # Conv1d H -> 2H, kernel K, dilation d, "same"
    acts = tanh(a[:H]) * sigmoid(a[H:])
    r    = res_skip(acts)                     # Conv1d 1x1, H -> 2H (H for the last layer)
    x    = (x + r[:H]) * mask;  skip += r[H:] # last layer: skip += r

Run as PyTorch operations at fp16 (``mixed_precision_flow``: fp32 stream, fp16 ``in_layers``),
a layer is a cast, a cuDNN convolution, a cast back, tanh, sigmoid, a product, a 1x1
convolution, slices, an addition, a mask multiply and the skip sum: each ``[B, 2H, T]``
intermediate crosses memory several times. :func:`wn_layer` does the whole layer in one pass.
A program takes ``BLOCK_T`` time positions of one item and

1. computes the dilated convolution on the tensor cores: ``tl.dot`` of ``[BLOCK_T, 64]`` input
   tiles by ``[64, 64]`` weight tiles in the ``in_layers``' dtype (fp16/bf16), float32
   accumulation. The input is the stream rounded to that dtype, exactly what the PyTorch path
   feeds cuDNN; each layer writes that rounded copy of its output for the next layer, so both
   operands reach the tensor cores straight from shared memory (no conversion in registers)
   and the taps read half the bytes;
2. applies the gate in float32 (the PyTorch path rounds ``a`` to fp16 first; this is closer to
   the all-float32 flow, see the tests);
3. computes the 1x1 ``res_skip`` convolution in near-float32 precision, which the flow needs
   (rounding the ``res_skip`` inputs to fp16 costs the audio several dB of SNR,
   docs/PERFORMANCE.md): the gate output ``|acts| <= 1`` and the weight (scaled by a power of
   two) are each split into two float16 halves, and three float16 tensor-core products
   (``lo @ w_hi + hi @ w_lo + hi @ w_hi``) with float32 accumulation give about 22 significant
   bits (TF32x3's accuracy, at twice its speed and with half the registers: ``tl.dot`` with
   ``input_precision="tf32x3"`` kept three float32 gate tiles split in registers and spilled);
4. updates the stream and the skip sum and stores them: one DRAM read of ``x``, one read and
   write of ``skip``, one write of the new ``x`` (float32 and rounded).

Design choices:

* ``H`` (192 for Piper voices) is not a power of two, so channels go in 64-wide blocks: the
  gate's output is computed one 64-channel block at a time (tanh and sigmoid halves together,
  two ``[BLOCK_T, 64]`` float32 accumulators), and the 1x1 convolution one 64-channel output
  block at a time from the ``H/64`` gate blocks kept in registers as float16 pairs. The
  convolution loops over (tap, input block) pairs at run time so Triton's software pipeline
  overlaps the next tiles' loads with the current products.
* One kernel a layer (not conv+gate then res_skip): the gate never goes to memory.
* The stream is not updated in place (a program's taps read its neighbours' rows, which they
  may already have rewritten): :func:`wn` ping-pongs between two buffers. ``skip`` is updated
  in place (each element is read and written by the same program).
* Rows at or past an item's length read as zero and are written as zero, so the convolution's
  zero padding matches the PyTorch path (whose ``x`` is already zero there) and the output is
  exactly zero past each length; a tile wholly past the length only writes zeros.
* Register budget (Triton 3.9 for sm_90, checked with ptxas): the six float16 gate tiles are
  the A operands of the 1x1 products and stay in registers; Triton lays such products out with
  all warps along the time axis, so with 8 warps at ``BLOCK_T`` = 64 the two warp groups may
  compute the same rows of those products twice. Measured anyway: the default ``(64, 8, 3)``
  was the fastest of eight configurations, with the same outputs (docs/PERFORMANCE.md, "Figures
  behind the engine's defaults").

Layout: ``[B, T, H]`` contiguous (channels last), float32 for ``x`` and ``skip``.
Supported: ``H`` in 64, 128, 192, 256; any odd kernel size; any dilation; no global
conditioning (``gin_channels`` = 0). With float32 ``in_layers`` the convolution runs as
``tl.dot`` in TF32x3 (correct, not tuned: the engine fuses only at fp16/bf16). What it does not
know: the model, text, where the weights came from. It needs Triton and a CUDA tensor (or
``TRITON_INTERPRET=1`` and CPU tensors, which is how the tests run it without a GPU).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from engines.torch_vits.fused_conv import available  # noqa: F401  (re-exported: same requirement)
from engines.torch_vits.fused_gemm import LO_SCALE  # the same split: low halves times 2**11 (2048 in the kernel)
from engines.torch_vits.launch import KernelLaunch, launch

#: Hidden channel counts the kernel takes: multiples of 64 up to 256 (explicit gate blocks, at most four).
SUPPORTED_HIDDEN = (64, 128, 192, 256)


def supports(hidden: int, kernel_size: int) -> bool:
    """Whether a WN of this width and (odd) kernel size can run fused."""
    return hidden in SUPPORTED_HIDDEN and kernel_size % 2 == 1


def _block_config(hidden: int) -> tuple[int, int, int]:
    """(time positions per program, warps, pipeline stages); see the module docstring (the fastest
    of the configurations swept)."""
    return (64, 8, 3)


def _kernel():
    """The jitted kernel, imported on first use (Triton reads ``TRITON_INTERPRET`` when it is
    first imported; a test process can still choose the interpreter after importing this)."""
    from engines.torch_vits._wn_kernel import wn_layer_kernel

    return wn_layer_kernel


def _fp16_scale(w: torch.Tensor) -> float:
    """The power of two that brings ``w``'s largest entry to about 2^14 (float16 range, no subnormals for
    all but negligible entries); 1 for a zero matrix."""
    peak = float(w.abs().max())
    return 2.0 ** (math.ceil(math.log2(peak)) - 14) if peak > 0 else 1.0


def pack_layer(in_weight: torch.Tensor, in_bias: torch.Tensor, rs_weight: torch.Tensor, rs_bias: torch.Tensor,
               dilation: int) -> dict:
    """One WN layer's weights as the kernel reads them.

    * ``w_in``: the ``in_layer`` weight ``[2H, H, K]`` as ``[K, H, 2H]`` contiguous, in its own
      dtype (fp16/bf16 after :func:`~engines.torch_vits.modules.mixed_precision_flow`);
    * ``w_hi``, ``w_lo``, ``w_scale``: the ``res_skip`` weight ``[R, H, 1]`` as ``[H, R]``,
      scaled by a power of two so that its largest entry is about 2^14 (float16 range, no
      subnormals for all but negligible entries), then split into two float16 halves:
      ``w = (w_hi + w_lo) * w_scale`` to about 2^-22 relative;
    * the biases in float32 and the dilation.
    """
    w = rs_weight.detach()[:, :, 0].t().float()
    w_scale = _fp16_scale(w)
    w = w / w_scale  # exact: a power of two
    w_hi = w.half()
    w_lo = (w - w_hi.float()).half()
    return {
        "w_in": in_weight.detach().permute(2, 1, 0).contiguous(),
        "b_in": in_bias.detach().float().contiguous(),
        "w_hi": w_hi.contiguous(), "w_lo": w_lo.contiguous(), "w_scale": w_scale,
        "b_rs": rs_bias.detach().float().contiguous(),
        "dilation": int(dilation),
    }


def pack_wn(wn) -> list[dict]:
    """A :class:`~engines.torch_vits.modules.WN`'s layers as the kernel reads them (:func:`pack_layer`)."""
    return [pack_layer(inl.weight, inl.bias, rs.weight, rs.bias, inl.dilation[0])
            for inl, rs in zip(wn.in_layers, wn.res_skip_layers)]


def wn_layer(x: torch.Tensor, layer: dict, lengths: torch.Tensor, skip: torch.Tensor, *, first: bool, last: bool,
             xc: torch.Tensor | None = None, x_out: torch.Tensor | None = None, xc_out: torch.Tensor | None = None,
             block: tuple | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """One WN layer (weights from :func:`pack_layer`) on ``[B, T, H]`` float32 ``x``.

    ``xc``: ``x`` in the convolution's dtype (``x.to(dtype)``, made here when None; ``x`` itself
    for a float32 convolution). ``skip`` (``[B, T, H]`` float32) is updated in place (``first``:
    overwritten). Returns ``(x_out, xc_out)``, the next layer's input in float32 and in the
    convolution's dtype (new tensors unless given; ``xc_out`` is ``x_out`` for a float32
    convolution), or ``(None, None)`` for the ``last`` layer. ``lengths``: ``[B]`` valid time
    positions of each item (clipped to ``T``). ``block``: (time positions per program, warps[,
    pipeline stages]) for tuning; default :func:`_block_config`."""
    b, t, h = x.shape
    w_in = layer["w_in"]
    k = w_in.shape[0]
    r = h if last else 2 * h
    if (x.dtype != torch.float32 or skip.dtype != torch.float32 or not x.is_contiguous()
            or not skip.is_contiguous() or tuple(skip.shape) != (b, t, h)):
        raise ValueError(f"wn_layer needs contiguous float32 [B, T, H] x and skip; got {tuple(x.shape)} "
                         f"{x.dtype} and {tuple(skip.shape)} {skip.dtype}")
    if (h not in SUPPORTED_HIDDEN or k % 2 == 0 or tuple(w_in.shape) != (k, h, 2 * h)
            or tuple(layer["w_hi"].shape) != (h, r)):
        raise ValueError(f"wn_layer takes H in {SUPPORTED_HIDDEN}, a [K, H, 2H] in-weight with odd K and a "
                         f"[H, {r}] res_skip weight; got H={h}, {tuple(w_in.shape)}, {tuple(layer['w_hi'].shape)}")
    dtype = w_in.dtype
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"the in-weight must be fp16, bf16 or fp32, not {dtype}")
    f32 = dtype == torch.float32
    if xc is None:
        xc = x if f32 else x.to(dtype)
    if xc.dtype != dtype or tuple(xc.shape) != (b, t, h) or not xc.is_contiguous():
        raise ValueError(f"xc must be x as a contiguous {dtype} tensor; got {tuple(xc.shape)} {xc.dtype}")
    if not last:
        x_out = torch.empty_like(x) if x_out is None else x_out
        xc_out = x_out if f32 else (torch.empty_like(xc) if xc_out is None else xc_out)
        if x_out.data_ptr() == x.data_ptr() or xc_out.data_ptr() == xc.data_ptr():
            raise ValueError("x_out must not be x: the convolution reads rows other programs write")
    bt, warps, *stages = block or _block_config(h)
    grid = (-(-t // bt), b)
    launch(KernelLaunch(
        _kernel(), grid,
        (x, xc, w_in, layer["b_in"], layer["w_hi"], layer["w_lo"], layer["b_rs"],
         x_out if x_out is not None else x, xc_out if xc_out is not None else xc, skip,
         lengths, t, int(layer["dilation"]), float(layer["w_scale"])),
        dict(H=h, NB=h // 64, R=r, K=k, BLOCK_T=bt, FIRST=bool(first), LAST=bool(last), F32=f32,
             WRITE_XC=not last and not f32, num_warps=warps, num_stages=stages[0] if stages else 3),
    ))
    return (None, None) if last else (x_out, xc_out)


def wn(x: torch.Tensor, layers: list[dict], lengths: torch.Tensor, *, xc: torch.Tensor | None = None,
       block: tuple | None = None) -> torch.Tensor:
    """All layers of a WN (``layers`` from :func:`pack_wn`) on ``[B, T, H]`` float32 ``x``: the skip
    sum ``[B, T, H]`` float32, zero past each length. ``x`` is overwritten (it is one of the two
    ping-pong buffers of the stream), and so is ``xc``: ``x`` already rounded to the convolution's
    dtype (as :func:`coupling_io` writes it; made here when None)."""
    skip = torch.empty_like(x)
    dtype = layers[0]["w_in"].dtype
    if dtype == torch.float32:
        xc = x
    elif xc is None:
        xc = x.to(dtype)  # the first layer's input, rounded once
    cur = (x, xc)
    spare = (torch.empty_like(x), None if dtype == torch.float32 else torch.empty_like(cur[1]))
    n = len(layers)
    for i, p in enumerate(layers):
        last = i == n - 1
        nxt = wn_layer(cur[0], p, lengths, skip, first=i == 0, last=last, xc=cur[1], x_out=spare[0],
                       xc_out=spare[1], block=block)
        if not last:
            cur, spare = nxt, cur
    return skip


def pack_matrix(w_kn: torch.Tensor, rows: int, cols: int) -> dict:
    """A ``[K, N]`` float32 matrix as :func:`coupling_io` reads it: zero-padded to ``[rows, cols]``,
    scaled by a power of two so that its largest entry is about 2^14 (float16 range, no subnormals
    for all but negligible entries), and split into float16 halves ``hi + lo / 2048``:
    ``w = (hi + lo / 2048) * scale`` to about 2^-22 relative."""
    w = w_kn.detach().float()
    k, n = w.shape
    if k > rows or n > cols:
        raise ValueError(f"cannot pad a [{k}, {n}] matrix to [{rows}, {cols}]")
    scale = _fp16_scale(w)
    full = w.new_zeros(rows, cols)
    full[:k, :n] = w / scale  # exact: a power of two
    hi = full.half()
    return {"hi": hi.contiguous(), "lo": ((full - hi.float()) * LO_SCALE).half().contiguous(),
            "scale": scale}


#: time positions and warps per program of :func:`coupling_io`
COUPLING_BLOCK_T = 64
COUPLING_WARPS = 4


def coupling_io(y: torch.Tensor, lengths: torch.Tensor, half: int, *, skip: torch.Tensor | None = None,
                post: dict | None = None, dst: int = 0, pre: dict | None = None, src: int = 0,
                xc_dtype: torch.dtype = torch.float16, block_t: int | None = None):
    """The 1x1 convolutions of a coupling layer around its WN, in one pass over ``y`` (the flow's
    stream, ``[B, T, C]`` float32, updated in place).

    * ``post`` (:func:`pack_matrix` of the ``post`` weight ``[H, half]`` plus ``"b"``, its bias):
      ``y[:, :, dst:dst+half] = (y[...] - (skip @ w_post + b_post)) * mask`` for the skip sum
      ``skip`` ``[B, T, H]`` float32 of the coupling's WN;
    * ``pre`` (the ``pre`` weight ``[half, H]`` likewise): returns the next WN's input
      ``h = (y[:, :, src:src+half] @ w_pre + b_pre) * mask`` ``[B, T, H]`` float32 and ``h`` rounded
      to ``xc_dtype`` (the WN convolution's dtype), else ``(None, None)``. With both, ``src`` must
      be ``dst``: the next coupling reads the half this one just wrote (what Flip between two
      couplings amounts to), straight from registers.

    Both products run on the float16 tensor cores as three products of split operands (about 22
    significant bits, near float32: the flow's 1x1 convolutions need it, see
    :func:`~engines.torch_vits.modules.mixed_precision_flow`). ``mask``: ``t < lengths``."""
    b, t, c = y.shape
    if y.dtype != torch.float32 or not y.is_contiguous() or post is None and pre is None:
        raise ValueError(f"coupling_io needs a contiguous float32 [B, T, C] stream and post and/or pre; got "
                         f"{tuple(y.shape)} {y.dtype}")
    if post is not None and pre is not None and src != dst:
        raise ValueError("with post and pre, the next coupling's source half must be the half just updated")
    w = post if post is not None else pre
    hp = w["hi"].shape[1] if post is not None else w["hi"].shape[0]
    h = w["hi"].shape[0] if post is not None else w["hi"].shape[1]
    if h % 64 or hp < half or hp & (hp - 1) or max(dst, src) + half > c:
        raise ValueError(f"coupling_io takes a hidden width that is a multiple of 64 and halves inside the stream; "
                         f"got H={h}, padded half {hp}, half {half} at {dst}/{src} of {c}")
    if post is not None and (skip is None or tuple(skip.shape) != (b, t, h) or skip.dtype != torch.float32
                             or not skip.is_contiguous()):
        raise ValueError(f"post needs the WN's contiguous float32 [B, T, {h}] skip sum")
    out = (None, None)
    if pre is not None:
        hx = y.new_empty(b, t, h)
        out = (hx, hx if xc_dtype == torch.float32 else torch.empty(b, t, h, device=y.device, dtype=xc_dtype))
    dummy = y  # pointer arguments the constexpr flags leave unread
    bt = block_t or COUPLING_BLOCK_T
    post_args = (post["hi"], post["lo"], post["b"]) if post is not None else (dummy,) * 3
    pre_args = (pre["hi"], pre["lo"], pre["b"]) if pre is not None else (dummy,) * 3
    launch(KernelLaunch(
        _coupling_kernel(), (-(-t // bt), b),
        (y, skip if skip is not None else dummy, *post_args, *pre_args,
         out[0] if pre is not None else dummy, out[1] if pre is not None else dummy, lengths, t,
         float(post["scale"]) if post is not None else 1.0, float(pre["scale"]) if pre is not None else 1.0),
        dict(C=c, H=h, HALF=half, HP=hp, DST=dst, SRC=src, POST=post is not None, PRE=pre is not None, BLOCK_T=bt,
             num_warps=COUPLING_WARPS, num_stages=1),
    ))
    return out


def _coupling_kernel():
    from engines.torch_vits._coupling_kernel import coupling_io_kernel

    return coupling_io_kernel


def wn_layer_reference(x, w_in, b_in, w_rs, b_rs, lengths, dilation, skip=None, *, last=False):
    """What :func:`wn_layer` computes, in plain PyTorch (float32 arithmetic after rounding ``x`` to
    ``w_in``'s dtype). Weights in Conv1d layout: ``w_in`` ``[2H, H, K]``, ``w_rs`` ``[R, H, 1]``.
    ``x``, ``skip``: ``[B, T, H]``; returns ``(x_next or None, skip_new)``, both zero past each length."""
    b, t, h = x.shape
    k = w_in.shape[-1]
    mask = (torch.arange(t, device=x.device)[None, :] < lengths.long()[:, None]).to(torch.float32)[:, :, None]
    xin = (x.float() * mask).to(w_in.dtype).float().transpose(1, 2)
    a = F.conv1d(xin, w_in.float(), b_in.float(), padding=dilation * (k - 1) // 2, dilation=dilation)
    acts = torch.tanh(a[:, :h]) * torch.sigmoid(a[:, h:])
    r = F.conv1d(acts, w_rs.float(), b_rs.float()).transpose(1, 2)  # [B, T, R]
    prev = 0.0 if skip is None else skip.float()
    if last:
        return None, (prev + r) * mask
    return (x.float() + r[..., :h]) * mask, (prev + r[..., h:]) * mask
