"""The Triton kernel behind :func:`engines.torch_vits.fused_gemm.gemm` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_gemm` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl


@triton.jit
def _addr(base_ptr, rows, cols, T, s_b, s_t, s_c, head_stride, HEAD: tl.constexpr):
    # element (row, col) of a [B*T, cols] operand stored as [B, T, ...] with strides s_b, s_t and
    # column stride s_c; with HEAD > 0, column j is (head j // HEAD, channel j % HEAD) and heads
    # lie head_stride apart (the attention's [heads, B, T, d] layout)
    bi = (rows // T).to(tl.int64)
    ti = (rows % T).to(tl.int64)
    row_off = bi * s_b + ti * s_t
    if HEAD > 0:
        col_off = (cols // HEAD).to(tl.int64) * head_stride + (cols % HEAD) * s_c
    else:
        col_off = cols.to(tl.int64) * s_c
    return base_ptr + row_off[:, None] + col_off[None, :]


# rows and rows per item change with every chunk: not specialized on (divisibility by 16 of these
# would double the compiled variants and changes no load's vectorization, which comes from the
# column strides and widths)
UNSPECIALIZED = ["M", "T"]


@triton.jit(do_not_specialize=UNSPECIALIZED)
def gemm_kernel(a_ptr, w_ptr, wlo_ptr, bias_ptr, res_ptr, g_ptr, be_ptr, len_ptr, out_ptr,
                M, N, K, T, eps,
                a_sb, a_st, a_hs, o_sb, o_st, o_sc, o_hs, r_sb, r_st,
                A_HEAD: tl.constexpr, O_HEAD: tl.constexpr, ACT: tl.constexpr, RES: tl.constexpr,
                LN: tl.constexpr, ROW_MASK: tl.constexpr, PRECISION: tl.constexpr, SPLIT: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SPLIT == 1:
        corr = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + ks
        a = tl.load(_addr(a_ptr, rows, kk, T, a_sb, a_st, 1, a_hs, A_HEAD),
                    mask=row_ok[:, None] & (kk < K)[None, :], other=0.0)
        w_at = kk[:, None].to(tl.int64) * N + cols[None, :]
        w_ok = (kk < K)[:, None] & col_ok[None, :]
        w = tl.load(w_ptr + w_at, mask=w_ok, other=0.0)
        if SPLIT == 1:  # fp16 halves: a = a_hi + a_lo / 2**11, w = w_hi + w_lo / 2**11 (w split once, in memory)
            a_hi = a.to(tl.float16)
            a_lo = ((a - a_hi.to(tl.float32)) * 2048.0).to(tl.float16)
            w_lo = tl.load(wlo_ptr + w_at, mask=w_ok, other=0.0)
            acc = tl.dot(a_hi, w, acc)
            corr = tl.dot(a_hi, w_lo, corr)
            corr = tl.dot(a_lo, w, corr)
        elif SPLIT == 2:  # unscaled remainders, one accumulator: a = a_hi + a_lo, w = w_hi + w_lo
            a_hi = a.to(tl.float16)
            a_lo = (a - a_hi.to(tl.float32)).to(tl.float16)
            w_lo = tl.load(wlo_ptr + w_at, mask=w_ok, other=0.0)
            acc = tl.dot(a_hi, w, acc)
            acc = tl.dot(a_hi, w_lo, acc)
            acc = tl.dot(a_lo, w, acc)
        else:
            acc = tl.dot(a, w, acc, input_precision=PRECISION)
    if SPLIT == 1:
        acc += corr * (1.0 / 2048.0)
    acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0)[None, :]
    if RES != 0:
        res = tl.load(_addr(res_ptr, rows, cols, T, r_sb, r_st, 1, 0, 0), mask=row_ok[:, None] & col_ok[None, :],
                      other=0.0)
    if RES == 1:  # residual before the norm and activation
        acc += res
    if LN:  # the whole row is in this tile (BLOCK_N >= N, one program along N)
        keep = col_ok[None, :]
        mean = tl.sum(tl.where(keep, acc, 0.0), axis=1) / N
        diff = tl.where(keep, acc - mean[:, None], 0.0)
        var = tl.sum(diff * diff, axis=1) / N
        acc = diff * (1.0 / tl.sqrt(var + eps))[:, None]
        acc = acc * tl.load(g_ptr + cols, mask=col_ok, other=0.0)[None, :] \
            + tl.load(be_ptr + cols, mask=col_ok, other=0.0)[None, :]
    if ACT == 1:  # ReLU
        acc = tl.maximum(acc, 0.0)
    if ACT == 2:  # GELU, exact (erf)
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    if RES == 2:  # residual after the norm and activation
        acc += res
    if ROW_MASK:  # rows at or past their item's length are written as 0
        ti = rows % T
        length = tl.load(len_ptr + rows // T, mask=row_ok, other=0)
        acc = tl.where((ti < length)[:, None], acc, 0.0)
    tl.store(_addr(out_ptr, rows, cols, T, o_sb, o_st, o_sc, o_hs, O_HEAD), acc,
             mask=row_ok[:, None] & col_ok[None, :])
