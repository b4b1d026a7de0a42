"""Cold start of the torch engine with and without the Triton precompile, on one GPU.

    python bench/precompile_check.py --weights carry/joe-fp16.safetensors [--json $OUT/precompile.json]

Each case runs in its own Python process (Triton keeps compiled kernels in memory too), with
``TRITON_CACHE_DIR`` set to its own directory, and times building a ``TorchEngine`` (fp16, fused
decoder and flow, eager, lazy warm-up, ``max_batch`` 1024, cuDNN autotuning off so that only
Triton's compilation differs) and then its first batch (the first ``--batch`` sentences of
``bench/data/alice_ids.npz``, one ``synthesize`` call, seed 0):

* ``on``: ``BOOKTTS_TORCH_PRECOMPILE=1``, an empty cache directory;
* ``off``: ``BOOKTTS_TORCH_PRECOMPILE=0``, another empty cache directory (the kernels compile one
  by one in the first batch, as before);
* ``on-warm``: ``BOOKTTS_TORCH_PRECOMPILE=1`` again on the ``on`` case's (now filled) directory:
  what precompiling costs when there is nothing left to compile.

A compilation listener counts Triton's compilations (and loads from its disk cache) during the
build and during the first batch: after a precompile the first batch should compile nothing.
The first batch's int16 PCM of the ``on`` and ``off`` cases is compared (it must be identical:
the same kernels are compiled, only earlier). Prints a table; ``--json`` writes everything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data" / "alice_ids.npz"


def load_ids(n: int) -> list[list[int]]:
    d = np.load(DATA)
    ids, off = d["ids"].astype(np.int64), d["offsets"]
    return [ids[off[i]:off[i + 1]].tolist() for i in range(min(n, len(off) - 1))]


def child(a) -> dict:
    """One case, in this process: build the engine, run the first batch, count compilations."""
    t_start = time.perf_counter()
    import torch
    import triton

    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.torch_engine import TorchEngine
    from engines.weights import voice_from_weights

    events = []  # (phase, cache_hit)
    phase = ["build"]
    triton.knobs.compilation.listener = lambda **kw: events.append((phase[0], bool(kw.get("cache_hit"))))
    voice = voice_from_weights(a.weights)
    t_import = time.perf_counter() - t_start
    precision = "fp16" if a.device.startswith("cuda") else "fp32"  # cpu: only to try the script out
    spec = EngineSpec(name="torch", precision=precision, device=a.device, max_batch=1024)
    t0 = time.perf_counter()
    eng = TorchEngine(voice, spec, weights_path=a.weights, warmup="lazy")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    phase[0] = "first"
    batch = SynthesisBatch.from_sequences(load_ids(a.batch), Scales(voice.noise_scale, voice.length_scale,
                                                                    voice.noise_w), seed=0)
    t0 = time.perf_counter()
    res = eng.synthesize(batch)
    first_s = time.perf_counter() - t0
    phase[0] = "second"
    t0 = time.perf_counter()
    eng.synthesize(batch)
    second_s = time.perf_counter() - t0
    pcm = np.concatenate([res.item(i) for i in range(len(res))]).astype(np.int16)
    np.save(a.pcm_out, pcm)

    def count(ph, hit):
        return sum(1 for p, h in events if p == ph and h == hit)

    x = eng.info.extra
    return {
        "case": a.child, "cache_dir": os.environ.get("TRITON_CACHE_DIR"), "triton": triton.__version__,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "cpus": len(os.sched_getaffinity(0)),
        "fused": x["fused_resblocks"], "fused_flow": x["fused_flow"], "autotune": x["autotune"],
        "import_s": round(t_import, 2), "build_s": round(build_s, 2), "load_s": x["load_s"],
        "precompile": x["precompile"], "precompile_s": x["precompile_s"],
        "precompile_report": eng.precompile_report.as_dict() if eng.precompile_report else None,
        "first_batch_s": round(first_s, 2), "second_batch_s": round(second_s, 2),
        "build_plus_first_s": round(build_s + first_s, 2),
        "compiled_in_build": count("build", False), "loaded_in_build": count("build", True),
        "compiled_in_first_batch": count("first", False), "loaded_in_first_batch": count("first", True),
        "compiled_later": count("second", False),
        "sentences": len(batch), "audio_s": round(float(np.sum(res.sample_lengths)) / voice.sample_rate, 1),
        "pcm_sha256": hashlib.sha256(pcm.tobytes()).hexdigest()[:16],
    }


def run_case(a, case: str, cache: str, pcm: Path, timeout: float) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, BOOKTTS_TORCH_PRECOMPILE="0" if case == "off" else "1",
               BOOKTTS_TORCH_AUTOTUNE="0", PYTHONUNBUFFERED="1")
    for k in ("BOOKTTS_TORCH_FUSED", "BOOKTTS_TORCH_FUSED_FLOW", "BOOKTTS_TORCH_COMPILE", "BOOKTTS_TORCH_WARMUP"):
        env.pop(k, None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case, "--weights", a.weights, "--device",
           a.device, "--batch", str(a.batch), "--pcm-out", str(pcm)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        return {"case": case, "error": (p.stderr or p.stdout)[-2000:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["process_s"] = round(time.perf_counter() - t0, 2)
    warn = [ln for ln in p.stderr.splitlines() if "precompile" in ln.lower()]
    if warn:
        r["log"] = warn[-3:]
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=os.environ.get("BOOKTTS_TORCH_WEIGHTS"))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=256, help="sentences in the first batch")
    ap.add_argument("--cases", default="on,off,on-warm")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pcm-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not a.weights:
        ap.error("--weights (or BOOKTTS_TORCH_WEIGHTS) is needed: the voice's exported safetensors")
    if a.child:
        print(json.dumps(child(a)))
        return 0

    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="precompile-check-"))
    caches = {"on": tmp / "cache-on", "off": tmp / "cache-off"}
    caches["on-warm"] = caches["on"]
    for d in set(caches.values()):
        d.mkdir()
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cases": {}}
    budget = {"on": 60.0, "off": 150.0, "on-warm": 45.0}
    for case in a.cases.split(","):
        if case == "on-warm" and "on" not in out["cases"]:
            continue
        r = run_case(a, case, str(caches[case]), tmp / f"{case}.npy", budget.get(case, 120.0))
        out["cases"][case] = r
        if "error" in r:
            print(f"[{case}] error: {r['error']}", flush=True)
            continue
        print(f"[{case}] build {r['build_s']:6.2f} s (precompile {r['precompile_s']:5.2f} s) + first batch "
              f"{r['first_batch_s']:6.2f} s = {r['build_plus_first_s']:6.2f} s; compiled {r['compiled_in_build']} in "
              f"the build, {r['compiled_in_first_batch']} in the first batch; second batch {r['second_batch_s']:.2f} s",
              flush=True)
    cs = out["cases"]
    if all(c in cs and "error" not in cs[c] for c in ("on", "off")):
        on, off = np.load(tmp / "on.npy"), np.load(tmp / "off.npy")
        same = on.shape == off.shape and bool(np.array_equal(on, off))
        out["pcm_identical"] = same
        out["pcm_max_abs_diff"] = (int(np.abs(on.astype(np.int32) - off.astype(np.int32)).max())
                                   if on.shape == off.shape else None)
        out["cold_start_s"] = {"precompile_on": cs["on"]["build_plus_first_s"],
                               "precompile_off": cs["off"]["build_plus_first_s"]}
        out["kernels_compiled"] = {"precompile_on": cs["on"]["compiled_in_build"] + cs["on"]["compiled_in_first_batch"],
                                   "precompile_off": cs["off"]["compiled_in_first_batch"]}
        r = cs["on"]["precompile_report"] or {}
        print(f"\n{cs['on']['gpu']}, triton {cs['on']['triton']}, torch {cs['on']['torch']}, {cs['on']['cpus']} CPUs; "
              f"first batch: {cs['on']['sentences']} sentences, {cs['on']['audio_s']} s of audio")
        print("| case | build s | precompile s | first batch s | build + first s | compiled: build / first batch |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, c in cs.items():
            if "error" not in c:
                print(f"| {name} | {c['build_s']} | {c['precompile_s']} | {c['first_batch_s']} | "
                      f"{c['build_plus_first_s']} | {c['compiled_in_build']} / {c['compiled_in_first_batch']} |")
        print(f"precompile: {r.get('kernels')} specializations from {r.get('launches')} distinct launches on "
              f"{r.get('workers')} threads; error: {r.get('error')}")
        print(f"first-batch PCM identical with and without precompile: {same} (max |diff| {out['pcm_max_abs_diff']})")
    out["total_s"] = round(time.perf_counter() - t_all, 1)
    print(f"total {out['total_s']} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
