"""Where a batch's wall time goes on the GPU: kernel-busy time against wall time, per phase.

    python bench/timeline.py --weights carry/joe-fp16.safetensors [--json OUT.json] [--env K=V ...]

One engine (defaults unless ``--env`` sets switches before it is built), the workload of
``bench/gpu_throughput.py`` (1024 sentences of Alice, one batch), two warm passes, then one pass
under ``torch.profiler``. From the trace: each kernel (and device memcpy/memset) is attributed to
the phase whose host range launched it (stage A chunks, stage B chunks, the rest), through the
launch's correlation id. Per phase: kernels, the union of their device intervals (busy), the device
span from the phase's first kernel start to its last kernel end, and the host time spent in the
phase. ``busy / span`` well under 1 means the device waited for the host (launch-bound).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def union(intervals) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def analyse(trace: dict, phases: tuple[str, ...]) -> dict:
    ev = trace["traceEvents"]
    ranges = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
              if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"] in phases]
    launch = {}
    for e in ev:
        runtime = e.get("cat") in ("cuda_runtime", "cuda_driver")
        if e.get("ph") == "X" and runtime and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = e["ts"]
    dev = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = {p: {"kernels": 0, "intervals": [], "host_ms": 0.0, "by_name": {}} for p in phases + ("other",)}
    for s, e, name in ranges:
        out[name]["host_ms"] += (e - s) / 1000.0
    for k in dev:
        t = launch.get(k.get("args", {}).get("correlation"))
        phase, width = "other", None
        if t is not None:
            for s, e, name in ranges:  # the innermost range that holds the launch
                if s <= t <= e and (width is None or e - s < width):
                    phase, width = name, e - s
        out[phase]["kernels"] += 1
        out[phase]["intervals"].append((k["ts"], k["ts"] + k["dur"]))
        d = out[phase]["by_name"].setdefault(k["name"][:90], [0, 0.0])
        d[0] += 1
        d[1] += k["dur"] / 1000.0
    res = {}
    all_iv = []
    by_name: dict[str, list] = {}
    for k in dev:
        d = by_name.setdefault(k["name"][:90], [0, 0.0])
        d[0] += 1
        d[1] += k["dur"] / 1000.0
    api: dict[str, list] = {}
    for e in ev:  # host-side CUDA API calls: a long cudaMemcpyAsync or a synchronize is the host waiting
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            d = api.setdefault(e["name"], [0, 0.0, 0.0])
            d[0] += 1
            d[1] += e["dur"] / 1000.0
            d[2] = max(d[2], e["dur"] / 1000.0)
    res["host_api"] = [{"name": n, "count": c, "ms": round(ms, 2), "max_ms": round(mx, 3)}
                       for n, (c, ms, mx) in sorted(api.items(), key=lambda x: -x[1][1])[:12]]
    res["top_kernels"] = [{"name": n, "count": c, "ms": round(ms, 2)}
                          for n, (c, ms) in sorted(by_name.items(), key=lambda x: -x[1][1])[:30]]
    for p, d in out.items():
        iv = d.pop("intervals")
        d["top_kernels"] = [{"name": n, "count": c, "ms": round(ms, 2)}  # per phase: what to fuse next
                            for n, (c, ms) in sorted(d.pop("by_name").items(), key=lambda x: -x[1][1])[:15]]
        all_iv += iv
        d["busy_ms"] = round(union(iv) / 1000.0, 2)
        d["span_ms"] = round((max(e for _, e in iv) - min(s for s, _ in iv)) / 1000.0, 2) if iv else 0.0
        d["busy_of_span"] = round(d["busy_ms"] / d["span_ms"], 3) if d["span_ms"] else None
        d["host_ms"] = round(d["host_ms"], 2)
        res[p] = d
    res["all"] = {"kernels": len(all_iv), "busy_ms": round(union(all_iv) / 1000.0, 2),
                  "span_ms": round((max(e for _, e in all_iv) - min(s for s, _ in all_iv)) / 1000.0, 2)}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--env", action="append", default=[], help="K=V set before the engine is built")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    for kv in a.env:
        k, _, v = kv.partition("=")
        os.environ[k] = v

    import torch

    from engines import EngineSpec
    from engines.torch_engine import TorchEngine
    from engines.weights import voice_from_weights
    from gpu_throughput import alice_workload

    voice = voice_from_weights(a.weights)
    _, batch = alice_workload(voice, a.n)
    eng = TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device=a.device, max_batch=a.n),
                      weights_path=a.weights, warmup=False)

    host_s: dict[str, float] = {}

    def ranged(name, fn):
        def wrapped(*args, **kw):
            t0 = time.perf_counter()
            with torch.profiler.record_function(name):
                out = fn(*args, **kw)
            host_s[name] = host_s.get(name, 0.0) + time.perf_counter() - t0
            return out
        return wrapped

    # stage_a: one chunk, eager or replayed as a CUDA graph (BOOKTTS_TORCH_GRAPHS); stage_b: a chunk's
    # prior expansion and noise (the rest of the chunk is flow and decoder)
    phases = ("stage_a", "stage_b", "flow", "decoder")
    eng._run_stage_a, eng._run_chunk = ranged("stage_a", eng._run_stage_a), ranged("stage_b", eng._run_chunk)
    eng.flow.reverse, eng.dec = ranged("flow", eng.flow.reverse), ranged("decoder", eng.dec)
    walls = []
    for _ in range(3):
        host_s.clear()
        t0 = time.perf_counter()
        eng.synthesize(batch)
        walls.append(time.perf_counter() - t0)
    # host time inside each phase in the last unprofiled pass (nested phases count in their parents too)
    host_unprofiled = {k: round(v * 1000, 2) for k, v in host_s.items()}
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        eng.synthesize(batch)
        prof_wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "env": a.env,
           "gpu": torch.cuda.get_device_name(), "info": {k: v for k, v in eng.info.extra.items()
                                                           if isinstance(v, (str, int, float, bool, type(None)))},
           "walls_s": [round(w, 4) for w in walls],
           "host_ms_unprofiled": host_unprofiled, "profiled_wall_s": round(prof_wall, 4),
           "phases": analyse(trace, phases)}
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
