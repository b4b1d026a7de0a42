"""The fused WN kernel of the flow (engines/torch_vits/fused_wn.py) on the GPU: checks, timing, block sweep.

    python bench/fused_wn_bench.py --weights carry/joe-fp16.safetensors --json $OUT/fused_wn.json
    python bench/fused_wn_bench.py --device cpu --tiny [--weights W.safetensors]   # CPU smoke run (interpreter)

Needs torch, triton, numpy, safetensors and this repository (no piper, no onnx when --weights is given).

1. **cases**: the test cases of tests/engines/fused_wn_cases.py on the device (kernel against its
   PyTorch reference for several widths, kernels, dilations, dtypes, first/middle/last layers;
   the voice's whole flow fused against plain, fp32 and fp16; tails past the lengths; an item
   padded in a batch against it alone), with the tests' tolerances.
2. **flow**: the voice's whole flow reverse (4 couplings x 4 WN layers) on ``[rows, 192, frames]``
   float32 input, item lengths uniform in [0.75, 1] x frames: the engine's current path
   (``mixed_precision_flow``: fp32 stream, fp16/bf16 ``in_layers`` through cuDNN, autotuned,
   no TF32) against ``use_fused()``. CUDA events around one call, 5 warm-up calls, median of 20.
   Also the relative L2 distance of each to the all-fp32 flow on the same input.
3. **sweep**: one middle WN layer (the most common kind) at the first shape for each block
   configuration (time positions a program, warps, pipeline stages); max error against the
   default configuration; then the whole fused flow with the fastest one.

The JSON (``--json``) has one list per section; a table is printed at the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: (time positions a program, warps, pipeline stages). 8 warps at 64 positions compute the 1x1 products twice
#: (see engines/torch_vits/fused_wn.py); listed to measure it.
BLOCKS = [(32, 4, 3), (64, 4, 2), (64, 4, 3), (64, 8, 3), (128, 4, 2), (128, 8, 2), (128, 8, 3), (128, 8, 4)]
TINY_BLOCKS = [(32, 4, 3), (64, 4, 3), (128, 4, 3)]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=os.environ.get("BOOKTTS_TORCH_WEIGHTS"),
                    help="exported safetensors weights (default $BOOKTTS_TORCH_WEIGHTS, else the voice's ONNX file)")
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (Triton's interpreter; use with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and few repetitions (a CPU smoke run)")
    ap.add_argument("--precision", choices=("fp16", "bf16"), default="fp16", help="dtype of the in_layers")
    ap.add_argument("--shapes", default=None, help="rows x frames list (default 256x1024,64x4096; tiny: 2x96)")
    ap.add_argument("--sections", default="cases,flow,sweep")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def voice_rates(weights) -> tuple[int, int]:
    """(hop length, sample rate) of the voice: from the weights' metadata, else the installed voice."""
    import numpy as np

    if weights:
        from engines.weights import read_weights

        _, hp, meta = read_weights(weights)
        return int(np.prod(hp["upsample_rates"])), int(meta["sample_rate"])
    from core.voice import resolve_voice

    v = resolve_voice()
    return v.hop_length, v.sample_rate


def main(argv=None) -> int:
    a = parse(argv)
    if a.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is first imported
    import torch

    from engines.torch_vits import fused_wn
    from engines.torch_vits.modules import mixed_precision_flow
    from tests.engines import fused_wn_cases as cases

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device; run with --device cpu --tiny for a smoke run", file=sys.stderr)
        return 2
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        print("--device cpu needs TRITON_INTERPRET=1 (unset it or set it to 1)", file=sys.stderr)
        return 2
    if cuda:
        torch.cuda.set_device(dev)
    warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 5)
    reps = a.reps if a.reps is not None else (2 if a.tiny else 20)
    shapes = [tuple(int(v) for v in s.split("x")) for s in (a.shapes or ("2x96" if a.tiny else "256x1024,64x4096"))
              .split(",")]
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    sections = a.sections.split(",")
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__, "device": str(dev),
                 "precision": a.precision, "weights": a.weights, "cases": [], "flow": [], "sweep": []}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        print("triton is not installed", file=sys.stderr)
        return 2
    if cuda:
        p = torch.cuda.get_device_properties(dev)
        out["gpu"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
    where = out.get("gpu", "cpu (Triton interpreter)")
    print(f"{where}; torch {torch.__version__}, triton {out['triton']}", flush=True)

    def save():
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1, default=str))

    def timed(fn) -> float:
        """Median seconds of one call."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1000)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    # the engine's stage-B settings: cuDNN autotuning, no TF32 anywhere (true fp32 1x1 convolutions)
    torch.backends.cuda.matmul.allow_tf32 = False
    flags = dict(enabled=True, benchmark=True, deterministic=False, allow_tf32=False)
    kind = "cuda" if cuda else "cpu"

    # ------------------------------------------------------------------ 1. cases
    if "cases" in sections:
        t0 = time.perf_counter()
        with torch.backends.cudnn.flags(**flags):
            got = {**cases.kernel_cases(kind), **cases.flow_cases(kind, weights=a.weights)}
        tol = 1e-5 if not cuda else 5e-5
        print(f"\ncases ({time.perf_counter() - t0:.1f} s):")
        for cid, r in got.items():
            if "err" in r and "scale" in r:
                ok = (r["err"] <= tol * max(1.0, r["scale"]) and r.get("tail", 0.0) == 0.0
                      and r.get("xc_err", 0.0) == 0.0)
            elif cid == "flow-fp16-fused-vs-plain":
                ok = r["rel_l2"] <= 2e-3 and r["fused_vs_fp32"] <= 1.1 * r["plain_vs_fp32"] + 1e-6
            elif cid == "flow-fused-tail-zero":
                ok = r["err"] == 0.0
            else:
                ok = r["rel_l2"] <= (1e-5 if not cuda else 1e-4)
            out["cases"].append({"case": cid, "ok": ok, **r})
            print(f"  {'ok  ' if ok else 'FAIL'} {cid:34} " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float)
                                                                   else f"{k}={v}" for k, v in r.items()), flush=True)
        save()

    # ------------------------------------------------------------------ 2. whole flow
    flow32 = cases.load_flow(a.weights).to(dev)
    hop, sr = voice_rates(a.weights)
    plain = mixed_precision_flow(copy.deepcopy(flow32), half)
    cpu_block = cases.CPU_FLOW_BLOCK if not cuda else None
    fused = copy.deepcopy(plain).use_fused(block=cpu_block)
    h = flow32.flows[0].enc.hidden
    k = flow32.flows[0].enc.in_layers[0].kernel_size[0]
    n_layers = flow32.flows[0].enc.n_layers
    n_coupling = sum(1 for f in flow32.flows if hasattr(f, "enc"))
    # multiply-adds x 2 a frame: in_layers, res_skip (last layer H outputs), pre and post
    half_c = flow32.flows[0].half
    flop_frame = n_coupling * (n_layers * 2 * k * h * 2 * h + (n_layers - 1) * 2 * h * 2 * h + 2 * h * h
                               + 2 * 2 * half_c * h)

    def inputs(rows, frames, seed=0):
        g = torch.Generator().manual_seed(seed)
        z = torch.randn(rows, 2 * half_c, frames, generator=g)
        lengths = (frames * (0.75 + 0.25 * torch.rand(rows, generator=g))).long().clamp(1, frames)
        lengths[0] = frames
        z, lengths = z.to(dev), lengths.to(dev)
        mask = (torch.arange(frames, device=dev)[None] < lengths[:, None]).float()[:, None]
        return z, lengths, mask

    def rel(x, y):
        return float((x.float() - y.float()).norm() / y.float().norm())

    if "flow" in sections:
        print("\nwhole flow reverse (median of %d after %d warm-up calls):" % (reps, warmup))
        for rows, frames in shapes:
            z, lengths, mask = inputs(rows, frames)
            audio_s = rows * frames * hop / sr
            with torch.inference_mode(), torch.backends.cudnn.flags(**flags):
                ref = flow32.reverse(z, mask)
                y_plain = plain.reverse(z, mask)
                y_fused = fused.reverse(z, mask, lengths)
                t_plain = timed(lambda: plain.reverse(z, mask))
                t_fused = timed(lambda: fused.reverse(z, mask, lengths))
            row = {"rows": rows, "frames": frames, "audio_s": round(audio_s, 1),
                   "plain_ms": round(t_plain * 1e3, 3), "fused_ms": round(t_fused * 1e3, 3),
                   "speedup": round(t_plain / t_fused, 2),
                   "fused_x_realtime": round(audio_s / t_fused, 0), "plain_x_realtime": round(audio_s / t_plain, 0),
                   "fused_tflops": round(flop_frame * rows * frames / t_fused / 1e12, 1),
                   "rel_l2_fused_vs_plain": rel(y_fused, y_plain), "rel_l2_fused_vs_fp32": rel(y_fused, ref),
                   "rel_l2_plain_vs_fp32": rel(y_plain, ref)}
            out["flow"].append(row)
            save()
            print(f"  {rows:4}x{frames:<5} plain {row['plain_ms']:9.3f} ms  fused {row['fused_ms']:9.3f} ms  "
                  f"x{row['speedup']:.2f}  ({row['fused_tflops']} TFLOP/s; rel L2 to fp32: fused "
                  f"{row['rel_l2_fused_vs_fp32']:.2e}, plain {row['rel_l2_plain_vs_fp32']:.2e})", flush=True)
            del z, ref, y_plain, y_fused

    # ------------------------------------------------------------------ 3. block sweep (one middle layer)
    if "sweep" in sections:
        rows, frames = shapes[0]
        layers = fused._fused_plan[0]["wn"]
        p = layers[1] if len(layers) > 2 else layers[0]
        g = torch.Generator().manual_seed(2)
        _, lengths, _ = inputs(rows, frames)
        x = torch.randn(rows, frames, h, generator=g).to(dev)
        skip0 = torch.randn(rows, frames, h, generator=g).to(dev)
        xc = x.to(p["w_in"].dtype)
        xc_out = torch.empty_like(xc) if xc.data_ptr() != x.data_ptr() else None
        flop = rows * frames * (2 * k * h * 2 * h + 2 * h * 2 * h)  # the layer's multiply-adds x 2 (1x1 counted once)

        def layer(block, skip, x_out):
            return fused_wn.wn_layer(x, p, lengths, skip, first=False, last=False, xc=xc, x_out=x_out, xc_out=xc_out,
                                     block=block)

        base_skip, base_x = skip0.clone(), torch.empty_like(x)
        layer(cpu_block or fused_wn._block_config(h), base_skip, base_x)
        print(f"\none middle WN layer, {rows}x{frames} frames (block = time positions, warps, stages):")
        best = None
        for block in (TINY_BLOCKS if a.tiny else BLOCKS):
            skip, xo = skip0.clone(), torch.empty_like(x)
            try:
                layer(block, skip, xo)
                err = max(float((skip - base_skip).abs().max()), float((xo - base_x).abs().max()))
                sec = timed(lambda: layer(block, skip, xo))  # skip keeps accumulating: harmless for timing
            except Exception as exc:  # a configuration the compiler rejects (shared memory, registers): report it
                msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                out["sweep"].append({"block": list(block), "error": msg})
                print(f"  {str(block):14} failed: {msg}", flush=True)
                continue
            row = {"block": list(block), "us": round(sec * 1e6, 1), "tflops": round(flop / sec / 1e12, 1),
                   "max_err_vs_default": err}
            out["sweep"].append(row)
            save()
            print(f"  {str(block):14} {sec * 1e6:10.1f} us  {row['tflops']:6.1f} TFLOP/s  err vs default {err:.2g}",
                  flush=True)
            if err <= 1e-4 * max(1.0, float(base_x.abs().max())) and (best is None or sec < best[1]):
                best = (block, sec)
        if best:
            out["best_block"] = list(best[0])
            tuned = copy.deepcopy(plain).use_fused(block=best[0])
            res = []
            for rows, frames in shapes:
                z, lengths, mask = inputs(rows, frames)
                with torch.inference_mode():
                    t = timed(lambda: tuned.reverse(z, mask, lengths))
                res.append({"rows": rows, "frames": frames, "block": list(best[0]), "fused_ms": round(t * 1e3, 3)})
                print(f"  whole flow with {best[0]}: {rows}x{frames} {t * 1e3:.3f} ms", flush=True)
            out["flow_best_block"] = res
        save()

    # ------------------------------------------------------------------ table
    if out["flow"]:
        print("\n| rows x frames | plain ms | fused ms | speedup | fused x RT | rel L2 fused/fp32 "
              "| rel L2 plain/fp32 |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in out["flow"]:
            print(f"| {r['rows']}x{r['frames']} | {r['plain_ms']} | {r['fused_ms']} | {r['speedup']} | "
                  f"{r['fused_x_realtime']:,.0f} | {r['rel_l2_fused_vs_fp32']:.2e} | {r['rel_l2_plain_vs_fp32']:.2e} |")
    bad = [c["case"] for c in out["cases"] if not c["ok"]]
    if bad:
        print(f"\nFAILED cases: {', '.join(bad)}")
    save()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
