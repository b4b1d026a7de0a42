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
    y = y * tl.load(g_ptr + offs_c, mask=c_ok, other=0.0)[None, :] + tl.load(be_ptr + offs_c, mask=c_ok, other=0.0)[None, :]
    y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))  # GELU, exact (erf)
    tl.store(out_ptr + pid_b * o_b + offs_t[:, None].to(tl.int64) * o_t + offs_c[None, :], y, mask=ok)
