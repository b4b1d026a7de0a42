"""The Triton kernel behind :func:`engines.torch_vits.fused_wn.wn_layer` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_wn` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.

Channels are handled in blocks of 64 (``tl.arange`` and ``tl.dot`` need powers of two; the
flow's 192 hidden channels are three blocks). The gate's output blocks are separate
variables under compile-time conditions, so ``H`` can be 64, 128, 192 or 256.
"""

import triton
import triton.language as tl


@triton.jit
def _gate_block(xc_ptr, w_ptr, b_ptr, base, offs_t, offs_c, length, dilation,
                O: tl.constexpr, H: tl.constexpr, NB: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                F32: tl.constexpr):
    """``tanh(a[:, O]) * sigmoid(a[:, H + O])`` for the 64-channel output block ``O`` of the
    dilated convolution ``a = conv(x) + b``, as a ``[BLOCK_T, 64]`` float32 tile.

    ``xc_ptr``: the layer input already in the convolution's dtype (``[B, T, H]``); ``w_ptr``:
    ``[K, H, 2H]`` (tap, input channel, output channel). Input rows outside ``[0, length)``
    read as 0 (the convolution's zero padding and the item's padded tail). Products
    accumulate in float32 (fp16/bf16 operands: both straight from shared memory)."""
    acc_t = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    acc_s = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    x_tile = xc_ptr + base + offs_t[:, None] * H + offs_c[None, :]  # rows offs_t, channels 0..63
    w_tile = w_ptr + offs_c[:, None] * (2 * H) + (O * 64 + offs_c)[None, :]  # tap 0, input channels 0..63
    # one loop step = one (tap, input block) pair: a [BLOCK_T, 64] input tile and two [64, 64]
    # weight tiles, small enough for the software pipeline to keep a few steps in flight
    for ki in range(K * NB):
        k = ki // NB
        i = ki % NB
        shift = (k - (K - 1) // 2) * dilation
        src = offs_t + shift
        ok = (src >= 0) & (src < length)
        xt = tl.load(x_tile + (shift * H + i * 64), mask=ok[:, None], other=0.0)
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
def _split16(a):
    """A float32 tile with ``|a| <= 1`` as ``hi + lo``, both float16 (22 significant bits together)."""
    hi = a.to(tl.float16)
    return hi, (a - hi.to(tl.float32)).to(tl.float16)


@triton.jit
def _res_skip_col(h0, l0, h1, l1, h2, l2, h3, l3, whi_ptr, wlo_ptr, b_ptr, w_scale, offs_c,
                  N: tl.constexpr, NB: tl.constexpr, R: tl.constexpr):
    """Output block ``N`` of the 1x1 convolution ``acts @ w + b`` in near-float32 precision on the
    float16 tensor cores: ``acts = h + l`` and ``w / w_scale = wh + wl`` (float16 pairs), and
    ``acts @ w = (l @ wh + h @ wl + h @ wh) * w_scale`` with float32 accumulation (the ``l @ wl``
    term, ~2^-22 relative, is left out). ``whi_ptr``, ``wlo_ptr``: ``[H, R]`` float16."""
    col = offs_c[:, None] * R + (N * 64 + offs_c)[None, :]
    wh = tl.load(whi_ptr + col)
    wl = tl.load(wlo_ptr + col)
    r = tl.dot(l0, wh)
    r = tl.dot(h0, wl, r)
    r = tl.dot(h0, wh, r)
    if NB > 1:
        wh = tl.load(whi_ptr + 64 * R + col)
        wl = tl.load(wlo_ptr + 64 * R + col)
        r = tl.dot(l1, wh, r)
        r = tl.dot(h1, wl, r)
        r = tl.dot(h1, wh, r)
    if NB > 2:
        wh = tl.load(whi_ptr + 128 * R + col)
        wl = tl.load(wlo_ptr + 128 * R + col)
        r = tl.dot(l2, wh, r)
        r = tl.dot(h2, wl, r)
        r = tl.dot(h2, wh, r)
    if NB > 3:
        wh = tl.load(whi_ptr + 192 * R + col)
        wl = tl.load(wlo_ptr + 192 * R + col)
        r = tl.dot(l3, wh, r)
        r = tl.dot(h3, wl, r)
        r = tl.dot(h3, wh, r)
    return r * w_scale + tl.load(b_ptr + N * 64 + offs_c)[None, :]


@triton.jit
def _layer_tile(x_ptr, xc_ptr, w_in_ptr, b_in_ptr, whi_ptr, wlo_ptr, b_rs_ptr, w_scale, x_out_ptr, xc_out_ptr,
                skip_ptr, base, offs_t, offs_c, length, T, dilation,
                H: tl.constexpr, NB: tl.constexpr, R: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                FIRST: tl.constexpr, LAST: tl.constexpr, F32: tl.constexpr, WRITE_XC: tl.constexpr):
    """The layer on one tile of rows (see :func:`wn_layer_kernel`)."""
    # the gate, one 64-channel block at a time, each kept as a float16 pair for the 1x1 convolution
    h0, l0 = _split16(_gate_block(xc_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation,
                                  0, H, NB, K, BLOCK_T, F32))
    h1 = h0  # placeholders for narrower layers: never read when NB says so
    l1 = l0
    h2 = h0
    l2 = l0
    h3 = h0
    l3 = l0
    if NB > 1:
        h1, l1 = _split16(_gate_block(xc_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation,
                                      1, H, NB, K, BLOCK_T, F32))
    if NB > 2:
        h2, l2 = _split16(_gate_block(xc_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation,
                                      2, H, NB, K, BLOCK_T, F32))
    if NB > 3:
        h3, l3 = _split16(_gate_block(xc_ptr, w_in_ptr, b_in_ptr, base, offs_t, offs_c, length, dilation,
                                      3, H, NB, K, BLOCK_T, F32))

    valid = (offs_t < length)[:, None]
    inside = (offs_t < T)[:, None]
    rows = base + offs_t[:, None] * H
    for n in tl.static_range(R // 64):
        r = _res_skip_col(h0, l0, h1, l1, h2, l2, h3, l3, whi_ptr, wlo_ptr, b_rs_ptr, w_scale, offs_c, n, NB, R)
        if LAST:
            here = rows + (n * 64 + offs_c)[None, :]
            s = r
            if not FIRST:
                s += tl.load(skip_ptr + here, mask=valid, other=0.0)
            tl.store(skip_ptr + here, tl.where(valid, s, 0.0), mask=inside)
        else:
            if n < NB:  # residual half: the next layer's input, in float32 and in the convolution's dtype
                here = rows + (n * 64 + offs_c)[None, :]
                xn = tl.where(valid, tl.load(x_ptr + here, mask=valid, other=0.0) + r, 0.0)
                tl.store(x_out_ptr + here, xn, mask=inside)
                if WRITE_XC:
                    tl.store(xc_out_ptr + here, xn.to(xc_out_ptr.dtype.element_ty), mask=inside)
            else:  # skip half
                here = rows + ((n - NB) * 64 + offs_c)[None, :]
                s = r
                if not FIRST:
                    s += tl.load(skip_ptr + here, mask=valid, other=0.0)
                tl.store(skip_ptr + here, tl.where(valid, s, 0.0), mask=inside)


@triton.jit
def _zero_tile(x_out_ptr, xc_out_ptr, skip_ptr, base, offs_t, offs_c, T, H: tl.constexpr, BLOCK_T: tl.constexpr,
               LAST: tl.constexpr, WRITE_XC: tl.constexpr):
    """A tile wholly past the item's length: zeros to the outputs, no arithmetic."""
    inside = (offs_t < T)[:, None]
    rows = base + offs_t[:, None] * H
    zero = tl.zeros((BLOCK_T, 64), dtype=tl.float32)
    for n in tl.static_range(H // 64):
        here = rows + (n * 64 + offs_c)[None, :]
        tl.store(skip_ptr + here, zero, mask=inside)
        if not LAST:
            tl.store(x_out_ptr + here, zero, mask=inside)
            if WRITE_XC:
                tl.store(xc_out_ptr + here, zero.to(xc_out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def wn_layer_kernel(x_ptr, xc_ptr, w_in_ptr, b_in_ptr, whi_ptr, wlo_ptr, b_rs_ptr, x_out_ptr, xc_out_ptr, skip_ptr,
                    len_ptr, T, dilation, w_scale,
                    H: tl.constexpr, NB: tl.constexpr, R: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                    FIRST: tl.constexpr, LAST: tl.constexpr, F32: tl.constexpr, WRITE_XC: tl.constexpr):
    """One WN layer on ``BLOCK_T`` time positions of one item (grid: time blocks x items).

    ``x``, ``x_out``, ``skip``: ``[B, T, H]`` float32; ``xc``, ``xc_out``: the same rows in the
    convolution's dtype (``xc`` is ``x`` rounded; ``WRITE_XC``: ``xc_out`` is written, with
    ``x_out`` rounded, for the next layer). Not last: ``x_out = (x + r[:, :H]) * mask`` and
    ``skip (+)= r[:, H:]``; last: ``skip += r``. ``FIRST``: ``skip`` is written, not read.
    ``NB = H / 64``; ``R``: outputs of the 1x1 convolution (``2H``, or ``H`` for the last
    layer), whose weight comes as two float16 ``[H, R]`` halves ``whi + wlo = w / w_scale``
    (see :func:`_res_skip_col`). Every store is zero past the item's length; a tile wholly past
    it (an item's padded tail, a padding row of length 0) only writes zeros. The outputs must
    not be the inputs (a program's taps read rows its neighbours write); ``skip`` is read and
    written element by element by one program, so it is updated in place."""
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32), T)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, 64)
    base = pid_b * T * H
    if pid_t * BLOCK_T < length:
        _layer_tile(x_ptr, xc_ptr, w_in_ptr, b_in_ptr, whi_ptr, wlo_ptr, b_rs_ptr, w_scale, x_out_ptr, xc_out_ptr,
                    skip_ptr, base, offs_t, offs_c, length, T, dilation, H, NB, R, K, BLOCK_T, FIRST, LAST, F32,
                    WRITE_XC)
    else:
        _zero_tile(x_out_ptr, xc_out_ptr, skip_ptr, base, offs_t, offs_c, T, H, BLOCK_T, LAST, WRITE_XC)
