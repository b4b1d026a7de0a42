"""What must hold of a job directory once a job ends, whatever happened on the way (issue 15):
every planned utterance exactly once in the manifest, each row's audio the fake engine's audio of
its own utterance at the manifest's offsets, chapter files ending where their rows do, one batch
record and one batch audio file per batch, and no temp file anywhere."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import soundfile as sf

from core.files import TMP_MARK, TMP_NAME
from tests.fake_audio import assert_rows_play_their_own_audio

KEY = ("book_index", "chapter_index", "utterance_index")


def temp_files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if TMP_NAME.match(p.name) or TMP_MARK in p.name)


def check_job_dir(out: Path, job_id: str, batches: int) -> int:
    """Assert the invariant on ``out``; returns the number of utterances whose audio was checked."""
    out = Path(out)
    assert not temp_files(out), f"temp files left in {out}: {temp_files(out)}"
    plan = pq.read_table(out / "plan.parquet").to_pylist()
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    planned = {tuple(r[k] for k in KEY): r["text"] for r in plan}
    counts = Counter(tuple(r[k] for k in KEY) for r in rows)
    dup = {k: n for k, n in counts.items() if n != 1}
    assert not dup, f"utterances in the manifest more than once: {dup}"
    assert set(counts) == set(planned), (f"missing {sorted(set(planned) - set(counts))}, "
                                         f"unplanned {sorted(set(counts) - set(planned))}")
    for r in rows:
        assert r["text"] == planned[tuple(r[k] for k in KEY)], r
    checked = assert_rows_play_their_own_audio(out)
    assert checked == sum(r["status"] == "synthesized" for r in rows) > 0
    # chapter files: exactly the manifest's, each row starting where the one before it (and its pause) ends
    by_chapter: dict[str, list[dict]] = {}
    for r in rows:
        by_chapter.setdefault(r["chapter_path"], []).append(r)
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*.flac")} | {str(p.relative_to(out))
                                                                       for p in out.rglob("*.wav")
                                                                       if ".work" not in p.parts}
    assert on_disk == set(by_chapter), f"chapter files {sorted(on_disk)} vs manifest {sorted(by_chapter)}"
    for path, rs in by_chapter.items():
        sr = sf.info(str(out / path)).samplerate
        t = 0.0
        for r in rs:
            assert abs(r["start_s"] - t) <= 1.5 / sr, f"{path}: row {r['utterance_index']} starts at {r['start_s']}, not {t}"
            t = r["start_s"] + r["duration_s"] + r["pause_after_s"]
        assert abs(sf.info(str(out / path)).frames - t * sr) <= 1.5, path
    # one record and one audio file per batch, all of this job
    work = out / ".work" / "batches"
    wavs = Counter(p.name.split("-")[0] for p in work.glob("b*.wav"))
    recs = Counter(p.name.split("-")[0] for p in work.glob("b*.json"))
    assert sorted(wavs) == sorted(recs) == [f"b{b:06d}" for b in range(batches)] and \
        set(wavs.values()) == set(recs.values()) == {1}, f"batch files: {sorted(p.name for p in work.iterdir())}"
    assert all(job_id in p.name for p in work.iterdir()), sorted(p.name for p in work.iterdir())
    return checked
