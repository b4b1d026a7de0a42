"""Reduced precision of the torch engine against its fp32 output, on CPU (issue 4's quality gate).

fp16 arithmetic on CPU (``allow_cpu_half``) uses the same precision layout as on the GPU (stage A
fp32, flow fp32 stream with half dilated convolutions, decoder half), so its error is a fair
stand-in for the GPU's; the GPU figures are in docs/PERFORMANCE.md. Targets: SNR >= 42.5 dB and
MCD <= 1.2 dB (definition: engines/tools/audio_quality.py).
"""

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("piper", reason="piper-tts is needed to phonemize the test sentences")

from engines import EngineSpec  # noqa: E402
from engines.tools.audio_quality import mcd, snr_db  # noqa: E402
from engines.base import Scales, SynthesisBatch  # noqa: E402

SENTENCES = [
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do.",
    "So she was considering in her own mind whether the pleasure of making a daisy-chain would be worth the trouble.",
    "There was nothing so very remarkable in that.",
]


# the FP16 and FP32 engines run eagerly on this machine's CPU: 280 s on the idle 2-core development machine on
# 2026-12-07, 310 s inside a full CI run there (over the 300 s default), so the hang guard is set wider here
@pytest.mark.timeout(900)
def test_fp16_meets_the_quality_targets_against_fp32(voice):
    from piper import PiperVoice

    from engines.torch_engine import TorchEngine

    pv = PiperVoice.load(str(voice.model_path))
    ids = [pv.phonemes_to_ids(pv.phonemize(s)[0]) for s in SENTENCES]
    batch = SynthesisBatch.from_sequences(ids, Scales(0.667, 1.0, 0.8), seed=7)
    ref = TorchEngine(voice, EngineSpec(name="torch", precision="fp32", device="cpu", threads=2)).synthesize(batch)
    half = TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device="cpu", threads=2),
                       allow_cpu_half=True).synthesize(batch)
    # stage A runs in fp32 at every precision: same durations, same noise, sample-by-sample comparable
    assert np.array_equal(ref.sample_lengths, half.sample_lengths)
    snrs = [snr_db(ref.item(i), half.item(i)) for i in range(len(ids))]
    mcds = [mcd(ref.item(i), half.item(i)) for i in range(len(ids))]
    assert np.mean(snrs) >= 42.5, snrs
    assert np.mean(mcds) <= 1.2, mcds
    assert not np.any(np.abs(half.audio) >= 32767), "no clipping"
