"""Check a finished job directory against the fake engine: every manifest row plays its own audio.

The fake engine (engines/fake.py) turns each phoneme id into a tone whose pitch depends on the id,
with a length fixed by the number of ids, independently of the batch an utterance was in. So the
audio of one utterance can be made again from its own phoneme ids (plan.parquet) and compared,
sample for sample, with the slice of its chapter file that the manifest gives it. Where the job
applied a loudness gain (``--loudness ebu``, the default), the expected audio gets the gain that
``loudness.json`` reports for its chapter (and the fake tones never need limiting: checked), so
every sample still matches to within one step of rounding.
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
    from jobs.job import load_job
    from jobs.synthesize import _normalize

    job = load_job(Path(out))
    sr = job.sample_rate
    engine = FakeEngine(sample_rate=sr, hop_length=job.voice.hop_length)
    phonemes = {r.key: r.utt.phoneme_ids for r in job.rows}
    rows = pq.read_table(Path(out) / "manifest.parquet").to_pylist()
    keys = [(r["book_index"], r["chapter_index"], r["utterance_index"]) for r in rows]
    assert sorted(keys) == sorted(phonemes), "the manifest lists exactly the job's planned utterances"
    chapters = {p: sf.read(str(Path(out) / p), dtype="int16")[0] for p in {r["chapter_path"] for r in rows}}
    gains = {p: 1.0 for p in chapters}
    if job.config.loudness != "none":
        import json

        assert job.config.loudness == "ebu", "ACX resamples: the samples cannot be compared one by one"
        for c in json.loads((Path(out) / "loudness.json").read_text())["chapters"]:
            assert not c["limited"], c
            gains[c["file"]] = c["gain"]
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
        if gains[r["chapter_path"]] != 1.0:
            from jobs.loudness import to_int16

            want = to_int16(want.astype(np.float32) / 32768.0 * np.float32(gains[r["chapter_path"]]))
        got = audio[start:start + n]
        close = len(got) == len(want) and int(np.abs(got.astype(np.int32) - want).max(initial=0)) <= 1
        assert close and (np.any(got) or not np.any(want)), \
            f"row {key} ({r['text'][:40]!r}) does not play its own audio in {r['chapter_path']}"
        checked += 1
    for path, audio in chapters.items():
        last = [r for r in rows if r["chapter_path"] == path][-1]
        assert len(audio) == round((last["start_s"] + last["duration_s"] + last["pause_after_s"]) * sr), path
    return checked
