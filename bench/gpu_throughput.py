"""Throughput of the torch engine on one GPU: whole model, host phoneme ids -> host int16 PCM.

    python bench/gpu_throughput.py --weights carry/joe-fp32.safetensors [--json $OUT/bench.json]
    python bench/gpu_throughput.py --make-data      # (re)write bench/data/alice_ids.npz (needs piper)

Workload: a fixed random sample (seed 0) of the sentences of *Alice in Wonderland*
(``bench/data/alice_ids.npz``: Piper phoneme ids, sentence by sentence, made with
piper's phonemizer by ``--make-data``), in book order, default voice scales. A
configuration cuts the workload into consecutive batches of ``b`` sentences and calls
``TorchEngine.synthesize`` on each (ids in host memory -> int16 PCM in host memory,
everything included: H2D, stage A, bucketing, stage B, D2H). One untimed pass first
(compilation, CUDA-graph recording, cuDNN autotuning), then ``--reps`` timed passes
(wall clock; every call ends synchronized because its result is on the host); the
median pass gives x-real-time = seconds of audio / seconds of wall time. Batch-1
configurations use the first ``--n1`` sentences of the sample.

Also: the decoder alone (CUDA events around the generator on a fixed ``[rows, C,
frames]`` input, median of 20 after warm-up) and a stage profile (CUDA events around
H2D + encoder, duration predictor, expansion + noise, flow, decoder, D2H).
Sections run in order of importance and stop starting new ones past ``--budget-s``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "alice_ids.npz"
BOOKS = [ROOT / "tests" / "data" / "alice-pg11.txt", Path("/work/shared/corpus/alice-pg11.txt")]


# --------------------------------------------------------------------------- data
def make_alice(out: Path = DATA, max_ids: int = 400) -> Path:
    """Phonemize the book sentence by sentence with piper; keep sentences of 4..max_ids ids."""
    from piper import PiperVoice

    from jobs.ingest import load_book
    from jobs.segment import split_sentences
    from core.voice import resolve_voice

    book = next(p for p in BOOKS if p.is_file())
    pv = PiperVoice.load(str(resolve_voice().model_path))
    seqs = []
    for ch in load_book(book).chapters:
        for para in ch.paragraphs:
            for sent in split_sentences(para):
                for ph in pv.phonemize(sent):
                    ids = pv.phonemes_to_ids(ph)
                    if 3 < len(ids) <= max_ids:  # the planner splits longer sentences at clauses
                        seqs.append(ids)
    offsets = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int64)
    np.savez_compressed(out, ids=np.concatenate(seqs).astype(np.uint8), offsets=offsets, source=str(book.name))
    return out


def load_alice(path: Path = DATA) -> list[list[int]]:
    d = np.load(path)
    ids, off = d["ids"].astype(np.int64), d["offsets"]
    return [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]


def alice_workload(voice, n: int, seed: int = 0):
    """The benchmark workload: ``n`` sentences of Alice picked with ``seed`` (in book order) and one
    :class:`~engines.base.SynthesisBatch` of them at the voice's scales, noise seed ``seed``:
    (sentences, batch). Seed 0 is the workload of every table in docs/PERFORMANCE.md."""
    from engines.base import Scales, SynthesisBatch

    seqs = load_alice()
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(seqs), size=min(n, len(seqs)), replace=False))
    seqs = [seqs[i] for i in pick]
    sc = Scales(voice.noise_scale, voice.length_scale, voice.noise_w)
    return seqs, SynthesisBatch.from_sequences(seqs, sc, seed=seed)


# --------------------------------------------------------------------------- measurement
class Bench:
    def __init__(self, args):
        import torch

        from core.voice import voice_from_weights
        from core.voice import resolve_voice

        self.torch = torch
        self.args = args
        self.t_start = time.perf_counter()
        self.voice = voice_from_weights(args.weights) if args.weights else resolve_voice()
        self.sr = self.voice.sample_rate
        self.seqs, _ = alice_workload(self.voice, args.n)
        self.rows: list[dict] = []
        self.out: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": self.rows}
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            self.out["gpu"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
        self.out.update(torch=torch.__version__, n_sentences=len(self.seqs),
                        phoneme_ids=int(sum(map(len, self.seqs))))

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def save(self) -> None:
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(self.out, indent=2, default=str))

    def engine(self, precision: str, compiled: bool, max_batch: int, channels_last: bool = False,
               fused: bool = False):
        from engines import EngineSpec
        from engines.torch_engine import TorchEngine

        spec = EngineSpec(name="torch", precision=precision, device=self.args.device, max_batch=max_batch)
        t0 = time.perf_counter()
        e = TorchEngine(self.voice, spec, weights_path=self.args.weights, compile=compiled, warmup=False,
                        channels_last=channels_last or fused, fused=fused)
        return e, time.perf_counter() - t0

    def whole(self, eng, b: int, label: str, seqs=None) -> dict:
        from engines.base import Scales, SynthesisBatch

        seqs = seqs or self.seqs
        sc = Scales(self.voice.noise_scale, self.voice.length_scale, self.voice.noise_w)
        batches = [SynthesisBatch.from_sequences(seqs[i:i + b], sc, seed=i) for i in range(0, len(seqs), b)]
        t0 = time.perf_counter()
        samples = sum(int(eng.synthesize(x).sample_lengths.sum()) for x in batches)  # untimed warm-up pass
        first = time.perf_counter() - t0
        times = []
        for _ in range(self.args.reps):
            t0 = time.perf_counter()
            for x in batches:
                eng.synthesize(x)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        audio_s = samples / self.sr
        label = label + (" fused" if eng.fused else " NHWC" if eng.channels_last else "")
        row = {"config": label, "precision": eng.info.precision, "compiled": eng.compiled, "batch": b,
               "sentences": len(seqs), "audio_s": round(audio_s, 1), "first_pass_s": round(first, 2),
               "median_s": round(med, 4), "spread_s": round(max(times) - min(times), 4),
               "x_realtime": round(audio_s / med, 1),
               "peak_mem_gib": round(self.torch.cuda.max_memory_allocated() / 2**30, 2)
               if self.torch.cuda.is_available() else None}
        self.rows.append(row)
        self.save()
        print(f"{label:34} b={b:5} {audio_s:8.1f} s audio  median {med:8.4f} s  {row['x_realtime']:10.1f} x RT "
              f"(first pass {first:.1f} s, spread {row['spread_s']:.4f} s)", flush=True)
        return row

    # ----------------------------------------------------------------------- decoder alone
    def decoder_alone(self, eng, rows: int, frames: int, compiled: bool) -> dict:
        torch = self.torch
        dec = eng.dec
        fn = torch.compile(dec, dynamic=False) if compiled else dec
        layout = "fused" if dec.fused else "NHWC" if dec.channels_last else "NCL"
        c = eng.hparams.inter_channels
        z = torch.randn(rows, c, frames, device=eng.device, dtype=eng.dtype)
        lens = torch.full((rows,), frames, device=eng.device)
        times = []
        with torch.inference_mode(), eng._flags(benchmark=True):
            for _ in range(5):
                fn(z, lens)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(z, lens)
            for _ in range(20):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                g.replay()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1000)
        med = statistics.median(times)
        audio_s = rows * frames * eng.hop / self.sr
        row = {"config": f"decoder alone {eng.info.precision} {'compiled' if compiled else 'eager'} {layout} (CUDA graph)",
               "precision": eng.info.precision, "compiled": compiled, "batch": rows, "frames": frames,
               "audio_s": round(audio_s, 1), "median_s": round(med, 5), "x_realtime": round(audio_s / med, 1)}
        self.rows.append(row)
        self.save()
        print(f"{row['config']:44} {rows}x{frames} frames  median {med * 1000:.3f} ms  {row['x_realtime']:.1f} x RT",
              flush=True)
        return row

    # ----------------------------------------------------------------------- profile
    def profile(self, eng, b: int) -> dict:
        """CUDA events around each stage of the engine's pipeline (eager; flow and decoder
        timed separately), summed over the workload; second of two passes."""
        torch = self.torch
        from engines.base import Scales

        sc = Scales(self.voice.noise_scale, self.voice.length_scale, self.voice.noise_w)
        keys = ("h2d+encoder", "duration", "sync+bucketing", "expand+noise", "flow", "decoder+int16", "d2h")
        m = eng.model
        ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        for _ in range(2):
            acc = {k: 0.0 for k in keys}
            for i in range(0, len(self.seqs), b):
                seqs = self.seqs[i:i + b]
                n = len(seqs)
                lens_np = np.array([len(s) for s in seqs])
                ids_np = np.zeros((n, lens_np.max()), np.int64)
                for j, s in enumerate(seqs):
                    ids_np[j, :len(s)] = s
                t = ids_np.shape[1]
                with torch.inference_mode(), eng._flags(benchmark=True):
                    gen = torch.Generator(device=eng.device).manual_seed(i)
                    e0, e1, e2 = ev(), ev(), ev()
                    e0.record()
                    ids = torch.from_numpy(ids_np).pin_memory().to(eng.device, non_blocking=True)
                    lens = torch.from_numpy(lens_np).pin_memory().to(eng.device, non_blocking=True)
                    noise = torch.randn(n, 2, t, generator=gen, device=eng.device) * sc.noise_w
                    c = eng.hparams.inter_channels
                    m_p = torch.zeros(n, c, t, device=eng.device)
                    logs_p = torch.zeros(n, c, t, device=eng.device)
                    dur = torch.zeros(n, t, device=eng.device)
                    frames = torch.zeros(n, dtype=torch.long, device=eng.device)
                    t_dp = 0.0
                    for rows_a, tc in eng.stage_a_chunks(lens_np, t):  # the engine's stage-A chunking
                        idx = torch.from_numpy(rows_a.astype(np.int64)).to(eng.device)
                        a0, a1, a2 = ev(), ev(), ev()
                        a0.record()
                        mask = (torch.arange(tc, device=eng.device)[None] < lens[idx][:, None])[:, None].float()
                        fa = m._fast_a  # the engine's channels-last stage A (FastStageA.forward, split in two)
                        if fa is not None:
                            m3 = mask[:, 0, :, None]
                            x = fa.encode(ids[idx, :tc], lens[idx], m3)
                            mp, lp = fa._prior(x, mask[:, 0], lens[idx])
                            a1.record()
                            logw = fa._durations(x, mask[:, 0], m3, noise[idx, :, :tc], lens[idx])[:, None]
                        else:
                            x, mp, lp = m.enc_p(ids[idx, :tc], mask)
                            a1.record()
                            logw = m.dp.reverse(x, mask, noise[idx, :, :tc] * mask)
                        du = torch.ceil(torch.exp(logw) * mask * sc.length_scale)[:, 0]
                        m_p[idx, :, :tc], logs_p[idx, :, :tc], dur[idx, :tc] = mp, lp, du
                        frames[idx] = torch.clamp_min(du.sum(1), 1).long()
                        a2.record()
                        a2.synchronize()
                        t_dp += a1.elapsed_time(a2) / 1000
                    e1.record()
                    e1.synchronize()
                    acc["h2d+encoder"] += e0.elapsed_time(e1) / 1000 - t_dp
                    acc["duration"] += t_dp
                    w0 = time.perf_counter()
                    fh = frames.cpu().numpy()
                    chunks = eng.stage_b_chunks(fh)
                    acc["sync+bucketing"] += time.perf_counter() - w0
                    eps = torch.randn(n, c, int(fh.max()), generator=gen, device=eng.device)
                    blocks = []
                    for rows, f in chunks:
                        q = [ev() for _ in range(4)]
                        q[0].record()
                        idx = torch.tensor(rows, device=eng.device)
                        mf, lf = m.expand_prior(m_p[idx], logs_p[idx], dur[idx], f)
                        ee = eps[idx][..., :f]
                        ee = torch.nn.functional.pad(ee, (0, f - ee.shape[-1]))
                        z = mf + ee * torch.exp(lf) * sc.noise_scale
                        fr = frames[idx]
                        ymask = (torch.arange(f, device=eng.device)[None] < fr[:, None])[:, None].float()
                        q[1].record()
                        zz = eng.flow.reverse(z, ymask)
                        q[2].record()
                        pcm = eng.dec((zz * ymask).to(eng.dtype), fr, pcm_scale=32767.0)
                        q[3].record()
                        q[3].synchronize()
                        acc["expand+noise"] += q[0].elapsed_time(q[1]) / 1000
                        acc["flow"] += q[1].elapsed_time(q[2]) / 1000
                        acc["decoder+int16"] += q[2].elapsed_time(q[3]) / 1000
                        blocks.append((rows, pcm))
                    w0 = time.perf_counter()  # the engine's packed result: chunk blocks into one pinned buffer
                    need = sum(p[:len(r)].numel() for r, p in blocks)
                    host = torch.empty(need, dtype=torch.int16, pin_memory=True)
                    off = 0
                    for rows, p in blocks:
                        blk = p[:len(rows)]
                        host[off:off + blk.numel()].view(blk.shape).copy_(blk, non_blocking=True)
                        off += blk.numel()
                    torch.cuda.synchronize()
                    del host
                    acc["d2h"] += time.perf_counter() - w0
        total = sum(acc.values())
        row = {"config": f"profile eager {eng.info.precision} b={b}", "stages_s": {k: round(v, 4) for k, v in acc.items()},
               "share": {k: round(v / total, 3) for k, v in acc.items()}, "total_s": round(total, 4)}
        self.out["profile"] = row
        self.save()
        layout = " fused" if eng.fused else " NHWC" if eng.channels_last else ""
        print(f"profile (eager {eng.info.precision}{layout}, b={b}, stage by stage "
              f"with syncs, {total:.3f} s total):")
        for k, v in acc.items():
            print(f"  {k:16} {v * 1000:9.1f} ms  {100 * v / total:5.1f} %")
        return row


def table(rows) -> None:
    print("\n| configuration | precision | batch | audio s | median s | x real-time |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        if "x_realtime" in r:
            b = f"{r['batch']}x{r['frames']}fr" if "frames" in r else r["batch"]
            print(f"| {r['config']} | {r['precision']} | {b} | {r['audio_s']} | {r['median_s']} | {r['x_realtime']:,.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-data", action="store_true")
    ap.add_argument("--weights", default=None, help="exported .safetensors weights (a host without the voice package)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--n", type=int, default=1024, help="sentences in the workload")
    ap.add_argument("--n1", type=int, default=128, help="sentences for batch-1 configurations")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="256,1024")
    ap.add_argument("--sections", default="baseline,decoder,eager,profile,compiled16,nhwc,bf16,compiled_bf16,"
                                           "decoder_compiled")
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--fused", choices=("auto", "0", "1"), default="auto",
                    help="decoder resblocks through the fused Triton kernel (auto: whichever the decoder section "
                         "measured faster; without that section, fused)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.make_data:
        p = make_alice()
        seqs = load_alice(p)
        lens = np.array([len(s) for s in seqs])
        print(f"{p}: {len(seqs)} sentences, {lens.sum()} ids, median {np.median(lens)}, max {lens.max()}")
        return 0
    bench = Bench(a)
    print(f"{bench.out.get('gpu')} torch {bench.out['torch']} {bench.out['date']}; workload {len(bench.seqs)} "
          f"sentences, {bench.out['phoneme_ids']} phoneme ids", flush=True)
    batches = [int(x) for x in a.batches.split(",")]
    sections = a.sections.split(",")
    s1 = bench.seqs[: a.n1]

    def go(name):
        ok = name in sections and bench.elapsed() < a.budget_s
        if name in sections and not ok:
            print(f"[skip {name}: {bench.elapsed():.0f} s elapsed > budget]", flush=True)
        return ok

    def guarded(fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # report and go on with the next section
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"[error in {getattr(fn, '__name__', fn)}: {msg}]", flush=True)
            bench.out.setdefault("errors", []).append(msg)
            bench.save()

    big = max(batches)
    mode = {"channels_last": True, "fused": a.fused != "0"}
    if go("baseline"):
        e32, _ = bench.engine("fp32", False, 1)
        guarded(bench.whole, e32, 1, "eager fp32 (baseline)", s1)
        del e32
    if go("decoder"):  # the decoder alone: cuDNN NHWC convolutions against the fused Triton resblocks
        res = {}
        for fused in (False, True):
            e = guarded(bench.engine, "fp16", False, big, True, fused)
            r = guarded(bench.decoder_alone, e[0], 64, 512, False) if e else None
            res[fused] = r["median_s"] if r else float("inf")
            del e
        if a.fused == "auto":
            mode["fused"] = res[True] <= res[False]
        bench.out["decoder_mode"] = "fused" if mode["fused"] else "NHWC"
    if go("eager"):
        e, _ = bench.engine("fp16", False, big, **mode)
        for b in batches:
            guarded(bench.whole, e, b, "eager fp16")
        if go("profile"):
            guarded(bench.profile, e, big)
        del e
    if go("compiled16"):
        e, build_s = bench.engine("fp16", True, big, **mode)
        for b in [big, 1]:
            if go("compiled16"):
                guarded(bench.whole, e, b, "compiled fp16 + CUDA graphs", s1 if b == 1 else None)
        del e
    if go("nhwc"):  # the decoder without the fused kernel (cuDNN NHWC), measured in the same run
        e, _ = bench.engine("fp16", False, big, channels_last=True, fused=False)
        guarded(bench.whole, e, big, "eager fp16")
        del e
    if go("bf16"):
        e, _ = bench.engine("bf16", False, big, **mode)
        guarded(bench.whole, e, big, "eager bf16")
        del e
    if go("compiled_bf16"):
        e, _ = bench.engine("bf16", True, big, **mode)
        guarded(bench.whole, e, big, "compiled bf16 + CUDA graphs")
        del e
    if go("decoder_compiled"):
        e, _ = bench.engine("fp16", False, big, **mode)
        guarded(bench.decoder_alone, e, 64, 512, True)
        del e
    bench.out["elapsed_s"] = round(bench.elapsed(), 1)
    bench.save()
    table(bench.rows)
    base = next((r for r in bench.rows if r["config"].startswith("eager fp32")), None)
    best = max((r for r in bench.rows if "sentences" in r), key=lambda r: r["x_realtime"], default=None)
    if base and best:
        print(f"\nbest whole-model: {best['config']} b={best['batch']}: {best['x_realtime']:,.0f} x RT = "
              f"{best['x_realtime'] / base['x_realtime']:.1f} x the eager fp32 batch-1 baseline "
              f"({base['x_realtime']:,.0f} x RT)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
