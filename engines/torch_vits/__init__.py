"""A PyTorch port of the Piper VITS inference graph, batched and split in two stages.

* Stage A (phoneme axis): text encoder + stochastic duration predictor (reverse)
  -> per-phoneme prior statistics ``m_p``, ``logs_p`` and integer durations.
* Alignment: durations -> frame lengths and the prior expanded onto frames.
* Stage B (frame axis): residual-coupling flow (reverse) + HiFi-GAN generator.

Stage B's shapes depend on the data (frame counts), so the engine buckets it
by frame count. Submodules import torch; this package file does not, so
:mod:`engines.torch_vits.hparams` can be used on hosts without torch.
"""

from __future__ import annotations

__all__ = ["VitsHParams", "hparams_from_state_dict"]

from engines.torch_vits.hparams import VitsHParams, hparams_from_state_dict
