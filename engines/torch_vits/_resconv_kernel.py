"""The Triton kernel behind :func:`engines.torch_vits.fused_conv.resconv` (see that module).

Kept in its own module so that it is jitted when first imported, not when
:mod:`~engines.torch_vits.fused_conv` is: Triton decides between compiling for the GPU and
its CPU interpreter (``TRITON_INTERPRET=1``) at that moment.
"""

import triton
import triton.language as tl


@triton.jit
def resconv_kernel(x_ptr, w_ptr, b_ptr, res_ptr, acc_ptr, out_ptr, len_ptr,
                    T, len_scale, dilation, out_scale, slope, post_slope,
                    C: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr,
                    HAS_RES: tl.constexpr, HAS_ACC: tl.constexpr, HAS_POST: tl.constexpr,
                    ACT16: tl.constexpr):
    # ACT16: leaky ReLU in the input's dtype as max(x, x * slope) (fp16: packed, no float32 round
    # trip); else in float32. Every store is zero past the item's length; a tile wholly past it
    # stores zeros and does no arithmetic.
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32) * len_scale, T)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, C)
    base = pid_b * T * C
    inside = (offs_t < T)[:, None]
    here = base + offs_t[:, None] * C + offs_c[None, :]
    if pid_t * BLOCK_T < length:
        acc = tl.zeros((BLOCK_T, C), dtype=tl.float32)
        for j in tl.static_range(K):
            src = offs_t + (j - (K - 1) // 2) * dilation
            ok = (src >= 0) & (src < length)
            xt = tl.load(x_ptr + base + src[:, None] * C + offs_c[None, :], mask=ok[:, None], other=0.0)
            if ACT16:
                xt = tl.maximum(xt, xt * tl.cast(slope, x_ptr.dtype.element_ty))
            else:
                xt = tl.where(xt > 0, xt, xt * slope).to(x_ptr.dtype.element_ty)
            wj = tl.load(w_ptr + j * C * C + offs_c[:, None] * C + offs_c[None, :])
            acc += tl.dot(xt, wj)
        acc += tl.load(b_ptr + offs_c).to(tl.float32)[None, :]
        if HAS_RES:
            acc += tl.load(res_ptr + here, mask=inside, other=0.0).to(tl.float32)
        if HAS_ACC:
            acc += tl.load(acc_ptr + here, mask=inside, other=0.0).to(tl.float32)
        acc = acc * out_scale
        if HAS_POST:  # the next layer's input: leaky ReLU (then the time mask, below)
            acc = tl.where(acc > 0, acc, acc * post_slope)
        acc = tl.where((offs_t < length)[:, None], acc, 0.0)  # zero past the item's length
        tl.store(out_ptr + here, acc.to(out_ptr.dtype.element_ty), mask=inside)
    else:
        tl.store(out_ptr + here, tl.zeros((BLOCK_T, C), dtype=out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def postconv_pcm_kernel(x_ptr, w_ptr, out_ptr, len_ptr, T, len_scale, max_value,
                        C: tl.constexpr, K: tl.constexpr, BLOCK_T: tl.constexpr):
    # the decoder's last convolution (C -> 1 channel, no bias) on an input that is already
    # activated and masked, then tanh, the mask, and int16 PCM; rounded to fp16 where the
    # PyTorch path rounds (the convolution's output and tanh's) so both give the same samples
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32) * len_scale, T)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, C)
    if pid_t * BLOCK_T < length:
        acc = tl.zeros((BLOCK_T,), dtype=tl.float32)
        for j in tl.static_range(K):
            src = offs_t + (j - (K - 1) // 2)
            ok = (src >= 0) & (src < length)
            xt = tl.load(x_ptr + pid_b * T * C + src[:, None] * C + offs_c[None, :], mask=ok[:, None], other=0.0)
            wj = tl.load(w_ptr + j * C + offs_c)
            acc += tl.sum(xt.to(tl.float32) * wj.to(tl.float32)[None, :], axis=1)
        a = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)  # tanh
        y = y.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = tl.where(offs_t < length, y, 0.0)
        pcm = tl.minimum(tl.maximum(y * max_value, -max_value), max_value)
        tl.store(out_ptr + pid_b * T + offs_t, pcm.to(tl.int16), mask=offs_t < T)
    else:  # a tile wholly past the item's length: silence
        tl.store(out_ptr + pid_b * T + offs_t, tl.zeros((BLOCK_T,), dtype=tl.int16), mask=offs_t < T)


@triton.jit
def upsample_kernel(x_ptr, w_ptr, b_ptr, out_ptr, len_ptr, T, pad, len_scale,
                    CI: tl.constexpr, CO: tl.constexpr, U: tl.constexpr, BLOCK_T: tl.constexpr,
                    HAS_LEN: tl.constexpr):
    # ConvTranspose1d with kernel 2U and stride U, polyphase: output n = t*U + r - pad is
    # x[t] @ W[r] + x[t-1] @ W[r+U]; a program takes BLOCK_T input positions (t up to T, whose
    # x[T] = 0 still feeds the last outputs) and all U phases, so each input tile is loaded once.
    # HAS_LEN: outputs at or past the item's output length (lengths[b] * len_scale) are stored as
    # zeros, and a tile all of whose outputs are there does no arithmetic.
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_i = tl.arange(0, CI)
    offs_o = tl.arange(0, CO)
    base = pid_b * T * CI
    n_out = T * U
    out_len = n_out
    if HAS_LEN:
        out_len = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32) * len_scale, n_out)
    if pid_t * BLOCK_T * U - pad < out_len:
        x0 = tl.load(x_ptr + base + offs_t[:, None] * CI + offs_i[None, :], mask=(offs_t < T)[:, None], other=0.0)
        prev = offs_t - 1
        x1 = tl.load(x_ptr + base + prev[:, None] * CI + offs_i[None, :], mask=((prev >= 0) & (prev < T))[:, None],
                     other=0.0)
        bias = tl.load(b_ptr + offs_o).to(tl.float32)
        for r in tl.static_range(U):
            w0 = tl.load(w_ptr + r * CI * CO + offs_i[:, None] * CO + offs_o[None, :])
            w1 = tl.load(w_ptr + (r + U) * CI * CO + offs_i[:, None] * CO + offs_o[None, :])
            acc = tl.dot(x0, w0) + tl.dot(x1, w1) + bias[None, :]
            n = offs_t * U + r - pad
            ok = (n >= 0) & (n < n_out) & (offs_t <= T)
            acc = tl.where((n < out_len)[:, None], acc, 0.0)
            tl.store(out_ptr + pid_b * n_out * CO + n[:, None] * CO + offs_o[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=ok[:, None])
    else:
        zero = tl.zeros((BLOCK_T, CO), dtype=out_ptr.dtype.element_ty)
        for r in tl.static_range(U):
            n = offs_t * U + r - pad
            ok = (n >= 0) & (n < n_out) & (offs_t <= T)
            tl.store(out_ptr + pid_b * n_out * CO + n[:, None] * CO + offs_o[None, :], zero, mask=ok[:, None])
