#!/usr/bin/env python3
"""CPU benchmark: this project's local runner vs the `piper` command line, same text, same cores, one run.

Both synthesize the same passage (the first paragraphs of Alice in Wonderland, chapter I, a few minutes
of audio) with the same voice and default noise settings, writing WAV. x-real-time = seconds of speech
produced / wall seconds of the whole command (process start, model load and writing included; pauses
our runner inserts between sentences are not counted as speech). Prints both figures and their ratio.

    python bench/cpu_vs_piper.py [--words 700] [--repeats 2] [--cpus 0-1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def passage(words: int) -> str:
    from jobs.ingest import load_book

    book = load_book(ROOT / "tests" / "data" / "alice-pg11.txt")
    out, n = [], 0
    for par in book.chapters[0].paragraphs:
        out.append(par)
        n += len(par.split())
        if n >= words:
            break
    return "\n".join(out) + "\n"


def timed(cmd: list[str], cpus: str | None) -> float:
    if cpus and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus] + cmd
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=700)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each tool; the median is reported")
    ap.add_argument("--cpus", default=None, help="taskset CPU list for both tools (default: all cores)")
    ap.add_argument("--max-batch", type=int, default=32, help="the CLI's default")
    args = ap.parse_args()

    import pyarrow.parquet as pq
    import soundfile as sf

    from core.voice import resolve_voice

    voice = resolve_voice()
    piper = shutil.which("piper") or str(Path(sys.executable).with_name("piper"))
    with tempfile.TemporaryDirectory(prefix="booktts-bench-") as tmp:
        tmp = Path(tmp)
        text = tmp / "passage.txt"
        text.write_text(passage(args.words), encoding="utf-8")
        ours_t, piper_t, ours_speech, piper_speech = [], [], 0.0, 0.0
        for r in range(args.repeats):
            out = tmp / f"ours{r}"
            ours_t.append(timed([sys.executable, str(ROOT / "cli.py"), "run", str(text), "-o", str(out),
                                 "--format", "wav", "--max-batch", str(args.max_batch)], args.cpus))
            ours_speech = sum(row["duration_s"] for row in pq.read_table(out / "manifest.parquet").to_pylist())
            wav = tmp / f"piper{r}.wav"
            piper_t.append(timed([piper, "-m", str(voice.model_path), "-i", str(text), "-f", str(wav)], args.cpus))
            info = sf.info(str(wav))
            piper_speech = info.frames / info.samplerate
        ours_t.sort()
        piper_t.sort()
        o, p = ours_t[len(ours_t) // 2], piper_t[len(piper_t) // 2]
        result = {
            "words": args.words, "cpus": args.cpus or f"all ({os.cpu_count()})",
            "ours": {"speech_s": round(ours_speech, 1), "wall_s": round(o, 2), "x_real_time": round(ours_speech / o, 2)},
            "piper_cli": {"speech_s": round(piper_speech, 1), "wall_s": round(p, 2), "x_real_time": round(piper_speech / p, 2)},
        }
        result["ratio_ours_over_piper"] = round(result["ours"]["x_real_time"] / result["piper_cli"]["x_real_time"], 3)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
