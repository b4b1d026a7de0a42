"""jobs.ingest: book files -> chapters of paragraphs.

Real data: Alice in Wonderland (Project Gutenberg #11) as TXT and EPUB, copied into tests/data.
Every hostile or broken EPUB is built here with ``zipfile`` into tmp_path; none is committed.
"""

from __future__ import annotations

import difflib
import json
import re
import time
import zipfile
from pathlib import Path

import pytest

from jobs import ingest
from core.errors import EncodingError, InputError, UnsafePathError
from jobs.ingest import Book, Chapter, load_book

DATA = Path(__file__).resolve().parent.parent / "data"
ALICE_TXT = DATA / "alice-pg11.txt"
ALICE_EPUB = DATA / "alice-pg11.epub"

ALICE_TITLES = [
    "CHAPTER I. Down the Rabbit-Hole",
    "CHAPTER II. The Pool of Tears",
    "CHAPTER III. A Caucus-Race and a Long Tale",
    "CHAPTER IV. The Rabbit Sends in a Little Bill",
    "CHAPTER V. Advice from a Caterpillar",
    "CHAPTER VI. Pig and Pepper",
    "CHAPTER VII. A Mad Tea-Party",
    "CHAPTER VIII. The Queen\u2019s Croquet-Ground",
    "CHAPTER IX. The Mock Turtle\u2019s Story",
    "CHAPTER X. The Lobster Quadrille",
    "CHAPTER XI. Who Stole the Tarts?",
    "CHAPTER XII. Alice\u2019s Evidence",
]
ALICE_START = "Alice was beginning to get very tired"
LICENCE_WORDS = ("Gutenberg", "License", "LICENSE", "trademark", "Illustration", "*** START", "*** END")


def words(text: str) -> list[str]:
    """Words for comparing two renderings of one text: case, quotes and punctuation ignored."""
    return re.findall(r"[a-z0-9]+", text.casefold().replace("\u2019", "").replace("'", ""))


def chapter_words(ch: Chapter) -> list[str]:
    return words(" ".join(ch.paragraphs))


def assert_one_line(excinfo, path, *needles):
    """A user-facing error: one line, no surrounding whitespace, naming the file."""
    msg = str(excinfo.value)
    assert msg and "\n" not in msg and "\r" not in msg and msg == msg.strip(), repr(msg)
    assert str(path) in msg, (str(path), msg)
    for n in needles:
        assert n.lower() in msg.lower(), (n, msg)
    return msg


# ------------------------------------------------------------------------------------- EPUB builders

CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             '</rootfiles></container>')


def write_zip(path: Path, files: dict[str, str | bytes], mimetype: bool = True) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        if mimetype:
            z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, data in files.items():
            z.writestr(name, data)
    return path


def xhtml(body: str, doctype: str = "") -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>' + doctype +
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
            f'<head><title>t</title><style>p {{ color: red }}</style></head><body>{body}</body></html>')


def nav_doc(entries) -> str:
    def ol(items):
        out = "<ol>"
        for label, href, *kids in items:
            out += f'<li><a href="{href}">{label}</a>{ol(kids[0]) if kids and kids[0] else ""}</li>'
        return out + "</ol>"

    return xhtml(f'<nav epub:type="toc" id="toc"><h1>Contents</h1>{ol(entries)}</nav>'
                 '<nav epub:type="landmarks"><ol><li><a href="c1.xhtml">Begin</a></li></ol></nav>')


def ncx_doc(entries) -> str:
    n = 0

    def points(items):
        nonlocal n
        out = ""
        for label, href, *kids in items:
            n += 1
            out += (f'<navPoint id="p{n}" playOrder="{n}"><navLabel><text>{label}</text></navLabel>'
                    f'<content src="{href}"/>{points(kids[0]) if kids and kids[0] else ""}</navPoint>')
        return out

    return ('<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
            f'<docTitle><text>NCX title</text></docTitle><navMap>{points(entries)}</navMap></ncx>')


def make_epub(path: Path, docs: list[tuple[str, str]], nav=None, ncx=None, title="A Test Book",
              linear: dict[str, str] | None = None, extra: dict[str, str | bytes] | None = None,
              opf: str | None = None) -> Path:
    """A small EPUB: ``docs`` are (file name under OEBPS/, body HTML) in spine order."""
    linear = linear or {}
    manifest = "".join(f'<item id="d{i}" href="{name}" media-type="application/xhtml+xml"/>'
                       for i, (name, _b) in enumerate(docs))
    spine = "".join(f'<itemref idref="d{i}"{" linear=%r" % linear[name] if name in linear else ""}/>'
                    for i, (name, _b) in enumerate(docs))
    files: dict[str, str | bytes] = {"META-INF/container.xml": CONTAINER}
    if nav is not None:
        manifest += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
        files["OEBPS/nav.xhtml"] = nav_doc(nav)
    if ncx is not None:
        manifest += '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        files["OEBPS/toc.ncx"] = ncx_doc(ncx)
    manifest += '<item id="css" href="style.css" media-type="text/css"/>'
    files["OEBPS/style.css"] = "p { margin: 0 }"
    files["OEBPS/content.opf"] = opf or (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">test</dc:identifier><dc:title>{title}</dc:title><dc:language>en</dc:language>'
        f'</metadata><manifest>{manifest}</manifest>'
        f'<spine{" toc=%r" % "ncx" if ncx is not None else ""}>{spine}</spine></package>')
    for name, body in docs:
        files[f"OEBPS/{name}"] = xhtml(body)
    files.update(extra or {})
    return write_zip(path, files)


PROSE = ("It was a bright cold day in April, and the clocks in the old tower were striking the hour "
         "while the baker swept the snow from his step.")


# ------------------------------------------------------------------------------------- Alice TXT


@pytest.fixture(scope="module")
def alice_txt() -> Book:
    return load_book(ALICE_TXT)


@pytest.fixture(scope="module")
def alice_epub() -> Book:
    return load_book(ALICE_EPUB)


def test_alice_txt_has_the_twelve_chapters_with_their_titles(alice_txt):
    assert alice_txt.format == "txt"
    assert [c.index for c in alice_txt.chapters] == list(range(1, 13))
    assert [c.title for c in alice_txt.chapters] == ALICE_TITLES


def test_alice_txt_first_chapter_starts_with_the_story(alice_txt):
    assert alice_txt.chapters[0].paragraphs[0].startswith(ALICE_START)
    # hard-wrapped lines are joined with single spaces, italics markers gone, curly quotes kept
    assert alice_txt.chapters[0].paragraphs[0].endswith("\u201cwithout pictures or conversations?\u201d")
    assert "There was nothing so very remarkable in that;" in alice_txt.chapters[0].paragraphs[2]
    assert alice_txt.chapters[-1].paragraphs[-1] == "THE END"


def test_alice_txt_contents_list_and_title_page_are_not_chapters_or_text(alice_txt):
    # the "Contents" block lists every chapter once more; it must not give empty chapters nor be spoken
    assert all(len(c.paragraphs) > 20 for c in alice_txt.chapters)
    everything = " ".join(p for c in alice_txt.chapters for p in c.paragraphs)
    assert "Down the Rabbit-Hole" not in everything
    assert "MILLENNIUM FULCRUM" not in everything
    for w in LICENCE_WORDS:
        assert w not in everything, w
    assert not re.search(r"(?<!\w)_|_(?!\w)", everything), "no italics markers left"


def test_alice_txt_book_title_from_its_title_page(alice_txt):
    # no Gutenberg "Title:" line in this copy: the line before "by Lewis Carroll" is the title
    assert alice_txt.title == "Alice\u2019s Adventures in Wonderland"


def test_alice_txt_intra_word_italics_lose_their_markers(alice_txt):
    # Gutenberg writes "_Un_important": the word must come out whole
    text = " ".join(alice_txt.chapters[-1].paragraphs)
    assert "\u201cUnimportant, your Majesty means" in text


def test_loading_alice_is_fast():
    for path in (ALICE_TXT, ALICE_EPUB):
        t = time.perf_counter()
        load_book(path)
        assert time.perf_counter() - t < 1.0, path


# ------------------------------------------------------------------------------------- Alice EPUB


def test_alice_epub_has_the_twelve_chapters_in_spine_order_titled_from_the_toc(alice_epub):
    assert alice_epub.format == "epub"
    assert alice_epub.title == "Alice's Adventures in Wonderland"  # dc:title
    assert [c.index for c in alice_epub.chapters] == list(range(1, 13))
    assert [c.title for c in alice_epub.chapters] == ALICE_TITLES
    assert alice_epub.chapters[0].paragraphs[0].startswith(ALICE_START)


def test_alice_epub_has_no_gutenberg_boilerplate_nor_repeated_headings(alice_epub):
    everything = " ".join(p for c in alice_epub.chapters for p in c.paragraphs)
    for w in LICENCE_WORDS:
        assert w not in everything, w
    # each chapter's <h2> repeats its TOC label: it is spoken once, from Chapter.title
    for c in alice_epub.chapters:
        assert words(c.paragraphs[0])[:3] != words(c.title)[:3]
    assert "*" not in everything, "asterisms (scene breaks) are not spoken"


def test_alice_txt_and_epub_give_the_same_words_per_chapter(alice_txt, alice_epub):
    # Gutenberg's TXT and EPUB of #11 are two slightly different editions: besides punctuation
    # (ignored here), exactly two words differ. Everything else must match word for word, which
    # checks that neither reader drops, duplicates or reorders text.
    known = {(7, ("ways",), ("way",)), (11, ("attempts",), ("attempt",))}
    found = set()
    assert len(alice_txt.chapters) == len(alice_epub.chapters)
    for a, b in zip(alice_txt.chapters, alice_epub.chapters):
        wa, wb = chapter_words(a), chapter_words(b)
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
            if op != "equal":
                found.add((a.index, tuple(wa[i1:i2]), tuple(wb[j1:j2])))
    assert found == known


def test_book_round_trips_through_json(alice_epub):
    d = json.loads(json.dumps(alice_epub.to_dict()))
    again = Book.from_dict(d)
    assert again == alice_epub
    assert d["source"] == str(ALICE_EPUB) and d["format"] == "epub"
    assert load_book(str(ALICE_TXT)).source == ALICE_TXT  # a str path is accepted too


# ------------------------------------------------------------------------------------- Gutenberg boilerplate


PG_HEADER = ("The Project Gutenberg eBook of A Small Test\n\nThis ebook is for the use of anyone anywhere.\n\n"
             "Title: A Small Test\n\nAuthor: Nobody\n\n")
PG_LICENCE = "\n\nUpdated editions will replace the previous one.\n\nSection 1. General Terms of Use\n\n" \
             "THE FULL PROJECT GUTENBERG LICENSE\nPLEASE READ THIS BEFORE YOU DISTRIBUTE OR USE THIS WORK.\n"
STORY = "CHAPTER I.\nThe Start\n\n" + PROSE + "\n\nCHAPTER II.\nThe End\n\nShe went home, and that was the end of it.\n"


@pytest.mark.parametrize("start,end", [
    ("*** START OF THE PROJECT GUTENBERG EBOOK A SMALL TEST ***", "*** END OF THE PROJECT GUTENBERG EBOOK A SMALL TEST ***"),
    ("*** START OF THIS PROJECT GUTENBERG EBOOK A SMALL TEST ***", "*** END OF THIS PROJECT GUTENBERG EBOOK A SMALL TEST ***"),
    ("*** START OF THIS PROJECT GUTENBERG EBOOK A SMALL\nTEST ***\n\nProduced by Someone and the Online Team",
     "End of the Project Gutenberg EBook of A Small Test, by Nobody\n\n*** END OF THIS PROJECT GUTENBERG EBOOK ***"),
    ("***START OF THE PROJECT GUTENBERG EBOOK A SMALL TEST***", "End of Project Gutenberg's A Small Test, by Nobody"),
], ids=["modern", "this-ebook", "old-wrapped-marker-with-credits", "old-end-line"])
def test_gutenberg_header_and_footer_are_left_out(tmp_path, start, end):
    p = tmp_path / "pg.txt"
    p.write_text(PG_HEADER + start + "\n\n\n" + STORY + "\n\n" + end + PG_LICENCE, encoding="utf-8")
    book = load_book(p)
    assert book.title == "A Small Test"  # from the "Title:" line of the header
    assert [c.title for c in book.chapters] == ["CHAPTER I. The Start", "CHAPTER II. The End"]
    assert [c.paragraphs for c in book.chapters] == [[PROSE], ["She went home, and that was the end of it."]]


def test_alice_wrapped_in_gutenberg_boilerplate_loads_the_same(tmp_path, alice_txt):
    p = tmp_path / "alice-full.txt"
    p.write_text(PG_HEADER.replace("A Small Test", "Alice's Adventures in Wonderland")
                 + "*** START OF THE PROJECT GUTENBERG EBOOK 11 ***\n\n" + ALICE_TXT.read_text(encoding="utf-8")
                 + "\n\n*** END OF THE PROJECT GUTENBERG EBOOK 11 ***" + PG_LICENCE, encoding="utf-8")
    book = load_book(p)
    assert book.title == "Alice's Adventures in Wonderland"
    assert [c.to_dict() for c in book.chapters] == [c.to_dict() for c in alice_txt.chapters]


def test_gutenberg_markdown_is_stripped_too(tmp_path):
    p = tmp_path / "pg.md"
    p.write_text(PG_HEADER + "*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n# A Small Test\n\n## One\n\n"
                 + PROSE + "\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***" + PG_LICENCE, encoding="utf-8")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("One", [PROSE])]


# ------------------------------------------------------------------------------------- plain text


def test_short_txt_without_boilerplate(tmp_path):
    book = load_book(DATA / "short-story.txt")
    assert book.title == "The Clockmaker's Apprentice"
    assert [c.title for c in book.chapters] == ["Chapter One. The Shop on Mill Street",
                                                "Chapter Two. The Quarter Past Three"]
    ch1 = book.chapters[0].paragraphs
    assert ch1[-1] == '"No," said the clockmaker. "A clock that stops by itself has something to tell us. ' \
                      'We shall wait and listen."'
    # the illustration marker and the "* * *" scene break are gone; no other word is lost
    text = (DATA / "short-story.txt").read_text(encoding="utf-8")
    body = text.split("Chapter One", 1)[1].replace("[Illustration: The clock in the window]", "")
    body = body.replace("The Shop on Mill Street", "").replace("Chapter Two", "").replace("The Quarter Past Three", "")
    assert [w for c in book.chapters for w in chapter_words(c)] == words(body)


def test_bom_is_ignored(tmp_path):
    plain, bom = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(STORY, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + STORY.encode("utf-8"))
    assert load_book(bom).chapters == load_book(plain).chapters
    assert load_book(bom).chapters[0].title == "CHAPTER I. The Start"


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_windows_and_old_mac_line_ends(tmp_path, newline):
    p = tmp_path / "crlf.txt"
    p.write_bytes(STORY.replace("\n", newline).encode("utf-8"))
    book = load_book(p)
    assert [c.title for c in book.chapters] == ["CHAPTER I. The Start", "CHAPTER II. The End"]
    assert not any("\r" in x for c in book.chapters for x in [c.title, *c.paragraphs])


@pytest.mark.parametrize("heading,title", [
    ("Chapter 1", "Chapter 1"),
    ("CHAPTER XII. Alice's Evidence", "CHAPTER XII. Alice's Evidence"),
    ("Chapter One", "Chapter One"),
    ("Chapter Twenty-One: The Return", "Chapter Twenty-One: The Return"),
    ("Chapter the First", "Chapter the First"),
    ("IV.", ["Chapter IV.", "Chapter V."]),  # a bare numeral chapter is announced as a chapter
    ("CHAPTER I.\nDown the Rabbit-Hole", "CHAPTER I. Down the Rabbit-Hole"),
    ("Chapter 3\n\nTHE LONG ROAD", "Chapter 3. The Long Road"),  # titles in capitals: title case
    ("PROLOGUE", "Prologue"),
], ids=["arabic", "roman-with-title", "word", "hyphenated-word-with-title", "ordinal", "roman-alone",
        "gutenberg-title-next-line", "title-in-next-block", "prologue"])
def test_txt_chapter_heading_forms(tmp_path, heading, title):
    # roman numerals alone count only in sequence (IV. then V.); the other forms may simply repeat
    first, second = title if isinstance(title, list) else (title, title)
    p = tmp_path / "h.txt"
    again = "V." if heading == "IV." else heading.replace(first, second)
    p.write_text(f"{heading}\n\n{PROSE}\n\n{again}\n\nSecond time round.\n", encoding="utf-8")
    book = load_book(p)
    assert [c.title for c in book.chapters] == [first, second]
    assert book.chapters[0].paragraphs == [PROSE]


@pytest.mark.parametrize("text", [
    "Chapter 1 was the one she liked best, she said, and read it again.\n",
    "Part of the reason was the weather.\n",
    "I\nwent out and came back.\n",
], ids=["chapter-word-in-prose", "part-word-in-prose", "roman-I-starting-a-wrapped-line"])
def test_prose_that_only_looks_like_a_heading_stays_prose(tmp_path, text):
    p = tmp_path / "x.txt"
    p.write_text(text, encoding="utf-8")
    book = load_book(p)
    assert len(book.chapters) == 1 and book.chapters[0].paragraphs == [" ".join(text.split())]


def test_initial_alone_on_a_line_is_not_a_roman_chapter(tmp_path):
    # a letter signed "M." (roman 1000) with no M+1 anywhere: prose, not a chapter heading
    p = tmp_path / "letter.txt"
    p.write_text(f"I.\n\n{PROSE}\n\nYours ever,\n\nM.\n\nII.\n\nThe reply came.\n")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Chapter I.", [PROSE, "Yours ever,", "M."]), ("Chapter II.", ["The reply came."])]


def test_one_paragraph_per_line_text_is_split_at_lines(tmp_path):
    # exported without blank lines: each (long, unwrapped) line is a paragraph; headings still count
    paras = [f"{PROSE} This is paragraph {n} and it goes on for a while longer than a wrapped line." for n in range(9)]
    p = tmp_path / "lines.txt"
    p.write_text("Chapter 1\n" + "\n".join(paras[:5]) + "\nChapter 2\n" + "\n".join(paras[5:]) + "\n")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("Chapter 1", paras[:5]), ("Chapter 2", paras[5:])]


def test_markdown_keeps_prose_that_looks_like_link_definitions_or_list_numbers(tmp_path):
    p = tmp_path / "m.md"
    p.write_text("[Note]: the author said this twice.\n\n[1]: http://example.com/ref\n\n"
                 "It happened in the spring of\n1984. Then everything changed.\n")
    assert load_book(p).chapters[0].paragraphs == [
        "[Note]: the author said this twice.", "It happened in the spring of 1984. Then everything changed."]


def test_no_headings_gives_one_chapter_with_everything(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("Short line\n\nAnother short line\n\n\u2026\n", encoding="utf-8")
    book = load_book(p)
    assert book.title == "notes"  # file stem
    # nothing is dropped when there are no headings, not even non-prose lines or a lone ellipsis;
    # the chapter title is "" rather than the file name (which nobody wants to hear spoken)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("", ["Short line", "Another short line", "\u2026"])]


def test_a_short_note_before_the_first_heading_opens_the_first_chapter(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text(f"THE TITLE\n\nA note before the story begins, kept by the author.\n\nChapter 1\n\n{PROSE}\n")
    book = load_book(p)
    # the note is spoken before Chapter 1's heading, no chapter of its own; the title page is not spoken
    assert [(c.title, c.opening, c.paragraphs) for c in book.chapters] == [
        ("Chapter 1", 1, ["A note before the story begins, kept by the author.", PROSE])]


def test_long_prose_before_the_first_heading_stays_its_own_chapter(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text(f"THE TITLE\n\n{PROSE}\n\n{PROSE}\n\n{PROSE}\n\n{PROSE}\n\nChapter 1\n\n{PROSE}\n")
    book = load_book(p)
    assert [(c.title, c.opening, c.paragraphs) for c in book.chapters] == [
        ("", 0, [PROSE] * 4), ("Chapter 1", 0, [PROSE])]  # an unheaded opening of over 100 words of prose


def test_front_matter_with_prose_does_not_repeat_the_title_page(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text(f"THE TITLE\n\nby Some Body\n\nA note before the story begins.\n\nChapter 1\n\n{PROSE}\n")
    book = load_book(p)
    assert [(c.title, c.opening, c.paragraphs) for c in book.chapters] == [
        ("Chapter 1", 1, ["A note before the story begins.", PROSE])]  # title and author: announced once


def test_front_matter_without_prose_is_left_out(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text(f"THE TITLE\n\nby Some Body\n\nILLUSTRATED EDITION\n\nChapter 1\n\n{PROSE}\n")
    book = load_book(p)
    assert book.title == "The Title"  # a title page in capitals: title case
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("Chapter 1", [PROSE])]


def test_contents_with_one_entry_per_block_is_not_chapters(tmp_path):
    # a contents list whose entries are separated by blank lines, then the chapters
    p = tmp_path / "c.txt"
    p.write_text("CONTENTS\n\nChapter 1. Arrival\n\nChapter 2. Departure\n\nChapter 3. Home\n\n\n"
                 f"Chapter 1. Arrival\n\n{PROSE}\n\nChapter 2. Departure\n\nThey left.\n\nChapter 3. Home\n\n"
                 "They came back.\n")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Chapter 1. Arrival", [PROSE]), ("Chapter 2. Departure", ["They left."]), ("Chapter 3. Home", ["They came back."])]


def test_contents_followed_by_an_epigraph_does_not_make_a_chapter(tmp_path):
    # the last contents line is followed by text, but it is a contents entry (its chapter comes
    # later): no chapter "Chapter III" holding the epigraph. The epigraph is prose, so it is kept,
    # spoken before the first chapter's heading (the book names no title of its own, and file names are not spoken).
    p = tmp_path / "c.txt"
    p.write_text("Chapter I. One\nChapter II. Two\nChapter III. Three\n\nAll the world's a stage.\n\n"
                 f"Chapter I. One\n\n{PROSE}\n\nChapter II. Two\n\nTwo.\n\nChapter III. Three\n\nThree.\n")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Chapter I. One", ["All the world's a stage.", PROSE]), ("Chapter II. Two", ["Two."]),
        ("Chapter III. Three", ["Three."])]
    assert book.chapters[0].opening == 1


def test_part_heading_followed_by_chapter_heading_merge(tmp_path):
    p = tmp_path / "parts.txt"
    p.write_text(f"BOOK ONE\n\nCHAPTER I.\nThe Farm\n\n{PROSE}\n\nCHAPTER II.\nThe Town\n\nIn town.\n")
    book = load_book(p)
    assert [c.title for c in book.chapters] == ["BOOK ONE. CHAPTER I. The Farm", "CHAPTER II. The Town"]


def test_emphasis_and_illustrations_are_cleaned_but_words_kept(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("She was _very_ tired, *really* **very** tired; file_name stays.\n\n[Illustration]\n\n"
                 "[Illustration: A long\ncaption here]\n\nThe end \u2014 \u201cquoted\u201d \u2018too\u2019.\n")
    book = load_book(p)
    assert book.chapters[0].paragraphs == ["She was very tired, really very tired; file_name stays.",
                                           "The end \u2014 \u201cquoted\u201d \u2018too\u2019."]


# ------------------------------------------------------------------------------------- encodings


def test_undeclared_latin1_text_is_read_as_windows_1252_and_the_log_says_so(tmp_path, caplog):
    # not UTF-8 and no declaration: read as Windows-1252 (it reads ISO-8859-1 alike), one warning line
    p = tmp_path / "latin1.txt"
    p.write_bytes("Chapter 1\n\nCaf\xe9 au lait.\n".encode("latin-1"))
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        book = load_book(p)
    assert book.chapters[0].paragraphs == ["Caf\xe9 au lait."]
    [rec] = [r for r in caplog.records if r.name == "booktts.ingest"]
    msg = rec.getMessage()
    assert "\n" not in msg and str(p) in msg and "not valid UTF-8" in msg
    assert "Windows-1252" in msg and "declares no encoding" in msg and "--encoding" in msg


def test_text_with_bytes_windows_1252_leaves_undefined_is_still_refused_naming_the_position(tmp_path):
    # 0x81 (or 0x8D, 0x8F, 0x90, 0x9D) means no text in Windows-1252: refused in one line, as before
    p = tmp_path / "odd.txt"
    p.write_bytes(b"Chapter 1\n\nCaf\x81 au lait.\n")
    with pytest.raises(EncodingError) as ei:
        load_book(p)
    msg = assert_one_line(ei, p, "--encoding latin-1", "utf-8")
    assert "byte offset 14" in msg and "line 3" in msg and "0x81" in msg


def test_8_bit_text_in_another_script_is_still_refused_with_a_hint(tmp_path):
    # Russian saved as Windows-1251 decodes in Windows-1252 too, but as accented garbage: nearly every letter
    # is a byte 0x80-0xFF, which Western text never is, so it is refused in one line
    p = tmp_path / "ru.txt"
    p.write_bytes("\u0413\u043b\u0430\u0432\u0430 1\n\n\u0412\u0441\u0435 \u0441\u0447\u0430\u0441\u0442"
                  "\u043b\u0438\u0432\u044b\u0435 \u0441\u0435\u043c\u044c\u0438 \u043f\u043e\u0445\u043e"
                  "\u0436\u0438 \u0434\u0440\u0443\u0433 \u043d\u0430 \u0434\u0440\u0443\u0433\u0430.\n"
                  .encode("cp1251"))
    with pytest.raises(EncodingError) as ei:
        load_book(p)
    assert_one_line(ei, p, "--encoding", "cp1251", "line 1")
    assert load_book(p, encoding="cp1251").chapters[0].paragraphs[-1].startswith("\u0412\u0441\u0435 ")


def test_latin1_text_loads_with_its_encoding(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes("Chapter 1\n\nCaf\xe9 au lait.\n".encode("latin-1"))
    book = load_book(p, encoding="latin-1")
    assert book.chapters[0].paragraphs == ["Caf\xe9 au lait."]


def test_undeclared_windows_1252_text_reads_its_punctuation_bytes(tmp_path, caplog):
    # curly quotes saved by Windows are bytes 0x93/0x94; latin-1 would turn them into control characters
    p = tmp_path / "win.txt"
    p.write_bytes("\u201cHello,\u201d she said \u2014 twice.\n".encode("cp1252"))
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        assert load_book(p).chapters[0].paragraphs == ["\u201cHello,\u201d she said \u2014 twice."]
    assert "Windows-1252" in caplog.text
    assert load_book(p, encoding="cp1252").chapters[0].paragraphs == ["\u201cHello,\u201d she said \u2014 twice."]


def test_a_gutenberg_file_declaring_ascii_with_windows_1252_bytes_loads(caplog):
    # Spoon River Anthology, Project Gutenberg eBook #1280: "Character set encoding: ASCII", yet "that\x92s"
    # twice in Robert Fulton Tanner; it used to be refused, so none of its poems was heard
    p = DATA / "structure" / "spoon-river-excerpt.txt"
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        book = load_book(p)
    text = " ".join(pa for ch in book.chapters for pa in ch.paragraphs)
    assert "You enter the room--that\u2019s being born;" in text and "But there\u2019s work to do" in text
    assert book.title == "Spoon River Anthology" and book.author == "Edgar Lee Masters"
    [rec] = [r for r in caplog.records if r.name == "booktts.ingest"]
    assert "'ASCII'" in rec.getMessage() and "Windows-1252" in rec.getMessage()


# On Liberty, Project Gutenberg eBook #34901 ("34901-8.txt"): ISO-8859-1, declared in its header, CRLF lines
ON_LIBERTY_HEAD = ("The Project Gutenberg EBook of On Liberty, by John Stuart Mill\r\n\r\n"
                   "Title: On Liberty\r\n\r\nAuthor: John Stuart Mill\r\n\r\n"
                   "Release Date: January 10, 2011 [EBook #34901]\r\n\r\nLanguage: English\r\n\r\n"
                   "Character set encoding: {}\r\n\r\n"
                   "*** START OF THIS PROJECT GUTENBERG EBOOK ON LIBERTY ***\r\n\r\n")
ON_LIBERTY_BODY = ("INTRODUCTION.\r\n\r\n\r\nI.\r\n\r\nHe offered the Company a pension; Mill refused\r\n"
                   "of the \xa3200 which he offered. The _Trait\xe9 de Politique Positive_ aims at\r\n"
                   "a despotism of society over the individual.\r\n\r\n"
                   "*** END OF THIS PROJECT GUTENBERG EBOOK ON LIBERTY ***\r\n")


def test_gutenberg_latin1_file_is_read_as_its_header_declares_and_the_log_says_so(tmp_path, caplog):
    p = tmp_path / "34901-8.txt"
    p.write_bytes((ON_LIBERTY_HEAD.format("ISO-8859-1") + ON_LIBERTY_BODY).encode("latin-1"))
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        book = load_book(p)
    text = " ".join(pa for ch in book.chapters for pa in ch.paragraphs)
    assert "\xa3200" in text and "Trait\xe9 de Politique" in text
    assert book.title == "On Liberty" and book.author == "John Stuart Mill"
    [rec] = [r for r in caplog.records if r.name == "booktts.ingest"]
    assert "ISO-8859-1" in rec.getMessage() and str(p) in rec.getMessage() and "not valid UTF-8" in rec.getMessage()


def test_declared_latin1_with_windows_punctuation_bytes_reads_them_as_windows_1252(tmp_path, caplog):
    p = tmp_path / "a-8.txt"
    body = ON_LIBERTY_BODY.replace("Mill refused", "\u201cMill refused\u201d")
    p.write_bytes((ON_LIBERTY_HEAD.format("ISO Latin-1") + body).encode("cp1252"))
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        book = load_book(p)
    text = " ".join(pa for ch in book.chapters for pa in ch.paragraphs)
    assert "\u201cMill refused\u201d" in text and "\xa3200" in text
    assert "Windows-1252" in caplog.text


def test_a_declaration_the_bytes_belie_or_none_reads_latin1_text_as_windows_1252(tmp_path, caplog):
    # "ASCII" cannot be what a file with byte 0xA3 is in, and no declaration says nothing: both are read as
    # Western 8-bit text (they used to be refused with a hint to pass --encoding latin-1)
    heads = (ON_LIBERTY_HEAD.format("ASCII"), ON_LIBERTY_HEAD.replace("Character set encoding: {}\r\n\r\n", ""))
    for i, head in enumerate(heads):
        p = tmp_path / f"b{i}.txt"
        p.write_bytes((head + ON_LIBERTY_BODY).encode("latin-1"))
        caplog.clear()
        with caplog.at_level("WARNING", logger="booktts.ingest"):
            book = load_book(p)
        assert "\xa3200" in " ".join(pa for ch in book.chapters for pa in ch.paragraphs)
        [rec] = [r for r in caplog.records if r.name == "booktts.ingest"]
        assert "Windows-1252" in rec.getMessage() and ("'ASCII'" in rec.getMessage()) == (i == 0)


def test_an_explicit_encoding_wins_over_the_declared_one(tmp_path, caplog):
    p = tmp_path / "c.txt"
    p.write_bytes((ON_LIBERTY_HEAD.format("ISO-8859-1") + ON_LIBERTY_BODY).encode("latin-1"))
    with caplog.at_level("WARNING", logger="booktts.ingest"):
        book = load_book(p, encoding="iso-8859-15")
    assert "\xa3200" in " ".join(pa for ch in book.chapters for pa in ch.paragraphs)
    assert not [r for r in caplog.records if r.name == "booktts.ingest"]


def test_unknown_encoding_name_is_an_input_error(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("Hello there.\n")
    with pytest.raises(InputError) as ei:
        load_book(p, encoding="no-such-codec")
    assert_one_line(ei, p, "no-such-codec")


def test_utf16_needs_its_encoding(tmp_path):
    p = tmp_path / "u16.txt"
    p.write_bytes(STORY.encode("utf-16"))
    with pytest.raises(EncodingError) as ei:
        load_book(p)
    assert_one_line(ei, p, "--encoding utf-16")
    assert [c.title for c in load_book(p, encoding="utf-16").chapters] == ["CHAPTER I. The Start", "CHAPTER II. The End"]


# ------------------------------------------------------------------------------------- Markdown


def test_markdown_sample_chapters_and_clean_up():
    book = load_book(DATA / "sample.md")
    assert book.format == "md"
    assert book.title == "The Lamplighter's Almanac"  # the single H1
    assert [c.title for c in book.chapters] == [
        "The First Evening", "Fog on the Quay", "Fog on the Quay, Continued",  # ATX and setext headings
        "The Brass Key"]
    # the note before the contents is spoken before the first heading (the title is announced)
    assert book.chapters[0].opening == 1 and book.chapters[0].paragraphs[0].startswith("This little almanac")
    everything = " ".join(p for c in book.chapters for p in c.paragraphs)
    assert "little flame" in everything and "good omen" in everything and "*" not in everything
    assert "towards the harbour." in everything and "example.org" not in everything  # link -> its text
    assert "A lamp on a pole" not in everything and "lamp.png" not in everything  # image dropped
    assert "Sample book" not in everything  # HTML comment dropped
    assert "Fog at six. Wind none. Lamps: three, all lit." in everything  # code text kept, fences gone
    assert "```" not in everything and "---" not in everything
    assert "Contents" not in everything and "#the-first-evening" not in everything  # contents list dropped
    assert "\"A lamp that lights at the first touch,\" his mother used to say, \"promises a quiet night.\"" \
        in book.chapters[0].paragraphs  # blockquote markers gone, lines joined


def test_markdown_parts_prefix_their_first_chapter(tmp_path):
    p = tmp_path / "parts.md"
    p.write_text(f"# Part One\n\n## Chapter 1\n\n{PROSE}\n\n## Chapter 2\n\nTwo.\n\n### A scene\n\nMore.\n\n"
                 "# Part Two\n\n## Chapter 3\n\nThree.\n")
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Part One. Chapter 1", [PROSE]), ("Chapter 2", ["Two.", "A scene", "More."]),
        ("Part Two. Chapter 3", ["Three."])]


def test_markdown_headings_below_the_chapters_are_headings_inside_them(tmp_path):
    # a poem's numbered parts ("### I.") and a letter's writer line, marked up below the chapters' level,
    # are said as headings (the pause after them), a bare numeral as a part, capitals de-shouted; a
    # sentence marked up as a heading stays a paragraph
    long = "And so it was that the whole of the company went down to the river together at dawn that day"
    p = tmp_path / "poems.md"
    p.write_text(f"## THE BELLS\n\n### I.\n\nHear the sledges with the bells.\n\n### II.\n\nHear the mellow "
                 f"wedding bells.\n\n## LETTER 1\n\n### USBEK TO RUSTAN\n\nWe stayed one day only.\n\n"
                 f"### {long}\n\nThe end.\n\n## ANNABEL LEE\n\nIt was many and many a year ago.\n\n"
                 f"## ELDORADO\n\nGaily bedight, a gallant knight.\n")
    book = load_book(p)
    assert [c.title for c in book.chapters] == ["The Bells", "LETTER 1", "Annabel Lee", "Eldorado"]
    bells, letter = book.chapters[:2]
    assert list(zip(bells.paragraphs, [bells.kind(i) for i in range(len(bells.paragraphs))])) == [
        ("Part I.", "heading"), ("Hear the sledges with the bells.", "text"),
        ("Part II.", "heading"), ("Hear the mellow wedding bells.", "text")]
    assert [(letter.paragraphs[i], letter.kind(i)) for i in range(len(letter.paragraphs))] == [
        ("Usbek to Rustan", "heading"), ("We stayed one day only.", "text"), (long, "text"), ("The end.", "text")]


def test_markdown_without_hash_headings_uses_text_headings(tmp_path):
    p = tmp_path / "plain.md"
    p.write_text(f"CHAPTER I.\nThe Start\n\n{PROSE} *Emphasis* [a link](http://x.example).\n\nCHAPTER II.\n\nEnd.\n")
    book = load_book(p)
    assert [c.title for c in book.chapters] == ["CHAPTER I. The Start", "CHAPTER II."]
    assert book.chapters[0].paragraphs == [PROSE + " Emphasis a link."]


# ------------------------------------------------------------------------------------- EPUB structure


def test_epub_chapters_sharing_one_file_split_at_their_anchors(tmp_path):
    p = make_epub(tmp_path / "frag.epub", [
        ("c1.xhtml", f'<h1 id="a">One</h1><p>{PROSE}</p><h1 id="b">Two</h1><p>Second.</p>'),
        ("c2.xhtml", "<h1>Three</h1><p>Third.</p>"),
    ], nav=[("One", "c1.xhtml#a"), ("Two", "c1.xhtml#b"), ("Three", "c2.xhtml")])
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("One", [PROSE]), ("Two", ["Second."]), ("Three", ["Third."])]


def test_epub_document_without_toc_entry_is_appended_to_the_chapter_before(tmp_path):
    p = make_epub(tmp_path / "split.epub", [
        ("c1.xhtml", f"<h1>One</h1><p>{PROSE}</p>"),
        ("c1b.xhtml", "<p>The rest of chapter one.</p>"),
        ("c2.xhtml", "<h1>Two</h1><p>Second.</p>"),
    ], nav=[("One", "c1.xhtml"), ("Two", "c2.xhtml")])
    assert [(c.title, c.paragraphs) for c in load_book(p).chapters] == [
        ("One", [PROSE, "The rest of chapter one."]), ("Two", ["Second."])]


def test_epub2_ncx_titles(tmp_path):
    p = make_epub(tmp_path / "ncx.epub", [
        ("c1.xhtml", f"<h2>I</h2><p>{PROSE}</p>"), ("c2.xhtml", "<h2>II</h2><p>Second.</p>"),
    ], ncx=[("Chapter I: Morning", "c1.xhtml"), ("Chapter II: Night", "c2.xhtml")])
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("Chapter I: Morning", ["I", PROSE]), ("Chapter II: Night", ["II", "Second."])]


def test_epub_without_toc_uses_document_headings(tmp_path):
    p = make_epub(tmp_path / "notoc.epub", [
        ("c1.xhtml", f"<h1>The Start</h1><p>{PROSE}</p>"), ("c1b.xhtml", "<p>More of the start.</p>"),
        ("c2.xhtml", "<h2>The Middle</h2><p>Second.</p>"),
    ])
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("The Start", [PROSE, "More of the start."]), ("The Middle", ["Second."])]


def test_epub_nested_toc_parent_page_prefixes_first_child(tmp_path):
    p = make_epub(tmp_path / "nested.epub", [
        ("p1.xhtml", "<h1>Part One</h1>"), ("c1.xhtml", f"<h2>Chapter 1</h2><p>{PROSE}</p>"),
        ("c2.xhtml", "<h2>Chapter 2</h2><p>Second.</p>"),
    ], nav=[("Part One", "p1.xhtml", [("Chapter 1", "c1.xhtml"), ("Chapter 2", "c2.xhtml")])])
    assert [c.title for c in load_book(p).chapters] == ["Part One. Chapter 1", "Chapter 2"]


def test_epub_heading_repeating_title_is_not_spoken_twice_and_longer_heading_wins(tmp_path):
    p = make_epub(tmp_path / "h.epub", [
        ("c1.xhtml", f"<h2>CHAPTER I.<br/>Down the Hole</h2><p>{PROSE}</p>"),
        ("c2.xhtml", "<h2>Chapter 2</h2><h3>The Long Fall</h3><p>Second.</p>"),
        ("c3.xhtml", "<h2>Chapter 3: Landing</h2><p>Third.</p>"),
    ], nav=[("Chapter I. Down the Hole", "c1.xhtml"), ("Chapter 2 The Long Fall", "c2.xhtml"),
            ("Chapter 3", "c3.xhtml")])
    assert [(c.title, c.paragraphs) for c in load_book(p).chapters] == [
        ("Chapter I. Down the Hole", [PROSE]), ("Chapter 2 The Long Fall", ["Second."]),
        ("Chapter 3: Landing", ["Third."])]


def test_epub_xhtml_to_text(tmp_path):
    body = (
        '<h1>One</h1>'
        f'<p>{PROSE}<a epub:type="noteref" href="#n1">1</a></p>'
        '<p>Water<sup><a href="#n2">2</a></sup> is wet, E = mc<sup>2</sup>.</p>'
        '<p class="poem">Twinkle, twinkle,<br/>little bat!<br/><br/>How I wonder<br/>what you\'re at!</p>'
        '<img src="x.png" alt="A picture"/><script>var x = "no";</script>'
        '<div>In a div<span class="pagenum">[Pg 7]</span> with <i>italics</i>, <b>bold</b> and a '
        '<a href="http://example.com">link</a>.</div>'
        '<ul><li>First item</li><li>Second item</li></ul>'
        '<blockquote>Quoted words.</blockquote>'
        '<p>\u201cCurly\u201d &amp; straight &#8212; all&nbsp;kept.</p>'
        '<aside epub:type="footnote" id="n1"><p>The marked note is dropped.</p></aside>'
        '<div role="doc-endnotes"><p>Endnotes too.</p></div>'
        '<div class="note" id="n2"><p>An unmarked note is kept.</p></div>'
    )
    p = make_epub(tmp_path / "x.epub", [("c1.xhtml", body)], nav=[("One", "c1.xhtml")])
    (ch,) = load_book(p).chapters
    assert ch.paragraphs == [
        PROSE, "Water is wet, E = mc2.", "Twinkle, twinkle, little bat!", "How I wonder what you're at!",
        "In a div with italics, bold and a link.", "First item", "Second item", "Quoted words.",
        "\u201cCurly\u201d & straight \u2014 all kept.", "An unmarked note is kept."]


def test_epub_html_entities_with_xhtml_doctype_are_read(tmp_path):
    doctype = '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
    p = make_epub(tmp_path / "ent.epub", [("c1.xhtml", "")], nav=[("One", "c1.xhtml")],
                  extra={"OEBPS/c1.xhtml": xhtml(f"<p>{PROSE}&nbsp;&mdash;&hellip;</p>", doctype)})
    # &nbsp; is a non-breaking space, which whitespace normalisation turns into a plain space
    assert load_book(p).chapters[0].paragraphs == [PROSE + " \u2014\u2026"]


def test_epub_malformed_xhtml_is_read_as_html(tmp_path):
    p = make_epub(tmp_path / "bad.epub", [("c1.xhtml", "")], nav=[("One", "c1.xhtml")],
                  extra={"OEBPS/c1.xhtml": f"<html><body><h1>One</h1><p>{PROSE}<br>Fish & chips<p>Next</body>"})
    assert load_book(p).chapters[0].paragraphs == [PROSE + " Fish & chips", "Next"]


def test_epub_gutenberg_markers_as_plain_text(tmp_path):
    p = make_epub(tmp_path / "pg.epub", [
        ("h.xhtml", "<p>The Project Gutenberg eBook of X</p><p>This ebook is for the use of anyone anywhere.</p>"
                    "<p>*** START OF THE PROJECT GUTENBERG EBOOK X ***</p>"),
        ("c1.xhtml", f"<h1>One</h1><p>{PROSE}</p>"),
        ("f.xhtml", "<p>*** END OF THE PROJECT GUTENBERG EBOOK X ***</p><h2>THE FULL PROJECT GUTENBERG LICENSE</h2>"
                    "<p>Please read this before you distribute or use this work.</p>"),
    ], nav=[("X", "h.xhtml"), ("One", "c1.xhtml"), ("Licence", "f.xhtml")])
    book = load_book(p)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("One", [PROSE])]


def test_epub_non_linear_document_not_in_toc_is_skipped(tmp_path):
    p = make_epub(tmp_path / "nl.epub", [
        ("c1.xhtml", f"<h1>One</h1><p>{PROSE}</p>"), ("popup.xhtml", "<p>Answer key: forty-two.</p>"),
    ], nav=[("One", "c1.xhtml")], linear={"popup.xhtml": "no"})
    assert [c.paragraphs for c in load_book(p).chapters] == [[PROSE]]


def test_deeply_nested_xhtml_is_read_without_recursion_error(tmp_path):
    # a hostile document nesting 20000 <div>s must not crash the reader with a RecursionError
    deep = "<div>" * 20000 + "<p>Deep text.</p>" + "</div>" * 20000
    p = make_epub(tmp_path / "deep.epub", [("c1.xhtml", f"<h1>One</h1><p>{PROSE}</p>{deep}")], nav=[("One", "c1.xhtml")])
    assert load_book(p).chapters[0].paragraphs == [PROSE, "Deep text."]


@pytest.mark.parametrize("unit", ["_a ", "*a ", "[a ", "![a ", "`a ", "[a](", "<a "],
                         ids=["underscores", "stars", "brackets", "images", "backticks", "open-links", "tags"])
def test_huge_paragraph_of_unmatched_markup_stays_fast(tmp_path, unit):
    # clean-up must be linear: an earlier regex took minutes on 300 kB of "_a _a _a ..."
    p = tmp_path / "huge.md"
    p.write_text(unit * 200_000)
    t = time.perf_counter()
    book = load_book(p)
    assert time.perf_counter() - t < 3.0
    assert len(book.chapters) == 1 and len(book.chapters[0].paragraphs[0]) > 200_000


# ------------------------------------------------------------------------------------- bad inputs

ENTITY_BOMB = ('<?xml version="1.0"?><!DOCTYPE html [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">'
               '<!ENTITY c "&b;&b;&b;&b;&b;&b;">]><html xmlns="http://www.w3.org/1999/xhtml"><body><p>&c;</p>'
               '</body></html>')
EXTERNAL_ENTITY = ('<?xml version="1.0"?><!DOCTYPE html [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
                   '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>&e;</p></body></html>')
ENCRYPTION = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
              '<EncryptedData xmlns="http://www.w3.org/2001/04/xmlenc#"><EncryptionMethod '
              'Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/><CipherData><CipherReference '
              'URI="OEBPS/c1.xhtml"/></CipherData></EncryptedData></encryption>')
FONT_OBFUSCATION = ENCRYPTION.replace("http://www.w3.org/2001/04/xmlenc#aes128-cbc",
                                      "http://www.idpf.org/2008/embedding").replace("OEBPS/c1.xhtml", "OEBPS/f.otf")


def _good(tmp_path, name="book.epub", **kw):
    return make_epub(tmp_path / name, [("c1.xhtml", f"<h1>One</h1><p>{PROSE}</p>")], nav=[("One", "c1.xhtml")], **kw)


def _opf_with(href: str) -> str:
    return ('<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/><manifest>'
            f'<item id="c" href="{href}" media-type="application/xhtml+xml"/></manifest>'
            '<spine><itemref idref="c"/></spine></package>')


def _bad_input(kind: str, tmp_path: Path) -> Path:
    """Build one bad input in tmp_path and return its path."""
    d = tmp_path
    if kind == "missing":
        return d / "missing.txt"
    if kind == "directory":
        (d / "a-folder").mkdir()
        return d / "a-folder"
    if kind == "empty":
        (d / "empty.txt").write_bytes(b"")
        return d / "empty.txt"
    if kind == "whitespace":
        (d / "blank.txt").write_text(" \n\n\t\r\n  \n")
        return d / "blank.txt"
    if kind == "only-illustration":
        (d / "pic.txt").write_text("[Illustration]\n\n* * *\n")
        return d / "pic.txt"
    if kind == "only-gutenberg-header":
        (d / "header.txt").write_text(PG_HEADER + "*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n\n"
                                      "*** END OF THE PROJECT GUTENBERG EBOOK X ***" + PG_LICENCE)
        return d / "header.txt"
    if kind == "binary-nul":
        (d / "binary.txt").write_bytes(bytes(range(256)) * 40)
        return d / "binary.txt"
    if kind == "binary-control":
        (d / "ctrl.txt").write_bytes(b"\x01\x02\x03\x04abc\x05\x06\x07\x08" * 500)
        return d / "ctrl.txt"
    if kind == "zip-named-txt":
        return write_zip(d / "book.txt", {"a.txt": "hello"})
    if kind == "markdown-binary":
        (d / "b.md").write_bytes(b"# T\x00\x00\x00")
        return d / "b.md"
    if kind == "corrupt-zip":
        (d / "corrupt.epub").write_bytes(b"PK\x03\x04 this is not really a zip file")
        return d / "corrupt.epub"
    if kind == "text-named-epub":
        (d / "text.epub").write_text("Just some text.\n")
        return d / "text.epub"
    if kind == "truncated-zip":
        data = _good(d, "whole.epub").read_bytes()
        (d / "truncated.epub").write_bytes(data[: len(data) // 2])
        return d / "truncated.epub"
    if kind == "no-container":
        return write_zip(d / "nocontainer.epub", {"OEBPS/c1.xhtml": xhtml("<p>x</p>")})
    if kind == "missing-opf":
        return write_zip(d / "noopf.epub", {"META-INF/container.xml": CONTAINER})
    if kind == "empty-spine":
        return write_zip(d / "nospine.epub", {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf":
                                              '<package xmlns="http://www.idpf.org/2007/opf"><manifest/></package>'})
    if kind == "drm-encryption":
        return _good(d, "drm.epub", extra={"META-INF/encryption.xml": ENCRYPTION})
    if kind == "drm-rights":
        return _good(d, "rights.epub", extra={"META-INF/rights.xml": "<rights/>"})
    if kind == "member-escapes":
        return _good(d, "escape.epub", extra={"../../evil.xhtml": "x"})
    if kind == "member-absolute":
        return _good(d, "absolute.epub", extra={"/etc/evil.xhtml": "x"})
    if kind == "container-escapes":
        return write_zip(d / "escape2.epub", {"META-INF/container.xml": CONTAINER.replace("OEBPS/content.opf",
                                                                                           "../../content.opf")})
    if kind == "opf-href-escapes":
        return _good(d, "href.epub", opf=_opf_with("../../../etc/passwd"))
    if kind == "opf-href-absolute":
        return _good(d, "abs.epub", opf=_opf_with("/etc/passwd"))
    if kind == "opf-href-file-url":
        return _good(d, "fileurl.epub", opf=_opf_with("file:///etc/passwd"))
    if kind == "entity-expansion":
        return _good(d, "lol.epub", extra={"OEBPS/c1.xhtml": ENTITY_BOMB})
    if kind == "external-entity":
        return _good(d, "xxe.epub", extra={"OEBPS/c1.xhtml": EXTERNAL_ENTITY})
    if kind == "entity-in-opf":
        opf = _opf_with("c1.xhtml").replace("<package", '<!DOCTYPE package [<!ENTITY x "y">]><package', 1)
        return _good(d, "opfent.epub", opf=opf)
    raise AssertionError(kind)


BAD = [
    # (kind, expected exception class, words the message must hold besides the path)
    ("missing", InputError, ["no such file"]),
    ("directory", InputError, ["directory"]),
    ("empty", InputError, ["empty"]),
    ("whitespace", InputError, ["whitespace"]),
    ("only-illustration", InputError, ["no readable text"]),
    ("only-gutenberg-header", InputError, ["Project Gutenberg"]),
    ("binary-nul", InputError, ["binary"]),
    ("binary-control", InputError, ["binary"]),
    ("zip-named-txt", InputError, [".epub"]),
    ("markdown-binary", InputError, ["binary"]),
    ("corrupt-zip", InputError, ["corrupt zip", "re-download"]),
    ("text-named-epub", InputError, ["corrupt zip"]),
    ("truncated-zip", InputError, ["not a valid EPUB"]),
    ("no-container", InputError, ["container.xml"]),
    ("missing-opf", InputError, ["OEBPS/content.opf"]),
    ("empty-spine", InputError, ["spine"]),
    ("drm-encryption", InputError, ["DRM"]),
    ("drm-rights", InputError, ["DRM"]),
    ("member-escapes", UnsafePathError, [".."]),
    ("member-absolute", UnsafePathError, ["absolute"]),
    ("container-escapes", UnsafePathError, [".."]),
    ("opf-href-escapes", UnsafePathError, [".."]),
    ("opf-href-absolute", UnsafePathError, ["absolute"]),
    ("opf-href-file-url", UnsafePathError, ["outside"]),
    ("entity-expansion", InputError, ["entities"]),
    ("external-entity", InputError, ["entities"]),
    ("entity-in-opf", InputError, ["entities"]),
]


@pytest.mark.parametrize("kind,cls,needles", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_error_naming_the_file(tmp_path, kind, cls, needles):
    path = _bad_input(kind, tmp_path)
    with pytest.raises(cls) as ei:
        load_book(path)
    assert_one_line(ei, path, *needles)
    if cls is InputError:
        assert type(ei.value) in (InputError,), "not a more specific class than expected"


def test_zip_bomb_is_refused(tmp_path, monkeypatch):
    # a content document that inflates far beyond the cap (the cap is lowered to keep the test small)
    monkeypatch.setattr(ingest.epub, "MAX_UNCOMPRESSED_BYTES", 1024 * 1024)  # where the reader looks
    p = _good(tmp_path, "bomb.epub", extra={"OEBPS/c1.xhtml": xhtml("<p>" + " " * (4 * 1024 * 1024) + "x</p>")})
    assert p.stat().st_size < 64 * 1024
    with pytest.raises(InputError) as ei:
        load_book(p)
    assert_one_line(ei, p, "zip bomb")


def test_corrupt_compressed_member_is_an_input_error(tmp_path):
    # found by fuzzing: a damaged deflate stream raised zlib.error (a traceback) instead of one line
    p = make_epub(tmp_path / "damaged.epub", [("c1.xhtml", f"<h1>One</h1><p>{PROSE * 50}</p>")], nav=[("One", "c1.xhtml")])
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("OEBPS/c1.xhtml")
    raw = bytearray(p.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for k in range(start + 20, start + info.compress_size - 20, 7):
        raw[k] ^= 0x5A
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError) as ei:
        load_book(p)
    assert_one_line(ei, p, "not a valid EPUB", "corrupt zip")


def test_font_obfuscation_is_not_drm(tmp_path):
    # EPUBs may obfuscate embedded fonts (listed in encryption.xml); the text is still readable
    p = _good(tmp_path, "fonts.epub", extra={"META-INF/encryption.xml": FONT_OBFUSCATION})
    assert load_book(p).chapters[0].paragraphs == [PROSE]


def test_good_epub_built_here_loads(tmp_path):
    # the builder behind the bad-input cases makes a readable book when nothing is broken
    book = load_book(_good(tmp_path))
    assert (book.title, [(c.title, c.paragraphs) for c in book.chapters]) == ("A Test Book", [("One", [PROSE])])


def test_markdown_rule_after_a_bullet_is_not_a_heading(tmp_path):
    # "- item" then "---": a list item and a thematic break, not a level-2 heading named "item"
    # (which would cut a chapter there); a paragraph underlined so is still a heading
    p = tmp_path / "list.md"
    p.write_text("# One\n\nIt began with a list of what she had packed for the journey north.\n\n"
                 "- a lantern\n---\n\nAnd then the road went on for many miles without a turn.\n\n"
                 "Two\n---\n\nThe second chapter had prose of its own to read out loud.\n", encoding="utf-8")
    book = ingest.load_book(p)
    assert [c.title for c in book.chapters] == ["Two"]  # "One" is the book title (its single H1), announced once
    # the short text under the title is spoken before "Two", no chapter of its own
    assert any("a lantern" in para for para in book.chapters[0].paragraphs[:book.chapters[0].opening])


# ------------------------------------------------------------------------------------- issue 28: makers' notes, figures


def test_transcribers_notes_and_file_notes_are_never_spoken(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("THE WHALE\n\nby A. Writer\n\n\n\nOriginal Transcriber\u2019s Notes:\n\n\n"
                 "This text is a combination of etexts, one from an old project and one from the archives. "
                 "The resulting etext was compared with a printed copy.\n\n\n\n"
                 f"CHAPTER I.\n\n{PROSE}\n\n[Transcriber's Note: the spelling of the original is kept.]\n\n"
                 "The sea was grey.\n\nHe opened the file and read this file twice.\n\nCHAPTER II.\n\nThe ship sailed at dawn, and nobody waved.\n")
    book = load_book(p)
    text = " ".join(q for c in book.chapters for q in c.paragraphs)
    assert "etext" not in text and "Transcriber" not in text and "spelling" not in text
    assert [c.paragraphs for c in book.chapters] == [[PROSE, "The sea was grey.",
                                                      "He opened the file and read this file twice."],
                                                    ["The ship sailed at dawn, and nobody waved."]]


def test_epub_figure_boxes_file_notes_and_running_contents_are_not_read(tmp_path):
    # a Gutenberg EPUB: an images note on the title page, the contents as one run of text, each chapter's
    # number and title as separate NCX entries with an illustration's box ("0029m") between them
    titles = ["The Old Sea-dog", "Black Dog Appears", "The Black Spot", "The Sea-chest"]
    title_page = ("<h1 id='t'>TREASURE TALE</h1><div class='mynote'>The images in this file are of absolute format: "
                  "they do not reduce in size for small screens; a different version of this ebook is "
                  "available.</div><div class='fig'>0010m</div><p id='c'>"
                  + " ".join(f"{n}. {t}" for n, t in enumerate(titles, 1)) + "</p>")
    chapters = "".join(f"<h2 id='n{n}'>{n}</h2><div class='fig'>00{n}9m</div><h3 id='h{n}'>{t}</h3>"
                       f"<div class='figleft c4'>90{n}9m</div><p>{PROSE} ({n})</p>" for n, t in enumerate(titles, 1))
    ncx = [("TREASURE TALE", "c0.xhtml#t")]
    for n, t in enumerate(titles, 1):
        ncx += [(str(n), f"c1.xhtml#n{n}"), (t, f"c1.xhtml#h{n}")]
    book = load_book(make_epub(tmp_path / "ti.epub", [("c0.xhtml", title_page), ("c1.xhtml", chapters)], ncx=ncx,
                               title="Treasure Tale"))
    assert len(book.chapters) == 4 and all(c.title.endswith(t) for c, t in zip(book.chapters, titles))
    assert [c.paragraphs[-1] for c in book.chapters] == [f"{PROSE} ({n})" for n in range(1, 5)]
    text = " ".join(q for c in book.chapters for q in c.paragraphs)
    assert "m" not in {w[-1] for w in text.split() if w[0].isdigit()} and "images" not in text


def test_an_epub_chapter_the_contents_leaves_out_is_still_a_chapter(tmp_path):
    """Siddhartha (PG 2500 as EPUB 3): each chapter is an <h2> at the top of its own file, and the NCX names
    every one but "BY THE RIVER", whose file stands in the spine between SANSARA and THE FERRYMAN: a file no
    entry points to, opening with a heading at the chapters' level between two named chapters, is a chapter."""
    texts = {
        "SANSARA": "For a long time, Siddhartha had lived the life of the world and of lust, though without being "
                   "a part of it.",
        "BY THE RIVER": "Siddhartha walked through the forest, was already far from the city, and knew nothing but "
                        "that one thing, that there was no going back for him.",
        "THE FERRYMAN": "By this river I want to stay, thought Siddhartha, it is the same which I have crossed a "
                        "long time ago on my way to the childlike people.",
        "THE SON": "Timid and weeping, the boy had attended his mother\u2019s funeral; gloomy and shy, he had "
                   "listened to Siddhartha.",
    }
    docs = [(f"c{n}.xhtml", f'<h2><a id="chap{n}"/>{head}</h2><p>{body}</p>')
            for n, (head, body) in enumerate(texts.items())]
    ncx = [(head, f"c{n}.xhtml#chap{n}") for n, head in enumerate(texts) if head != "BY THE RIVER"]
    book = load_book(make_epub(tmp_path / "sid.epub", docs, ncx=ncx, title="Siddhartha"))
    assert [c.title for c in book.chapters] == ["Sansara", "By the River", "The Ferryman", "The Son"]
    assert book.chapters[1].paragraphs[0].startswith("Siddhartha walked through the forest")
    assert book.chapters[0].paragraphs[-1].endswith("without being a part of it.")
