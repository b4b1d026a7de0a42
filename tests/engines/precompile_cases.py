"""Cases for test_precompile.py, run in a child process (see kernel_child.py for why).

``python tests/engines/precompile_cases.py [cpu|cuda]`` prints one JSON object. On CPU the fused
kernels run under Triton's interpreter (fp32); on CUDA natively (fp16, the engine's default).

* ``enumerated-vs-launched``: the kernel launches of a real ``TorchEngine.synthesize`` call
  (three short items in two frame buckets, one chunk of two rows; recorded through the launch
  helpers while they really launch) against what :meth:`TorchEngine.kernel_launches` enumerates
  for the engine's shapes by a dry run, compared by :func:`engines.torch_vits.launch.launch_key`.
* ``cuda-first-batch-compiles`` (CUDA only): Triton compilations during the first batch of an
  engine built with precompile on (a fresh ``TRITON_CACHE_DIR``): 0 when the precompiled
  specializations are exactly Triton's own for the launches.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# three items whose frame counts (6, 8 and 13 with these scales and no duration noise) fall in the
# buckets 8 (two rows) and 16 (one row): short, because the interpreter runs stage B slowly
IDS = [[1, 0, 20, 0, 2], [1, 0, 35, 0, 14, 0, 2], [1, 0, 20, 0, 35, 0, 14, 0, 27, 0, 2]]
BUCKETS = [8, 16]


def _describe(key) -> str:
    name, _, args, options = key
    return f"{name}{args}{options}"


def main(device: str) -> None:
    if device == "cuda":
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="booktts-precompile-test-")
    import numpy as np
    import torch

    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.torch_engine import TorchEngine
    from engines.torch_options import ENV
    from engines.torch_vits.launch import launch_key, observe
    from core.voice import resolve_voice

    os.environ[ENV["fused_flow"]] = "1"
    t0 = time.perf_counter()
    precision = "fp32" if device == "cpu" else "fp16"
    spec = EngineSpec(name="torch", precision=precision, device="cpu" if device == "cpu" else "cuda:0", max_batch=4)
    if os.environ.get("BOOKTTS_TORCH_WEIGHTS"):  # a GPU host without the voice package
        from core.voice import voice_from_weights

        voice = voice_from_weights(os.environ["BOOKTTS_TORCH_WEIGHTS"])
    else:
        voice = resolve_voice()
    eng = TorchEngine(voice, spec, fused=True, buckets=BUCKETS, warmup="lazy")
    out = {"device": device, "engine_extra": {k: v for k, v in eng.info.extra.items() if k.startswith("precompile")}}

    compiles = []
    if device == "cuda":
        import triton

        triton.knobs.compilation.listener = lambda **kw: compiles.append(bool(kw.get("cache_hit")))

    batch = SynthesisBatch.from_sequences(IDS, Scales(0.667, 0.3, 0.0), seed=3)
    launched = []
    with observe(launched.append, run=True):
        res = eng.synthesize(batch)
    frames = (np.asarray(res.sample_lengths) // eng.hop).tolist()
    chunks = [(len(items), f) for items, f in eng.stage_b_chunks(np.asarray(frames))]

    enumerated = [kl for lists in eng.kernel_launches() for kl in lists]

    def key(kl):  # the prior kernel is specialized on its constexprs alone (no integer argument is)
        return (kl.name, tuple(sorted(kl.options.items())), 0, ()) if kl.name == "sample_prior_kernel" \
            else launch_key(kl)

    got, want = {key(k) for k in launched}, {key(k) for k in enumerated}
    out["enumerated-vs-launched"] = {
        "frames": frames, "chunks": chunks, "warmup_shapes": eng.warmup_shapes(spec.max_batch),
        "launched": len(got), "enumerated": len(want), "launch_calls": len(launched),
        "names": sorted({k.name for k in launched}),
        "max_rows_launched": max(kl.grid[1] for kl in launched),
        "missing": sorted(_describe(k) for k in got - want)[:10],  # launched, not enumerated
        "extra": sorted(_describe(k) for k in want - got)[:10],  # enumerated, never launched
        "extra_names": sorted({k[0] for k in want - got}), "extra_count": len(want - got),
        "audio_ok": bool(all(len(res.item(i)) == frames[i] * eng.hop for i in range(len(IDS)))),
    }
    if device == "cuda":
        out["cuda-first-batch-compiles"] = {"compiled": compiles.count(False), "loaded": compiles.count(True)}
    out["elapsed_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
