"""The Triton kernel behind :func:`engines.torch_vits.fused_prior.sample_prior` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_prior` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl


# every integer argument changes with the batch or the chunk (row counts, phoneme widths, noise
# frames): not specialized on, so the compiled variants are set by the constexprs alone
UNSPECIALIZED = ["n", "F", "TP_real", "FE", "p_sb", "p_sc", "d_sb", "e_sb", "e_sc"]


@triton.jit(do_not_specialize=UNSPECIALIZED)
def sample_prior_kernel(mp_ptr, lp_ptr, dur_ptr, item_ptr, eps_ptr, erow_ptr, out_ptr,
                        n, F, TP_real, FE, noise_scale,
                        p_sb, p_sc, d_sb, e_sb, e_sc,
                        C: tl.constexpr, CP: tl.constexpr, TP: tl.constexpr, NOISE: tl.constexpr,
                        BLOCK_F: tl.constexpr):
    """``BLOCK_F`` frames of one chunk row (grid: frame blocks x rows). Row ``r < n`` is batch item
    ``item[r]``: frame ``j``'s phoneme is ``p`` = the number of the item's phonemes that end at or
    before ``j`` (running sums of its durations), and ``z[r, j, :] = m_p[:, p] + eps[:, j] *
    exp(logs_p[:, p]) * noise_scale`` with ``m_p``, ``logs_p`` read as 0 for ``p`` past the
    phoneme axis and ``eps`` (row ``erow[r]``) as 0 past its ``FE`` frames. Rows ``r >= n``
    (padding) are 0. ``m_p``, ``logs_p``: ``[*, C, TP_real]`` with unit stride along time
    (strides ``p_sb``, ``p_sc``); ``durations``: ``[*, TP_real]`` float32; ``eps``: ``[*, C, FE]``
    with unit stride along time; ``out``: ``[rows, F, C]`` float32."""
    pid_f = tl.program_id(0)
    r = tl.program_id(1)
    offs_f = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    cc = tl.arange(0, CP)
    c_ok = cc < C
    out_at = out_ptr + r.to(tl.int64) * F * C + offs_f[:, None] * C + cc[None, :]
    store_ok = (offs_f < F)[:, None] & c_ok[None, :]
    if r >= n:
        tl.store(out_at, tl.zeros((BLOCK_F, CP), dtype=tl.float32), mask=store_ok)
    else:
        item = tl.load(item_ptr + r).to(tl.int64)
        tt = tl.arange(0, TP)
        dur = tl.load(dur_ptr + item * d_sb + tt, mask=tt < TP_real, other=0.0)
        ends = tl.cumsum(dur, axis=0)  # whole frames: exact in float32
        # the phoneme of each frame: how many phonemes end at or before it
        p = tl.sum((ends[None, :] <= offs_f[:, None].to(tl.float32)).to(tl.int32), axis=1)
        p_ok = (p < TP_real)[:, None] & c_ok[None, :]
        at = item * p_sb + cc[None, :] * p_sc + p[:, None]
        m = tl.load(mp_ptr + at, mask=p_ok, other=0.0)
        z = m
        if NOISE:
            lg = tl.load(lp_ptr + at, mask=p_ok, other=0.0)
            erow = tl.load(erow_ptr + r).to(tl.int64)
            e = tl.load(eps_ptr + erow * e_sb + cc[None, :] * e_sc + offs_f[:, None],
                        mask=(offs_f < FE)[:, None] & c_ok[None, :], other=0.0)
            z = m + e * tl.exp(lg) * noise_scale
        tl.store(out_at, z, mask=store_ok)
