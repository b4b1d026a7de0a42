"""Fused residual-block convolution of the HiFi-GAN decoder, as a Triton kernel.

The decoder's resblocks are chains of ``x -> residual + conv(leaky_relu(x) * mask)`` on
32 to 128 channels. Run as separate PyTorch operations (activation, mask multiply,
cuDNN convolution, bias, residual addition, the average of the resblocks), each
element crosses memory six or seven times, and cuDNN's kernels for these small
channel counts are slow (the tile table in docs/PERFORMANCE.md). This module
does one pass per convolution: a program loads a ``[BLOCK_T, C]`` tile of the input
for each of the ``K`` taps, applies leaky ReLU and the time mask while loading,
multiplies it by the tap's ``[C, C]`` weight on the tensor cores (``tl.dot``) and
adds bias, residual and (for the last convolution of a resblock) the running sum of
the resblocks before one store.

Layout: activations are ``[B, T, C]`` contiguous, which is the memory of the
decoder's channels-last ``[B, C, 1, T]`` tensors, so no copy is needed to switch
between this kernel and cuDNN's NHWC convolutions.

Two more kernels serve the rest of the fused decoder: :func:`upsample` (the transposed
convolutions, as ``stride`` two-tap convolutions, one per output phase, in one pass) and
:func:`postconv_pcm` (the last convolution, tanh, mask and int16 conversion in one pass).

What it does not know: where the weights came from, the model, or text. It needs
Triton and a CUDA tensor (or ``TRITON_INTERPRET=1`` and CPU tensors, which is how
the tests run it without a GPU); :func:`available` says whether it can run.
"""

from __future__ import annotations

import importlib.util

import torch

from engines.torch_vits.launch import KernelLaunch, launch

#: Channel counts the kernel is used for (``tl.dot`` needs at least 16 and ``tl.arange`` a power of
#: two; 32-128 ran on a GPU, 16 only under the interpreter; wider layers fall back to cuDNN).
SUPPORTED_CHANNELS = (16, 32, 64, 128)


#: the resblock kernel's leaky ReLU in float16 when its input is float16 (no float32 round trip);
#: False computes it in float32
HALF_ACTIVATION = True


def supports(channels: int, kernel_size: int) -> bool:
    """Whether a ``channels -> channels`` convolution of this (odd) kernel size can run fused."""
    return channels in SUPPORTED_CHANNELS and kernel_size % 2 == 1


def available() -> bool:
    """True when Triton is importable (a CUDA device, or the interpreter, is still needed to run)."""
    return importlib.util.find_spec("triton") is not None


def _block_config(channels: int, kernel_size: int = 3) -> tuple[int, int]:
    """(time positions per program, warps) for a channel count and kernel size: an fp32 accumulator
    of ``BLOCK_T x C`` lives in registers: 128 x 4 warps for up to 64 channels, 64 x 4 for 128
    channels (the fastest of the tiles tried, docs/PERFORMANCE.md; ``bench/fused_conv_tune.py``
    re-measures them). ``kernel_size`` is accepted for tuning by kernel size; the default does not use it."""
    return (128, 4) if channels <= 64 else (64, 4)


def _kernel():
    """The jitted kernel, imported on first use. Triton is not imported before: it reads
    ``TRITON_INTERPRET`` when it is first imported, so a process (a test) can still choose
    the interpreter after importing this module."""
    from engines.torch_vits._resconv_kernel import resconv_kernel

    return resconv_kernel


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A Conv1d weight ``[C_out, C_in, K]`` as the kernel reads it: ``[K, C_in, C_out]`` contiguous."""
    return weight.detach().permute(2, 1, 0).contiguous()


def resconv(x: torch.Tensor, w_kio: torch.Tensor, bias: torch.Tensor, lengths: torch.Tensor, len_scale: int,
            dilation: int, *, residual: torch.Tensor | None = None, accumulate: torch.Tensor | None = None,
            out_scale: float = 1.0, slope: float = 0.1, post_slope: float | None = None,
            out: torch.Tensor | None = None, block: tuple[int, int] | None = None,
            num_stages: int | None = None) -> torch.Tensor:
    """``out = (conv(leaky_relu(x) * mask) + bias + residual + accumulate) * out_scale * mask`` on ``[B, T, C]``.

    With ``post_slope``, ``out = leaky_relu(out, post_slope) * mask`` instead: the input of the next
    layer, when the sum itself is not needed (the last convolution of a decoder stage).
    The output is zero past each item's length; a tile of ``block`` positions wholly past it
    stores zeros without reading anything (a chunk's padded tails and padding rows cost a write).
    In float16 the leaky ReLU is computed in float16 (``max(x, x * slope)``, the slope rounded to
    float16: a relative change of 2.4e-4 on negative inputs for 0.1); in other dtypes in float32.

    ``mask`` keeps time positions ``< lengths[b] * len_scale`` (the convolution's zero
    padding and the item's padded tail read as 0). The convolution has odd kernel size
    ``K`` (from ``w_kio``), stride 1, the given dilation and "same" padding.
    ``out`` may be ``accumulate`` (each element is read before it is written) but not ``x``.
    ``block``: (time positions per program, warps), for tuning; default :func:`_block_config`.
    ``num_stages``: passed to the launch when given (for tuning); ``None`` leaves Triton's default.
    """
    b, t, c = x.shape
    k = w_kio.shape[0]
    if not x.is_contiguous() or tuple(w_kio.shape) != (k, c, c) or k % 2 == 0:
        raise ValueError(f"resconv needs a contiguous [B, T, C] input and a [K, C, C] weight with odd K; "
                         f"got {tuple(x.shape)} and {tuple(w_kio.shape)}")
    if out is None:
        out = torch.empty_like(x)
    block_t, warps = block or _block_config(c, k)
    grid = (-(-t // block_t), b)
    dummy = x  # never read when the flag is off
    launch(KernelLaunch(
        _kernel(), grid,
        (x, w_kio, bias, residual if residual is not None else dummy, accumulate if accumulate is not None else dummy,
         out, lengths, t, int(len_scale), int(dilation), float(out_scale), float(slope),
         float(post_slope if post_slope is not None else 0.0)),
        dict(C=c, K=k, BLOCK_T=block_t, HAS_RES=residual is not None, HAS_ACC=accumulate is not None,
             HAS_POST=post_slope is not None, ACT16=x.dtype == torch.float16 and HALF_ACTIVATION, num_warps=warps,
             **({} if num_stages is None else {"num_stages": int(num_stages)})),
    ))
    return out


def pack_post_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bias-free ``[1, C, K]`` Conv1d weight as :func:`postconv_pcm` reads it: ``[K, C]`` contiguous."""
    return weight.detach()[0].t().contiguous()


def postconv_pcm(x: torch.Tensor, w_kc: torch.Tensor, lengths: torch.Tensor, len_scale: int,
                 max_value: float, block_t: int = 128) -> torch.Tensor:
    """int16 ``[B, T]`` = ``clamp(tanh(conv(x)) * mask * max_value)`` for ``x`` ``[B, T, C]`` contiguous,
    already activated and masked, and a bias-free C -> 1 convolution (weight from
    :func:`pack_post_weight`, odd ``K``, 'same' padding): the decoder's last layer and the
    conversion to PCM in one pass. Rounded to the input's dtype where the PyTorch path rounds."""
    b, t, c = x.shape
    k = w_kc.shape[0]
    if not x.is_contiguous() or tuple(w_kc.shape) != (k, c) or k % 2 == 0:
        raise ValueError(f"postconv_pcm needs a contiguous [B, T, C] input and a [K, C] weight with odd K; "
                         f"got {tuple(x.shape)} and {tuple(w_kc.shape)}")
    from engines.torch_vits._resconv_kernel import postconv_pcm_kernel

    out = torch.empty(b, t, dtype=torch.int16, device=x.device)
    launch(KernelLaunch(postconv_pcm_kernel, (-(-t // block_t), b), (x, w_kc, out, lengths, t, int(len_scale),
                                                                     float(max_value)),
                        dict(C=c, K=k, BLOCK_T=block_t, num_warps=4)))
    return out


def upsample_supported(c_in: int, c_out: int, kernel_size: int, stride: int, padding: int) -> bool:
    """Whether a ConvTranspose1d fits :func:`upsample`: kernel ``2 * stride``, padding ``stride // 2``
    (HiFi-GAN's), 16-256 input and 16-128 output channels, powers of two."""
    return (kernel_size == 2 * stride and padding == stride // 2 and c_in in SUPPORTED_CHANNELS + (256,)
            and c_out in SUPPORTED_CHANNELS)


def _upsample_block(c_in: int) -> int:
    """Input positions per program of :func:`upsample` (4 warps; all output phases of a position in one
    program): fewer for the 256-channel first layer, whose input tiles are twice as wide."""
    return 32 if c_in > 128 else 64


def pack_up_weight(weight: torch.Tensor) -> torch.Tensor:
    """A ConvTranspose1d weight ``[C_in, C_out, K]`` as :func:`upsample` reads it: ``[K, C_in, C_out]``."""
    return weight.detach().permute(2, 0, 1).contiguous()


def upsample(x: torch.Tensor, w_kio: torch.Tensor, bias: torch.Tensor, stride: int, padding: int,
             lengths: torch.Tensor | None = None, len_scale: int = 1) -> torch.Tensor:
    """ConvTranspose1d (kernel ``2 * stride``, the given padding) on ``[B, T, C_in]`` contiguous ->
    ``[B, T * stride, C_out]``, as ``stride`` two-tap convolutions (one per output phase) in one pass.
    With ``lengths``, outputs at or past ``lengths[b] * len_scale`` (output positions) are zero, and
    tiles wholly past it do no arithmetic."""
    b, t, ci = x.shape
    k, ci2, co = w_kio.shape
    if not x.is_contiguous() or ci2 != ci or k != 2 * stride:
        raise ValueError(f"upsample needs a contiguous [B, T, C_in] input and a [2*stride, C_in, C_out] weight; "
                         f"got {tuple(x.shape)} and {tuple(w_kio.shape)}")
    from engines.torch_vits._resconv_kernel import upsample_kernel

    out = torch.empty(b, t * stride, co, dtype=x.dtype, device=x.device)
    block_t = _upsample_block(ci)
    launch(KernelLaunch(upsample_kernel, (-(-(t + 1) // block_t), b),
                        (x, w_kio, bias, out, lengths if lengths is not None else x, t, int(padding), int(len_scale)),
                        dict(CI=ci, CO=co, U=int(stride), BLOCK_T=block_t, HAS_LEN=lengths is not None, num_warps=4)))
    return out


def resconv_reference(x, weight, bias, lengths, len_scale, dilation, *, residual=None, accumulate=None,
                      out_scale=1.0, slope=0.1, post_slope=None):
    """What :func:`resconv` computes, in plain PyTorch (``weight`` in Conv1d layout ``[C_out, C_in, K]``),
    with the leaky ReLU in float32 (zero past each item's length, as the kernel)."""
    b, t, c = x.shape
    k = weight.shape[-1]
    mask = (torch.arange(t, device=x.device)[None, :] < (lengths.long() * len_scale)[:, None]).to(x.dtype)
    h = torch.nn.functional.leaky_relu(x, slope) * mask[:, :, None]
    y = torch.nn.functional.conv1d(h.transpose(1, 2).float(), weight.float(), bias.float(),
                                   padding=dilation * (k - 1) // 2, dilation=dilation).transpose(1, 2)
    if residual is not None:
        y = y + residual.float()
    if accumulate is not None:
        y = y + accumulate.float()
    y = y * out_scale
    if post_slope is not None:
        y = torch.nn.functional.leaky_relu(y, post_slope)
    return (y * mask[:, :, None]).to(x.dtype)
