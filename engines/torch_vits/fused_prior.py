"""Stage B's input as one Triton kernel: the prior expanded to frames and sampled, in the flow's layout.

Stage B of a chunk starts from ``z_p = m + eps * exp(logs) * noise_scale``, where ``m`` and
``logs`` are stage A's prior ``m_p``, ``logs_p`` (``[B, C, T]`` per phoneme) repeated along a
frame axis by the durations (:meth:`~engines.torch_vits.model.VitsSynthesizer.expand_prior`).
As PyTorch operations that is a gather of the chunk's rows from the batch tensors, a running
sum, a search, two gathers, masks, the noise rows' gather, padding, ``exp``, two products, a sum,
padding rows, and the flow's transpose to ``[B, T, C]``: some fifteen kernels a chunk.
:func:`sample_prior` writes ``z_p`` directly as ``[rows, frames, C]`` float32 (the layout the
fused flow works in), one program per block of frames of one row: it sums the item's durations
itself, finds each frame's phoneme by counting the phonemes that end at or before it (at most a
few hundred per item), and gathers the prior and the noise.

The values are those of the PyTorch operations (the same float32 products in the same order;
``exp`` may differ in the last bit). Frames past an item's total duration take ``m = logs = 0``,
as :meth:`expand_prior` gives them (their ``z`` is noise, which the flow masks). What it does
not know: the model, text, how rows were chunked. It needs Triton and CUDA tensors (or
``TRITON_INTERPRET=1`` and CPU tensors, which is how the tests run it).
"""

from __future__ import annotations

import torch

from engines.torch_vits.launch import KernelLaunch, launch, pow2

#: frames per program (GPU; the tests use the same)
BLOCK_F = 32
#: the phoneme axis is read as a power of two of at least this many (one compiled variant for all short batches)
MIN_WIDTH = 16


def _kernel():
    from engines.torch_vits._prior_kernel import sample_prior_kernel

    return sample_prior_kernel


def sample_prior(m_p: torch.Tensor, logs_p: torch.Tensor, durations: torch.Tensor, items: torch.Tensor,
                 frames: int, rows: int, eps: torch.Tensor | None = None, eps_rows: torch.Tensor | None = None,
                 noise_scale: float = 0.0) -> torch.Tensor:
    """``z_p`` of a chunk, ``[rows, frames, C]`` float32: row ``r < len(items)`` is batch item
    ``items[r]`` (``m_p``, ``logs_p``: ``[B, C, T]``; ``durations``: ``[B, T]`` whole frames as
    float32) expanded to ``frames`` frames, plus ``eps[eps_rows[r]] * exp(logs) * noise_scale``
    when ``eps`` (``[*, C, F']``, zero past its ``F'`` frames) is given; rows past ``len(items)``
    are 0 (padding rows)."""
    b, c, t = m_p.shape
    n = int(items.shape[0])
    if (m_p.dtype != torch.float32 or logs_p.shape != m_p.shape or logs_p.stride() != m_p.stride()
            or m_p.stride(2) != 1 or durations.shape != (b, t) or durations.stride(1) != 1
            or durations.dtype != torch.float32):
        raise ValueError(f"sample_prior needs float32 [B, C, T] m_p and logs_p (unit time stride, same strides) "
                         f"and float32 [B, T] durations; got {tuple(m_p.shape)} {m_p.dtype}, "
                         f"{tuple(durations.shape)} {durations.dtype}")
    if n > rows or frames < 1:
        raise ValueError(f"cannot write {n} items into {rows} rows of {frames} frames")
    noise = eps is not None and noise_scale != 0.0
    if noise and (eps_rows is None or eps_rows.shape[0] != n or eps.shape[1] != c or eps.stride(2) != 1):
        raise ValueError("eps must be [*, C, frames] with unit time stride, with one eps row per item")
    out = torch.empty(rows, frames, c, device=m_p.device, dtype=torch.float32)
    e = eps if noise else m_p
    launch(KernelLaunch(
        _kernel(), (-(-frames // BLOCK_F), rows),
        (m_p, logs_p, durations, items, e, eps_rows if noise else items, out,
         n, frames, t, e.shape[2], float(noise_scale),
         m_p.stride(0), m_p.stride(1), durations.stride(0), e.stride(0), e.stride(1)),
        dict(C=c, CP=pow2(c), TP=pow2(t, MIN_WIDTH), NOISE=noise, BLOCK_F=BLOCK_F, num_warps=4),
    ))
    return out


def sample_prior_reference(m_p, logs_p, durations, items, frames: int, rows: int, eps=None, eps_rows=None,
                           noise_scale: float = 0.0) -> torch.Tensor:
    """What :func:`sample_prior` computes, as the PyTorch operations it replaces."""
    from engines.torch_vits.model import VitsSynthesizer

    items = items.long()
    m, logs = VitsSynthesizer.expand_prior(m_p[items], logs_p[items], durations[items], frames)
    if eps is not None and noise_scale != 0.0:
        e = eps[eps_rows.long()]
        e = torch.nn.functional.pad(e, (0, frames - e.shape[-1])) if e.shape[-1] < frames else e[..., :frames]
        m = m + e * torch.exp(logs) * noise_scale
    out = m.new_zeros(rows, frames, m.shape[1])
    out[:len(items)] = m.transpose(1, 2)
    return out
