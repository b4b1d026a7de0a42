"""Configurations of the torch engine against each other in one process, passes interleaved.

    python bench/ab_interleave.py --weights carry/joe-fp16.safetensors [--reps 15] [--json OUT.json]

The lent GPU's speed drifts by several percent between calls and within one (docs/PERFORMANCE.md),
which is as large as the effects measured here. So one engine is built once and switched between
configurations that need no rebuild (each with its own CUDA graphs, captured in two warm-up
passes before timing), and the passes are interleaved: rep 1 of A, of B, of C, rep 2
of A, ... Each pass is ``TorchEngine.synthesize`` over the same workload as
``bench/gpu_throughput.py`` (1024 sentences of Alice, one batch; host ids to host int16 PCM). Per
configuration: the median pass and its x real-time; per rep, the ratio of each configuration's pass
to the first configuration's in the same rep, and the median of those ratios (below 1: faster).

Configurations:

* ``now``: the engine's defaults;
* ``cublas``: stage A's GEMMs through cuBLAS in true float32 (``BOOKTTS_TORCH_STAGE_A_GEMM=0``);
* ``wn128``: ``cublas``, and the flow's WN kernel at its previous default block (128, 8, 3): the
  engine as this session began, except the spline's running sum (no switch; 5 ms a batch, run 15);
* ``gemm@M1xN1xK1xW1xS1/M2xN2xK2xW2xS2``: the defaults with stage A's GEMM tiles (plain / LayerNorm)
  set, as :data:`engines.torch_vits.fused_gemm.BLOCKS`;
* ``wn@BxWxS``: the defaults with the WN kernel's block (time positions, warps, stages);
* ``rc@C:BxW``: the defaults with the resblock kernel's block for ``C`` channels;
* ``up@CI:B``: the defaults with the upsampling kernel's ``B`` input positions a program for ``CI``
  input channels;
* ``nodds``: the defaults with the DDSConv prologue as PyTorch operations, not
  :mod:`engines.torch_vits.fused_dds`'s kernel;
* ``noattn``: the defaults with the encoder's attention as :meth:`FastStageA._attend
  <engines.torch_vits.fast_stage_a.FastStageA._attend>` (cuBLAS float32 and PyTorch), not
  :mod:`engines.torch_vits.fused_attn`'s kernel;
* ``noprior``: the defaults with stage B's input made by PyTorch operations, not
  :mod:`engines.torch_vits.fused_prior`'s kernel;
* ``attn@MxNxWxS[:PRECISION]``: the defaults with the attention kernel's tiles (query rows, key columns,
  warps, stages), as :data:`engines.torch_vits.fused_attn.BLOCK` (and its products' precision);
* ``attnp@PRECISION``: the defaults with the attention kernel's products in ``PRECISION`` (``tf32x3``,
  ``ieee`` or ``fp16x3``), as :data:`engines.torch_vits.fused_attn.PRECISION`;
* ``cio@BxW``: the defaults with the coupling kernel's time positions and warps a program
  (:func:`engines.torch_vits.fused_wn.coupling_io`);
* ``nooverlap``: the defaults with the PCM copied to the host after the last chunk, not chunk by
  chunk on a copy stream;
* ``pipe2``: the defaults with stage A in two pipeline groups (``BOOKTTS_TORCH_PIPELINE=2``; the prior
  noise is drawn per group, so its audio differs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv=None) -> int:
    import torch

    from engines import EngineSpec
    from engines.torch_engine import TorchEngine
    from engines.torch_vits import fused_attn, fused_conv, fused_gemm, fused_wn
    from engines.weights import voice_from_weights
    from gpu_throughput import alice_workload

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--configs", default="now,cublas,wn128")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    voice = voice_from_weights(a.weights)
    seqs, batch = alice_workload(voice, a.n)
    eng = TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device=a.device, max_batch=a.n),
                      weights_path=a.weights, warmup=False, allow_cpu_half=not a.device.startswith("cuda"))
    wn_default, rc_default, gemm_default = fused_wn._block_config, fused_conv._block_config, dict(fused_gemm.BLOCKS)
    attn_default, cio_default = fused_attn.BLOCK, (fused_wn.COUPLING_BLOCK_T, fused_wn.COUPLING_WARPS)
    attnp_default = fused_attn.PRECISION
    up_default = fused_conv._upsample_block

    def ints(text: str) -> tuple:
        return tuple(int(v) for v in text.split("x"))

    pipeline_default = eng.pipeline
    caches: dict[str, tuple] = {}  # each configuration's own CUDA graphs (a capture bakes its tiles in)
    current = [None]

    def use(cfg: str) -> None:
        if current[0] is not None:
            caches[current[0]] = (eng._graphs, eng._graphs_for, eng._graphs_b)
        eng._graphs, eng._graphs_for, eng._graphs_b = caches.get(cfg, (None, None, None))
        current[0] = cfg
        kind, _, arg = cfg.partition("@")
        kernels = kind not in ("cublas", "wn128")
        if eng.model.stage_a_kernels != kernels:
            eng.model.use_fast_stage_a(True, kernels=kernels)  # packs the weights, outside the timed passes
        eng.model._fast_a.fused_dds = kind != "nodds"
        eng.model._fast_a.fused_attention = kind != "noattn"
        eng.fused_prior = eng.fused_flow and kind != "noprior"
        fused_attn.BLOCK = ints(arg.split(":")[0]) if kind == "attn" else attn_default
        fused_attn.PRECISION = (arg if kind == "attnp" else arg.split(":")[1] if kind == "attn" and ":" in arg
                                else attnp_default)
        fused_wn.COUPLING_BLOCK_T, fused_wn.COUPLING_WARPS = ints(arg) if kind == "cio" else cio_default
        eng.copy_overlap = kind != "nooverlap"
        eng.pipeline = 2 if kind == "pipe2" else pipeline_default
        fused_wn._block_config = wn_default
        fused_conv._block_config = rc_default
        fused_gemm.BLOCKS = dict(gemm_default)
        fused_conv._upsample_block = up_default
        if kind == "wn128":
            fused_wn._block_config = lambda hidden: (128, 8, 3)
        elif kind == "gemm":
            fused_gemm.BLOCKS = dict(zip(("plain", "ln"), (ints(blk) for blk in arg.split("/"))))
        elif kind == "wn":
            fused_wn._block_config = lambda hidden, blk=ints(arg): blk
        elif kind == "up":
            ci, bt = (int(v) for v in arg.split(":"))
            fused_conv._upsample_block = lambda c, ci=ci, bt=bt: bt if c == ci else up_default(c)
        elif kind == "rc":
            ch, blk = int(arg.split(":")[0]), ints(arg.split(":")[1])
            fused_conv._block_config = lambda c, k=3: blk if c == ch else rc_default(c, k)

    configs = a.configs.split(",")
    unknown = {c for c in configs if c.partition("@")[0] not in ("now", "cublas", "wn128", "gemm", "wn", "rc", "nodds",
                                                                 "noattn", "nooverlap", "pipe2", "up", "noprior", "attn",
                                                                 "cio", "attnp")}
    unknown |= {c for c in configs if c.partition("@")[0] == "attnp"
                and c.partition("@")[2] not in fused_attn.PRECISIONS}
    if unknown:
        ap.error(f"unknown configurations {sorted(unknown)}")
    samples = {}
    for cfg in configs:  # warm-up passes of each (compiles, cuDNN tuning; graphs: first sight, capture)
        use(cfg)
        eng.synthesize(batch)
        samples[cfg] = int(eng.synthesize(batch).sample_lengths.sum())
    if len(set(samples.values())) != 1:
        print(f"warning: sample counts differ between configurations: {samples}", flush=True)
    times = {cfg: [] for cfg in configs}
    for _ in range(a.reps):
        for cfg in configs:
            use(cfg)
            if eng.is_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            eng.synthesize(batch)
            times[cfg].append(time.perf_counter() - t0)
    use(configs[0])
    audio_s = samples[configs[0]] / voice.sample_rate
    out = {"gpu": torch.cuda.get_device_name(0) if eng.is_cuda else "cpu", "torch": torch.__version__,
           "sentences": len(seqs),
           "audio_s": round(audio_s, 1), "reps": a.reps, "configs": {}}
    for cfg in configs:
        med = statistics.median(times[cfg])
        ratios = [t / t0 for t, t0 in zip(times[cfg], times[configs[0]])]
        out["configs"][cfg] = {"median_s": round(med, 4), "min_s": round(min(times[cfg]), 4),
                               "x_realtime": round(audio_s / med, 1),
                               "median_ratio_to_first": round(statistics.median(ratios), 4),
                               "times_s": [round(t, 4) for t in times[cfg]]}
        r = out["configs"][cfg]
        print(f"{cfg:8} median {r['median_s']:.4f} s  min {r['min_s']:.4f} s  {r['x_realtime']:9.1f} x RT  "
              f"paired ratio to {configs[0]}: {r['median_ratio_to_first']:.3f}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
