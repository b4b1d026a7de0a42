"""Quality of the torch engine's fp16 and bf16 modes against its fp32 mode, on the same utterances.

    python bench/quality.py [--device cuda:0] [--weights W.safetensors] [--n 20] [--json OUT.json]

Utterances: the first ``--n`` sentences of *Alice in Wonderland* with 40..300 phoneme
ids (``bench/data/alice_ids.npz``, see ``bench/gpu_throughput.py --make-data``),
synthesized in one batch with the voice's default scales and one fixed seed. Stage A
(encoder, durations, noise draws) runs in float32 at every precision, so every
precision yields the same sample counts and the same noise: the comparison is
sample by sample, no alignment needed. Compared on the engine's int16 output.

SNR and MCD per utterance: exact definitions in ``engines/tools/audio_quality.py`` (one definition for
the project; the MCD uses a 0-8 kHz mel filterbank and c_1..c_24 over speech frames).

Also reported: ``mcd_full_band`` (the same with the filterbank up to 11025 Hz; the voice has
almost no energy above 8 kHz, and there int16 rounding alone moves the cepstrum: +-0.5 LSB
of uniform noise scores ~0.7 dB), and ``mcd_floor`` (the primary MCD of the fp32 output
against itself plus +-0.5 LSB of uniform noise: the resolution of the measure on int16 audio).

Targets (issue 4): fp16 SNR >= 42.5 dB and MCD <= 1.2 dB.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from engines.tools.audio_quality import mcd, snr_db  # noqa: E402,F401  one definition for the project


def quality_sentences(n: int = 20) -> list[list[int]]:
    from gpu_throughput import load_alice

    return [s for s in load_alice() if 40 <= len(s) <= 300][:n]


def run(device: str = "cpu", weights=None, n: int = 20, precisions=("fp16", "bf16"), seed: int = 2024,
        compiled: bool = False, plain: bool = False) -> dict:
    import torch

    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.torch_engine import TorchEngine
    from core.voice import voice_from_weights
    from core.voice import resolve_voice

    voice = voice_from_weights(weights) if weights else resolve_voice()
    seqs = quality_sentences(n)
    batch = SynthesisBatch.from_sequences(seqs, Scales(voice.noise_scale, voice.length_scale, voice.noise_w), seed=seed)

    def engine(prec, test=True):
        spec = EngineSpec(name="torch", precision=prec, device=device, max_batch=len(seqs))
        return TorchEngine(voice, spec, weights_path=weights, compile=compiled and test, warmup=False,
                           allow_cpu_half=device == "cpu", channels_last=False if plain or not test else None)

    ref = engine("fp32", test=False).synthesize(batch)  # the reference: eager fp32, plain layout
    rng = np.random.default_rng(0)
    floor = [mcd(ref.item(i), ref.item(i) + rng.uniform(-0.5, 0.5, int(ref.sample_lengths[i])))
             for i in range(len(seqs))]
    out = {"device": device if device == "cpu" else torch.cuda.get_device_name(torch.device(device)),
           "n_utterances": len(seqs), "audio_s": float(ref.sample_lengths.sum() / voice.sample_rate),
           "reference": "torch engine fp32 eager (no TF32), same batch, same seed",
           "tested": f"{'compiled' if compiled else 'eager'}{', plain NCL decoder' if plain else ', engine defaults'}",
           "mcd_floor_db": float(np.mean(floor)), "results": {}}
    for prec in precisions:
        t0 = time.perf_counter()
        try:
            eng = engine(prec)
            res = eng.synthesize(batch)
        except Exception as exc:  # a precision the host cannot run: say so and go on
            out["results"][prec] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            continue
        if not np.array_equal(res.sample_lengths, ref.sample_lengths):
            out["results"][prec] = {"error": "sample lengths differ from fp32"}
            continue
        snrs = [snr_db(ref.item(i), res.item(i)) for i in range(len(seqs))]
        mcds = [mcd(ref.item(i), res.item(i)) for i in range(len(seqs))]
        full = [mcd(ref.item(i), res.item(i), full_band=True) for i in range(len(seqs))]
        out["results"][prec] = {
            "snr_db_mean": float(np.mean(snrs)), "snr_db_min": float(np.min(snrs)),
            "snr_db_median": float(np.median(snrs)),
            "mcd_db_mean": float(np.mean(mcds)), "mcd_db_max": float(np.max(mcds)),
            "mcd_full_band_db_mean": float(np.mean(full)),
            "seconds": round(time.perf_counter() - t0, 2),
            "fused_resblocks": bool(eng.info.extra.get("fused_resblocks")),
            "channels_last": bool(eng.info.extra.get("channels_last")),
            "fused_flow": bool(eng.info.extra.get("fused_flow")),
            "fast_stage_a": bool(eng.info.extra.get("fast_stage_a")),
        }
    return out


def print_table(q: dict) -> None:
    print(f"quality of {q['tested']} vs fp32 on {q['device']}: {q['n_utterances']} utterances, {q['audio_s']:.1f} s of audio")
    print(f"MCD floor of the measure (fp32 vs fp32 + 0.5 LSB uniform noise): {q['mcd_floor_db']:.3f} dB")
    print(f"{'precision':10} {'SNR mean':>9} {'SNR min':>8} {'MCD mean':>9} {'MCD max':>8} {'MCD 0-11k':>10}"
          "  target: SNR>=42.5 dB, MCD<=1.2 dB")
    for prec, r in q["results"].items():
        if "error" in r:
            print(f"{prec:10} {r['error']}")
        else:
            print(f"{prec:10} {r['snr_db_mean']:9.2f} {r['snr_db_min']:8.2f} {r['mcd_db_mean']:9.3f} {r['mcd_db_max']:8.3f}"
                  f" {r['mcd_full_band_db_mean']:10.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0" if _cuda() else "cpu")
    ap.add_argument("--weights", default=None, help="exported .safetensors (default: the installed voice's ONNX)")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--precisions", default="fp16,bf16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile", action="store_true", help="test the compiled engines (CUDA graphs on CUDA)")
    ap.add_argument("--plain", action="store_true",
                    help="test the plain NCL decoder and flow (no Triton kernels) instead of the engine's defaults")
    ap.add_argument("--channels-last", action="store_true",
                    help="no effect: the engine's defaults (NHWC, fused kernels on CUDA) are what is tested")
    a = ap.parse_args(argv)
    q = run(a.device, a.weights, a.n, tuple(a.precisions.split(",")), compiled=a.compile, plain=a.plain)
    print_table(q)
    if a.json:
        Path(a.json).write_text(json.dumps(q, indent=2))
    return 0


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
