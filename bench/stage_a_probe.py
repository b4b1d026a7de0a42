"""Stage A (text encoder + duration predictor) on the GPU: time, kernel profile, and what
reduced precision does to the durations.

    python bench/stage_a_probe.py --weights carry/joe-fp16.safetensors [--json $OUT/stage_a.json]

Workload: the first ``--n`` sentences of bench/gpu_throughput.py's sample (seed 0) as one
batch, cut into the engine's stage-A chunks. For each variant: CUDA events around all
chunks (one warm-up pass, median of ``--reps``), and against true fp32 (no TF32): the share
of phonemes whose integer duration changed, the share of sentences whose frame count
changed, and the largest change in frames. Variants: ``fp32`` (the channel-first stage A,
the engine's path before the fast one), ``fp32fast`` (the channels-last fast path,
:mod:`engines.torch_vits.fast_stage_a`, true fp32: the engine's default on CUDA), ``tf32``
(channel-first; cuDNN and cuBLAS may use TF32), ``bf16``/``fp16`` (channel-first, autocast),
``fp32tc`` (the fast path with its GEMMs through :mod:`engines.torch_vits.fused_gemm`: tensor
cores, near fp32; ``fp32tc~PRECISION`` picks :data:`~engines.torch_vits.fused_gemm.PRECISION`, and
``fp32tc@M1xN1xK1xW1xS1/M2xN2xK2xW2xS2`` its plain and LayerNorm tiles).
Each row also has ``prior_max_rel``: the largest difference of ``m_p`` from fp32's, relative
to its largest value. With ``--profile``: the top CUDA kernels and the kernel count of the
fp32fast and fp32tc passes and of one stage-B chunk (torch.profiler).

    python bench/stage_a_probe.py --weights carry/joe-fp16.safetensors --variants fp32,fp32fast --profile
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv=None) -> int:
    import torch

    from engines import EngineSpec
    from engines.base import Scales
    from engines.torch_engine import TorchEngine
    from engines.torch_vits import fused_gemm
    from engines.weights import voice_from_weights
    from gpu_throughput import alice_workload

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--variants", default="fp32,fp32fast,tf32,bf16,fp16")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    voice = voice_from_weights(a.weights)
    seqs, batch = alice_workload(voice, a.n)
    sc = Scales(voice.noise_scale, voice.length_scale, voice.noise_w)
    eng = TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device=a.device, max_batch=a.n),
                      weights_path=a.weights, warmup=False, allow_cpu_half=not a.device.startswith("cuda"),
                      fast_stage_a=False)
    dev = eng.device
    m = eng.model
    ids = torch.from_numpy(batch.phoneme_ids).to(dev)
    lens = torch.from_numpy(batch.lengths).to(dev)
    b, t = ids.shape
    gen = torch.Generator(device=dev).manual_seed(0)
    noise = torch.randn(b, 2, t, generator=gen, device=dev) * float(sc.noise_w)
    chunks = [(torch.from_numpy(r.astype(np.int64)).to(dev), tc) for r, tc in eng.stage_a_chunks(batch.lengths, t)]
    cuda = dev.type == "cuda"
    out: dict = {"gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "sentences": b,
                 "phoneme_ids": int(batch.lengths.sum()), "padded_ids": int(sum(len(r) * tc for r, tc in chunks)),
                 "chunks": len(chunks), "variants": {}}
    print(f"{out['gpu']}: {b} sentences, {out['phoneme_ids']} ids ({out['padded_ids']} padded) in {len(chunks)} chunks",
          flush=True)

    default_blocks, default_precision = dict(fused_gemm.BLOCKS), fused_gemm.PRECISION
    packed = [None]

    def run(variant, prior=False):
        """Stage A over all chunks in ``variant``: durations [b, t] (and with ``prior``, m_p [b, c, t],
        outside the timed runs: its copies would add kernels)."""
        kernels = variant.startswith("fp32tc")
        fast = kernels or variant == "fp32fast"
        name, _, spec = variant.partition("@")  # fp32tc[~PRECISION][@PLAIN/LN], blocks as MxNxKxWARPSxSTAGES
        if kernels:
            fused_gemm.PRECISION = name.partition("~")[2] or default_precision
            fused_gemm.BLOCKS = dict(default_blocks) if not spec else dict(
                zip(("plain", "ln"), (tuple(int(v) for v in blk.split("x")) for blk in spec.split("/"))))
        key = (fast, kernels, fused_gemm.PRECISION if kernels else None)
        if packed[0] != key:
            m.use_fast_stage_a(fast, kernels=kernels)  # packs the weights once, outside the timed runs
            packed[0] = key
        dur = torch.zeros(b, t, device=dev)
        mp = torch.zeros(b, eng.hparams.inter_channels, t, device=dev) if prior else None
        tf32 = variant == "tf32"
        amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(variant)
        with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False,
                                                                allow_tf32=tf32):
            prev = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                for idx, tc in chunks:
                    with torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
                        mpc, _, du, _ = m.stage_a(ids[idx, :tc], lens[idx], noise[idx, :, :tc],
                                                  float(sc.length_scale))
                    dur[idx, :tc] = du.float()
                    if prior:
                        mp[idx, :, :tc] = mpc.float()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev
        return dur, mp

    variants = a.variants.split(",")
    unknown = {v for v in variants if not v.startswith("fp32tc")} - {"fp32", "fp32fast", "tf32", "bf16", "fp16"}
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}")
    ref, ref_mp = run("fp32", prior=True)  # the reference of every row's change columns (and a warm-up)
    for v in variants:
        try:
            _, mp = run(v, prior=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a tile too large for shared memory: record it, go on
            out["variants"][v] = {"error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"}
            print(f"{v:8} {out['variants'][v]}", flush=True)
            continue
        times = []
        for _ in range(a.reps):
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                dur, _ = run(v)
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            else:
                t0 = time.perf_counter()
                dur, _ = run(v)
                times.append((time.perf_counter() - t0) * 1000)
        row = {"median_ms": round(statistics.median(times), 2), "min_ms": round(min(times), 2)}
        valid = torch.arange(t, device=dev)[None, :] < lens[:, None]
        diff = (dur != ref) & valid
        fr = (dur.sum(1) - ref.sum(1)).abs()
        row.update(phonemes_changed=round(float(diff.sum()) / float(valid.sum()), 6),
                   sentences_changed=round(float((fr > 0).float().mean()), 4),
                   max_frames_changed=int(fr.max()),
                   max_duration_change=int((dur - ref).abs().max()),
                   prior_max_rel=float((mp - ref_mp).abs().max() / ref_mp.abs().max()))
        out["variants"][v] = row
        print(f"{v:8} {row}", flush=True)

    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        def top(prof, n=18):
            rows = []
            for ev in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:n]:
                rows.append({"name": ev.key[:110], "calls": ev.count, "ms": round(ev.device_time_total / 1000, 2)})
            return rows

        for v, key in (("fp32fast", "stage_a_fast_kernels"), ("fp32tc", "stage_a_tc_kernels")):
            run(v)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run(v)
                torch.cuda.synchronize()
            out[key] = top(prof)
            # every CUDA kernel of the pass (and the few copies/memsets the probe itself adds)
            out[key + "_count"] = sum(ev.count for ev in prof.key_averages() if ev.device_time_total > 0)
            out[key + "_ms"] = round(sum(ev.self_device_time_total for ev in prof.key_averages()) / 1000, 2)
        # one stage-B chunk at batch 1024's commonest shape, through the engine
        with torch.inference_mode():
            fr = torch.full((96,), 400, device=dev)
            z = torch.randn(96, eng.hparams.inter_channels, 448, device=dev)
            with eng._flags(benchmark=True):
                for _ in range(3):
                    eng._stage_b(z, fr)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    eng._stage_b(z, fr)
                    torch.cuda.synchronize()
        out["stage_b_kernels_96x448"] = top(prof, 25)
        for k in ("stage_a_fast_kernels", "stage_a_tc_kernels", "stage_b_kernels_96x448"):
            print(k, *(f"{s}: {out[k + s]}" for s in ("_count", "_ms") if k + s in out))
            for r in out[k]:
                print(f"  {r['ms']:8.2f} ms  {r['calls']:5}  {r['name']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
