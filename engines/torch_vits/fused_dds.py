"""Two Triton kernels of the stochastic duration predictor: the DDSConv prologue (depthwise dilated
convolution, LayerNorm and GELU) and the inverse rational-quadratic spline of its flows.

Each DDSConv layer of the stochastic duration predictor starts with a depthwise (one filter per
channel) dilated convolution of ``K`` taps, then LayerNorm over the channels and an exact GELU,
before its 1x1 convolution (:func:`engines.torch_vits.fused_gemm.gemm`, which adds the second
norm, GELU and residual in its epilogue). Run as PyTorch operations that is ``K`` multiply-adds of
strided views, a LayerNorm and a GELU: five kernels and five passes over ``[B, T, C]`` per layer,
fifteen layers a chunk. :func:`sepconv_ln_gelu` does it in one pass, in float32.

Layout: the layer's input lives, masked, in the middle rows of a zero-padded buffer
``[B, T + 2*pad, C]`` (:class:`engines.torch_vits.fast_stage_a.FastStageA` keeps the duration
predictor's stream there), so every tap reads inside the buffer.

:func:`spline_inverse` is :func:`engines.torch_vits.fast_stage_a.spline_inverse` (softmax of the
bin widths and heights, their running sums, the bin search, the knots' gather and the quadratic's
root) followed by the mask, per element in one pass instead of some forty small kernels a flow.

What it does not know: the model, text, which layer it runs. It needs Triton and CUDA tensors (or
``TRITON_INTERPRET=1`` and CPU tensors, which is how the tests run it).
"""

from __future__ import annotations

import torch

from engines.torch_vits.launch import KernelLaunch, launch, pow2

#: time rows per program (a [BLOCK_T, C rounded up to a power of two] float32 tile), warps
BLOCK = (32, 4)


def _kernel():
    """The jitted kernel, imported on first use (see :mod:`engines.torch_vits.fused_conv`)."""
    from engines.torch_vits._dds_kernel import sepconv_ln_gelu_kernel

    return sepconv_ln_gelu_kernel


def sepconv_ln_gelu(buf: torch.Tensor, pad: int, dilation: int, taps_kc: torch.Tensor, bias: torch.Tensor,
                    ln: tuple, out: torch.Tensor | None = None, block: tuple | None = None) -> torch.Tensor:
    """``gelu(layer_norm(bias + sum_j x[t + (j - K//2) * dilation] * taps_kc[j]))`` for ``x`` the middle
    ``T`` rows of ``buf`` ``[B, T + 2*pad, C]`` (rows ``pad .. pad + T - 1``; unit column stride), as a
    float32 ``[B, T, C]`` tensor (``out``, or new). ``taps_kc``: ``[K, C]`` contiguous (tap ``j`` of every
    channel), ``K`` odd, ``pad >= (K // 2) * dilation``; ``ln``: ``(gamma, beta, eps)``."""
    b, rows, c = buf.shape
    k = taps_kc.shape[0]
    t = rows - 2 * pad
    if buf.stride(2) != 1 or k % 2 == 0 or tuple(taps_kc.shape) != (k, c) or not taps_kc.is_contiguous() \
            or t < 1 or pad < (k // 2) * dilation:
        raise ValueError(f"sepconv_ln_gelu: buffer {tuple(buf.shape)} (pad {pad}, unit column stride), taps "
                         f"{tuple(taps_kc.shape)} (contiguous [K, C], K odd) and dilation {dilation} do not fit")
    if out is None:
        out = torch.empty(b, t, c, device=buf.device, dtype=torch.float32)
    if tuple(out.shape) != (b, t, c) or out.stride(2) != 1:
        raise ValueError(f"sepconv_ln_gelu: out must be a [B, T, C] view with unit column stride, not "
                         f"{tuple(out.shape)}")
    gamma, beta, eps = ln
    cp = pow2(c)
    bt, warps = block or BLOCK
    launch(KernelLaunch(_kernel(), (-(-t // bt), b), (
        buf, taps_kc, bias, gamma, beta, out, t, int(pad), int(dilation), float(eps),
        buf.stride(0), buf.stride(1), out.stride(0), out.stride(1)),
        dict(C=c, CP=cp, K=k, BLOCK_T=bt, num_warps=warps)))
    return out


def sepconv_ln_gelu_reference(buf, pad, dilation, taps_kc, bias, ln):
    """What :func:`sepconv_ln_gelu` computes, as the PyTorch operations it replaces."""
    k = taps_kc.shape[0]
    t = buf.shape[1] - 2 * pad
    half = k // 2
    y = bias.float() + sum(buf[:, pad + (j - half) * dilation: pad + (j - half) * dilation + t].float() * taps_kc[j]
                           for j in range(k))
    g, be, eps = ln
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(y, (y.shape[-1],), g, be, eps))


#: time rows per program of :func:`spline_inverse`, warps
SPLINE_BLOCK = (64, 4)


def spline_inverse(x: torch.Tensor, st: torch.Tensor, lengths: torch.Tensor, num_bins: int, tail_bound: float,
                   min_w: float = 1e-3, min_h: float = 1e-3, min_d: float = 1e-3,
                   block: tuple | None = None) -> torch.Tensor:
    """:func:`engines.torch_vits.fast_stage_a.spline_inverse` of ``x`` ``[B, T]`` (any strides) with the
    unnormalized widths, heights and inner derivatives side by side in ``st`` ``[B, T, 3*num_bins - 1]``
    (unit last stride), times the mask of ``lengths``: a new float32 ``[B, T]`` tensor."""
    b, t = x.shape
    if min_w != min_h:  # pragma: no cover - VITS uses one minimum for both
        raise ValueError("widths and heights are normalized together; they need the same minimum")
    if tuple(st.shape) != (b, t, 3 * num_bins - 1) or st.stride(2) != 1:
        raise ValueError(f"spline_inverse: st must be [B, T, {3 * num_bins - 1}] with unit last stride, not "
                         f"{tuple(st.shape)}")
    from engines.torch_vits._dds_kernel import spline_inverse_kernel

    out = torch.empty(b, t, device=x.device, dtype=torch.float32)
    bt, warps = block or SPLINE_BLOCK
    launch(KernelLaunch(spline_inverse_kernel, (-(-t // bt), b), (
        x, st, lengths, out, t, x.stride(0), x.stride(1), st.stride(0), st.stride(1), float(tail_bound),
        float(min_w), float(min_d)), dict(NB=num_bins, KP=pow2(num_bins), BLOCK_T=bt,
                                          num_warps=warps)))
    return out
