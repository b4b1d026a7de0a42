"""The Triton kernel behind :func:`engines.torch_vits.fused_wn.wn_layer` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_wn` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.

Channels are handled in blocks of 64 (``tl.arange`` and ``tl.dot`` need powers of two; the
flow's 192 hidden channels are three blocks). The gate's output blocks are separate
variables ``a0 .. a3`` under compile-time conditions, so ``H`` can be 64, 128, 192 or 256.
"""

import triton
import triton.language as tl


@triton.jit
def _gate_block(x_ptr, w_ptr, b_ptr, base, offs_t, offs_c, length, dilation,
                O: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr, F32: tl.constexpr):
    """``tanh(a[:, O]) * sigmoid(a[:, H + O])`` for the 64-channel output block ``O`` of the
    dilated convolution ``a = conv(x) + b``, as a ``[BLOCK_T, 64]`` float32 tile.

    ``w_ptr``: ``[K, H, 2H]`` (tap, input channel, output channel). Input rows outside
    ``[0, length)`` read as 0 (the convolution's zero padding and the item's padded tail).
    The input is rounded to the weights' dtype on load, as the PyTorch path rounds ``x``
    before its half-precision convolution; products accumulate in float32."""
    NB: tl.constexpr = H // 64
    acc_t = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    acc_s = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    # one loop step = one (tap, input block) pair: a [BLOCK_T, 64] input tile and two [64, 64]
    # weight tiles, small enough for the software pipeline to keep a few steps in flight
    x_tile = x_ptr + base + offs_t[:, None] * H + offs_c[None, :]  # rows offs_t, channels 0..63
    w_tile = w_ptr + offs_c[:, None] * (2 * H) + (O * 64 + offs_c)[None, :]  # tap 0, input channels 0..63
    for ki in range(K * NB):
        k = ki // NB
        i = ki % NB
        shift = (k - (K - 1) // 2) * dilation
        src = offs_t + shift
        ok = (src >= 0) & (src < length)
        xt = tl.load(x_tile + (shift * H + i * 64), mask=ok[:, None], other=0.0).to(w_ptr.dtype.element_ty)
        wt = tl.load(w_tile + (k * H + i * 64) * (2 * H))
        ws = tl.load(w_tile + ((k * H + i * 64) * (2 * H) + H))
        if F32:
            acc_t = tl.dot(xt, wt, acc_t, input_precision="tf32x3")
            acc_s = tl.dot(xt, ws, acc_s, input_precision="tf32x3")
        else:
            acc_t = tl.dot(xt, wt, acc_t)
            acc_s = tl.dot(xt, ws, acc_s)
    a_t = acc_t + tl.load(b_ptr + O * 64 + offs_c)[None, :]
    a_s = acc_s + tl.load(b_ptr + H + O * 64 + offs_c)[None, :]
    # tanh and sigmoid from exp of non-positive arguments (no overflow; libdevice is not in the interpreter)
    e = tl.exp(-2.0 * tl.abs(a_t))
    th = (1.0 - e) / (1.0 + e)
    th = tl.where(a_t < 0, -th, th)
    es = tl.exp(-tl.abs(a_s))
    sg = tl.where(a_s < 0, es, 1.0) / (1.0 + es)
    return th * sg


@triton.jit
def _res_skip_col(a0, a1, a2, a3, w_ptr, b_ptr, offs_c, N: tl.constexpr, NB: tl.constexpr, R: tl.constexpr):
    """Output block ``N`` of the 1x1 convolution ``acts @ w + b`` (``w_ptr``: ``[H, R]`` float32),
    on the tensor cores in TF32x3 (three TF32 products: about float32 accuracy)."""
    col = w_ptr + offs_c[:, None] * R + (N * 64 + offs_c)[None, :]
    r = tl.dot(a0, tl.load(col), input_precision="tf32x3")
    if NB > 1:
        r = tl.dot(a1, tl.load(col + 64 * R), r, input_precision="tf32x3")
    if NB > 2:
        r = tl.dot(a2, tl.load(col + 128 * R), r, input_precision="tf32x3")
    if NB > 3:
        r = tl.dot(a3, tl.load(col + 192 * R), r, input_precision="tf32x3")
    return r + tl.load(b_ptr + N * 64 + offs_c)[None, :]


@triton.jit
def _layer_tile(x_ptr, w_in_ptr, b_in_ptr, w_rs_ptr, b_rs_ptr, x_out_ptr, skip_ptr, base, offs_t, offs_c,
                length, T, dilation, H: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                FIRST: tl.constexpr, LAST: tl.constexpr, F32: tl.constexpr):
    """The layer on one tile of rows (see :func:`wn_layer_kernel`)."""
    NB: tl.constexpr = H // 64
    R: tl.constexpr = H if LAST else 2 * H
    a0 = _gate_block(x_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation, 0, H, K, BLOCK_T, F32)
    a1 = a0  # placeholders for narrower layers: never read when NB says so
    a2 = a0
    a3 = a0
    if NB > 1:
        a1 = _gate_block(x_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation, 1, H, K, BLOCK_T, F32)
    if NB > 2:
        a2 = _gate_block(x_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation, 2, H, K, BLOCK_T, F32)
    if NB > 3:
        a3 = _gate_block(x_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation, 3, H, K, BLOCK_T, F32)

    valid = (offs_t < length)[:, None]
    inside = (offs_t < T)[:, None]
    rows = base + offs_t[:, None] * H
    for n in tl.static_range(R // 64):
        r = _res_skip_col(a0, a1, a2, a3, w_rs_ptr, b_rs_ptr, offs_c, n, NB, R)
        if LAST:
            here = rows + (n * 64 + offs_c)[None, :]
            s = r
            if not FIRST:
                s += tl.load(skip_ptr + here, mask=valid, other=0.0)
            tl.store(skip_ptr + here, tl.where(valid, s, 0.0), mask=inside)
        else:
            if n < NB:  # residual half: the next layer's input
                here = rows + (n * 64 + offs_c)[None, :]
                xc = tl.load(x_ptr + here, mask=valid, other=0.0)
                tl.store(x_out_ptr + here, tl.where(valid, xc + r, 0.0), mask=inside)
            else:  # skip half
                here = rows + ((n - NB) * 64 + offs_c)[None, :]
                s = r
                if not FIRST:
                    s += tl.load(skip_ptr + here, mask=valid, other=0.0)
                tl.store(skip_ptr + here, tl.where(valid, s, 0.0), mask=inside)


@triton.jit
def _zero_tile(x_out_ptr, skip_ptr, base, offs_t, offs_c, T, H: tl.constexpr, BLOCK_T: tl.constexpr,
               LAST: tl.constexpr):
    """A tile wholly past the item's length: zeros to ``x_out`` and ``skip``, no arithmetic."""
    inside = (offs_t < T)[:, None]
    rows = base + offs_t[:, None] * H
    zero = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    for n in tl.static_range(H // 64):
        here = rows + (n * 64 + offs_c)[None, :]
        tl.store(skip_ptr + here, zero, mask=inside)
        if not LAST:
            tl.store(x_out_ptr + here, zero, mask=inside)


@triton.jit
def wn_layer_kernel(x_ptr, w_in_ptr, b_in_ptr, w_rs_ptr, b_rs_ptr, x_out_ptr, skip_ptr, len_ptr,
                    T, dilation,
                    H: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                    FIRST: tl.constexpr, LAST: tl.constexpr, F32: tl.constexpr):
    """One WN layer on ``BLOCK_T`` time positions of one item (grid: time blocks x items).

    ``x``, ``x_out``, ``skip``: ``[B, T, H]`` float32. Not last: ``x_out = (x + r[:, :H]) * mask``
    and ``skip (+)= r[:, H:]``; last: ``skip += r``. ``FIRST``: ``skip`` is written, not read.
    Every store is zero past the item's length; a tile wholly past it (an item's padded tail,
    a padding row of length 0) only writes zeros. ``x_out`` must not be ``x`` (the convolution
    reads neighbouring programs' rows); ``skip`` is read and written element by element by one
    program, so it is updated in place."""
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32), T)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, 64)
    base = pid_b * T * H
    if pid_t * BLOCK_T < length:
        _layer_tile(x_ptr, w_in_ptr, b_in_ptr, w_rs_ptr, b_rs_ptr, x_out_ptr, skip_ptr, base, offs_t, offs_c,
                    length, T, dilation, H, K, BLOCK_T, FIRST, LAST, F32)
    else:
        _zero_tile(x_out_ptr, skip_ptr, base, offs_t, offs_c, T, H, BLOCK_T, LAST)
