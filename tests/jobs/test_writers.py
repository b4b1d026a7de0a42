"""jobs.formats.WRITERS: one Writer per --format; write_chapter_audio, check_available, describe and the
one-file-per-book paths read it instead of if-chains on the format's name."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InputError
from jobs import formats
from jobs.config import AUDIO_FORMATS


def test_the_cli_formats_are_the_writers():
    assert AUDIO_FORMATS == tuple(formats.WRITERS)
    assert [f for f in formats.WRITERS if formats.per_book(f)] == ["m4b"]
    assert formats.chapter_relpath("b", 3, "t", "m4b") == ".work/chapters/b/003-t.wav"
    assert formats.chapter_relpath("b", 3, "t", "opus") == "b/003-t.opus"
    assert formats.book_relpath("b") == "b.m4b"


def test_a_new_chapter_format_is_one_entry(tmp_path, monkeypatch):
    written = []

    def write(tmp, final, blocks, rate, tags, writer_errors, flac_level):
        tmp.write_bytes(b"".join(np.asarray(b, dtype=np.float32).tobytes() for b in blocks))

    def tag(tmp, tags):
        written.append((tmp.name, tags.title))

    monkeypatch.setitem(formats.WRITERS, "raw", formats.Writer("raw", "raw float32 per chapter", write, tag=tag,
                                                                mutagen=False))
    assert formats.describe("raw") == "raw float32 per chapter" and not formats.per_book("raw")
    assert formats.chapter_relpath("b", 1, "one", "raw") == "b/001-one.raw"
    formats.check_available("raw")
    pcm = np.linspace(-0.5, 0.5, 100, dtype=np.float32)
    out = tmp_path / "c.raw"
    formats.write_chapter_audio(out, out, "raw", pcm, 22050, formats.Tags("One", "Book", "Voice"))
    assert np.array_equal(np.frombuffer(out.read_bytes(), dtype=np.float32), pcm)
    assert written == [("c.raw", "One")]


def test_an_unknown_format_is_one_line():
    with pytest.raises(InputError, match=r"--format 'aiff' is not supported; choose flac, wav, mp3, opus, m4b"):
        formats.check_available("aiff")


def test_wav_and_flac_chapters_through_their_writers(tmp_path):
    import soundfile as sf

    pcm = (0.2 * np.sin(np.arange(4000) / 9.0)).astype(np.float32)
    tags = formats.Tags("Chapter One", "The Book", "A Voice", artist="Ann Author", track=(1, 2))
    for fmt in ("wav", "flac"):
        out = tmp_path / f"c.{fmt}"
        formats.write_chapter_audio(out, out, fmt, pcm, 22050, tags, flac_level=8 if fmt == "flac" else None)
        back, rate = sf.read(str(out), dtype="int16")
        assert rate == 22050 and len(back) == len(pcm) and abs(int(back[100]) - round(pcm[100] * 32768)) <= 1
    from mutagen.flac import FLAC

    assert FLAC(str(tmp_path / "c.flac"))["title"] == ["Chapter One"]
    assert sf.SoundFile(str(tmp_path / "c.wav")).title == "Chapter One"
