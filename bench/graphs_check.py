"""Stage A's CUDA graphs (``BOOKTTS_TORCH_GRAPHS``) on a GPU: the same audio, and how much faster.

    python bench/graphs_check.py --weights carry/joe-fp16.safetensors [--n 1024] [--reps 9] [--json OUT.json]

One engine is built (fp16, lazy warm-up, defaults otherwise) and switched between three
configurations without a rebuild (:attr:`TorchEngine.stage_a_graphs`, :attr:`TorchEngine.pad_stage_a`):

* ``off``: no graphs, no row padding: the engine with ``BOOKTTS_TORCH_GRAPHS=0`` (as before graphs);
* ``pad``: no graphs, stage A's chunks padded as with graphs: the same shapes as ``on``, eager;
* ``on_a``: stage A's graphs only (each chunk shape eager when first seen, captured the second
  time, replayed after that), stage B eager;
* ``on``: the graphs of both stages (the default on CUDA): stage B's chunks also replayed as
  graphs per (rows, frame bucket).

Checks (exit status 1 if one fails), on the workload of ``bench/gpu_throughput.py`` (``--n``
sentences of Alice, one batch, seed 0) and on a second batch of other sentences (seed 1, other
partial chunks, so other graphs):

1. ``on`` == ``pad``, bit for bit (int16 PCM and frame counts), at the first sight, the capture
   and a replay of every shape, and again with the pipelined path (2 groups: stage A on a side
   stream). This is the graphs themselves: same kernels, same shapes.
2. ``on`` == ``off``, bit for bit: padding rows change no real row. Every op of stage A is per
   row, but a cuBLAS GEMM (the attention's batched products) may pick another algorithm for
   another batch count; if this one fails while 1 holds, the differences are that rounding.

Timing: passes interleaved (rep 1 of off, pad, on, rep 2, ...: the GPU's speed drifts between
and within calls), whole ``synthesize`` (host ids to host PCM) and stage A alone (the engine's
chunk loop, synchronized at the end); per configuration the median, and the median of per-rep
ratios to ``off``. Captures and replays come from :meth:`TorchEngine.stage_a_graph_stats`.
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

CONFIGS = ("off", "pad", "on_a", "on")
#: (stage_a_graphs, pad_stage_a, stage_b_graphs) of each configuration
SETTINGS = {"off": (False, False, False), "pad": (False, True, False), "on_a": (True, None, False),
            "on": (True, None, True)}
#: passes of ``on`` before it replays every shape of a batch: first sight, capture
SIGHTS = ("first-sight", "capture", "replay")


def compare(a, b) -> dict:
    """Two results of the same batch: items whose frame counts differ, and over the others the
    samples that differ and the largest difference (int16 steps)."""
    import numpy as np

    same = a.sample_lengths == b.sample_lengths
    samples, worst = 0, 0
    for i in np.flatnonzero(same):
        d = np.abs(a.item(int(i)).astype(np.int32) - b.item(int(i)))
        if d.size:
            samples += int((d > 0).sum())
            worst = max(worst, int(d.max()))
    out = {"frames_differ": int((~same).sum()), "samples_differ": samples, "max_diff": worst}
    out["identical"] = out["frames_differ"] == 0 and samples == 0
    return out


def main(argv=None) -> int:
    import numpy as np
    import torch

    from engines import EngineSpec
    from engines.base import Scales
    from engines.torch_engine import TorchEngine
    from engines.weights import voice_from_weights
    from gpu_throughput import alice_workload

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if not a.device.startswith("cuda") or not torch.cuda.is_available():
        ap.error("CUDA graphs need a CUDA device")

    voice = voice_from_weights(a.weights)
    sc = Scales(voice.noise_scale, voice.length_scale, voice.noise_w)
    batches = [alice_workload(voice, a.n, seed)[1] for seed in (0, 1)]
    eng = TorchEngine(voice, EngineSpec(name="torch", precision="fp16", device=a.device, max_batch=a.n),
                      weights_path=a.weights, warmup=False)
    if not eng.fast_stage_a:
        print("stage A is not the channels-last eager path here: no graphs to check", flush=True)
        return 1
    print(f"built: stage_a_graphs={eng.stage_a_graphs} (default), stage_a_gemm={eng.info.extra['stage_a_gemm']}, "
          f"pipeline={eng.pipeline}", flush=True)

    def use(cfg: str) -> None:
        eng.stage_a_graphs, eng.pad_stage_a, eng.stage_b_graphs = SETTINGS[cfg]

    out = {"gpu": torch.cuda.get_device_name(eng.device), "torch": torch.__version__, "sentences": a.n,
           "reps": a.reps, "checks": {}, "configs": {}}
    ok = True

    def check(name: str, got, want) -> None:
        nonlocal ok
        r = compare(got, want)
        out["checks"][name] = r
        ok = ok and r["identical"]
        print(f"  {name:52} {'identical' if r['identical'] else 'DIFFERENT'}  frames differ {r['frames_differ']}, "
              f"samples differ {r['samples_differ']}, max {r['max_diff']}", flush=True)

    # ---- correctness
    print("checks (int16 PCM and frame counts, bit for bit):", flush=True)
    reserved0 = torch.cuda.memory_reserved(eng.device)
    for bi, batch in enumerate(batches):
        use("off")
        ref_off = eng.synthesize(batch)
        use("pad")
        ref_pad = eng.synthesize(batch)
        use("on")
        for sight in SIGHTS:
            got = eng.synthesize(batch)
            check(f"batch {bi} on({sight}) == pad", got, ref_pad)
        check(f"batch {bi} on == off", got, ref_off)
    # the pipelined path: stage A on a side stream, captured and replayed there (graphs dropped first);
    # the prior noise is drawn per group, so it has its own reference
    saved = eng.pipeline
    eng.pipeline = 2
    try:
        use("pad")
        ref_pad = eng.synthesize(batches[0])
        use("on")
        eng.reset_graphs()
        for sight in SIGHTS:
            check(f"batch 0 pipelined on({sight}) == pipelined pad", eng.synthesize(batches[0]), ref_pad)
    finally:
        eng.pipeline = saved
    stats = eng.stage_a_graph_stats()
    out["stats_after_checks"] = stats
    out["graph_memory_reserved_mib"] = round((torch.cuda.memory_reserved(eng.device) - reserved0) / 2**20, 1)
    print(f"graphs after checks: {stats}", flush=True)
    if not stats["on"]:
        print(f"graphs were turned off: {stats.get('error')}", flush=True)
        ok = False

    # ---- timing
    batch = batches[0]
    audio_s = float(eng.synthesize(batch).sample_lengths.sum()) / voice.sample_rate
    chunks = eng.stage_a_chunks(batch.lengths, batch.phoneme_ids.shape[1])
    ids_all = torch.from_numpy(batch.phoneme_ids).to(eng.device)
    lens_all = torch.from_numpy(batch.lengths).to(eng.device)
    b, t = batch.phoneme_ids.shape
    noise = torch.randn(b, 2, t, device=eng.device) * float(sc.noise_w)
    c = eng.hparams.inter_channels
    m_p, logs_p = torch.zeros(b, c, t, device=eng.device), torch.zeros(b, c, t, device=eng.device)
    durations, frames = torch.zeros(b, t, device=eng.device), torch.zeros(b, dtype=torch.long, device=eng.device)

    def stage_a_pass() -> None:
        """The engine's stage-A chunk loop (TorchEngine._synthesize's launch_a, one group): each chunk's
        rows scattered into the batch's tensors."""
        with torch.inference_mode(), eng._flags(benchmark=False):
            for rows, tc in chunks:
                n = len(rows)
                idx = torch.from_numpy(rows.astype(np.int64)).to(eng.device, non_blocking=True)
                mp, lp, du, fr = eng._run_stage_a(ids_all[idx, :tc], lens_all[idx], noise[idx, :, :tc],
                                                  float(sc.length_scale))
                m_p[idx, :, :tc] = mp[:n]
                logs_p[idx, :, :tc] = lp[:n]
                durations[idx, :tc] = du[:n]
                frames[idx] = fr[:n]

    for cfg in CONFIGS:  # every shape of the stage-A loop seen twice more (on: captured) before timing
        use(cfg)
        stage_a_pass()
        stage_a_pass()
    times = {(kind, cfg): [] for kind in ("batch", "stage_a") for cfg in CONFIGS}
    for _ in range(a.reps):
        for cfg in CONFIGS:
            use(cfg)
            for kind, run in (("batch", lambda: eng.synthesize(batch)), ("stage_a", stage_a_pass)):
                torch.cuda.synchronize(eng.device)
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize(eng.device)
                times[(kind, cfg)].append(time.perf_counter() - t0)
    use("on")
    out["stats_after_timing"] = eng.stage_a_graph_stats()
    out["stage_b_stats"] = eng._graphs_b.stats.as_dict() if eng._graphs_b is not None else None
    print(f"stage B graphs: {out['stage_b_stats']}", flush=True)
    out["audio_s"] = round(audio_s, 1)
    out["stage_a_chunks"] = len(chunks)
    print(f"\n{a.n} sentences, {audio_s:.0f} s of audio, {len(chunks)} stage-A chunks, {a.reps} interleaved reps",
          flush=True)
    print(f"{'config':6} {'batch median':>13} {'x RT':>9} {'ratio/off':>10}   {'stage A median':>15} {'ratio/off':>10}",
          flush=True)
    for cfg in CONFIGS:
        row = {}
        for kind in ("batch", "stage_a"):
            ts = times[(kind, cfg)]
            ratios = [t / t0 for t, t0 in zip(ts, times[(kind, "off")])]
            row[kind] = {"median_s": round(statistics.median(ts), 5), "min_s": round(min(ts), 5),
                         "median_ratio_to_off": round(statistics.median(ratios), 4),
                         "times_s": [round(t, 5) for t in ts]}
        row["x_realtime"] = round(audio_s / row["batch"]["median_s"], 1)
        out["configs"][cfg] = row
        print(f"{cfg:6} {row['batch']['median_s']:12.4f}s {row['x_realtime']:9.1f} "
              f"{row['batch']['median_ratio_to_off']:10.3f}   {row['stage_a']['median_s'] * 1e3:13.2f}ms "
              f"{row['stage_a']['median_ratio_to_off']:10.3f}", flush=True)
    print(f"graphs: {out['stats_after_timing']}; reserved for them (and anything else new): "
          f"{out['graph_memory_reserved_mib']} MiB", flush=True)
    out["ok"] = ok
    print("OK: graphs change no sample" if ok else "FAILED: see the checks above", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
