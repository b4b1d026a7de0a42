"""Captions a person can read (issue 28): at most two lines of 42 characters and 7 seconds per cue,
long sentences cut at clause ends or between words, times from the engine's phoneme durations where
the manifest has them, else shared out by the words' lengths; checked on the caption files of a
whole chapter of Alice (fake engine: audio content does not matter here, only times and text)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs import captions
from jobs.config import JobConfig
from jobs.prepare import prepare_job
from jobs.runner import run_local

DATA = Path(__file__).resolve().parents[1] / "data"
TOL = 0.0015  # cue times are written in whole milliseconds


def read_cues(text: str, sep: str) -> list[dict]:
    """Each cue of an SRT (sep ",") or WebVTT (sep ".") file: start, end, its lines, its word tags."""
    stamp = r"(\d\d):(\d\d):(\d\d)" + re.escape(sep) + r"(\d\d\d)"
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        at = next((k for k, line in enumerate(lines) if "-->" in line), None)
        if at is None:
            continue
        g = [int(x) for x in re.fullmatch(stamp + " --> " + stamp, lines[at]).groups()]
        body = lines[at + 1:]
        tags = [int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000
                for h, m, s, ms in re.findall(r"<(\d\d):(\d\d):(\d\d)\.(\d\d\d)>", "\n".join(body))]
        out.append({"start": g[0] * 3600 + g[1] * 60 + g[2] + g[3] / 1000,
                    "end": g[4] * 3600 + g[5] * 60 + g[6] + g[7] / 1000,
                    "lines": [re.sub(r"<[^>]+>", "", line) for line in body], "tags": tags})
    return out


@pytest.fixture(scope="module")
def long_chapter(tmp_path_factory, voice):
    """Chapter I of Alice (about 2,200 words, sentences up to ~90 words) with SRT and VTT captions."""
    from engines.fake import FakeEngine

    out = tmp_path_factory.mktemp("captions") / "out"
    book = out.parent / "alice.txt"
    shutil.copy(DATA / "alice-pg11.txt", book)
    job = prepare_job([book], out, JobConfig(chapters="1", loudness="none", captions="srt,vtt", announce=False))
    run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
    rows = [r for r in pq.read_table(out / "manifest.parquet").to_pylist() if r["duration_s"] > 0]
    audio = out / rows[0]["chapter_path"]
    rows = [r for r in rows if r["duration_s"] > 0]
    return rows, {fmt: read_cues(audio.with_suffix(f".{fmt}").read_text(encoding="utf-8"), sep)
                  for fmt, sep in (("srt", ","), ("vtt", "."))}


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_every_cue_of_a_long_chapter_is_readable(long_chapter, fmt):
    rows, files = long_chapter
    cues = files[fmt]
    assert len(cues) > len(rows), "long sentences are split into several cues"
    for c in cues:
        words = " ".join(c["lines"]).split()
        one_word = len(words) == 1
        assert len(c["lines"]) <= captions.MAX_LINES or one_word, c
        assert all(len(line) <= captions.LINE_CHARS for line in c["lines"]) or one_word, c
        assert c["end"] - c["start"] <= captions.MAX_CUE_S + TOL or one_word, c
        assert c["end"] > c["start"]
    for a, b in zip(cues, cues[1:]):  # in order, never overlapping
        assert a["end"] <= b["start"] + 1e-9


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_the_cues_of_an_utterance_cover_it_exactly(long_chapter, fmt):
    rows, files = long_chapter
    cues = files[fmt]
    k = 0
    for r in rows:
        start, end = r["start_s"], r["start_s"] + r["duration_s"]
        mine = []
        while k < len(cues) and cues[k]["start"] < end - TOL:
            mine.append(cues[k])
            k += 1
        assert mine and abs(mine[0]["start"] - start) <= TOL and abs(mine[-1]["end"] - end) <= TOL, r["text"]
        assert all(abs(a["end"] - b["start"]) <= TOL for a, b in zip(mine, mine[1:]))  # no gap inside
        assert " ".join(" ".join(c["lines"]) for c in mine).split() == r["text"].split()
    assert k == len(cues)


def test_cuts_fall_on_the_word_times_of_the_phoneme_durations(long_chapter):
    """The fake engine gives per-phoneme durations: VTT cues of utterances whose phonemes split into
    their words carry word tags, each inside its cue and in order (the cut itself is the next cue's
    first word's start: test_cut_times_follow_word_starts_when_given)."""
    rows, files = long_chapter
    cues = files["vtt"]
    tagged = [c for c in cues if c["tags"]]
    assert len(tagged) > 20 and any(len(c["lines"]) == 2 for c in tagged)
    for c in tagged:
        assert len(c["tags"]) == len(" ".join(c["lines"]).split()) - 1
        assert all(c["start"] - TOL < t < c["end"] + TOL for t in c["tags"]) and c["tags"] == sorted(c["tags"])


def test_cut_times_follow_word_starts_when_given():
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    starts = [10.0 + 0.9 * i for i in range(16)]  # 0.9 s a word: at most 7 s, so 8 words a cue
    cues = captions.split_utterance(text, 9.5, 25.0, starts)
    assert [c[0] for c in cues] == [9.5] + [starts[len(" ".join(c[2] for c in cues[:k]).split())]
                                             for k in range(1, len(cues))]
    assert cues[-1][1] == 25.0 and all(c[1] - c[0] <= 7.0 for c in cues[1:])
    assert all(len(c[3]) == len(c[2].split()) for c in cues)


def test_without_word_times_the_time_is_shared_by_length():
    text = "aaaa bbbb cccc dddd " * 10  # 40 equal words: a cut falls at its word's share of the time
    cues = captions.split_utterance(text.strip(), 0.0, 40.0)
    assert len(cues) > 1
    done = 0
    for c in cues[:-1]:
        done += len(c[2].split())
        assert c[1] == pytest.approx(done * 1.0)  # each word "xxxx " is 1/40 of the characters
    assert cues[-1][1] == 40.0 and all(len(c) == 3 for c in cues)


def test_a_cue_ends_at_a_clause_rather_than_mid_clause():
    text = ("Alice was beginning to get very tired of sitting by her sister, and of having nothing to do "
            "once or twice she had peeped into the book her sister was reading")
    cues = captions.split_utterance(text, 0.0, 6.0)
    assert cues[0][2].endswith("sister,")
    assert " ".join(c[2] for c in cues) == text


def test_a_single_long_word_stands_alone():
    word = "Pneumonoultramicroscopicsilicovolcanoconiosis-and-then-some-more"
    cues = captions.split_utterance(f"a {word} b", 0.0, 30.0, [0.0, 0.5, 29.5])
    assert [c[2] for c in cues] == ["a", word, "b"]
    assert captions.srt(cues).count("\n" + word + "\n") == 1  # on one line, not broken up


def test_srt_alone_cuts_at_the_word_times_too(long_chapter, tmp_path, voice):
    """SRT has no word tags, but a job with SRT captions alone cuts its cues at the same word times
    (from the phoneme durations) as the VTT's."""
    from engines.fake import FakeEngine

    _, files = long_chapter
    book = tmp_path / "alice.txt"
    shutil.copy(DATA / "alice-pg11.txt", book)
    job = prepare_job([book], tmp_path / "out", JobConfig(chapters="1", loudness="none", captions="srt",
                                                          announce=False))
    run_local(job, FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length))
    srt = read_cues(next((tmp_path / "out").glob("*/*.srt")).read_text(encoding="utf-8"), ",")
    assert [(c["start"], c["end"]) for c in srt] == [(c["start"], c["end"]) for c in files["vtt"]]


def test_every_cut_inside_an_utterance_falls_between_two_phonemes(long_chapter):
    """Where the phonemes do not split into the text's words (espeak-ng says "for the" as one word),
    the cut is still placed by the phoneme durations, never by a share of the wall time: each cut
    lies on a phoneme boundary of the manifest's ``phoneme_durations_s``."""
    rows, files = long_chapter
    for fmt in ("srt", "vtt"):
        cues, k, cuts = files[fmt], 0, 0
        for r in rows:
            end = r["start_s"] + r["duration_s"]
            mine = []
            while k < len(cues) and cues[k]["start"] < end - TOL:
                mine.append(cues[k])
                k += 1
            edges = np.cumsum([0.0] + r["phoneme_durations_s"]) + r["start_s"]
            for c in mine[1:]:
                cuts += 1
                assert np.min(np.abs(edges - c["start"])) <= TOL, (fmt, r["text"], c["start"])
        assert cuts > 50


def test_word_times_are_estimated_from_the_phonemes_where_the_words_differ(voice):
    from jobs.phonemize import Phonemizer

    text = "There was nothing so very remarkable in that; nor did Alice think it so very much out of the way."
    ids = Phonemizer(voice)(text).ids
    space = set(voice.phoneme_id_map[" "])
    silent = {i for k in "^$_" for i in voice.phoneme_id_map[k]}
    marks = {i for k in ",.;:!?" for i in voice.phoneme_id_map.get(k, [])}
    durations = [0.2 if i in marks else 0.05 for i in ids]
    assert captions.word_starts(text, 1.0, ids, durations, space, silent) is None  # "there was" is one word
    starts, exact = captions.word_times(text, 1.0, ids, durations, space, silent, marks)
    assert not exact and len(starts) == len(text.split())
    assert starts == sorted(starts) and 1.0 <= starts[0] and starts[-1] < 1.0 + sum(durations)
    # the ";" pause (0.2 s) lies between "that;" and "nor": the estimate puts "nor" after it
    at = text.split().index("nor")
    assert starts[at] - starts[at - 1] > 0.2
    assert captions.word_times(text, 1.0, ids, None, space, silent) is None


class NoDurations:
    """The fake engine as the fp32 ONNX and TensorRT engines are: audio without phoneme durations."""

    def __init__(self, inner):
        self.inner, self.info = inner, inner.info

    def synthesize(self, batch):
        res = self.inner.synthesize(batch)
        res.durations = None
        return res


def test_without_durations_cuts_fall_on_equal_phoneme_shares(tmp_path, voice):
    """An engine that gives no durations: the utterance's time is shared out by its phoneme ids (the
    brief's phoneme count), so every cut inside an utterance lies on a multiple of its time per id."""
    from engines.fake import FakeEngine

    book = tmp_path / "alice.txt"
    shutil.copy(DATA / "alice-pg11.txt", book)
    out = tmp_path / "out"
    job = prepare_job([book], out, JobConfig(chapters="1", loudness="none", captions="srt,vtt", announce=False))
    run_local(job, NoDurations(FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length)))
    rows = [r for r in pq.read_table(out / "manifest.parquet").to_pylist() if r["duration_s"] > 0]
    assert all(r["phoneme_durations_s"] is None for r in rows)
    audio = out / rows[0]["chapter_path"]
    vtt = read_cues(audio.with_suffix(".vtt").read_text(encoding="utf-8"), ".")
    assert not any(c["tags"] for c in vtt)  # estimated times give no word tags
    srt = read_cues(audio.with_suffix(".srt").read_text(encoding="utf-8"), ",")
    assert [(c["start"], c["end"]) for c in srt] == [(c["start"], c["end"]) for c in vtt]
    k = cuts = 0
    for r in rows:
        end = r["start_s"] + r["duration_s"]
        mine = []
        while k < len(srt) and srt[k]["start"] < end - TOL:
            mine.append(srt[k])
            k += 1
        assert len(" ".join(" ".join(c["lines"]) for c in mine)) <= len(r["text"]) + len(mine)
        edges = r["start_s"] + np.arange(r["phoneme_count"] + 1) * (r["duration_s"] / r["phoneme_count"])
        for c in mine[1:]:
            cuts += 1
            assert np.min(np.abs(edges - c["start"])) <= TOL, (r["text"], c["start"])
        assert all(len(c["lines"]) <= 2 and c["end"] - c["start"] <= captions.MAX_CUE_S + TOL
                   for c in mine if len(" ".join(c["lines"]).split()) > 1)
    assert cuts > 50
