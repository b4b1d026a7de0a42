"""Check a finished job directory: every planned utterance once in the manifest, in order, and
chapter files whose lengths match the manifest's timings.

    python bench/check_job.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq
import soundfile as sf


def main(out: str) -> int:
    out = Path(out)
    plan = pq.read_table(out / "plan.parquet").to_pylist()
    man = pq.read_table(out / "manifest.parquet").to_pylist()
    key = lambda r: (r["book_index"], r["chapter_index"], r["utterance_index"])  # noqa: E731
    planned = [key(r) for r in plan]
    listed = [key(r) for r in man]
    problems = []
    if sorted(planned) != sorted(listed) or len(set(listed)) != len(listed):
        problems.append(f"manifest has {len(listed)} rows ({len(set(listed))} distinct), plan {len(planned)}")
    if listed != sorted(listed):
        problems.append("manifest rows are not in book order")
    audio_s = 0.0
    for path in sorted({r["chapter_path"] for r in man}):
        rows = [r for r in man if r["chapter_path"] == path]
        info = sf.info(str(out / path))
        end = max(r["start_s"] + r["duration_s"] + r["pause_after_s"] for r in rows)
        if abs(info.duration - end) > 0.05:
            problems.append(f"{path}: file {info.duration:.2f} s, manifest ends at {end:.2f} s")
        audio_s += info.duration
    print(f"{out}: {len(man)} utterances, {len({r['chapter_path'] for r in man})} chapter files, "
          f"{audio_s / 3600:.2f} h of audio; statuses {sorted({r['status'] for r in man})}")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
