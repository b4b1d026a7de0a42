"""ONNX Runtime on CPU running the two exported stages (:mod:`engines.tools.export`): fp32, fp16 or int8.

``python cli.py run BOOK --engine onnx --precision int8`` lands here. Nothing has to be prepared:
the voice's staged graphs and its INT8 stage B live in the cache (``$BOOKTTS_CACHE`` or
``~/.cache/booktts/<voice model sha256>/``) and are created there on first use (export from
the PyTorch port, then calibration on the corpus shipped in ``data/calibration/``), with a
message on stderr saying so.

A batch runs as: stage A on the whole batch (float32: durations never depend on the
precision) -> the frame counts -> items sorted by frames and cut into micro-batches ->
the prior on frames plus noise (numpy) -> stage B at the engine's precision -> int16 PCM.

Noise: one ``numpy.random.default_rng(SynthesisBatch.seed)`` per batch (a fresh seed when it is
None) draws ``dp_noise`` [B, 2, T] then ``eps`` [B, C, max frames], so item i's noise does not
depend on the micro-batching, and the same batch and seed give the same audio.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from engines.spec import EngineSpec
from engines.base import EngineInfo, SynthesisBatch, SynthesisResult, float_to_int16
from engines.onnx_cpu import map_ort_error
from engines.tools.export import STAGE_A_INPUTS, STAGE_B_INPUTS, ensure_exported, ort_session, prior_on_frames
from core.errors import EngineUnavailable

PRECISIONS = ("fp32", "fp16", "int8")
#: Items of stage B run at once on CPU (as :data:`engines.onnx_cpu.CPU_MICRO_BATCH`: larger CPU
#: batches of these convolutions only add padding).
CPU_MICRO_BATCH = 2


class OnnxStagedEngine:
    """The exported stages in ONNX Runtime on CPU. Text-blind; implements :class:`engines.base.Engine`."""

    def __init__(self, voice, spec: EngineSpec | None = None, *, cache_dir: Path | None = None,
                 micro_batch: int = CPU_MICRO_BATCH, calibration=None) -> None:
        spec = spec or EngineSpec(precision="int8")
        if spec.device != "cpu":
            raise EngineUnavailable(f"the onnx engine runs on cpu only (asked for {spec.device}); "
                                    "use --engine tensorrt or --engine torch for GPUs")
        if spec.precision not in PRECISIONS:
            raise EngineUnavailable(f"the staged onnx engine has no {spec.precision} mode; use fp32, fp16 or int8")
        t0 = time.perf_counter()
        self.voice = voice
        self.spec = spec
        self.micro_batch = max(1, int(micro_batch))
        precisions = ("fp32", "fp16") if spec.precision == "fp16" else ("fp32",)
        staged = ensure_exported(voice, precisions, cache_dir)
        extra: dict = {"staged": True, "cache": str(staged.directory)}
        if spec.precision == "int8":
            from engines.tools.quantize import ensure_int8, read_report

            # calibration: the caller's CalibrationSource, for a model not made yet
            path = ensure_int8(voice, staged.directory, calibration, threads=spec.threads)
            rep = read_report(path)
            extra.update(int8_sites=rep.get("int8_sites"), int8_mac_share=rep.get("int8_mac_share"))
        else:
            path = staged.stage_b[spec.precision]
        hp = staged.meta.get("hparams", {})
        self.n_vocab = int(hp.get("n_vocab", 1 << 30))
        self.channels = int(hp.get("inter_channels", 192))
        self.hop_length = int(staged.meta.get("hop_length", voice.hop_length))
        self.stage_a = ort_session(staged.stage_a, spec.threads)
        self.stage_b = ort_session(Path(path), spec.threads)
        self.stage_b_path = Path(path)
        self.load_s = time.perf_counter() - t0
        extra.update(stage_b=Path(path).name, threads=spec.threads or 0, load_s=round(self.load_s, 2))
        self.info = EngineInfo("onnx", spec.precision, "cpu", voice.sample_rate, spec.max_batch, extra)

    # ------------------------------------------------------------------ synthesis
    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        batch.validate(self.n_vocab)
        t0 = time.perf_counter()
        try:
            audio, lengths, durations = self._synthesize(batch)
        except Exception as exc:
            raise map_ort_error(exc, f"a batch of {len(batch)} (staged, {self.info.precision})") from exc
        return SynthesisResult(audio, lengths, (time.perf_counter() - t0) * 1000.0, durations=durations)

    def _synthesize(self, batch: SynthesisBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sc = batch.scales
        seed = batch.seed if batch.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        rng = np.random.default_rng(int(seed))
        b, t = batch.phoneme_ids.shape
        dp_noise = rng.standard_normal((b, 2, t), dtype=np.float32)
        m_p, logs_p, durations, frames = self.stage_a.run(
            None, dict(zip(STAGE_A_INPUTS, (batch.phoneme_ids, batch.lengths, sc.as_array(), dp_noise))))
        frames = frames.astype(np.int64)
        max_frames = int(frames.max())
        eps = rng.standard_normal((b, self.channels, max_frames), dtype=np.float32) if sc.noise_scale != 0 else None
        out = np.zeros((b, max_frames * self.hop_length), dtype=np.int16)
        order = np.argsort(frames, kind="stable")
        for s in range(0, b, self.micro_batch):
            rows = order[s:s + self.micro_batch]
            n = int(frames[rows].max())
            z_p = prior_on_frames(m_p[rows], logs_p[rows], durations[rows], n,
                                  None if eps is None else eps[rows], float(sc.noise_scale))
            audio, _ = self.stage_b.run(None, dict(zip(STAGE_B_INPUTS, (z_p, frames[rows]))))
            out[rows, : audio.shape[1]] = float_to_int16(audio)
        # per-phoneme durations in samples (stage A's frames x hop): the manifest's phoneme_durations_s
        return out, frames * self.hop_length, np.asarray(durations, dtype=np.float32) * self.hop_length
