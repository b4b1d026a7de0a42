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


@triton.jit
def _mma(a, a_hi, a_lo, w_ptr, wlo_ptr, kk, cols, N, K, acc, corr, PRECISION: tl.constexpr, SPLIT: tl.constexpr):
    # one k-step of one column block: acc (and the split's correction sum) += a @ w[kk, cols]
    w_at = kk[:, None].to(tl.int64) * N + cols[None, :]
    w_ok = (kk < K)[:, None] & (cols < N)[None, :]
    w = tl.load(w_ptr + w_at, mask=w_ok, other=0.0)
    if SPLIT == 1:  # fp16 halves: a = a_hi + a_lo / 2**11, w = w_hi + w_lo / 2**11 (w split once, in memory)
        w_lo = tl.load(wlo_ptr + w_at, mask=w_ok, other=0.0)
        acc = tl.dot(a_hi, w, acc)
        corr = tl.dot(a_hi, w_lo, corr)
        corr = tl.dot(a_lo, w, corr)
    elif SPLIT == 2:  # unscaled remainders, one accumulator: a = a_hi + a_lo, w = w_hi + w_lo
        w_lo = tl.load(wlo_ptr + w_at, mask=w_ok, other=0.0)
        acc = tl.dot(a_hi, w, acc)
        acc = tl.dot(a_hi, w_lo, acc)
        acc = tl.dot(a_lo, w, acc)
    else:
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc, corr


@triton.jit
def _pre(acc, corr, rows, cols, M, N, T, bias_ptr, res_ptr, r_sb, r_st, RES: tl.constexpr, SPLIT: tl.constexpr):
    # a column block's sum, bias and (RES == 1) residual; also its residual for RES == 2
    col_ok = cols < N
    if SPLIT == 1:
        acc += corr * (1.0 / 2048.0)
    acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0)[None, :]
    res = acc
    if RES != 0:
        res = tl.load(_addr(res_ptr, rows, cols, T, r_sb, r_st, 1, 0, 0), mask=(rows < M)[:, None] & col_ok[None, :],
                      other=0.0)
    if RES == 1:  # residual before the norm and activation
        acc += res
    return acc, res


@triton.jit
def _post(acc, res, rows, cols, M, N, T, mean, rstd, g_ptr, be_ptr, len_ptr, out_ptr, o_sb, o_st, o_sc, o_hs,
          O_HEAD: tl.constexpr, ACT: tl.constexpr, RES: tl.constexpr, LN: tl.constexpr, ROW_MASK: tl.constexpr):
    # a column block's LayerNorm (row statistics given), activation, late residual, row mask and store
    col_ok = cols < N
    row_ok = rows < M
    if LN:
        acc = (acc - mean[:, None]) * rstd[:, None]
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


@triton.jit
def _row_sum(acc, cols, N):
    return tl.sum(tl.where((cols < N)[None, :], acc, 0.0), axis=1)


@triton.jit
def _row_sq(acc, mean, cols, N):
    d = tl.where((cols < N)[None, :], acc - mean[:, None], 0.0)
    return tl.sum(d * d, axis=1)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def gemm_kernel(a_ptr, w_ptr, wlo_ptr, bias_ptr, res_ptr, g_ptr, be_ptr, len_ptr, out_ptr,
                M, N, K, T, eps,
                a_sb, a_st, a_hs, o_sb, o_st, o_sc, o_hs, r_sb, r_st,
                A_HEAD: tl.constexpr, O_HEAD: tl.constexpr, ACT: tl.constexpr, RES: tl.constexpr,
                LN: tl.constexpr, ROW_MASK: tl.constexpr, PRECISION: tl.constexpr, SPLIT: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NB: tl.constexpr):
    # a program computes NB column blocks of BLOCK_N side by side (1..4; LayerNorm needs the whole
    # row: NB * BLOCK_N >= N), each activation tile loaded and split once for all of them
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    c0 = pid_n * (NB * BLOCK_N) + tl.arange(0, BLOCK_N)
    c1 = c0 + BLOCK_N
    c2 = c1 + BLOCK_N
    c3 = c2 + BLOCK_N
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = acc0
    acc2 = acc0
    acc3 = acc0
    corr0 = acc0
    corr1 = acc0
    corr2 = acc0
    corr3 = acc0
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + ks
        a = tl.load(_addr(a_ptr, rows, kk, T, a_sb, a_st, 1, a_hs, A_HEAD),
                    mask=row_ok[:, None] & (kk < K)[None, :], other=0.0)
        a_hi = a
        a_lo = a
        if SPLIT == 1:
            a_hi = a.to(tl.float16)
            a_lo = ((a - a_hi.to(tl.float32)) * 2048.0).to(tl.float16)
        elif SPLIT == 2:
            a_hi = a.to(tl.float16)
            a_lo = (a - a_hi.to(tl.float32)).to(tl.float16)
        acc0, corr0 = _mma(a, a_hi, a_lo, w_ptr, wlo_ptr, kk, c0, N, K, acc0, corr0, PRECISION, SPLIT)
        if NB > 1:
            acc1, corr1 = _mma(a, a_hi, a_lo, w_ptr, wlo_ptr, kk, c1, N, K, acc1, corr1, PRECISION, SPLIT)
        if NB > 2:
            acc2, corr2 = _mma(a, a_hi, a_lo, w_ptr, wlo_ptr, kk, c2, N, K, acc2, corr2, PRECISION, SPLIT)
        if NB > 3:
            acc3, corr3 = _mma(a, a_hi, a_lo, w_ptr, wlo_ptr, kk, c3, N, K, acc3, corr3, PRECISION, SPLIT)
    acc0, res0 = _pre(acc0, corr0, rows, c0, M, N, T, bias_ptr, res_ptr, r_sb, r_st, RES, SPLIT)
    res1 = res0
    res2 = res0
    res3 = res0
    if NB > 1:
        acc1, res1 = _pre(acc1, corr1, rows, c1, M, N, T, bias_ptr, res_ptr, r_sb, r_st, RES, SPLIT)
    if NB > 2:
        acc2, res2 = _pre(acc2, corr2, rows, c2, M, N, T, bias_ptr, res_ptr, r_sb, r_st, RES, SPLIT)
    if NB > 3:
        acc3, res3 = _pre(acc3, corr3, rows, c3, M, N, T, bias_ptr, res_ptr, r_sb, r_st, RES, SPLIT)
    mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
    rstd = mean
    if LN:  # over the whole row: this program's NB blocks
        total = _row_sum(acc0, c0, N)
        if NB > 1:
            total += _row_sum(acc1, c1, N)
        if NB > 2:
            total += _row_sum(acc2, c2, N)
        if NB > 3:
            total += _row_sum(acc3, c3, N)
        mean = total / N
        var = _row_sq(acc0, mean, c0, N)
        if NB > 1:
            var += _row_sq(acc1, mean, c1, N)
        if NB > 2:
            var += _row_sq(acc2, mean, c2, N)
        if NB > 3:
            var += _row_sq(acc3, mean, c3, N)
        rstd = 1.0 / tl.sqrt(var / N + eps)
    _post(acc0, res0, rows, c0, M, N, T, mean, rstd, g_ptr, be_ptr, len_ptr, out_ptr, o_sb, o_st, o_sc, o_hs,
          O_HEAD, ACT, RES, LN, ROW_MASK)
    if NB > 1:
        _post(acc1, res1, rows, c1, M, N, T, mean, rstd, g_ptr, be_ptr, len_ptr, out_ptr, o_sb, o_st, o_sc, o_hs,
              O_HEAD, ACT, RES, LN, ROW_MASK)
    if NB > 2:
        _post(acc2, res2, rows, c2, M, N, T, mean, rstd, g_ptr, be_ptr, len_ptr, out_ptr, o_sb, o_st, o_sc, o_hs,
              O_HEAD, ACT, RES, LN, ROW_MASK)
    if NB > 3:
        _post(acc3, res3, rows, c3, M, N, T, mean, rstd, g_ptr, be_ptr, len_ptr, out_ptr, o_sb, o_st, o_sc, o_hs,
              O_HEAD, ACT, RES, LN, ROW_MASK)
