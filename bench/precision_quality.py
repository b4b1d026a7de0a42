"""Quality gate for every precision of the exported stages: SNR and MCD against fp32, artefacts, speed.

    python bench/precision_quality.py [--n 20] [--threads 2] [--precisions fp16,int8] [--json OUT.json]

Utterances: ``bench/quality.py``'s set (the first ``--n`` sentences of *Alice* chapter I with
40..300 phoneme ids; the INT8 calibration corpus is chapters VIII-XII, so none is shared), in
batches of ``--batch``, the voice's default scales, one seed per batch. Every precision runs the
same float32 stage A with the same noise, so lengths are equal and the comparison is sample by
sample on the engines' int16 output. Metrics are ``bench/quality.py``'s ``snr_db`` and ``mcd``
(imported, one definition for the project).

Backends: the staged ONNX Runtime engine on CPU (``engines/onnx_staged.py``: fp32 = reference,
fp16, int8; the graphs and the INT8 model come from the voice's cache, created on first use);
TensorRT fp16/int8 on the GPU where ``tensorrt`` and a GPU exist (compared with TensorRT fp32
there), else a line saying it was not run.

Artefacts, per precision, worst utterance: NaN/inf samples, share of samples at full scale
(|x| = 32767, clipping), DC offset (mean sample / 32768). INT8 targets: MCD <= 1.8 dB, no NaN,
no clipping beyond fp32's, |DC| < 1e-3.

Speed: wall time of ``synthesize`` over all batches (after one untimed pass), as x real-time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from quality import mcd, quality_sentences, snr_db  # noqa: E402  (bench/quality.py: one MCD for the project)

TARGET_MCD_INT8 = 1.8


def _batches(seqs, scales, size):
    from engines.base import SynthesisBatch

    return [SynthesisBatch.from_sequences(seqs[i:i + size], scales, seed=1000 + i) for i in range(0, len(seqs), size)]


def _run(engine, batches):
    engine.synthesize(batches[0])  # warm-up
    items = []
    t0 = time.perf_counter()
    for b in batches:
        r = engine.synthesize(b)
        items += [r.item(i).copy() for i in range(len(b))]
    return items, time.perf_counter() - t0


def _compare(ref, got, wall, sr) -> dict:
    if [len(x) for x in ref] != [len(x) for x in got]:
        return {"error": "sample lengths differ from fp32"}
    snrs = [snr_db(r, g) for r, g in zip(ref, got)]
    mcds = [mcd(r, g) for r, g in zip(ref, got)]
    x = [g.astype(np.float64) / 32768.0 for g in got]
    audio_s = sum(len(g) for g in got) / sr
    return {
        "snr_db_mean": round(float(np.mean(snrs)), 2), "snr_db_min": round(float(np.min(snrs)), 2),
        "mcd_db_mean": round(float(np.mean(mcds)), 3), "mcd_db_max": round(float(np.max(mcds)), 3),
        "nan": int(sum(int(np.sum(~np.isfinite(a))) for a in x)),
        "clipped_max": float(max(np.mean(np.abs(g) >= 32767) for g in got)),
        "dc_max": float(max(abs(a.mean()) for a in x)),
        "x_realtime": round(audio_s / wall, 2), "wall_s": round(wall, 2),
    }


def run_cpu(args, voice, seqs, scales) -> dict:
    from engines import EngineSpec
    from engines.onnx_staged import OnnxStagedEngine
    from engines.tools.quantize import read_report
    from jobs.calibration import CalibrationCorpus

    batches = _batches(seqs, scales, args.batch)
    cache = Path(args.cache) if args.cache else None
    out: dict = {"backend": "onnxruntime staged, CPU", "results": {}}
    t0 = time.perf_counter()
    ref_engine = OnnxStagedEngine(voice, EngineSpec(precision="fp32", threads=args.threads), cache_dir=cache)
    ref, wall = _run(ref_engine, batches)
    out["audio_s"] = round(sum(len(r) for r in ref) / voice.sample_rate, 1)
    out["results"]["fp32"] = {**_compare(ref, ref, wall, voice.sample_rate), "note": "reference"}
    for prec in args.precisions:
        try:
            eng = OnnxStagedEngine(voice, EngineSpec(precision=prec, threads=args.threads), cache_dir=cache,
                                   calibration=CalibrationCorpus())
            got, wall = _run(eng, batches)
        except Exception as exc:  # say which precision could not run, and go on
            out["results"][prec] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            continue
        row = _compare(ref, got, wall, voice.sample_rate)
        if prec == "int8":
            rep = read_report(eng.stage_b_path)
            row["int8"] = {k: rep.get(k) for k in ("int8_sites", "int8_mac_share", "utterances", "scan_utterances",
                                                   "target_mcd_db", "method")}
            row["int8"]["sites_total"] = len(rep.get("sites", []))
        out["results"][prec] = row
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def run_tensorrt(args, voice, seqs, scales) -> dict:
    try:
        from engines.tensorrt_engine import require_tensorrt

        require_tensorrt(args.device)
    except Exception as exc:
        return {"backend": "TensorRT", "not_run": str(exc)}
    from engines import EngineSpec
    from engines.tensorrt_engine import TensorRTEngine
    from jobs.calibration import CalibrationCorpus

    batches = _batches(seqs, scales, args.batch)
    out: dict = {"backend": "TensorRT", "results": {}}
    spec = lambda p: EngineSpec(name="tensorrt", precision=p, device=args.device, max_batch=args.batch)  # noqa: E731
    ref, wall = _run(TensorRTEngine(voice, spec("fp32")), batches)
    out["results"]["fp32"] = {**_compare(ref, ref, wall, voice.sample_rate), "note": "reference"}
    for prec in args.precisions:
        got, wall = _run(TensorRTEngine(voice, spec(prec), calibration=CalibrationCorpus()), batches)
        out["results"][prec] = _compare(ref, got, wall, voice.sample_rate)
    return out


def print_table(q: dict) -> None:
    print(f"precision quality vs fp32: {q['n_utterances']} utterances (Alice ch. I), {q['date']}, {q['host']}")
    print(f"{'backend':30} {'prec':5} {'SNR mean':>8} {'SNR min':>8} {'MCD mean':>8} {'MCD max':>8} {'NaN':>4} "
          f"{'clip':>7} {'|DC| max':>9} {'x RT':>6}")
    for sec in q["sections"]:
        if "not_run" in sec:
            print(f"{sec['backend']:30} not run: {sec['not_run']}")
            continue
        for prec, r in sec["results"].items():
            if "error" in r:
                print(f"{sec['backend']:30} {prec:5} {r['error']}")
                continue
            print(f"{sec['backend']:30} {prec:5} {r['snr_db_mean']:8.2f} {r['snr_db_min']:8.2f} {r['mcd_db_mean']:8.3f} "
                  f"{r['mcd_db_max']:8.3f} {r['nan']:4d} {r['clipped_max']:7.1e} {r['dc_max']:9.1e} {r['x_realtime']:6.2f}")
            if "int8" in r:
                i = r["int8"]
                print(f"{'':30} int8: {i['int8_sites']} of {i['sites_total']} sites, {100 * (i['int8_mac_share'] or 0):.0f}% of "
                      f"stage-B MACs; calibration {i['utterances']} utt., scan {i['scan_utterances']} utt., "
                      f"target {i['target_mcd_db']} dB ({i['method']}); gate MCD <= {TARGET_MCD_INT8} dB: "
                      f"{'met' if r['mcd_db_mean'] <= TARGET_MCD_INT8 else 'MISSED'} (mean)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--cache", default=None, help="a voice cache directory (default: the voice's own, first use builds it)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    a.precisions = [p for p in a.precisions.split(",") if p]
    from engines.base import Scales
    from core.voice import resolve_voice

    voice = resolve_voice()
    seqs = quality_sentences(a.n)
    scales = Scales(voice.noise_scale, voice.length_scale, voice.noise_w)
    q = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "host": f"{platform.machine()}, {_cpu()}",
         "n_utterances": len(seqs), "sections": [run_cpu(a, voice, seqs, scales)]}
    if not a.no_gpu:
        q["sections"].append(run_tensorrt(a, voice, seqs, scales))
    print_table(q)
    if a.json:
        Path(a.json).write_text(json.dumps(q, indent=2))
    return 0


def _cpu() -> str:
    try:
        import os

        name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "cpu")
        return f"{name}, {os.cpu_count()} cores"
    except OSError:
        return platform.processor() or "cpu"


if __name__ == "__main__":
    sys.exit(main())
