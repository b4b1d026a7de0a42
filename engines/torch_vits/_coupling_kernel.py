"""The Triton kernel behind :func:`engines.torch_vits.fused_wn.coupling_io` (see that function).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_wn` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl


@triton.jit
def _split(a):
    """A float32 tile as ``hi + lo / 2048``, both float16: about 22 significant bits together for
    values inside float16's normal range (the stream and the skip sum are, by far)."""
    hi = a.to(tl.float16)
    return hi, ((a - hi.to(tl.float32)) * 2048.0).to(tl.float16)


@triton.jit
def _dot3(a_hi, a_lo, whi_ptr, wlo_ptr, at, acc, corr):
    """``acc + corr / 2048`` gains ``a @ w`` for the weight tile at offsets ``at`` (``w = whi +
    wlo / 2048``, both float16 in memory): three float16 products, float32 accumulation (the
    ``lo @ lo`` term, ~2^-22 relative, is left out)."""
    wh = tl.load(whi_ptr + at)
    wl = tl.load(wlo_ptr + at)
    acc = tl.dot(a_hi, wh, acc)
    corr = tl.dot(a_hi, wl, corr)
    corr = tl.dot(a_lo, wh, corr)
    return acc, corr


@triton.jit
def coupling_io_kernel(y_ptr, skip_ptr, post_hi, post_lo, post_b, pre_hi, pre_lo, pre_b, h_ptr, hc_ptr, len_ptr,
                       T, post_scale, pre_scale,
                       C: tl.constexpr, H: tl.constexpr, HALF: tl.constexpr, HP: tl.constexpr,
                       DST: tl.constexpr, SRC: tl.constexpr, POST: tl.constexpr, PRE: tl.constexpr,
                       BLOCK_T: tl.constexpr):
    """A coupling layer's 1x1 convolutions around its WN, on ``BLOCK_T`` time positions of one item
    (grid: time blocks x items). ``y``: the flow's stream ``[B, T, C]`` float32, updated in place.

    * ``POST``: ``y[:, :, DST:DST+HALF] = (y[..] - (skip @ w_post * post_scale + b_post)) * mask``,
      ``skip`` ``[B, T, H]`` float32 (zero past each length), ``w_post`` as ``[H, HP]`` float16
      halves (columns past ``HALF`` zero).
    * ``PRE``: the next WN's input ``h = (y[:, :, SRC:SRC+HALF] @ w_pre * pre_scale + b_pre) * mask``
      (``w_pre`` as ``[HP, H]`` float16 halves, rows past ``HALF`` zero) to ``h`` ``[B, T, H]``
      float32 and ``hc`` (the same rounded to ``hc``'s dtype, the WN convolution's input). With
      ``POST`` too, the source is the half just updated (``SRC == DST``), taken from registers.

    Rows at or past the item's length are written as 0. Every row of a program is its own: ``y``
    is read and written by one program per element."""
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32), T)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    valid = offs_t < length
    inside = offs_t < T
    c64 = tl.arange(0, 64)
    cp = tl.arange(0, HP)
    half_ok = (cp < HALF)[None, :]
    y_rows = y_ptr + pid_b * T * C + offs_t[:, None] * C
    s_rows = pid_b * T * H + offs_t[:, None] * H
    src = tl.zeros((BLOCK_T, HP), dtype=tl.float32)
    if POST:
        acc = tl.zeros((BLOCK_T, HP), dtype=tl.float32)
        corr = tl.zeros((BLOCK_T, HP), dtype=tl.float32)
        for i in tl.static_range(H // 64):
            s = tl.load(skip_ptr + s_rows + (i * 64 + c64)[None, :], mask=valid[:, None], other=0.0)
            s_hi, s_lo = _split(s)
            acc, corr = _dot3(s_hi, s_lo, post_hi, post_lo, (i * 64 + c64)[:, None] * HP + cp[None, :], acc, corr)
        stats = (acc + corr * (1.0 / 2048.0)) * post_scale + tl.load(post_b + cp, mask=cp < HALF, other=0.0)[None, :]
        dst = tl.load(y_rows + DST + cp[None, :], mask=valid[:, None] & half_ok, other=0.0)
        src = tl.where(valid[:, None], dst - stats, 0.0)
        tl.store(y_rows + DST + cp[None, :], src, mask=inside[:, None] & half_ok)
    elif PRE:
        src = tl.load(y_rows + SRC + cp[None, :], mask=valid[:, None] & half_ok, other=0.0)
    if PRE:
        a_hi, a_lo = _split(src)
        for n in tl.static_range(H // 64):
            acc = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
            corr = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
            acc, corr = _dot3(a_hi, a_lo, pre_hi, pre_lo, cp[:, None] * H + (n * 64 + c64)[None, :], acc, corr)
            h = (acc + corr * (1.0 / 2048.0)) * pre_scale + tl.load(pre_b + n * 64 + c64)[None, :]
            h = tl.where(valid[:, None], h, 0.0)
            at = s_rows + (n * 64 + c64)[None, :]
            tl.store(h_ptr + at, h, mask=inside[:, None])
            tl.store(hc_ptr + at, h.to(hc_ptr.dtype.element_ty), mask=inside[:, None])
