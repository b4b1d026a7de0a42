"""Where the wall time of a local run (`cli.py run`) goes, phase by phase.

    python bench/local_phases.py BOOK... [--engine fake|onnx|torch|tensorrt] [--device cuda:0] ...
    python bench/local_phases.py --job PLANNED_DIR --voice W.safetensors --engine torch --device cuda:0 ...

With BOOKs, the job is planned first (timed) into a fresh directory. With ``--job``, the job
planned elsewhere (`cli.py plan BOOK -o DIR` on a host with piper-tts) is copied (its
``job.json`` and ``plan.parquet`` only) into a fresh directory, so that DIR is never changed
and every run starts with no batch done; ``--voice`` may name the exported weights, as for
`cli.py run -o DIR`. Then the engine is built (timed) and the job is run as `cli.py run` runs it
(:func:`jobs.runner.run_local`), ``--repeat`` times on fresh copies with the same engine.

Printed: one JSON object per run (``--json FILE`` also writes them all), then a table.
Phases (seconds): ``plan``; ``engine_load``; ``synth_loop`` (first synthesis to the last batch
handed to the writer); ``engine_busy`` (inside the engine) and ``engine_share`` (engine_busy / synth_loop);
``write`` (the writer thread busy) and ``write_wait`` (the loop waiting for it); ``chapters_early``
(chapter threads busy, summed) for ``chapters_early_n`` chapters, the first written
``first_chapter_s`` after the run started; ``chapters_tail`` (after the last
batch: chapters still queued, those being written); ``finalize`` (the final call: what is left and
the manifest); ``run`` (run_local, all of it); ``total`` (plan + engine_load + run).

``--serial`` runs the loop without overlap instead (``run_batch`` per batch, then ``finalize``),
for comparison. ``--finalize-only`` also times a re-run with every batch done (chapter files,
manifest and finalized mark removed first): the resume that only finalizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLUMNS = ["plan", "engine_load", "synth_loop", "engine_busy", "engine_share", "write", "write_wait", "chapters_early",
           "chapters_early_n", "first_chapter_s", "chapters_tail", "finalize", "run", "total", "finalize_only"]


def fresh_copy(planned: Path, parent: Path, n: int) -> Path:
    out = parent / f"run{n}"
    out.mkdir(parents=True)
    for name in ("job.json", "plan.parquet"):
        shutil.copy2(planned / name, out / name)
    return out


def serial_run(job, engine) -> dict:
    """The loop without overlap: each batch synthesized and written in turn, then finalize."""
    from jobs.finalize import finalize
    from jobs.synthesize import run_batch

    t0 = time.perf_counter()
    audio = 0
    for b in job.pending_batches():
        rec = run_batch(job, b, engine, worker="local")
        audio += rec.audio_samples
    loop = time.perf_counter() - t0
    t = time.perf_counter()
    finalize(job)
    return {"synth_loop": loop, "finalize": time.perf_counter() - t, "run": time.perf_counter() - t0,
            "audio_s": audio / job.sample_rate}


def finalize_only(job, engine) -> float:
    """A re-run of the job with every batch done: chapter files, manifest and mark removed first."""
    from jobs.finalize import selected_chapters
    from jobs.job import FINALIZED_FILE, MANIFEST_FILE, WORK_DIR, load_job
    from jobs.runner import run_local

    for _, _, ch, _ in selected_chapters(job):
        (job.out_dir / ch["file"]).unlink(missing_ok=True)
    (job.out_dir / MANIFEST_FILE).unlink()
    (job.out_dir / WORK_DIR / FINALIZED_FILE).unlink()
    t = time.perf_counter()
    run_local(load_job(job.out_dir), engine)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("books", nargs="*", type=Path)
    ap.add_argument("--job", type=Path, help="a job directory planned already (`cli.py plan BOOK -o DIR`)")
    ap.add_argument("--engine", default="fake", choices=["fake", "onnx", "torch", "tensorrt"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--voice", default=None, help="voice (default: the job's; with --job: may be exported weights)")
    ap.add_argument("--max-batch", type=int, default=None, help="when planning BOOKs (default: the engine's default)")
    ap.add_argument("--max-batch-phonemes", type=int, default=None)
    ap.add_argument("--order", default="plan", choices=["plan", "chapters"], help="order of the batches")
    ap.add_argument("--no-early", action="store_true", help="no early chapter writes (all at the end)")
    ap.add_argument("--serial", action="store_true", help="no overlap at all: run_batch per batch, then finalize")
    ap.add_argument("--finalize-only", action="store_true", help="also time a re-run with every batch done")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None, help="where the runs' directories go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the runs' directories")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if bool(args.books) == bool(args.job):
        ap.error("give BOOK files or --job DIR (one of them)")

    from engines import EngineSpec, load_engine
    from jobs.calibration import CalibrationCorpus
    from jobs.config import JobConfig, batch_defaults
    from jobs.job import open_planned_job
    from jobs.prepare import prepare_job
    from jobs.runner import run_local

    spec = EngineSpec(name=args.engine, precision=args.precision, device=args.device, threads=args.threads)
    work = Path(tempfile.mkdtemp(prefix="local-phases-", dir=args.work))
    results = []
    engine = None
    try:
        for n in range(args.repeat):
            row: dict = {"engine": args.engine, "device": args.device, "precision": args.precision,
                         "order": args.order, "mode": "serial" if args.serial else
                         ("no-early" if args.no_early else "overlap"), "repeat": n, "cores": os.cpu_count()}
            t = time.perf_counter()
            if args.books:
                mb, mbp = batch_defaults(spec)
                cfg = JobConfig(voice=args.voice or JobConfig.voice, max_batch=args.max_batch or mb,
                                max_batch_phonemes=args.max_batch_phonemes or mbp)
                job = prepare_job(list(args.books), work / f"run{n}", cfg)
                row["plan"] = time.perf_counter() - t
            else:
                job = open_planned_job(fresh_copy(args.job, work, n), args.voice)
                row["plan"] = 0.0
                row["planned_in"] = str(args.job)
            s = job.meta["summary"]
            row.update(utterances=s["utterances"], batches=s["batches"], max_batch=job.config.max_batch)
            if engine is None:
                t = time.perf_counter()
                pending_est = sum(job.batch_estimated_seconds(b) for b in job.pending_batches())
                engine = load_engine(dataclasses.replace(spec, max_batch=job.config.max_batch, workload_s=pending_est),
                                     job.voice, calibration=CalibrationCorpus())
                row["engine_load"] = time.perf_counter() - t
            else:
                row["engine_load"] = 0.0
            if args.serial:
                row.update(serial_run(job, engine))
            else:
                t = time.perf_counter()
                stats = run_local(job, engine, order=args.order, early_chapters=not args.no_early)
                row["run"] = time.perf_counter() - t
                row.update(stats.phases, audio_s=stats.audio_s)
                if row.get("synth_loop"):
                    row["engine_share"] = row["engine_busy"] / row["synth_loop"]
            row["total"] = row["plan"] + row["engine_load"] + row["run"]
            if args.finalize_only:
                row["finalize_only"] = finalize_only(job, engine)
            row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
            print(json.dumps(row), flush=True)
            results.append(row)
            if not args.keep:
                shutil.rmtree(job.out_dir, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print()
    print("  ".join(f"{c:>12s}" for c in ["phase"] + [f"run {r['repeat']}" for r in results]))
    for c in COLUMNS:
        if any(c in r for r in results):
            vals = [r.get(c) for r in results]
            print("  ".join([f"{c:>12s}"] + [f"{v:12.3f}" if isinstance(v, float) else f"{str(v):>12s}" for v in vals]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
