"""The Triton kernel behind :func:`engines.torch_vits.fused_attn.relative_attention` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_attn` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl

#: integer arguments Triton must not specialize on (the chunk's width changes from batch to batch)
UNSPECIALIZED = ["T"]

# "fp16x3" (see fused_attn's docstring): float32 tiles times a power of two (exact, and so is the unscaling)
# split into float16 high parts and remainders. q, k, v and the relative embeddings are of order 1-10 for the
# voice: times 2**6 they stay far below float16's largest value 65504 (|x| up to ~1000 would fit), and the
# remainder of a value of order 1 (times 2**6, its float16 rounding error is ~2**-5 .. 2**-9) stays above
# float16's smallest normal number 2**-14, so it keeps its 11 bits. Probabilities (those of the band too) are
# in [0, 1]: times 2**14 the largest is 16384, and the high part stays a normal number down to p ~ 2**-28
# (4e-9); smaller ones, and remainders that are subnormal, are off by at most 2**-25 / 2**14 absolutely,
# nothing next to a row's sum (>= 1).
X_SCALE = tl.constexpr(64.0)  # 2**6: q, k, ek, v, ev
P_SCALE = tl.constexpr(16384.0)  # 2**14: the probabilities
S_UNSCALE = tl.constexpr(1.0 / 4096.0)  # 2**-12: the logits (q . k, q . ek) from their accumulator
O_UNSCALE = tl.constexpr(1.0 / 1048576.0)  # 2**-20: the output from its accumulators (P_SCALE * X_SCALE)


@triton.jit
def _split(x, SCALE: tl.constexpr):
    """A float32 tile times ``SCALE`` as a float16 high part and the float16 (unscaled) remainder."""
    xs = x * SCALE
    hi = xs.to(tl.float16)
    return hi, (xs - hi.to(tl.float32)).to(tl.float16)


@triton.jit
def _dot3(a_hi, a_lo, b_hi, b_lo, acc):
    """``acc + (a_hi + a_lo) @ (b_hi + b_lo)`` without the ``a_lo @ b_lo`` term: three float16
    tensor-core products into one float32 accumulator, the small ones first."""
    acc = tl.dot(a_lo, b_hi, acc)
    acc = tl.dot(a_hi, b_lo, acc)
    return tl.dot(a_hi, b_hi, acc)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def relative_attention_kernel(q_ptr, k_ptr, v_ptr, ek_ptr, ev_ptr, len_ptr, out_ptr, T,
                              D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, W: tl.constexpr,
                              RP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              PRECISION: tl.constexpr):
    # One query tile of one (head, item) row of q, k, v, out [H*B, T, D] (contiguous; grid
    # (tiles, B, H), row head * B + item). Channels in two tiles: DA (columns 0..DA-1) and DB
    # (columns DA..DA+DB-1, those >= D masked). Relative offsets r = j - i + W in 0..2W, held in
    # RP >= 2W+1 lanes (the rest masked to 0). PRECISION: tl.dot's input precision for every product
    # ("tf32x3", "ieee"), or "fp16x3": three float16 products of scaled, split operands (see X_SCALE above).
    R: tl.constexpr = 2 * W + 1
    pid_m = tl.program_id(0)
    item = tl.program_id(1)
    row = tl.program_id(2) * tl.num_programs(1) + item
    base = row.to(tl.int64) * T * D
    length = tl.load(len_ptr + item).to(tl.int32)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    ca = tl.arange(0, DA)
    cb = DA + tl.arange(0, DB)
    cr = tl.arange(0, RP)
    a_ok = ca < D
    b_ok = cb < D
    r_ok = cr < R
    m_ok = offs_m < T
    q_rows = q_ptr + base + offs_m[:, None] * D
    qa = tl.load(q_rows + ca[None, :], mask=m_ok[:, None] & a_ok[None, :], other=0.0)
    qb = tl.load(q_rows + cb[None, :], mask=m_ok[:, None] & b_ok[None, :], other=0.0)
    # qe[i, r] = q_i . ek[:, r]: the relative-key logit of query i at offset r (once per tile)
    eka = tl.load(ek_ptr + ca[:, None] * R + cr[None, :], mask=a_ok[:, None] & r_ok[None, :], other=0.0)
    ekb = tl.load(ek_ptr + cb[:, None] * R + cr[None, :], mask=b_ok[:, None] & r_ok[None, :], other=0.0)
    if PRECISION == "fp16x3":  # q's split is kept for the key loop
        qa_hi, qa_lo = _split(qa, X_SCALE)
        qb_hi, qb_lo = _split(qb, X_SCALE)
        eka_hi, eka_lo = _split(eka, X_SCALE)
        ekb_hi, ekb_lo = _split(ekb, X_SCALE)
        qe = _dot3(qa_hi, qa_lo, eka_hi, eka_lo, tl.zeros((BLOCK_M, RP), dtype=tl.float32))
        qe = _dot3(qb_hi, qb_lo, ekb_hi, ekb_lo, qe) * S_UNSCALE
    else:
        qe = tl.dot(qa, eka, input_precision=PRECISION)
        qe = tl.dot(qb, ekb, qe, input_precision=PRECISION)

    # online softmax over the key blocks of the item's real keys (none for a tile wholly past its length)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc_a = tl.zeros((BLOCK_M, DA), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M, DB), dtype=tl.float32)
    pband = tl.zeros((BLOCK_M, RP), dtype=tl.float32)  # p(i, i + r - W), rescaled along with acc
    hi = tl.where(m0 < length, length, 0)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < length
        if PRECISION == "fp16x3":  # k as row tiles [BLOCK_N, DA] (rows contiguous), split, transposed
            k_rows = k_ptr + base + offs_n[:, None] * D
            ka_hi, ka_lo = _split(tl.load(k_rows + ca[None, :], mask=n_ok[:, None] & a_ok[None, :], other=0.0),
                                  X_SCALE)
            kb_hi, kb_lo = _split(tl.load(k_rows + cb[None, :], mask=n_ok[:, None] & b_ok[None, :], other=0.0),
                                  X_SCALE)
            s = _dot3(qa_hi, qa_lo, tl.trans(ka_hi), tl.trans(ka_lo), tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
            s = _dot3(qb_hi, qb_lo, tl.trans(kb_hi), tl.trans(kb_lo), s) * S_UNSCALE
        else:
            k_cols = k_ptr + base + offs_n[None, :] * D
            kta = tl.load(k_cols + ca[:, None], mask=a_ok[:, None] & n_ok[None, :], other=0.0)  # [DA, BLOCK_N]
            ktb = tl.load(k_cols + cb[:, None], mask=b_ok[:, None] & n_ok[None, :], other=0.0)
            s = tl.dot(qa, kta, input_precision=PRECISION)
            s = tl.dot(qb, ktb, s, input_precision=PRECISION)
        rel = offs_n[None, :] - offs_m[:, None] + W  # [BLOCK_M, BLOCK_N]: the relative offset r of each logit
        # does this block meet the band |j - i| <= W? (j - i spans n0 - m0 - BLOCK_M + 1 .. n0 + BLOCK_N - 1 - m0)
        band = (n0 - m0 - BLOCK_M + 1 <= W) & (n0 + BLOCK_N - 1 - m0 >= -W)
        if band:
            for r in tl.static_range(R):
                qr = tl.sum(tl.where(cr[None, :] == r, qe, 0.0), axis=1)
                s += tl.where(rel == r, qr[:, None], 0.0)
        s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_rows = v_ptr + base + offs_n[:, None] * D
        va = tl.load(v_rows + ca[None, :], mask=n_ok[:, None] & a_ok[None, :], other=0.0)
        vb = tl.load(v_rows + cb[None, :], mask=n_ok[:, None] & b_ok[None, :], other=0.0)
        if PRECISION == "fp16x3":  # p times 2**14, v times 2**6: the accumulators carry 2**20
            p_hi, p_lo = _split(p, P_SCALE)
            va_hi, va_lo = _split(va, X_SCALE)
            vb_hi, vb_lo = _split(vb, X_SCALE)
            acc_a = _dot3(p_hi, p_lo, va_hi, va_lo, acc_a * alpha[:, None])
            acc_b = _dot3(p_hi, p_lo, vb_hi, vb_lo, acc_b * alpha[:, None])
        else:
            acc_a = tl.dot(p, va, acc_a * alpha[:, None], input_precision=PRECISION)
            acc_b = tl.dot(p, vb, acc_b * alpha[:, None], input_precision=PRECISION)
        pband = pband * alpha[:, None]
        if band:
            for r in tl.static_range(R):
                pr = tl.sum(tl.where(rel == r, p, 0.0), axis=1)
                pband += tl.where(cr[None, :] == r, pr[:, None], 0.0)
        m_i = m_new

    # the relative-value term: sum_r p(i, i + r - W) ev[r, :] (p is 0 for keys outside 0..length-1)
    eva = tl.load(ev_ptr + cr[:, None] * D + ca[None, :], mask=r_ok[:, None] & a_ok[None, :], other=0.0)
    evb = tl.load(ev_ptr + cr[:, None] * D + cb[None, :], mask=r_ok[:, None] & b_ok[None, :], other=0.0)
    # a tile past the length: l = 0 and acc = 0, written as zeros
    if PRECISION == "fp16x3":  # the band's probabilities (in [0, 1]) and ev scaled as p and v: 2**20 too
        pb_hi, pb_lo = _split(pband, P_SCALE)
        eva_hi, eva_lo = _split(eva, X_SCALE)
        evb_hi, evb_lo = _split(evb, X_SCALE)
        acc_a = _dot3(pb_hi, pb_lo, eva_hi, eva_lo, acc_a)
        acc_b = _dot3(pb_hi, pb_lo, evb_hi, evb_lo, acc_b)
        inv = O_UNSCALE / tl.where(l_i > 0, l_i, 1.0)
    else:
        acc_a = tl.dot(pband, eva, acc_a, input_precision=PRECISION)
        acc_b = tl.dot(pband, evb, acc_b, input_precision=PRECISION)
        inv = 1.0 / tl.where(l_i > 0, l_i, 1.0)
    o_rows = out_ptr + base + offs_m[:, None] * D
    tl.store(o_rows + ca[None, :], acc_a * inv[:, None], mask=m_ok[:, None] & a_ok[None, :])
    tl.store(o_rows + cb[None, :], acc_b * inv[:, None], mask=m_ok[:, None] & b_ok[None, :])
