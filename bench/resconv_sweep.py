"""One ResBlock2 resblock (two convolutions) of the decoder: the fused kernel's configurations and the
pair-fused kernel against today's two ``resconv`` launches.

    python bench/resconv_sweep.py --json out.json [--accumulate] [--sweep-kernels 3,5,7]

For each decoder stage of the voice (channels 128 / 64 / 32 at 8 / 64 / 256 samples a frame; 64
items of 512 frames by default, the last one half as long) and each of its ResBlock2 resblocks
(kernel 3, dilations 1 and 2; kernel 5, 2 and 6; kernel 7, 3 and 12) it times
``h1 = x + conv1(lrelu(x) * mask) + b1; out = h1 + conv2(lrelu(h1) * mask) + b2``:

* ``baseline``: two :func:`engines.torch_vits.fused_conv.resconv` launches at the default block
  (``_block_config``), as ``Generator._fused_resblocks`` runs them;
* ``resconv BxW sS``: the same two launches at another block (``B`` time positions a program, ``W``
  warps) or ``num_stages`` ``S`` (Triton's default is 3; the kernel's tap loop is unrolled, so there
  is no loop for the pipeliner and stages should not matter: this measures that). Only for the
  resblocks in ``--sweep-kernels`` (default: kernel 7, the largest), to bound the compiles;
* ``pair BxW pP span N``: :func:`engines.torch_vits.fused_conv.resblock2_pair`, both convolutions in
  one launch (``B`` time positions a chunk, ``W`` warps, ``P`` programs per SM, spans of ``N``
  positions; ``span auto`` is the wrapper's choice). Programs per SM and span are run-time
  arguments: sweeping them compiles nothing. Other chunk sizes only for ``--sweep-kernels``.

With ``--accumulate`` the second convolution also adds the running sum of the resblocks and scales
by 1/3 into it (``out`` is ``accumulate``), as the decoder's second and third resblocks do: one more
read per element on both sides. Without it (default) the pair is the first resblock's (no sum).

Every variant's output is checked against :func:`resconv_reference` applied twice (fp32 arithmetic,
fp16 rounding where the kernels round; TF32 off), before and after its timing; ``err`` is the larger
max |difference| and ``FAIL`` marks one above ``2**-7 * max(1, max |reference|)`` (a few units in the
last place of fp16). The exit status is 1 when any variant failed.

Timing: CUDA events around ``--reps`` launches (default 20) after 5 warm-up launches, the median of
5 such runs (as ``bench/fused_conv_tune.py``). ``ratio`` is the variant's time over the baseline's
in the same run (below 1: faster). GB/s counts the pair's minimum DRAM traffic (read x, write out;
plus read the sum with ``--accumulate``).

Kernel compilations (default arguments): 12 for the baselines (kernel 3's first convolution has
dilation 1, which Triton specialises), 14 for the ``resconv`` sweep (kernel 7: four blocks a stage,
two ``num_stages`` at 128 channels), 9 + 6 for the pair kernel: 41 (61 with ``--accumulate``, whose
two convolutions differ). They are compiled first by ``--jobs`` processes (default up to 8) that
launch each variant once on one item, filling Triton's on-disk cache; the measuring process then
loads them. The last column is the first call's seconds where this process met a new variant, and
each new kernel's registers / spilled bytes a thread (as the driver reports them).
``--device cpu`` runs the same code under Triton's interpreter on tiny shapes in fp32 (a smoke
test of this script; its times mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STAGES = [(128, 8), (64, 64), (32, 256)]  # (channels, samples per frame)
RESBLOCKS = [(3, (1, 2)), (5, (2, 6)), (7, (3, 12))]  # ResBlock2: (kernel, (dilation1, dilation2))
# resconv blocks (time positions, warps) besides the default 64 x 4, per channel count: the fp32
# accumulator (BLOCK_T * C / (32 * warps) registers a thread) kept between 16 and 128
SWEEP_BLOCKS = {128: [(32, 4), (64, 8), (128, 4), (128, 8)],
                64: [(32, 2), (64, 2), (128, 4), (128, 8)],
                32: [(64, 2), (128, 2), (128, 4), (128, 8)]}
# num_stages at the default block, per channel count; 3 is Triton's default (the baseline)
SWEEP_STAGES = {128: [1, 2]}
# pair-kernel chunks (time positions, warps) besides the default, per channel count
PAIR_BLOCKS = {128: [(32, 4), (128, 8)], 64: [(32, 2), (128, 4)], 32: [(32, 2), (128, 4)]}
PROGRAMS_PER_SM = [1, 2, 3, 4]  # the pair kernel's persistent grid (default 2)
SPAN_FACTORS = [0.5, 2.0]  # spans besides the wrapper's choice (times it)


class Compiles:
    """Which kernel variants this process has launched (an estimate of Triton's compiles: the
    constexprs, launch options and the integer specialisations that differ here)."""

    def __init__(self):
        self.seen, self.seconds = set(), 0.0

    def new(self, keys) -> int:
        fresh = set(keys) - self.seen
        self.seen |= fresh
        return len(fresh)


def compiled_kernels() -> dict:
    """id -> Triton's compiled kernel objects (``n_regs``, ``n_spills``) of the two kernels' JIT
    caches in this process; empty where this Triton version keeps them elsewhere (or interprets)."""
    out = {}
    try:
        from engines.torch_vits._resblock2_kernel import resblock2_kernel
        from engines.torch_vits._resconv_kernel import resconv_kernel

        for fn in (resconv_kernel, resblock2_kernel):
            for entry in (getattr(fn, "device_caches", None) or {}).values():
                for part in entry if isinstance(entry, tuple) else (entry,):
                    if isinstance(part, dict):
                        for ker in part.values():
                            if hasattr(ker, "n_regs"):
                                out[id(ker)] = ker
    except Exception:  # noqa: BLE001 - a report only
        pass
    return out


def stage_tensors(torch, dev, dtype, g, rows_n, frames, c, per_frame, accumulate):
    t = frames * per_frame
    x = torch.randn(rows_n, t, c, generator=g, device=dev).to(dtype)
    lengths = torch.full((rows_n,), frames, dtype=torch.long)
    lengths[-1] = max(1, frames // 2)
    total0 = torch.randn(rows_n, t, c, generator=g, device=dev).to(dtype) if accumulate else None
    return t, x, lengths.to(dev), total0


def resblock_weights(torch, dev, dtype, g, c, k):
    w1 = (torch.randn(c, c, k, generator=g, device=dev) / (c * k) ** 0.5).to(dtype)
    w2 = (torch.randn(c, c, k, generator=g, device=dev) / (c * k) ** 0.5).to(dtype)
    b1 = (torch.randn(c, generator=g, device=dev) * 0.3).to(dtype)
    b2 = (torch.randn(c, generator=g, device=dev) * 0.3).to(dtype)
    return w1, w2, b1, b2


def candidates(F, a, sweep_k, sms, rows_n, c, per_frame, t, k, d1, d2, x, lengths, weights):
    """[(name, fn(acc) -> out, compile keys, extra JSON fields)] for one resblock: ``acc`` is the
    running sum (and the output) with ``--accumulate``, else None."""
    w1, w2, b1, b2 = weights
    wk1, wk2 = F.pack_weight(w1), F.pack_weight(w2)
    scale = 1 / 3 if a.accumulate else 1.0

    def resconv_pair(block, stages, acc):
        h = F.resconv(x, wk1, b1, lengths, per_frame, d1, residual=x, block=block, num_stages=stages)
        return F.resconv(h, wk2, b2, lengths, per_frame, d2, residual=h, accumulate=acc, out=acc,
                         out_scale=scale, block=block, num_stages=stages)

    def resconv_keys(block, stages):
        bt, wp = block or F._block_config(c)
        return [("resconv", c, k, bt, wp, stages, False, d1 == 1),
                ("resconv", c, k, bt, wp, stages, a.accumulate, d2 == 1)]

    def pair(block, programs, span, acc):
        return F.resblock2_pair(x, wk1, b1, wk2, b2, lengths, per_frame, d1, d2, accumulate=acc, out=acc,
                                out_scale=scale, block=block, span=span, programs=programs)

    def pair_keys(block):
        sub, wp = block or F._pair_config(c)
        return [("pair", c, k, d2, sub, wp, a.accumulate, d1 == 1)]

    out = [("baseline", lambda acc: resconv_pair(None, None, acc), resconv_keys(None, None), {})]
    if k in sweep_k:
        for bt, wp in SWEEP_BLOCKS.get(c, []):
            out.append((f"resconv {bt}x{wp}", lambda acc, bw=(bt, wp): resconv_pair(bw, None, acc),
                        resconv_keys((bt, wp), None), {"block": [bt, wp]}))
        for st in SWEEP_STAGES.get(c, []):
            out.append((f"resconv default s{st}", lambda acc, st=st: resconv_pair(None, st, acc),
                        resconv_keys(None, st), {"num_stages": st}))
    sub0, _ = F._pair_config(c)
    lag0, _ = F._pair_lag(k, d2, sub0)
    for pps in PROGRAMS_PER_SM if not a.no_sweep else [2]:
        span_auto = F._pair_span(rows_n, t, sub0, lag0, pps * sms) * sub0
        spans = [None] + ([int(span_auto * f) for f in SPAN_FACTORS if int(span_auto * f) >= sub0]
                          if not a.no_sweep else [])
        for sp in spans:
            out.append((f"pair default p{pps} span {sp or f'auto={span_auto}'}",
                        lambda acc, pps=pps, sp=sp: pair(None, pps * sms, sp, acc), pair_keys(None),
                        {"programs_per_sm": pps, "span": sp or span_auto}))
    if k in sweep_k:
        for sub, wp in PAIR_BLOCKS.get(c, []):
            out.append((f"pair {sub}x{wp} p2 span auto", lambda acc, bw=(sub, wp): pair(bw, 2 * sms, None, acc),
                        pair_keys((sub, wp)), {"block": [sub, wp], "programs_per_sm": 2}))
    return out


def precompile(a, argv, jobs: int) -> float:
    """Compile every variant in ``jobs`` child processes first (each launches its share once on one
    item); Triton's on-disk cache then serves the measuring process. Returns the seconds it took."""
    s = time.perf_counter()
    child = []  # the same arguments, less --json (the children write none)
    skip = False
    for v in argv:
        if skip or v.startswith("--json="):
            skip = False
            continue
        skip = v == "--json"
        if not skip:
            child.append(v)
    base = [sys.executable, str(Path(__file__).resolve())] + child
    procs = [subprocess.Popen(base + ["--compile-worker", f"{i}/{jobs}"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(jobs)]
    for i, p in enumerate(procs):
        out, _ = p.communicate()
        if p.returncode != 0:  # not fatal: the measuring process compiles what is missing
            print(f"compile worker {i} failed ({p.returncode}):\n{out[-2000:]}", flush=True)
    return time.perf_counter() - s


def compile_worker(a, spec: str) -> int:
    """Launch this worker's share of the variants once (one item), so that they are compiled."""
    import torch

    from engines.torch_vits import fused_conv as F

    me, n = (int(v) for v in spec.split("/"))
    cpu = a.device == "cpu"
    dev = torch.device(a.device)
    dtype = torch.float32 if cpu else torch.float16
    sms = 4 if cpu else torch.cuda.get_device_properties(dev).multi_processor_count
    frames = a.frames or (4 if cpu else 512)
    sweep_k = {int(k) for k in a.sweep_kernels.split(",") if k} if not a.no_sweep else set()
    g = torch.Generator(device=dev).manual_seed(0)
    seen, turn = set(), 0
    for c, per_frame in STAGES:
        if c not in [int(v) for v in a.channels.split(",")]:
            continue
        t, x, lengths, total0 = stage_tensors(torch, dev, dtype, g, 1, frames, c, per_frame, a.accumulate)
        for k, (d1, d2) in RESBLOCKS:
            weights = resblock_weights(torch, dev, dtype, g, c, k)
            for name, fn, keys, _ in candidates(F, a, sweep_k, sms, 1, c, per_frame, t, k, d1, d2, x, lengths,
                                                weights):
                fresh = set(keys) - seen
                if not fresh:
                    continue
                seen |= fresh
                turn += 1
                if turn % n != me:
                    continue
                try:
                    fn(total0.clone() if a.accumulate else None)
                except Exception as exc:  # the measuring process reports it
                    print(f"C={c} K={k} {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if not cpu:
        torch.cuda.synchronize()
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="items (default 64; 2 on cpu)")
    ap.add_argument("--frames", type=int, default=None, help="frames an item (default 512; 4 on cpu)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--accumulate", action="store_true", help="time the resblock with the running sum (1/3)")
    ap.add_argument("--sweep-kernels", default="7", help="resblock kernel sizes to sweep configurations on")
    ap.add_argument("--channels", default="128,64,32", help="stages to run, by channel count")
    ap.add_argument("--no-sweep", action="store_true", help="baseline and default pair only")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes compiling the variants first (default: up to 8 on cuda, 0 on cpu; 0: none)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile-worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    cpu = a.device == "cpu"
    if cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is first imported
    if a.compile_worker:
        return compile_worker(a, a.compile_worker)
    jobs = a.jobs if a.jobs is not None else (0 if cpu else min(8, os.cpu_count() or 1))
    pre_s = precompile(a, argv, jobs) if jobs > 1 else 0.0
    if jobs > 1:
        print(f"compiled in {jobs} processes first: {pre_s:.1f} s", flush=True)
    rows_n = a.rows or (2 if cpu else 64)
    frames = a.frames or (4 if cpu else 512)
    sweep_k = {int(k) for k in a.sweep_kernels.split(",") if k} if not a.no_sweep else set()
    channels = [int(c) for c in a.channels.split(",")]

    import torch

    from engines.torch_vits import fused_conv as F

    torch.backends.cudnn.allow_tf32 = False  # the reference in true fp32
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    dtype = torch.float32 if cpu else torch.float16
    sms = 4 if cpu else torch.cuda.get_device_properties(dev).multi_processor_count

    def timed(fn) -> float:
        if cpu:  # the interpreter: one call, a smoke test only
            s = time.perf_counter()
            fn()
            return time.perf_counter() - s
        for _ in range(5):
            fn()
        runs = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(a.reps):
                fn()
            e.record()
            e.synchronize()
            runs.append(s.elapsed_time(e) / 1000 / a.reps)
        return statistics.median(runs)

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    compiles = Compiles()
    results, failures = [], []
    g = torch.Generator(device=dev).manual_seed(0)
    print(f"{'C':>3} {'K':>1} {'dil':>5} {'variant':34} {'us':>9} {'ratio':>6} {'GB/s':>6} {'err':>9}  "
          f"first call s (compiled) / regs, spill bytes", flush=True)
    for c, per_frame in STAGES:
        if c not in channels:
            continue
        t, x, lengths, total0 = stage_tensors(torch, dev, dtype, g, rows_n, frames, c, per_frame, a.accumulate)
        scale = 1 / 3 if a.accumulate else 1.0
        traffic = (3 if a.accumulate else 2) * x.numel() * x.element_size()
        for k, (d1, d2) in RESBLOCKS:
            weights = resblock_weights(torch, dev, dtype, g, c, k)
            w1, w2, b1, b2 = weights
            h1 = F.resconv_reference(x, w1, b1, lengths, per_frame, d1, residual=x)
            ref = F.resconv_reference(h1, w2, b2, lengths, per_frame, d2, residual=h1, accumulate=total0,
                                      out_scale=scale).float()
            del h1
            tol = 2.0**-7 * max(1.0, float(ref.abs().max()))
            tot = total0.clone() if a.accumulate else None  # the running sum the timed launches update
            base_us = None
            for name, fn, keys, extra in candidates(F, a, sweep_k, sms, rows_n, c, per_frame, t, k, d1, d2, x,
                                                    lengths, weights):
                n_new = compiles.new(keys)
                before = compiled_kernels()
                try:
                    s = time.perf_counter()
                    y = fn(total0.clone() if a.accumulate else None)
                    sync()
                    first = time.perf_counter() - s
                    err = float((y.float() - ref).abs().max())
                    del y
                    sec = timed(lambda: fn(tot))
                    y = fn(total0.clone() if a.accumulate else None)  # again, after the timing
                    err = max(err, float((y.float() - ref).abs().max()))
                    del y
                except Exception as exc:  # a configuration the compiler rejects: report it, go on
                    print(f"{c:3} {k} {d1:>2},{d2:<2} {name:34} failed: {type(exc).__name__}: {str(exc)[:200]}",
                          flush=True)
                    failures.append(f"C={c} K={k} {name}: {type(exc).__name__}")
                    continue
                regs = [[getattr(v, "n_regs", None), getattr(v, "n_spills", None)]
                        for i, v in compiled_kernels().items() if i not in before]
                if n_new:
                    compiles.seconds += first
                us = sec * 1e6
                if name == "baseline":
                    base_us = us
                ok = err <= tol and err == err
                if not ok:
                    failures.append(f"C={c} K={k} {name}: err {err:.3g} > {tol:.3g}")
                row = {"channels": c, "samples_per_frame": per_frame, "kernel": k, "dilations": [d1, d2],
                       "rows": rows_n, "time_steps": t, "accumulate": a.accumulate, "variant": name, "us": round(us, 1),
                       "ratio": round(us / base_us, 3) if base_us else None, "gbs": round(traffic / sec / 1e9),
                       "max_err": err, "tol": tol, "ok": ok, "new_compiles": n_new,
                       "first_call_s": round(first, 2) if n_new else None, "regs_spills": regs, **extra}
                results.append(row)
                note = (f"{first:.2f} " if n_new else "") + " ".join(f"{r}/{sp}" for r, sp in regs)
                print(f"{c:3} {k} {d1:>2},{d2:<2} {name:34} {us:9.1f} {row['ratio'] or 0:6.3f} {row['gbs']:6} "
                      f"{err:9.2e}{'' if ok else ' FAIL'}  {note}", flush=True)

    pre = f" (after {pre_s:.1f} s of compiling in {jobs} processes)" if jobs > 1 else ""
    print(f"\nkernel variants launched (compiles): {len(compiles.seen)}; first calls of those: "
          f"{compiles.seconds:.1f} s{pre}")
    print("\nbest per resblock (ratio to the baseline, lower is faster):")
    summary = {}
    for r in results:
        key = (r["channels"], r["kernel"])
        if not r["ok"]:
            continue
        for fam in ("resconv", "pair"):
            if r["variant"].startswith(fam) or (fam == "resconv" and r["variant"] == "baseline"):
                cur = summary.setdefault(key, {}).get(fam)
                if cur is None or r["us"] < cur["us"]:
                    summary[key][fam] = r
    stage_tot = {}
    for (c, k), best in sorted(summary.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        base = next(r for r in results if r["channels"] == c and r["kernel"] == k and r["variant"] == "baseline")
        line = f"  C={c:3} K={k}: baseline {base['us']:9.1f} us"
        st = stage_tot.setdefault(c, {"baseline": 0.0, "resconv": 0.0, "pair": 0.0})
        st["baseline"] += base["us"]
        for fam in ("resconv", "pair"):
            if fam in best:
                line += f" | best {fam}: {best[fam]['variant']} {best[fam]['us']:9.1f} us ({best[fam]['ratio']:.3f})"
                st[fam] += best[fam]["us"]
            else:
                st[fam] = float("nan")  # none of that family passed its check
        print(line)
    print("\nper stage (its three resblocks, each at its best variant of the family):")
    for c, st in stage_tot.items():
        print(f"  C={c:3}: baseline {st['baseline']:9.1f} us, best resconv {st['resconv']:9.1f} us "
              f"({st['resconv'] / st['baseline']:.3f}), best pair {st['pair']:9.1f} us "
              f"({st['pair'] / st['baseline']:.3f})")
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
    if a.json:
        Path(a.json).write_text(json.dumps({"device": torch.cuda.get_device_name(dev) if not cpu else "cpu",
                                            "torch": torch.__version__, "compiles": len(compiles.seen),
                                            "first_calls_s": round(compiles.seconds, 1),
                                            "precompile_s": round(pre_s, 1), "precompile_jobs": jobs,
                                            "failures": failures, "rows": results}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
