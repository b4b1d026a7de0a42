"""The batched VITS synthesizer, split in the two stages the engine runs separately.

``stage_a`` (phoneme axis, always float32 so durations do not depend on the
precision of stage B)::

    ids [B,T], lengths [B], dp_noise [B,2,T]*noise_w, length_scale
      -> m_p, logs_p [B,C,T], durations [B,T] (integer-valued float), frames [B]

``expand_prior`` (alignment): ``durations`` -> each frame's phoneme (cumulative
path, the same as VITS' ``generate_path``) -> ``m``, ``logs`` on frames
``[B,C,F]``, zero past an item's frames.

``stage_b`` (frame axis, at the engine's precision)::

    z_p [B,C,F], frames [B] -> flow (reverse) -> generator -> audio [B, F*hop] in [-1,1],
    zero past frames*hop.

``z_p = m + eps * exp(logs) * noise_scale`` is formed between the two stages.

:meth:`VitsSynthesizer.use_fast_stage_a` switches stage A to the channels-last fast path of
:mod:`engines.torch_vits.fast_stage_a` (same weights, same function up to float32 rounding,
far fewer GPU kernels).
"""

from __future__ import annotations

import torch
from torch import nn

from engines.torch_vits.hparams import VitsHParams
from engines.torch_vits.modules import (
    Generator,
    ResidualCouplingBlock,
    StochasticDurationPredictor,
    TextEncoder,
    sequence_mask,
)


class VitsSynthesizer(nn.Module):
    def __init__(self, hp: VitsHParams):
        super().__init__()
        self.hp = hp
        self.enc_p = TextEncoder(hp)
        self.dp = StochasticDurationPredictor(hp)
        self.flow = ResidualCouplingBlock(hp)
        self.dec = Generator(hp)
        self._fast_a = None  # FastStageA (packed weights) while the fast stage A is on
        self._tiles = None  # its kernels' tiles when chosen by the caller (None: the device's)

    def use_fast_stage_a(self, on: bool = True, kernels: bool | None = None, tiles=None) -> "VitsSynthesizer":
        """Run :meth:`stage_a` through :class:`~engines.torch_vits.fast_stage_a.FastStageA` (channels-last
        ``[B, T, C]``, GEMMs, float32). With ``kernels`` its GEMMs run through the Triton kernel of
        :mod:`engines.torch_vits.fused_gemm` (tensor cores, near fp32) instead of cuBLAS; None keeps the
        current choice (off at first). ``tiles``: the kernels' :class:`~engines.torch_vits.tiles.StageATiles`
        (None keeps the current choice; at first, the device's from :func:`~engines.torch_vits.tiles.tiles_for`).
        Its packed weight matrices follow later device/dtype moves (``.to``) and :meth:`load_weights`; the
        parameters and state dict are unchanged."""
        from engines.torch_vits.fast_stage_a import FastStageA

        if kernels is None:
            kernels = self.stage_a_kernels
        if tiles is not None:
            self._tiles = tiles
        with torch.no_grad():
            self._fast_a = FastStageA(self, kernels=kernels, tiles=getattr(self, "_tiles", None)) if on else None
        return self

    @property
    def stage_a_kernels(self) -> bool:
        """Whether the fast stage A's GEMMs run through the Triton kernel."""
        return self._fast_a is not None and self._fast_a.kernels

    @property
    def stage_a_precision(self) -> str | None:
        """The Triton GEMM kernel's precision in stage A (None when it is not used)."""
        return self._fast_a.precision if self._fast_a is not None else None

    @property
    def fast_stage_a(self) -> bool:
        return self._fast_a is not None

    @property
    def packed_stage_a(self):
        """The :class:`~engines.torch_vits.fast_stage_a.FastStageA` holding the packed weights (None on the
        channel-first path): a new object after every re-pack (device/dtype move, weight load, kernel
        switch), so a CUDA graph captured with the old one reads stale memory and must be dropped."""
        return self._fast_a

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        if getattr(self, "_fast_a", None) is not None:
            self.use_fast_stage_a(True)  # re-pack on the new device/dtype
        return out

    @property
    def hop_length(self) -> int:
        return self.hp.hop_length

    def load_weights(self, state: dict) -> None:
        """Load a state dict of tensors; the unused first duration ConvFlow may be absent."""
        own = self.state_dict()
        missing = [k for k in own if k not in state and not k.startswith("dp.flows.1.")]
        unexpected = [k for k in state if k not in own]
        if missing or unexpected:
            raise KeyError(f"weights do not fit the model: missing {missing[:4]}, unexpected {unexpected[:4]}")
        for k, v in state.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise KeyError(f"weight {k} has shape {tuple(v.shape)}, model expects {tuple(own[k].shape)}")
        self.load_state_dict(state, strict=False)
        if self._fast_a is not None:
            self.use_fast_stage_a(True)

    # ------------------------------------------------------------------ stage A
    def stage_a(self, ids: torch.Tensor, lengths: torch.Tensor, dp_noise: torch.Tensor, length_scale: float):
        if self._fast_a is not None:
            return self._fast_a(ids, lengths, dp_noise, length_scale)
        t = ids.shape[1]
        mask = sequence_mask(lengths, t).unsqueeze(1).to(dp_noise.dtype)  # [b, 1, t]
        x, m_p, logs_p = self.enc_p(ids, mask)
        logw = self.dp.reverse(x, mask, dp_noise * mask)
        if torch.is_tensor(length_scale) and length_scale.dim() == 1:  # one per row
            length_scale = length_scale[:, None, None]
        w = torch.exp(logw) * mask * length_scale
        durations = torch.ceil(w)[:, 0]  # [b, t]
        frames = torch.clamp_min(durations.sum(dim=1), 1).long()
        return m_p, logs_p, durations, frames

    # ------------------------------------------------------------------ alignment
    @staticmethod
    def expand_prior(m_p: torch.Tensor, logs_p: torch.Tensor, durations: torch.Tensor, n_frames: int):
        """Repeat each phoneme's prior ``duration`` times along a frame axis of length ``n_frames``."""
        b, c, t = m_p.shape
        ends = torch.cumsum(durations, dim=1)  # [b, t]: first frame after phoneme i
        frame = torch.arange(n_frames, device=m_p.device, dtype=ends.dtype)
        # phoneme of frame j = number of phonemes that end at or before j
        idx = torch.searchsorted(ends.contiguous(), frame.expand(b, n_frames).contiguous(), right=True)
        valid = (idx < t).to(m_p.dtype).unsqueeze(1)
        idx = idx.clamp(max=t - 1).unsqueeze(1).expand(b, c, n_frames)
        m = torch.gather(m_p, 2, idx) * valid
        logs = torch.gather(logs_p, 2, idx) * valid
        return m, logs

    # ------------------------------------------------------------------ stage B
    def stage_b(self, z_p: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        mask = sequence_mask(frames, z_p.shape[-1]).unsqueeze(1).to(z_p.dtype)
        z = self.flow.reverse(z_p, mask)
        return self.dec(z * mask, frames)

    # ------------------------------------------------------------------ whole model (reference path)
    def forward(self, ids, lengths, noise_scale: float = 0.667, length_scale: float = 1.0, noise_w: float = 0.8,
                generator: torch.Generator | None = None):
        """Unbucketed whole-model inference in the module's dtype: float audio ``[B, max_frames*hop]`` and frames."""
        dtype = next(self.parameters()).dtype
        b, t = ids.shape
        dp_noise = torch.randn(b, 2, t, generator=generator, device=ids.device, dtype=dtype) * noise_w
        m_p, logs_p, durations, frames = self.stage_a(ids, lengths, dp_noise, length_scale)
        n = int(frames.max())
        m, logs = self.expand_prior(m_p, logs_p, durations, n)
        eps = torch.randn(m.shape, generator=generator, device=ids.device, dtype=dtype)
        z_p = m + eps * torch.exp(logs) * noise_scale
        return self.stage_b(z_p, frames), frames
