"""The Triton kernel behind :func:`engines.torch_vits.fused_dds.sepconv_ln_gelu` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_dds` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl


@triton.jit
def sepconv_ln_gelu_kernel(buf_ptr, taps_ptr, b_ptr, g_ptr, be_ptr, out_ptr, T, pad, dilation, eps,
                           s_b, s_t, o_b, o_t,
                           C: tl.constexpr, CP: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr):
    # rows t of one item: y = gelu(layer_norm(bias + sum_j buf[pad + t + (j - K//2) * dilation] * taps[j]))
    # over C channels (CP: C rounded up to a power of two, the extra lanes masked)
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, CP)
    c_ok = offs_c < C
    t_ok = offs_t < T
    ok = t_ok[:, None] & c_ok[None, :]
    acc = tl.zeros((BLOCK_T, CP), dtype=tl.float32) + tl.load(b_ptr + offs_c, mask=c_ok, other=0.0)[None, :]
    for j in tl.static_range(K):
        src = pad + offs_t + (j - K // 2) * dilation
        x = tl.load(buf_ptr + pid_b * s_b + src[:, None].to(tl.int64) * s_t + offs_c[None, :], mask=ok, other=0.0)
        acc += x * tl.load(taps_ptr + j * C + offs_c, mask=c_ok, other=0.0)[None, :]
    mean = tl.sum(tl.where(ok, acc, 0.0), axis=1) / C
    diff = tl.where(ok, acc - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / C
    y = diff * (1.0 / tl.sqrt(var + eps))[:, None]
    gamma = tl.load(g_ptr + offs_c, mask=c_ok, other=0.0)
    y = y * gamma[None, :] + tl.load(be_ptr + offs_c, mask=c_ok, other=0.0)[None, :]
    y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))  # GELU, exact (erf)
    tl.store(out_ptr + pid_b * o_b + offs_t[:, None].to(tl.int64) * o_t + offs_c[None, :], y, mask=ok)


@triton.jit
def _pick(vals, j, idx):
    # vals[row, idx[row]] (0 where idx is out of range)
    return tl.sum(tl.where(j[None, :] == idx[:, None], vals, 0.0), axis=1)


@triton.jit
def _knot(cum, j, idx, tail, NB: tl.constexpr):
    # knot idx (0..NB) of a row whose bin sizes sum to cum: -tail, 2*tail*cum[idx-1] - tail, tail
    inner = 2.0 * tail * _pick(cum, j, idx - 1) - tail
    return tl.where(idx == 0, -tail, tl.where(idx == NB, tail, inner))


@triton.jit
def spline_inverse_kernel(x_ptr, st_ptr, len_ptr, out_ptr, T, x_sb, x_st, s_sb, s_st, tail, min_w, min_d,
                          NB: tl.constexpr, KP: tl.constexpr, BLOCK_T: tl.constexpr):
    # the inverse rational-quadratic spline of x [B, T] with widths, heights and inner derivatives
    # side by side in st [B, T, 3*NB - 1] (unnormalized), identity outside [-tail, tail], times the
    # mask; out [B, T] contiguous. KP: NB rounded up to a power of two (extra lanes masked).
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = offs_t < T
    length = tl.load(len_ptr + pid_b)
    x = tl.load(x_ptr + pid_b * x_sb + offs_t * x_st, mask=t_ok, other=0.0)
    j = tl.arange(0, KP)
    j_ok = j < NB
    ok = t_ok[:, None] & j_ok[None, :]
    row = st_ptr + pid_b * s_sb + offs_t[:, None] * s_st
    uw = tl.load(row + j[None, :], mask=ok, other=float("-inf"))
    uh = tl.load(row + NB + j[None, :], mask=ok, other=float("-inf"))
    ud = tl.load(row + 2 * NB + j[None, :], mask=t_ok[:, None] & (j < NB - 1)[None, :], other=0.0)
    ew = tl.exp(uw - tl.max(uw, axis=1)[:, None])
    eh = tl.exp(uh - tl.max(uh, axis=1)[:, None])
    w = tl.where(ok, min_w + (1.0 - min_w * NB) * (ew / tl.sum(ew, axis=1)[:, None]), 0.0)
    h = tl.where(ok, min_w + (1.0 - min_w * NB) * (eh / tl.sum(eh, axis=1)[:, None]), 0.0)
    cw = tl.cumsum(w, axis=1)
    ch = tl.cumsum(h, axis=1)
    # inner derivatives: softplus (PyTorch's: linear above 20) + min_d; 1 at both ends
    sp = tl.where(ud > 20.0, ud, tl.log(1.0 + tl.exp(tl.minimum(ud, 20.0))))
    d = sp + min_d
    inside = (x >= -tail) & (x <= tail)
    xc = tl.minimum(tl.maximum(x, -tail), tail)
    # the bin: how many of the height knots 0..NB-1 lie at or below xc (knot 0 is -tail)
    knots_h = tl.where(j[None, :] == 0, -tail, 2.0 * tail * _shift(ch, j) - tail)
    cnt = tl.sum(tl.where(ok & (xc[:, None] >= knots_h), 1, 0), axis=1)
    lo = tl.minimum(tl.maximum(cnt - 1, 0), NB)
    hi = tl.minimum(cnt, NB)
    in_cumw = _knot(cw, j, lo, tail, NB)
    in_w = _knot(cw, j, hi, tail, NB) - in_cumw
    in_cumh = _knot(ch, j, lo, tail, NB)
    in_h = _knot(ch, j, hi, tail, NB) - in_cumh
    d0 = tl.where((lo == 0) | (lo == NB), 1.0, _pick(d, j, lo - 1))
    d1 = tl.where((hi == 0) | (hi == NB), 1.0, _pick(d, j, hi - 1))
    delta = in_h / in_w
    y = xc - in_cumh
    s = d0 + d1 - 2 * delta
    ys = y * s
    a = ys + in_h * (delta - d0)
    bb = in_h * d0 - ys
    c = -delta * y
    disc = bb * bb - 4 * a * c
    root = (2 * c) / (-bb - tl.sqrt(disc))
    out = tl.where(inside, root * in_w + in_cumw, x)
    out = tl.where(offs_t < length, out, 0.0)
    tl.store(out_ptr + pid_b * T + offs_t, out, mask=t_ok)


@triton.jit
def _shift(cum, j):
    # row-wise cum[j - 1] at lane j (lane 0 gets 0; it is replaced by the knot -tail)
    return tl.sum(tl.where(j[None, None, :] == (j[None, :, None] - 1), cum[:, None, :], 0.0), axis=2)
