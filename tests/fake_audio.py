"""Check a finished job directory against the fake engine: every manifest row plays its own audio.

The fake engine (engines/fake.py) turns each phoneme id into a tone whose pitch depends on the id,
with a length fixed by the number of ids, independently of the batch an utterance was in. So the
audio of one utterance can be made again from its own phoneme ids (plan.parquet) and compared,
sample for sample, with the slice of its chapter file that the manifest gives it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf


def assert_rows_play_their_own_audio(out: Path) -> int:
    """Every synthesized row of ``out``'s manifest is, at its start_s/duration_s in its chapter
    file, exactly the fake engine's audio of that row's own utterance; each chapter file ends
    where its last row (and pause) ends. Returns the number of rows checked."""
    from engines.base import SynthesisBatch
    from engines.fake import FakeEngine
    from jobs.pipeline import _normalize, load_job

    job = load_job(Path(out))
    sr = job.sample_rate
    engine = FakeEngine(sample_rate=sr, hop_length=job.voice.hop_length)
    phonemes = {r.key: r.utt.phoneme_ids for r in job.rows}
    rows = pq.read_table(Path(out) / "manifest.parquet").to_pylist()
    keys = [(r["book_index"], r["chapter_index"], r["utterance_index"]) for r in rows]
    assert sorted(keys) == sorted(phonemes), "the manifest lists exactly the job's planned utterances"
    chapters = {p: sf.read(str(Path(out) / p), dtype="int16")[0] for p in {r["chapter_path"] for r in rows}}
    checked = 0
    for key, r in zip(keys, rows):
        audio = chapters[r["chapter_path"]]
        start, n = round(r["start_s"] * sr), round(r["duration_s"] * sr)
        if r["status"] != "synthesized":
            assert n == 0, r
            continue
        want = engine.synthesize(SynthesisBatch.from_sequences([phonemes[key]], job.scales)).item(0)
        if job.config.normalize:
            want = _normalize(want)
        got = audio[start:start + n]
        assert len(got) == len(want) and np.array_equal(got, want), \
            f"row {key} ({r['text'][:40]!r}) does not play its own audio in {r['chapter_path']}"
        checked += 1
    for path, audio in chapters.items():
        last = [r for r in rows if r["chapter_path"] == path][-1]
        assert len(audio) == round((last["start_s"] + last["duration_s"] + last["pause_after_s"]) * sr), path
    return checked
