"""Experimental variants of the resblock convolution kernel, for ``bench/resconv_variants.py``.

Not used by the engine. The same computation as
:func:`engines.torch_vits._resconv_kernel.resconv_kernel` (``out = conv(lrelu(x) * mask) + bias
+ residual``), with compile-time switches that each remove or change one piece of per-element
work, so that a sweep can say which piece bounds the kernel:

* ``ACT``: 0 leaky ReLU in float32 (as the engine's kernel), 1 in the input's dtype as
  ``max(x, x * slope)``, 2 none (timing only: not the same function);
* ``LMASK``: True masks the loads by each item's length (as the engine's kernel); False only by the
  tensor's bounds (the same function when every producer stores zeros past the length, which
  ``STORE_MASK`` does for this kernel's own output);
* ``IM2COL``: the ``K`` taps as one ``[BLOCK_T, KP*C]`` tile (``KP``: ``K`` rounded up to a power of
  two; the extra taps are masked to 0 and meet zero weight rows) and one dot, instead of ``K`` dots.
"""

import triton
import triton.language as tl


@triton.jit
def resconv_variant(x_ptr, w_ptr, b_ptr, res_ptr, out_ptr, len_ptr, T, len_scale, dilation, slope,
                    C: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK_T: tl.constexpr,
                    ACT: tl.constexpr, LMASK: tl.constexpr, STORE_MASK: tl.constexpr, IM2COL: tl.constexpr):
    pid_t = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    length = tl.minimum(tl.load(len_ptr + pid_b).to(tl.int32) * len_scale, T)
    hi = length if LMASK else T
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.arange(0, C)
    xb = x_ptr + pid_b * T * C
    if IM2COL:
        offs_j = tl.arange(0, KP)
        src = offs_t[:, None] + (offs_j[None, :] - (K - 1) // 2) * dilation  # [BT, KP]
        ok = (src >= 0) & (src < hi) & (offs_j < K)[None, :]
        xt = tl.load(xb + src[:, :, None] * C + offs_c[None, None, :], mask=ok[:, :, None], other=0.0)
        if ACT == 0:
            xt = tl.where(xt > 0, xt, xt * slope).to(x_ptr.dtype.element_ty)
        elif ACT == 1:
            xt = tl.maximum(xt, xt * tl.cast(slope, x_ptr.dtype.element_ty))
        xt = tl.reshape(xt, (BLOCK_T, KP * C))
        offs_r = tl.arange(0, KP * C)
        w = tl.load(w_ptr + offs_r[:, None] * C + offs_c[None, :], mask=(offs_r < K * C)[:, None], other=0.0)
        acc = tl.dot(xt, w)
    else:
        acc = tl.zeros((BLOCK_T, C), dtype=tl.float32)
        for j in tl.static_range(K):
            src = offs_t + (j - (K - 1) // 2) * dilation
            ok = (src >= 0) & (src < hi)
            xt = tl.load(xb + src[:, None] * C + offs_c[None, :], mask=ok[:, None], other=0.0)
            if ACT == 0:
                xt = tl.where(xt > 0, xt, xt * slope).to(x_ptr.dtype.element_ty)
            elif ACT == 1:
                xt = tl.maximum(xt, xt * tl.cast(slope, x_ptr.dtype.element_ty))
            wj = tl.load(w_ptr + j * C * C + offs_c[:, None] * C + offs_c[None, :])
            acc += tl.dot(xt, wj)
    acc += tl.load(b_ptr + offs_c).to(tl.float32)[None, :]
    inside = (offs_t < T)[:, None]
    here = pid_b * T * C + offs_t[:, None] * C + offs_c[None, :]
    acc += tl.load(res_ptr + here, mask=inside, other=0.0).to(tl.float32)
    if STORE_MASK:
        acc = tl.where((offs_t < length)[:, None], acc, 0.0)
    tl.store(out_ptr + here, acc.to(out_ptr.dtype.element_ty), mask=inside)
