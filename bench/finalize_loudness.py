"""What loudness costs finalize: CPU seconds and peak memory per hour of speech, EBU against none.

    BOOKTTS_TEST_ENGINES=1 python bench/finalize_loudness.py [--hours 2] [--repeats 2] [--json FILE]

Makes one plain-text book read as ONE chapter (Alice in Wonderland's prose from tests/data, its
chapter headings dropped, repeated until the fake engine speaks about ``--hours`` hours of it),
synthesizes it with `cli.py run --engine fake` (tones, as long as speech: the batches' audio and
records as any engine leaves them, each utterance's loudness statistics included; with
``--synth-loudness none`` the records have none, and deliver measures each chapter instead), then delivers it again with
`cli.py deliver OUT --loudness MODE` for each mode, ``--repeats`` times, each in a child process:
printed are its CPU seconds (user + system, the child and everything it waited for), its peak
resident memory (the largest of those processes) and wall seconds, per hour of speech. ``deliver``
runs the same chapter-writing code as finalize (jobs.finalize._assemble) and loads no engine.
``--work DIR`` keeps the synthesized job there (reused when it exists).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALICE = ROOT / "tests" / "data" / "alice-pg11.txt"
#: Words per hour of the fake engine's tones, about (the hours printed are the job's own).
WORDS_PER_HOUR = 12600


def book_text(hours: float) -> str:
    text = ALICE.read_text(encoding="utf-8")
    start = text.find("Alice was beginning")
    end = text.find("*** END")
    body = text[start:end if end > 0 else len(text)]
    paras = [re.sub(r"\s+", " ", p).strip() for p in body.split("\n\n")]
    paras = [p for p in paras if p and not re.match(r"^(CHAPTER|\*|[IVXL]+\.)", p) and len(p.split()) > 3]
    want, out, k = hours * WORDS_PER_HOUR, [], 0
    while sum(len(p.split()) for p in out) < want:  # whole paragraphs, repeated, until that many words
        out.append(paras[k % len(paras)])
        k += 1
    return "\n\n".join(out) + "\n"


def _measure(args: list[str]) -> None:
    """In a fresh process (so that earlier children do not count): run ``args``, print its usage."""
    t0 = time.perf_counter()
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    # ru_maxrss of the children: the largest of any one of them (KiB on Linux)
    print(json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mib": ru.ru_maxrss / 1024.0, "wall_s": wall}))


def run_child(args: list[str]) -> dict:
    """Run ``args`` in a child; its CPU seconds, peak RSS (MiB) and wall seconds."""
    res = subprocess.run([sys.executable, __file__, "--measure", *args], cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stderr.strip()[-2000:] or f"{' '.join(args)} failed")
    return json.loads(res.stdout.strip().splitlines()[-1])


def synthesize_once(work: Path, out: Path, hours: float, run_args: list[str]) -> None:
    """The benchmark's job: the book of ``hours`` read by ``--engine fake`` into ``out`` with
    ``run_args``, unless a finished job is already there (``--work`` reused)."""
    if (out / "manifest.parquet").exists():
        return
    book = work / "book.txt"
    book.write_text(book_text(hours), encoding="utf-8")
    t0 = time.perf_counter()
    run_child([sys.executable, "cli.py", "run", str(book), "-o", str(out), "--engine", "fake", *run_args])
    print(f"synthesized in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--measure":
        return _measure(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=2.0, help="about this much speech in the one chapter")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", default="none,ebu", help="comma-separated --loudness modes, measured in turn")
    ap.add_argument("--synth-loudness", default="ebu", help="--loudness of the synthesizing run (none: records "
                    "without statistics)")
    ap.add_argument("--work", type=Path, default=None, help="keep the synthesized job here (reused)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    os.environ.setdefault("BOOKTTS_TEST_ENGINES", "1")
    tmp = None
    if a.work is None:
        tmp = Path(tempfile.mkdtemp(prefix="finalize-loudness-"))
        work = tmp
    else:
        work = a.work
        work.mkdir(parents=True, exist_ok=True)
    out = work / "job"
    py = sys.executable
    try:
        synthesize_once(work, out, a.hours, ["--loudness", a.synth_loudness])
        summary = json.loads((out / ".work" / "finalized.json").read_text())
        hours = summary["audio_s"] / 3600.0
        chapters = len(summary["chapter_files"])
        print(f"job: {out} ({hours:.2f} h of audio, {chapters} chapter file(s))", file=sys.stderr)
        rows = []
        for rep in range(a.repeats):
            for mode in a.modes.split(","):
                m = run_child([py, "cli.py", "deliver", "-o", str(out), "--loudness", mode])
                row = {"mode": mode, "repeat": rep, "hours": round(hours, 3), "chapters": chapters, **m,
                       "cpu_s_per_hour": m["cpu_s"] / hours}
                rows.append(row)
                print(json.dumps(row), flush=True)
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"\n{'mode':6} {'CPU s/h':>8} {'wall s':>8} {'peak RSS MiB':>13}")
        for r in rows:
            print(f"{r['mode']:6} {r['cpu_s_per_hour']:8.2f} {r['wall_s']:8.1f} {r['peak_rss_mib']:13.0f}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
