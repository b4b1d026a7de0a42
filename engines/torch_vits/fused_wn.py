"""Fused WaveNet (``WN``) layers of the VITS residual-coupling flow, as a Triton kernel.

One WN layer (reverse pass; ``mask`` keeps ``t < length``) is::

    a    = in_layer(x)                        # Conv1d H -> 2H, kernel K, dilation d, "same"
    acts = tanh(a[:H]) * sigmoid(a[H:])
    r    = res_skip(acts)                     # Conv1d 1x1, H -> 2H (H for the last layer)
    x    = (x + r[:H]) * mask;  skip += r[H:] # last layer: skip += r

Run as PyTorch operations at fp16 (``mixed_precision_flow``: fp32 stream, fp16 ``in_layers``),
a layer is a cuDNN convolution, a dtype cast, tanh, sigmoid, a product, a 1x1 convolution, two
slices, an addition, a mask multiply and the skip sum: each ``[B, 2H, T]`` float32 intermediate
crosses memory several times. :func:`wn_layer` does the whole layer in one pass: a program takes
``BLOCK_T`` time positions of one item, computes the dilated convolution on the tensor cores
(``tl.dot`` on ``[BLOCK_T, 64] x [64, 64]`` tiles in the ``in_layers``' half dtype, float32
accumulation; the input is rounded to that dtype on load, exactly what the PyTorch path does),
the gate in float32, the 1x1 ``res_skip`` convolution on the tensor cores in TF32x3 (three TF32
products: about float32 accuracy, which the flow needs: rounding the ``res_skip`` inputs to fp16
costs the audio several dB of SNR, docs/PERFORMANCE.md), and the residual and skip updates,
with one read of ``x`` and one read and write of ``skip`` from DRAM (neighbouring rows of ``x``
for the taps come from cache).

Design choices:

* ``H`` (192 for Piper voices) is not a power of two, so channels go in 64-wide blocks: the
  gate's output is computed one 64-channel block at a time (tanh and sigmoid halves together,
  two ``[BLOCK_T, 64]`` float32 accumulators), and the 1x1 convolution one 64-channel output
  block at a time from the ``H/64`` gate blocks kept in registers; so at most ``H/64 + 2`` tiles
  of ``BLOCK_T x 64`` float32 are live (five for ``H`` = 192), not ``2H + 2H`` channels.
  The convolution loops over (tap, input block) pairs at run time so Triton's software
  pipeline overlaps the next tile's loads with the current product.
* One kernel a layer (not conv+gate then res_skip): the gate never goes to memory.
* The stream ``x`` is not updated in place (a program's taps read its neighbours' rows, which
  they may already have rewritten): :func:`wn` ping-pongs between two buffers. ``skip`` is
  updated in place (each element is read and written by the same program).
* Rows at or past an item's length read as zero and are written as zero, so the convolution's
  zero padding matches the PyTorch path (whose ``x`` is already zero there) and the output is
  exactly zero past each length.

Layout: ``[B, T, H]`` contiguous (channels last), float32 for ``x`` and ``skip``.
Supported: ``H`` in 64, 128, 192, 256; any odd kernel size; any dilation; no global
conditioning (``gin_channels`` = 0). What it does not know: the model, text, where the weights
came from. It needs Triton and a CUDA tensor (or ``TRITON_INTERPRET=1`` and CPU tensors, which
is how the tests run it without a GPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.torch_vits.fused_conv import available  # noqa: F401  (re-exported: same requirement)

#: Hidden channel counts the kernel takes: multiples of 64 up to 256 (explicit gate blocks a0..a3).
SUPPORTED_HIDDEN = (64, 128, 192, 256)


def supports(hidden: int, kernel_size: int) -> bool:
    """Whether a WN of this width and (odd) kernel size can run fused."""
    return hidden in SUPPORTED_HIDDEN and kernel_size % 2 == 1


def _block_config(hidden: int) -> tuple[int, int, int]:
    """(time positions per program, warps, pipeline stages). Five ``BLOCK_T x 64`` float32
    tiles are live at H = 192 (160 registers a thread at 64 x 4 warps), so 8 warps by
    default. Not yet tuned on the H200: ``bench/fused_wn_bench.py`` sweeps it."""
    return (64, 8, 3)


def _kernel():
    """The jitted kernel, imported on first use (Triton reads ``TRITON_INTERPRET`` when it is
    first imported; a test process can still choose the interpreter after importing this)."""
    from engines.torch_vits._wn_kernel import wn_layer_kernel

    return wn_layer_kernel


def pack_in_weight(weight: torch.Tensor) -> torch.Tensor:
    """``in_layer`` weight ``[2H, H, K]`` -> ``[K, H, 2H]`` contiguous, in its own dtype."""
    return weight.detach().permute(2, 1, 0).contiguous()


def pack_res_skip_weight(weight: torch.Tensor) -> torch.Tensor:
    """``res_skip`` weight ``[R, H, 1]`` -> ``[H, R]`` contiguous float32."""
    return weight.detach()[:, :, 0].t().float().contiguous()


def pack_wn(wn) -> list[dict]:
    """A :class:`~engines.torch_vits.modules.WN`'s layers as the kernel reads them (one dict a layer)."""
    layers = []
    for inl, rs in zip(wn.in_layers, wn.res_skip_layers):
        layers.append({
            "w_in": pack_in_weight(inl.weight),
            "b_in": inl.bias.detach().float().contiguous(),
            "w_rs": pack_res_skip_weight(rs.weight),
            "b_rs": rs.bias.detach().float().contiguous(),
            "dilation": int(inl.dilation[0]),
        })
    return layers


def wn_layer(x: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor, w_rs: torch.Tensor, b_rs: torch.Tensor,
             lengths: torch.Tensor, dilation: int, skip: torch.Tensor, *, first: bool, last: bool,
             x_out: torch.Tensor | None = None, block: tuple | None = None) -> torch.Tensor | None:
    """One WN layer on ``[B, T, H]`` float32 ``x``; updates ``skip`` (``[B, T, H]`` float32) in place
    (``first``: overwrites it) and returns the next layer's input (``x_out``, new if None), or None
    for the ``last`` layer. ``w_in``: :func:`pack_in_weight`; ``w_rs``: :func:`pack_res_skip_weight`;
    ``lengths``: ``[B]`` valid time positions of each item (clipped to ``T``).
    ``block``: (time positions per program, warps[, pipeline stages]) for tuning; default
    :func:`_block_config`."""
    b, t, h = x.shape
    k = w_in.shape[0]
    r = h if last else 2 * h
    if (x.dtype != torch.float32 or skip.dtype != torch.float32 or not x.is_contiguous()
            or not skip.is_contiguous() or tuple(skip.shape) != (b, t, h)):
        raise ValueError(f"wn_layer needs contiguous float32 [B, T, H] x and skip; got {tuple(x.shape)} "
                         f"{x.dtype} and {tuple(skip.shape)} {skip.dtype}")
    if h not in SUPPORTED_HIDDEN or k % 2 == 0 or tuple(w_in.shape) != (k, h, 2 * h) or tuple(w_rs.shape) != (h, r):
        raise ValueError(f"wn_layer takes H in {SUPPORTED_HIDDEN}, a [K, H, 2H] in-weight with odd K and a "
                         f"[H, {r}] res_skip weight; got H={h}, {tuple(w_in.shape)}, {tuple(w_rs.shape)}")
    if w_in.dtype not in (torch.float16, torch.bfloat16, torch.float32) or w_rs.dtype != torch.float32:
        raise ValueError(f"in-weight must be fp16/bf16/fp32 and res_skip weight fp32; got {w_in.dtype}, {w_rs.dtype}")
    if not last:
        if x_out is None:
            x_out = torch.empty_like(x)
        if x_out.data_ptr() == x.data_ptr():
            raise ValueError("x_out must not be x: the convolution reads rows other programs write")
    bt, warps, *stages = block or _block_config(h)
    grid = (-(-t // bt), b)
    _kernel()[grid](
        x, w_in, b_in, w_rs, b_rs, x_out if x_out is not None else x, skip, lengths, t, int(dilation),
        H=h, K=k, BLOCK_T=bt, FIRST=bool(first), LAST=bool(last), F32=w_in.dtype == torch.float32,
        num_warps=warps, num_stages=stages[0] if stages else 3,
    )
    return x_out


def wn(x: torch.Tensor, layers: list[dict], lengths: torch.Tensor, *, block: tuple | None = None,
       scratch: torch.Tensor | None = None) -> torch.Tensor:
    """All layers of a WN (``layers`` from :func:`pack_wn`) on ``[B, T, H]`` float32 ``x``: the skip
    sum ``[B, T, H]`` float32, zero past each length. ``x`` is overwritten (used as the second
    ping-pong buffer); ``scratch`` (``x``'s shape) saves an allocation."""
    skip = torch.empty_like(x)
    cur, other = x, scratch if scratch is not None else torch.empty_like(x)
    n = len(layers)
    for i, p in enumerate(layers):
        last = i == n - 1
        nxt = wn_layer(cur, p["w_in"], p["b_in"], p["w_rs"], p["b_rs"], lengths, p["dilation"], skip,
                       first=i == 0, last=last, x_out=None if last else other, block=block)
        if not last:
            cur, other = nxt, cur
    return skip


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
