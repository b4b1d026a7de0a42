"""Ingest: turn a book file (plain text, Markdown or EPUB) into chapters of paragraphs.

``load_book(path, encoding=None) -> Book`` is the only entry point. A :class:`Book` holds
:class:`Chapter` objects, 1-based and in reading order; each chapter has the title to speak
and its paragraphs, whitespace-normalised (hard-wrapped lines joined with single spaces).
Every user-caused failure is a one-line :class:`core.errors.InputError` (or its subclasses
``EncodingError`` and ``UnsafePathError``) naming the file and what to do.

Format is chosen by extension: ``.epub`` is EPUB, ``.md``/``.markdown`` is Markdown, anything
else (``.txt``, ``.text``, no extension, unknown) is plain text.

Decisions (the rules other modules can rely on)
-----------------------------------------------

Text files
    UTF-8 with or without BOM, CRLF/CR/LF. ``encoding`` overrides UTF-8. A file is refused as
    binary (before decoding) when it has NUL bytes, or more than 10 % control bytes in its
    first 64 KiB; a zip or PDF given a text name gets a hint instead. UTF-16 text (BOM) needs
    ``--encoding utf-16``.

Project Gutenberg boilerplate
    Text outside the ``*** START OF THE/THIS PROJECT GUTENBERG EBOOK`` and ``*** END OF ...`` /
    ``End of (the) Project Gutenberg ...`` markers is left out (TXT, Markdown, and EPUB blocks
    carrying the marker text). A "Produced by ..." credit paragraph right after the START marker
    is left out too. In EPUBs, elements with id ``pg-header``/``pg-footer`` or class
    ``pg-boilerplate`` are skipped, and TOC entries pointing into them are ignored.

Chapter headings (TXT, and Markdown without Markdown headings)
    A heading starts a blank-line separated block: ``CHAPTER I.``, ``Chapter 1``, ``Chapter One``,
    ``Chapter the First``, ``BOOK``/``PART``/``VOLUME``/``STAVE``/``CANTO`` + number, optionally
    followed by a title on the same line ("CHAPTER XII. Alice's Evidence"), ``PROLOGUE``,
    ``EPILOGUE``, ``PREFACE``, ``INTRODUCTION``, ``FOREWORD``, ``AFTERWORD``, ``INTERLUDE``, or a
    roman numeral alone in its block ("IV.") when it belongs to a sequence (IV. ... V.), so that a
    letter signed "M." is no chapter. A bare heading followed by a short title line (same block,
    or the next block when that is one short line without sentence punctuation) gives the spoken
    title "CHAPTER I. Down the Rabbit-Hole". Markdown uses ``#`` / setext headings: a single H1
    before all other headings is the book title; chapters are the highest remaining level, or
    the next one down when that has more headings ("# Part" / "## Chapter": a part heading
    directly followed by a chapter heading prefixes its title). Deeper headings stay in the
    chapter as spoken paragraphs.

Paragraphs
    Blank-line separated; hard-wrapped lines are joined with single spaces. A text written one
    paragraph per line (long lines, almost no blank lines) is split at every line instead.

Contents lists
    A run of three or more headings with no paragraph between them (Alice's "Contents" block) is
    a table of contents: it never makes chapters and its lines are dropped, not spoken. The last
    heading of the run is the real chapter start when body text follows it and the same heading
    does not come again later. A "Contents"/"Table of Contents" label right before the run goes
    too. Two headings in a row ("BOOK ONE" then "CHAPTER I.") merge into one title. Runs of three
    or more short (<= 20 words) paragraphs that are local links (Markdown ``[x](#y)``, EPUB rows
    linking into the book) are contents lists too and are dropped. Nothing else is dropped as a
    contents list; a chapter made only of other short lines is kept.

Front matter
    Text before the first heading becomes chapter 1 (titled with the book title when the book
    itself names it, else "": a file name is never spoken) only if it holds
    prose: a paragraph of 3+ words with lower-case letters ending in sentence punctuation (not a
    "by ..." credit line), or one of 20+ words, or 100+ words in all. Title pages, "by Author",
    edition lines and contents lists are therefore left out. A book with no headings at all is
    one chapter with everything in it (titled the same way).

Clean-up for speech
    ``_italics_``, ``*em*``, ``**bold**`` markers go (words stay); Markdown links become their
    text, images, HTML comments, link reference definitions and fence lines go (code text stays),
    bullet markers go, numbered list markers stay. ``[Illustration]`` and
    ``[Illustration: caption]`` markers go, as do separator-only paragraphs (``* * *``,
    ``-----``). Curly quotes and all other punctuation are kept, as is a lone "…".

EPUB
    ``META-INF/container.xml`` -> OPF -> spine order (``linear="no"`` items only when the TOC
    points at them). Titles come from the EPUB 3 nav (``epub:type="toc"``), else the EPUB 2 NCX.
    Each TOC entry (document or ``#fragment`` anchor, so several chapters may share a file)
    starts a chapter at that point; spine documents without a TOC entry are appended to the
    chapter before them. Entries whose target holds no text are dropped, except a parent entry
    (a "Part") directly followed by its first child, whose label is prefixed to the child's
    title. Leading TOC chapters without prose (title page, "Contents", edition notice) are
    front matter and are dropped by the rule above. Without a usable TOC, every spine document
    whose text has an h1/h2 starts a chapter titled by it; documents without one are appended to
    the previous chapter. Headings at the start of a chapter that repeat its title are not kept
    as paragraphs (the title is spoken from ``Chapter.title``); when the heading says more than
    the TOC label ("Chapter 1: The Start" vs "Chapter 1") the heading becomes the title.
    XHTML -> text keeps breaks at p, div, h1-h6, li, blockquote, tr, ...; ``<br/><br/>`` splits a
    paragraph (poem stanzas); images, svg, css, scripts, ``nav``, page-number markers, noteref
    links/``sup`` note markers and footnote/endnote bodies marked with ``epub:type`` or ``role``
    are dropped; ``figcaption`` text is kept.
    All XML is parsed with :mod:`defusedxml`: no entity declarations, no external references, no
    network or DTD access; a document declaring entities is refused with an ``InputError``. HTML
    named entities (``&nbsp;``) are turned into character references before parsing. A content
    document that is not well-formed XML is read with the stdlib HTML parser instead.
    Refused with one line: not a zip/corrupt zip, no container/OPF, DRM (``META-INF/rights.xml``,
    or ``encryption.xml`` listing content documents), zip member names or hrefs that are absolute
    or escape the archive with ``..`` (``UnsafePathError``; nothing is ever extracted to disk),
    more than :data:`MAX_UNCOMPRESSED_BYTES` of uncompressed data read (zip bomb).

Book title
    Gutenberg ``Title:`` line, the Markdown title H1, the EPUB ``dc:title``; else a short line
    directly followed by a "by Author" line in the front matter; else the file stem
    (``Book.title_known`` False: never spoken). The author: Gutenberg ``Author:``, that "by ..."
    line, the EPUB ``dc:creator`` (role ``aut`` or none). ``Book.announcement()`` is
    "Title, by Author.".

Front and back matter (left out unless ``front_matter=True``, ``--include-front-matter``)
    EPUB: documents the OPF guide or the nav's landmarks type as copyright-page, colophon, imprint,
    toc, index, loi or lot, and elements with those ``epub:type`` / ``role`` values. Every format:
    chapters titled "About the Author", "Contents", "Index", "Copyright", "Colophon", "Also by ...";
    a short copyright notice (copyright and rights-reserved/ISBN/first-published wording, no long
    prose) among the first three chapters; paragraphs that are only an ISBN; in the last chapter, a
    paragraph "About the Author" and the at most 400 words after it.

Footnotes (EPUB)
    Note bodies (``epub:type``/``role`` footnote, endnote, rearnote) are skipped by default
    (``footnotes="skip"``); ``"inline"`` reads them where they are in the document, ``"end"`` after
    the rest of their document. Note reference markers are always dropped.
"""

from __future__ import annotations

import codecs
import html
import html.entities
import posixpath
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree as ET

import defusedxml
from defusedxml import ElementTree as SafeET

from core.errors import EncodingError, InputError, UnsafePathError

__all__ = ["Book", "Chapter", "load_book", "MAX_UNCOMPRESSED_BYTES", "MAX_TEXT_BYTES"]

MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
"""Most uncompressed bytes read from one EPUB (zip bomb guard)."""
MAX_TEXT_BYTES = 200 * 1024 * 1024
"""Largest text or Markdown file accepted."""
MAX_ZIP_MEMBERS = 20_000
"""Most members an EPUB may list."""

MARKDOWN_SUFFIXES = {".md", ".markdown"}
EPUB_SUFFIXES = {".epub"}


# --------------------------------------------------------------------------- public types


@dataclass
class Chapter:
    """One chapter: its spoken title and its paragraphs, in reading order."""

    index: int
    """1-based position in the book."""
    title: str
    """Title as it should be spoken ("CHAPTER I. Down the Rabbit-Hole"); may be ""."""
    paragraphs: list[str] = field(default_factory=list)
    """Paragraph texts, whitespace-normalised."""

    def to_dict(self) -> dict:
        return {"index": self.index, "title": self.title, "paragraphs": list(self.paragraphs)}

    @classmethod
    def from_dict(cls, d: dict) -> Chapter:
        return cls(index=int(d["index"]), title=str(d.get("title", "")), paragraphs=[str(p) for p in d["paragraphs"]])


@dataclass
class Book:
    """A loaded book."""

    title: str
    source: Path
    format: str
    """"txt", "md" or "epub"."""
    chapters: list[Chapter] = field(default_factory=list)
    author: str | None = None
    """The author, where the book names one (Gutenberg ``Author:``, a "by ..." line, ``dc:creator``)."""
    title_known: bool = True
    """False when ``title`` is only the file name (then it is never spoken)."""

    def to_dict(self) -> dict:
        return {"title": self.title, "source": str(self.source), "format": self.format,
                "chapters": [c.to_dict() for c in self.chapters], "author": self.author,
                "title_known": self.title_known}

    @classmethod
    def from_dict(cls, d: dict) -> Book:
        return cls(title=str(d["title"]), source=Path(d["source"]), format=str(d["format"]),
                   chapters=[Chapter.from_dict(c) for c in d["chapters"]], author=d.get("author"),
                   title_known=bool(d.get("title_known", True)))

    def announcement(self) -> str | None:
        """"Title, by Author." to speak at the start of the book; None when the title is not known."""
        if not self.title_known or not self.title.strip():
            return None
        title = self.title.rstrip(" .,;:")
        return f"{title}, by {self.author}." if self.author else f"{title}."


FOOTNOTE_MODES = ("skip", "inline", "end")


def load_book(path: str | Path, encoding: str | None = None, front_matter: bool = False,
              footnotes: str = "skip") -> Book:
    """Read ``path`` (TXT, Markdown or EPUB) into a :class:`Book`.

    ``encoding`` applies to TXT and Markdown (default UTF-8, BOM allowed); EPUB documents
    declare their own. ``front_matter`` keeps copyright pages, contents, indexes, "About the
    Author" and ISBN lines (see "Front and back matter"); ``footnotes`` is what happens to EPUB
    footnote/endnote bodies: ``skip``, ``inline`` (read where they are) or ``end`` (read at the
    end of their document). Raises :class:`InputError` (one line) for anything unusable.
    """
    if footnotes not in FOOTNOTE_MODES:
        raise InputError(f"--footnotes {footnotes!r}: choose one of {', '.join(FOOTNOTE_MODES)}")
    book = _load_book(path, encoding, footnotes, front_matter)
    if not front_matter:
        kept = _drop_matter(book.chapters)
        if kept and any(c.paragraphs for c in kept):
            book.chapters = [Chapter(i + 1, c.title, c.paragraphs) for i, c in enumerate(kept)]
    return book


def _load_book(path: str | Path, encoding: str | None, footnotes: str, front_matter: bool) -> Book:
    p = Path(path)
    where = _show(p)
    try:
        if not p.exists():
            raise InputError(f"{where}: no such file; check the path")
        if p.is_dir():
            raise InputError(f"{where} is a directory, not a book file; pass a .txt, .md or .epub file")
        if not p.is_file():
            raise InputError(f"{where} is not a regular file; pass a .txt, .md or .epub file")
        size = p.stat().st_size
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise InputError(f"{where}: cannot access it ({getattr(e, 'strerror', None) or e}); "
                         f"check the path and its permissions") from None
    suffix = p.suffix.lower()
    if suffix in EPUB_SUFFIXES:
        return _load_epub(p, footnotes, front_matter)
    if size == 0:
        raise InputError(f"{where} is empty; nothing to read (pass a file with the book's text)")
    if size > MAX_TEXT_BYTES:
        raise InputError(f"{where} is larger than {MAX_TEXT_BYTES // (1024 * 1024)} MB; split it into smaller files")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{where}: cannot read it ({e.strerror or e}); check its permissions") from None
    text = _decode_text(where, data, encoding)
    fmt = "md" if suffix in MARKDOWN_SUFFIXES else "txt"
    return _load_text(p, where, text, fmt)


# --------------------------------------------------------------------------- small helpers


def _show(p: Path | str) -> str:
    """A path for a one-line message (control characters escaped)."""
    s = str(p)
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        s = repr(s)[1:-1]
    return s


_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"), None)
_WS_RE = re.compile(r"\s+")


def _norm(s: str) -> str:
    """Whitespace-normalise: one space between words, none at the ends; drop invisible marks."""
    return " ".join(s.translate(_INVISIBLE).split())


_SENTENCE_END_RE = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]_*]*$")


def _is_prose(p: str) -> bool:
    """A paragraph that reads as running text (not a title, credit or edition line)."""
    words = p.split()
    if len(words) >= 20:
        return True
    if len(words) < 3 or p.lower().startswith("by "):
        return False
    return any(c.islower() for c in p) and bool(_SENTENCE_END_RE.search(p))


def _has_prose(paras: list[str]) -> bool:
    return any(_is_prose(p) for p in paras) or sum(len(p.split()) for p in paras) >= 100


_SEPARATOR_RE = re.compile(r"^(?:[*\-_=~#\u2022\u00b7]\s*){3,}$|^\u2042$")


def _is_separator(p: str) -> bool:
    """``* * *`` and the like: a scene break with nothing to say."""
    return bool(_SEPARATOR_RE.match(p))


def _tokens(s: str) -> list[str]:
    """Lower-case word tokens for comparing titles with headings."""
    return re.findall(r"\w+", s.casefold().replace("\u2019", "").replace("'", ""))


def _join_title(head: str, title: str) -> str:
    head, title = _norm(head), _norm(title)
    if not head:
        return title
    if not title:
        return head
    return f"{head} {title}" if head[-1] in ".:!?;\u2014-" else f"{head}. {title}"


_CONTENTS_LABEL_RE = re.compile(r"^(?:table\s+of\s+)?contents[.:]?$", re.I)


# --------------------------------------------------------------------------- decoding


_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_CONTROL_BYTES = bytes(set(range(32)) - {9, 10, 12, 13, 11, 27}) + b"\x7f"


def _decode_text(where: str, data: bytes, encoding: str | None) -> str:
    if encoding:
        try:
            codec = codecs.lookup(encoding)
        except LookupError:
            raise InputError(f"unknown encoding {encoding!r} for {where}; "
                             f"pass --encoding with a name such as utf-8, latin-1 or cp1252") from None
        label = encoding
    else:
        codec, label = codecs.lookup("utf-8"), "UTF-8"
    wide = codec.name.startswith(("utf-16", "utf-32"))
    if not wide:
        if data.startswith(_UTF16_32_BOMS) and not data.startswith(codecs.BOM_UTF8):
            kind = "UTF-32" if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)) else "UTF-16"
            raise EncodingError(f"{where} is {kind} text, not {label}; re-save it as UTF-8 "
                                f"or pass --encoding {kind.lower()}")
        _refuse_binary(where, data)
    name = "utf-8-sig" if codec.name == "utf-8" else codec.name
    try:
        text = data.decode(name)
    except UnicodeDecodeError as e:
        pos = e.start
        line = data.count(b"\n", 0, pos) + 1
        col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
        raise EncodingError(
            f"{where} is not valid {label} text: byte 0x{data[pos]:02X} at byte offset {pos} (line {line}, "
            f"column {col}) cannot be decoded; re-save it as UTF-8 or pass --encoding {_guess_legacy(data)} "
            f"(or the file's real encoding)") from None
    text = text.lstrip("\ufeff")
    if "\x00" in text:
        raise InputError(f"{where} contains NUL characters; it is not a text book (pass a .txt, .md or .epub file)")
    return text


def _guess_legacy(data: bytes) -> str:
    """The 8-bit encoding to suggest: cp1252 when Windows punctuation bytes (0x80-0x9F) occur."""
    if re.search(rb"[\x80-\x9f]", data):
        try:
            data.decode("cp1252")
            return "cp1252"
        except UnicodeDecodeError:
            pass
    return "latin-1"


def _refuse_binary(where: str, data: bytes) -> None:
    head = data[:65536]
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        raise InputError(f"{where} is a zip archive, not text; if it is an EPUB, give it the .epub extension")
    if data.startswith(b"%PDF"):
        raise InputError(f"{where} is a PDF, which is not supported; convert it to EPUB or plain text first")
    if b"\x00" in data:
        raise InputError(f"{where} looks like a binary file (it has NUL bytes), not text; "
                         f"pass a .txt, .md or .epub book")
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    if head and controls > 0.10 * len(head):
        raise InputError(f"{where} looks like a binary file (many control bytes), not text; "
                         f"pass a .txt, .md or .epub book")


# --------------------------------------------------------------------------- Project Gutenberg


_PG_START_RE = re.compile(
    r"^[ \t]*\*{3}[ \t]*START[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG[ \t]+E-?(?:BOOK|TEXT)\b.*$"
    r"|^\*END\*THE SMALL PRINT!.*$", re.I | re.M)
_PG_END_RE = re.compile(
    r"^[ \t]*(?:\*{3}[ \t]*END[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG"
    r"|End[ \t]+of[ \t]+(?:the[ \t]+|this[ \t]+)?Project[ \t]+Gutenberg(?:'s|\u2019s)?\b)", re.I | re.M)
_PG_TITLE_RE = re.compile(r"^Title:[ \t]*(\S.*)$((?:\n[ \t]+\S.*$)*)", re.M)
_PG_AUTHOR_RE = re.compile(r"^Author:[ \t]*(\S.*)$", re.M)
_PG_CREDIT_RE = re.compile(r"^(?:Produced by|E-?text prepared by|This e-?(?:text|book) was produced by)\b", re.I)


def _pg_author(text: str) -> str | None:
    start = _PG_START_RE.search(text)
    m = _PG_AUTHOR_RE.search(text, 0, start.start()) if start else None
    return _norm(m.group(1)) if m else None


def _strip_gutenberg(text: str) -> tuple[str, str | None, bool]:
    """Return (body, title from the header, whether PG markers were found)."""
    title = None
    found = False
    start = _PG_START_RE.search(text)
    if start:
        found = True
        m = _PG_TITLE_RE.search(text, 0, start.start())
        if m:
            title = _norm(m.group(1) + " " + m.group(2))
        end_of_marker = start.end()
        if not start.group(0).rstrip().endswith("***") and start.group(0).lstrip().startswith("*"):
            # the marker wraps onto the next line(s): "... ALICE'S ADVENTURES IN\nWONDERLAND ***"
            rest = text[end_of_marker:end_of_marker + 400].split("\n")
            for k, line in enumerate(rest[1:3], start=1):
                if line.rstrip().endswith("***"):
                    end_of_marker += sum(len(x) + 1 for x in rest[:k + 1]) - 1
                    break
        body_start = end_of_marker
    else:
        body_start = 0
    end = _PG_END_RE.search(text, body_start)
    if end:
        found = True
        body = text[body_start:end.start()]
    else:
        body = text[body_start:]
    if start:
        # a "Produced by ..." credit paragraph right after the START marker
        stripped = body.lstrip()
        if _PG_CREDIT_RE.match(stripped):
            cut = re.search(r"\n[ \t]*\n", stripped)
            body = stripped[cut.end():] if cut else ""
    return body, title, found


# --------------------------------------------------------------------------- TXT / Markdown


@dataclass
class _Item:
    kind: str  # "heading" | "para"
    text: str
    toc: bool = False  # a paragraph that is a contents-list entry (a local link)


_ROMAN = r"(?=[IVXLCDM])M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
_NUMWORD = (rf"(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[- ](?:{_UNITS}))?"
            rf"|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|{_UNITS})")
_ORDINAL = (r"(?:the\s+)?(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
            r"|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|last)")
_KEYWORD = r"(?:CHAPTER|Chapter|BOOK|Book|PART|Part|VOLUME|Volume|STAVE|Stave|CANTO|Canto)"
_HEADING_RE = re.compile(
    rf"^(?P<head>{_KEYWORD}[ \t]+(?:{_ROMAN}|\d{{1,4}}|(?i:{_NUMWORD})|(?i:{_ORDINAL}))\b\.?)"
    rf"(?:[ \t]*[.,:\u2014\u2013-]?[ \t]*(?P<title>\S.*))?$")
_SECTION_RE = re.compile(
    r"^(?P<head>(?:PROLOGUE|Prologue|EPILOGUE|Epilogue|PREFACE|Preface|INTRODUCTION|Introduction|FOREWORD|Foreword"
    r"|AFTERWORD|Afterword|INTERLUDE|Interlude)\.?)(?:[ \t]*[.:\u2014\u2013-][ \t]*(?P<title>\S.*))?$")
_ROMAN_ALONE_RE = re.compile(rf"^{_ROMAN}\.?$")
_OPEN_CHARS = "\"'\u201c\u2018([_*"


def _title_like(s: str) -> bool:
    """A short line that can be a chapter title."""
    s = s.strip()
    words = s.split()
    if not 1 <= len(words) <= 12 or len(s) > 80:
        return False
    first = s[0]
    if not (first.isupper() or first.isdigit() or first in _OPEN_CHARS):
        return False
    return not s.endswith((",", ";"))


@dataclass
class _Heading:
    head: str
    title: str | None
    roman: bool = False


def _match_heading(line: str) -> _Heading | None:
    line = line.strip()
    if not line or len(line) > 100:
        return None
    for rx in (_HEADING_RE, _SECTION_RE):
        m = rx.match(line)
        if m:
            title = m.group("title")
            if title is not None and not _title_like(title):
                return None
            return _Heading(m.group("head"), title)
    if _ROMAN_ALONE_RE.match(line):
        return _Heading(line, None, roman=True)
    return None


def _strict_title_line(block: list[str]) -> str | None:
    """A block that is only a chapter title: one short line, no sentence punctuation at its end."""
    if len(block) != 1:
        return None
    s = block[0].strip()
    if not _title_like(s) or _match_heading(s):
        return None
    letters = [c for c in s if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        return s
    if re.search(r"[.!?:\u2026\"'\u201d\u2019]$", s):
        return None
    return s


def _split_blocks(text: str) -> list[list[str]]:
    """Blank-line separated blocks of lines. A text written one paragraph per line, with (almost)
    no blank lines and long unwrapped lines, gets one block per line instead."""
    lines = text.split("\n")
    full = [ln for ln in lines if ln.strip()]
    if len(full) >= 8:
        blank_runs = sum(1 for a, b in zip(lines, lines[1:]) if a.strip() and not b.strip())
        lengths = sorted(len(ln.strip()) for ln in full)
        if blank_runs < 0.1 * len(full) and lengths[len(lengths) // 2] > 150:
            return [[ln.rstrip()] for ln in full]
    blocks: list[list[str]] = []
    cur: list[str] = []
    for line in lines:
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return blocks


_ILLUSTRATION_RE = re.compile(r"\[\s*Illustration\b[^\]\[]{0,2000}\]", re.I)
_MARK_RE = re.compile(r"\*+|_+")


def _strip_emphasis(s: str) -> str:
    """Remove paired ``_x_``, ``*x*``, ``**x**``, ``__x__`` markers in one linear pass.

    An opening marker is followed by a non-space and not preceded by a word character (so
    ``snake_case`` stays); a closing one is preceded by a non-space and may be followed by a
    word character (Gutenberg writes ``_Un_important``). Unpaired markers stay as they are.
    """
    n = len(s)
    pending: dict[str, tuple[int, int]] = {}
    cuts: list[tuple[int, int]] = []
    for m in _MARK_RE.finditer(s):
        a, b = m.span()
        mk = m.group()
        if len(mk) > 3:
            continue
        before = s[a - 1] if a else " "
        after = s[b] if b < n else " "
        if mk in pending and not before.isspace() and before != "\\":
            cuts.append(pending.pop(mk))
            cuts.append((a, b))
            continue
        if not after.isspace() and not (before.isalnum() or before == "_" or before == "\\"):
            pending[mk] = (a, b)
    if not cuts:
        return s
    cuts.sort()
    out, last = [], 0
    for a, b in cuts:
        out.append(s[last:a])
        last = b
    out.append(s[last:])
    return "".join(out)


def _clean_inline(s: str) -> str:
    """Remove emphasis markers and illustration markers; keep all words and punctuation."""
    s = _ILLUSTRATION_RE.sub(" ", s)
    if "_" in s or "*" in s:
        s = _strip_emphasis(s)
    return s


def _roman_value(s: str) -> int:
    vals = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    s = s.rstrip(".")
    total = 0
    for k, ch in enumerate(s):
        v = vals[ch]
        total += -v if k + 1 < len(s) and vals[s[k + 1]] > v else v
    return total


def _roman_headings(blocks: list[list[str]]) -> set[int]:
    """Blocks that start with a roman numeral alone and belong to a numbered sequence (k, then
    k+1 later): a letter signed "M." or a lone "C." is no chapter."""
    cands = [(k, _roman_value(b[0].strip())) for k, b in enumerate(blocks)
             if len(b) <= 2 and _ROMAN_ALONE_RE.match(b[0].strip())]
    ok: set[int] = set()
    last = None
    for n, (k, v) in enumerate(cands):
        if (last is not None and v == last + 1) or any(v2 == v + 1 for _k2, v2 in cands[n + 1:n + 50]):
            ok.add(k)
            last = v
    return ok


def _txt_items(body: str) -> list[_Item]:
    """Plain text -> heading and paragraph items."""
    blocks = _split_blocks(body)
    roman_ok = _roman_headings(blocks)
    items: list[_Item] = []
    i = 0
    while i < len(blocks):
        lines = [ln.strip() for ln in blocks[i]]
        i += 1
        j = 0
        last_bare = False
        while j < len(lines):
            h = _match_heading(lines[j])
            if h is None or (h.roman and (j != 0 or i - 1 not in roman_ok)):
                break
            title = h.title
            if title is None and j + 1 < len(lines) and _match_heading(lines[j + 1]) is None \
                    and _title_like(lines[j + 1]) \
                    and not (j + 2 < len(lines) and lines[j + 2][:1].islower()):
                title = lines[j + 1]
                j += 1
            elif h.roman and len(lines) == 2:
                break  # "I" followed by a line that is no title: a paragraph
            if h.title is not None:
                text = _norm(lines[j]) if title == h.title else _join_title(h.head, title)
            else:
                text = _join_title(h.head, title or "")
            items.append(_Item("heading", _norm(_clean_inline(text))))
            last_bare = title is None
            j += 1
        if j == 0:
            _add_para(items, lines)
            continue
        if j < len(lines):
            _add_para(items, lines[j:])
        elif last_bare and i + 1 < len(blocks):
            t = _strict_title_line(blocks[i])
            if t is not None:
                items[-1].text = _join_title(items[-1].text, _norm(_clean_inline(t)))
                i += 1
    return items


def _add_para(items: list[_Item], lines: list[str], toc: bool = False) -> None:
    if _is_separator(_norm(" ".join(lines))):
        return
    text = _norm(_clean_inline(" ".join(lines)))
    if text and not _is_separator(text):
        items.append(_Item("para", text, toc))


_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_HR_RE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LINKDEF_RE = re.compile(r"^ {0,3}\[[^\]\[]{1,300}\]:[ \t]*<?[^\s<>]+>?"
                         r"(?:[ \t]+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?[ \t]*$")
_QUOTE_RE = re.compile(r"^[ \t]*(?:>[ \t]?)+")
_BULLET_RE = re.compile(r"^[ \t]*[-*+][ \t]+")
_ORDERED_RE = re.compile(r"^[ \t]*\d{1,4}[.)][ \t]+")
_COMMENT_RE = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_MD_IMAGE_RE = re.compile(r"!\[[^\]\[]{0,1000}\](?:\([^()\s]{0,2000}(?:\s+\"[^\"]{0,500}\")?\)|\[[^\]\[]{0,200}\])")
_MD_LINK_RE = re.compile(r"\[([^\]\[]{0,1000})\]\((?:[^()\s]|\([^)]{0,200}\)){0,2000}(?:\s+\"[^\"]{0,500}\")?\)")
_MD_REFLINK_RE = re.compile(r"\[([^\]\[]{1,1000})\]\[[^\]\[]{0,200}\]")
_MD_FOOTREF_RE = re.compile(r"\[\^[^\]\s]{1,100}\](?!:)")
_MD_FOOTDEF_RE = re.compile(r"^\[\^[^\]]+\]:\s*")
_MD_AUTOLINK_RE = re.compile(r"<((?:https?|ftp|mailto):[^>\s]+)>")
_MD_CODE_RE = re.compile(r"(`{1,3})([^`]{1,2000})\1")
_MD_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_MD_ESCAPE_RE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")
_MD_TOC_RE = re.compile(r"^\s*(?:\d{1,4}[.)]\s*)?\[[^\]]{1,300}\]\(#[^)\s]{0,300}\)\s*$")


def _clean_markdown(s: str) -> str:
    s = _MD_FOOTDEF_RE.sub("", s)
    s = _MD_CODE_RE.sub(lambda m: m.group(2).strip(), s)
    s = _MD_IMAGE_RE.sub(" ", s)
    s = _MD_LINK_RE.sub(r"\1", s)
    s = _MD_REFLINK_RE.sub(r"\1", s)
    s = _MD_FOOTREF_RE.sub("", s)
    s = _MD_AUTOLINK_RE.sub(r"\1", s)
    s = re.sub(r"<br\s*/?>", " ", s, flags=re.I)
    s = _MD_TAG_RE.sub("", s)
    s = _clean_inline(s)
    s = _MD_ESCAPE_RE.sub(r"\1", s)
    if "&" in s:
        s = html.unescape(s)
    return s


def _md_blocks(body: str) -> list[tuple[str, int, str, bool]]:
    """Markdown -> (kind, heading level, text, toc-entry) blocks; kind: heading | para | code."""
    out: list[tuple[str, int, str, bool]] = []
    para: list[str] = []

    def end_para() -> None:
        if para:
            raw = "\n".join(para)
            toc = bool(_MD_TOC_RE.match(raw))
            out.append(("para", 0, _clean_markdown(raw).strip(), toc))
            para.clear()

    fence: str | None = None
    code: list[str] = []

    def end_code() -> None:
        if code:
            out.append(("code", 0, "\n".join(code).strip(), False))
            code.clear()

    for line in _COMMENT_RE.sub("", body).split("\n"):
        if fence:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                end_code()
                fence = None
            elif line.strip():
                code.append(line)
            else:
                end_code()
            continue
        m = _FENCE_RE.match(line)
        if m:
            end_para()
            fence = m.group(1)
            continue
        if not line.strip():
            end_para()
            continue
        m = _ATX_RE.match(line)
        if m and (m.group(2) or line.strip() == m.group(1)):
            end_para()
            out.append(("heading", len(m.group(1)), _norm(_clean_markdown(m.group(2) or "")), False))
            continue
        m = _SETEXT_RE.match(line)
        if m and para and not _BULLET_RE.match(para[0]):
            text = _norm(_clean_markdown(" ".join(para)))
            para.clear()
            out.append(("heading", 1 if m.group(1)[0] == "=" else 2, text, False))
            continue
        if _HR_RE.match(line):
            end_para()
            continue
        if _LINKDEF_RE.match(line) and not _MD_FOOTDEF_RE.match(line.strip()):
            continue
        line = _QUOTE_RE.sub("", line)
        if not line.strip():
            end_para()
            continue
        if _BULLET_RE.match(line):
            end_para()
            line = _BULLET_RE.sub("", line)
        elif _ORDERED_RE.match(line) and (not para or re.match(r"^[ \t]*1[.)]", line)):
            end_para()  # only a list starting at 1 interrupts a paragraph ("1984. Then" may wrap)
        para.append(line.strip())
    if fence:
        end_code()
    end_para()
    return [b for b in out if b[0] == "heading" or b[2].strip()]


def _md_items(body: str) -> tuple[list[_Item], str | None]:
    """Markdown -> items and the title H1 (if the file has one). Falls back to plain-text headings."""
    blocks = _md_blocks(body)
    headings = [(k, b) for k, b in enumerate(blocks) if b[0] == "heading" and b[2]]
    if not headings:
        # no Markdown headings: find plain-text chapter headings ("CHAPTER I.") as in a TXT file
        return _txt_items("\n\n".join(b[2] for b in blocks)), None
    title_h1 = None
    skip = -1
    h1s = [k for k, b in headings if b[1] == 1]
    if len(h1s) == 1 and headings[0][1][1] == 1 and len(headings) > 1:
        skip = headings[0][0]
        title_h1 = headings[0][1][2]
    levels = sorted({b[1] for k, b in headings if k != skip})
    level = levels[0] if levels else 1
    if len(levels) > 1:
        nxt = levels[1]
        n_top = sum(1 for k, b in headings if k != skip and b[1] == level)
        n_next = sum(1 for k, b in headings if k != skip and b[1] == nxt)
        if n_next >= 2 and n_next > n_top:
            level = nxt  # "# Part" / "## Chapter": chapters are the finer level, parts prefix them
    items = []
    for k, (kind, lvl, text, toc) in enumerate(blocks):
        if k == skip:
            continue
        text = _norm(text)
        if kind == "heading" and text and lvl <= level:
            items.append(_Item("heading", text))
        elif text and not _is_separator(text):
            items.append(_Item("para", text, toc))
    return items, title_h1


def _build_chapters(items: list[_Item], book_title: str) -> list[Chapter]:
    """Items -> chapters: drop contents lists, merge heading pairs, keep front matter only if prose."""
    items = _drop_toc_para_runs(items)
    last_seen: dict[tuple[str, ...], int] = {}
    for n, it in enumerate(items):
        if it.kind == "heading":
            last_seen[tuple(_tokens(it.text))] = n
    # runs of headings with no paragraph between them
    out: list[_Item] = []
    k = 0
    while k < len(items):
        if items[k].kind != "heading":
            out.append(items[k])
            k += 1
            continue
        e = k
        while e < len(items) and items[e].kind == "heading":
            e += 1
        followed = e < len(items)
        labels = [h for h in items[k:e] if _CONTENTS_LABEL_RE.match(h.text)]
        run = [h for h in items[k:e] if not _CONTENTS_LABEL_RE.match(h.text)]
        if not run or not followed:
            pass  # a contents list (or a lone label) with no text after it
        elif len(run) >= 3 or labels:
            # a contents list: its entries are not chapters, nor is the "Contents" label before it.
            # Its last line is the real chapter start when body text follows and it is not
            # itself a contents entry (one whose heading comes again later).
            if out and out[-1].kind == "para" and _CONTENTS_LABEL_RE.match(out[-1].text):
                out.pop()
            if last_seen[tuple(_tokens(run[-1].text))] < e:
                out.append(run[-1])
        elif len(run) == 2:
            out.append(_Item("heading", _join_title(run[0].text, run[1].text)))
        else:
            out.append(run[0])
        k = e
    items = out

    chapters: list[tuple[str, list[str]]] = []
    front: list[str] = []
    cur: list[str] | None = None
    for it in items:
        if it.kind == "heading":
            cur = []
            chapters.append((it.text, cur))
        elif cur is None:
            front.append(it.text)
        else:
            cur.append(it.text)
    if not chapters:
        chapters = [(book_title, front)] if front else []
    elif front and _has_prose(front):
        chapters.insert(0, (book_title, front))
    chapters = [(t, ps) for t, ps in chapters if ps]
    return [Chapter(i + 1, t, ps) for i, (t, ps) in enumerate(chapters)]


def _drop_toc_para_runs(items: list[_Item]) -> list[_Item]:
    """Drop runs of 3+ contents-entry paragraphs (and a "Contents" label just before them)."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        if not items[k].toc:
            out.append(items[k])
            k += 1
            continue
        e = k
        while e < len(items) and items[e].toc:
            e += 1
        label_before = bool(out) and _CONTENTS_LABEL_RE.match(out[-1].text) is not None
        if e - k >= 3 or label_before:
            if label_before:
                out.pop()
        else:
            out.extend(items[k:e])
        k = e
    return out


_BY_RE = re.compile(r"^by\s+\S", re.I)


def _guess_title_author(items: list[_Item]) -> tuple[str, str] | None:
    """(title, author) from a short line followed by a "by Author" line near the start of the text."""
    paras: list[str] = []
    for it in items:
        if it.kind == "heading" or len(paras) >= 8:
            break
        paras.append(it.text)
    for a, b in zip(paras, paras[1:]):
        if _BY_RE.match(b) and 1 <= len(a.split()) <= 15 and not _is_prose(a):
            author = _norm(b[2:]).strip(" .,")
            return a, (author if 1 <= len(author.split()) <= 8 else "")
    return None


def _load_text(p: Path, where: str, text: str, fmt: str) -> Book:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    text = re.sub(r"[\x00-\x08\x0b\x0e-\x1f\x7f]", "", text)
    if not text.strip():
        raise InputError(f"{where} contains only whitespace; nothing to read (pass a file with the book's text)")
    body, pg_title, pg = _strip_gutenberg(text)
    if not body.strip():
        raise InputError(f"{where} holds only a Project Gutenberg header/licence and no book text; "
                         f"pass the complete book file")
    h1 = None
    if fmt == "md":
        items, h1 = _md_items(body)
    else:
        items = _txt_items(body)
    guessed = _guess_title_author(items)
    known = pg_title or h1 or (guessed[0] if guessed else None)
    title = known or p.stem
    author = _pg_author(text) if pg_title else None
    if author is None and guessed and (not pg_title or guessed[0] == known):
        author = guessed[1] or None
    # front matter / a heading-less book is titled with the book's own title, never a file name
    chapters = _build_chapters(items, known or "")
    if not chapters:
        raise InputError(f"{where} has no readable text{' after the Project Gutenberg header' if pg else ''}; "
                         f"pass a file with the book's text")
    return Book(title=title, source=p, format=fmt, chapters=chapters, author=author, title_known=bool(known))


# --------------------------------------------------------------------------- EPUB: XML


_XML_PREDEFINED = {"amp", "lt", "gt", "quot", "apos"}
_NAMED_ENTITY_RE = re.compile(rb"&([A-Za-z][A-Za-z0-9]{1,31});")
_OPS_NS = "{http://www.idpf.org/2007/ops}"


def _named_to_numeric(data: bytes) -> bytes:
    """``&nbsp;`` -> ``&#160;`` (HTML names are not declared in an XHTML file without its DTD)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data

    def sub(m: re.Match) -> bytes:
        name = m.group(1).decode("ascii")
        if name in _XML_PREDEFINED:
            return m.group(0)
        cp = html.entities.name2codepoint.get(name)
        return b"&#%d;" % cp if cp is not None else m.group(0)

    return _NAMED_ENTITY_RE.sub(sub, data)


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


class _HtmlTreeBuilder(HTMLParser):
    """Fallback for content documents that are not well-formed XML: HTML -> ElementTree."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
            "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = ET.Element("html")
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        el = ET.SubElement(self.stack[-1], tag, {k: (v or "") for k, v in attrs})
        if tag not in self.VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        ET.SubElement(self.stack[-1], tag, {k: (v or "") for k, v in attrs})

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, 0, -1):
            if self.stack[k].tag == tag:
                del self.stack[k:]
                return

    def handle_data(self, data):
        parent = self.stack[-1]
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + data
        else:
            parent.text = (parent.text or "") + data


def _parse_html(data: bytes) -> ET.Element:
    m = re.search(rb"""(?:encoding|charset)\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:2048])
    enc = "utf-8"
    if m:
        try:
            enc = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            pass
    b = _HtmlTreeBuilder()
    b.feed(data.decode(enc, errors="replace"))
    b.close()
    return b.root


# --------------------------------------------------------------------------- EPUB: XHTML -> blocks


@dataclass
class _Block:
    text: str
    level: int = 0  # 1..6 for headings
    xref: bool = False  # holds a link into the book (a contents entry?)


_BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "tfoot", "thead", "tr", "ul",
}
_SKIP_TAGS = {"head", "script", "style", "svg", "math", "img", "image", "object", "embed", "video", "audio",
              "iframe", "canvas", "noscript", "template", "title", "nav", "rt", "rp", "map", "button", "input",
              "select", "textarea"}
_NOTE_TYPES = {"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "noteref", "pagebreak",
               "annoref"}
_NOTE_ROLES = {"doc-footnote", "doc-endnote", "doc-endnotes", "doc-noteref", "doc-pagebreak"}
#: note bodies (what ``--footnotes inline|end`` reads); the other note types are markers, always dropped
_NOTE_BODY_TYPES = {"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes"}
_NOTE_BODY_ROLES = {"doc-footnote", "doc-endnote", "doc-endnotes"}
#: EPUB structural semantics (``epub:type``, landmarks, OPF guide) of front/back matter that is not
#: read unless ``--include-front-matter``: copyright pages, colophons, contents, indexes, lists.
_MATTER_TYPES = {"copyright-page", "copyright", "colophon", "imprint", "toc", "index", "loi", "lot", "landmarks",
                 "doc-colophon", "doc-toc", "doc-index"}
_MARKER_TEXT_RE = re.compile(r"^\s*(?:\[\s*\d{1,4}\s*\]|\(\s*\d{1,4}\s*\)|\d{1,4}|[*\u2020\u2021\u00a7\u00b6]+)\s*$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _attr_tokens(el: ET.Element, name: str) -> set[str]:
    v = el.get(name)
    if v is None and name == "type":
        v = el.get(_OPS_NS + "type") or el.get("epub:type")
    return set(v.split()) if v else set()


class _Extractor:
    """XHTML body -> blocks (paragraphs and headings), with the block index of every id."""

    def __init__(self, footnotes: str = "skip", front_matter: bool = False) -> None:
        self.footnotes = footnotes
        self.front_matter = front_matter
        self.notes: list[_Block] = []
        """Note bodies set aside by ``footnotes="end"`` (read after the document's text)."""
        self.blocks: list[_Block] = []
        self.anchors: dict[str, int] = {}
        self.skipped_ids: set[str] = set()
        self._buf: list[str] = []
        self._heading = 0
        self._pre = 0
        self._xref = False

    def run(self, root: ET.Element) -> _Extractor:
        body = next((e for e in root.iter() if _local(e.tag) == "body"), root)
        self._walk(body)
        self._flush()
        self.blocks.extend(self.notes)
        return self

    def _skip(self, el: ET.Element, tag: str) -> bool:
        if tag in _SKIP_TAGS or el.get("hidden") is not None:
            return True
        if el.get("id") in ("pg-header", "pg-footer"):
            return True
        classes = _attr_tokens(el, "class")
        if "pg-boilerplate" in classes or "pagenum" in classes:
            return True
        types, roles = _attr_tokens(el, "type"), _attr_tokens(el, "role")
        if not self.front_matter and (types | roles) & _MATTER_TYPES:
            return True
        if self.footnotes != "skip" and (types & _NOTE_BODY_TYPES or roles & _NOTE_BODY_ROLES):
            if self.footnotes == "inline":
                return False
            sub = _Extractor("inline", self.front_matter)  # the note body itself is read
            sub._walk(el)
            sub._flush()
            self.notes.extend(sub.blocks)
            return True
        if types & _NOTE_TYPES or roles & _NOTE_ROLES:
            return True
        if tag == "sup":
            if any(_local(d.tag) == "a" and d.get("href") for d in el.iter()):
                return True
            text = "".join(el.itertext())
            return bool(text.strip()) and bool(_MARKER_TEXT_RE.match(text)) and not text.strip().isdigit()
        if tag == "a":
            href = el.get("href") or ""
            if "#" in href and _MARKER_TEXT_RE.match("".join(el.itertext()) or "x"):
                return True
        return False

    def _walk(self, top: ET.Element) -> None:
        # an explicit stack, not recursion: a hostile document may nest elements thousands deep
        stack: list[tuple[str, object]] = [("enter", top)]
        while stack:
            kind, item = stack.pop()
            if kind == "text":
                self._text(item)  # type: ignore[arg-type]
            elif kind == "exit":
                tag, block, saved = item  # type: ignore[misc]
                if tag in ("td", "th"):
                    self._buf.append(" ")
                if block:
                    self._flush()
                self._heading, self._pre = saved
            else:
                self._enter(item, stack)  # type: ignore[arg-type]

    def _enter(self, el: ET.Element, stack: list) -> None:
        tag = _local(el.tag)
        if not tag:
            return
        if self._skip(el, tag):
            for sub in el.iter():
                i = sub.get("id")
                if i:
                    self.skipped_ids.add(i)
            return
        for key in ("id", "name") if tag == "a" else ("id",):
            v = el.get(key)
            if v and v not in self.anchors:
                self.anchors[v] = len(self.blocks)
        block = tag in _BLOCK_TAGS
        if block:
            self._flush()
        if tag == "br":
            self._buf.append("\n")
        elif tag in ("td", "th"):
            self._buf.append(" ")
        saved = (self._heading, self._pre)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = int(tag[1])
        if tag == "pre":
            self._pre += 1
        if tag == "a":
            href = el.get("href")
            if href and not _SCHEME_RE.match(href):
                self._xref = True
        self._text(el.text)
        stack.append(("exit", (tag, block, saved)))
        for child in reversed(el):
            if child.tail:
                stack.append(("text", child.tail))
            stack.append(("enter", child))

    def _text(self, s: str | None) -> None:
        if s:
            self._buf.append(s if self._pre else _WS_RE.sub(" ", s))

    def _flush(self) -> None:
        raw = "".join(self._buf)
        self._buf = []
        xref, self._xref = self._xref, False
        if not raw.strip():
            return
        pieces = [raw] if self._heading else re.split(r"\n[ \t\u00a0]*\n", raw)
        for piece in pieces:
            text = _norm(piece)
            if text and not _is_separator(text):
                self.blocks.append(_Block(text, self._heading, xref))


# --------------------------------------------------------------------------- EPUB: the archive


class _Epub:
    """Reads one EPUB through ``zipfile`` without extracting anything."""

    def __init__(self, p: Path, zf: zipfile.ZipFile) -> None:
        self.p = p
        self.where = _show(p)
        self.zf = zf
        self.read_bytes = 0
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise InputError(f"{self.where} has {len(infos)} files inside; that is not a book (limit "
                             f"{MAX_ZIP_MEMBERS}): re-export it")
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            self._check_member_name(info.filename)
            self.infos.setdefault(info.filename, info)
        self.folded = {n.casefold(): n for n in self.infos}

    # -- safety

    def _check_member_name(self, name: str) -> None:
        n = name.replace("\\", "/")
        norm = posixpath.normpath(n) if n else n
        if n.startswith("/") or re.match(r"^[A-Za-z]:", n) or norm == ".." or norm.startswith("../") or "\x00" in n:
            raise UnsafePathError(f"{self.where} contains an unsafe file name {name!r} (absolute or escaping the "
                                  f"archive with '..'); refusing this EPUB: re-download or re-export it")

    def resolve(self, base: str, href: str, what: str) -> str | None:
        """A member path for ``href`` relative to the folder ``base``; None for remote (http) links."""
        href = href.strip()
        if not href:
            return None
        if _SCHEME_RE.match(href) and not re.match(r"^[A-Za-z]:[\\/]", href):
            if href.lower().startswith("file:"):
                raise UnsafePathError(f"{self.where}: {what} points outside the archive ({href!r}); "
                                      f"refusing this EPUB: re-download or re-export it")
            return None
        path = unquote(href.split("#", 1)[0].split("?", 1)[0]).replace("\\", "/")
        if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
            raise UnsafePathError(f"{self.where}: {what} is an absolute path ({href!r}); "
                                  f"refusing this EPUB: re-download or re-export it")
        joined = posixpath.normpath(posixpath.join(base, path)) if path else base
        if joined == ".." or joined.startswith("../"):
            raise UnsafePathError(f"{self.where}: {what} escapes the archive with '..' ({href!r}); "
                                  f"refusing this EPUB: re-download or re-export it")
        return "" if joined == "." else joined

    # -- reading

    def member(self, name: str) -> str | None:
        if name in self.infos:
            return name
        return self.folded.get(name.casefold())

    def read(self, name: str, what: str) -> bytes:
        real = self.member(name)
        if real is None:
            raise InputError(f"{self.where} is not a valid EPUB: {what} {name!r} is missing; "
                             f"re-download or re-export it")
        info = self.infos[real]
        if info.flag_bits & 0x1:
            raise InputError(f"{self.where} is DRM-protected (its files are encrypted) and cannot be read; "
                             f"use a DRM-free copy of the book")
        left = MAX_UNCOMPRESSED_BYTES - self.read_bytes
        if info.file_size > left:
            self._bomb()
        try:
            with self.zf.open(info) as f:
                data = f.read(left + 1)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError,
                ValueError) as e:
            raise InputError(f"{self.where} is not a valid EPUB (corrupt zip: {_norm(str(e))}); "
                             f"re-download or re-export it") from None
        if len(data) > left:
            self._bomb()
        self.read_bytes += len(data)
        return data

    def _bomb(self) -> None:
        raise InputError(f"{self.where} unpacks to more than {MAX_UNCOMPRESSED_BYTES // (1024 * 1024)} MB "
                         f"(a zip bomb or not a book); refusing it")

    def xml(self, name: str, what: str, html_fallback: bool = False) -> ET.Element:
        data = self.read(name, what)
        try:
            return SafeET.fromstring(_named_to_numeric(data), forbid_dtd=False, forbid_entities=True,
                                     forbid_external=True)
        except defusedxml.DefusedXmlException:
            raise InputError(f"{self.where}: {name} declares XML entities or external references (a DTD with "
                             f"<!ENTITY>), which are refused for safety; re-export the EPUB without them") from None
        except (ET.ParseError, ValueError, LookupError) as e:
            if html_fallback:
                return _parse_html(data)
            raise InputError(f"{self.where} is not a valid EPUB: {name} is not well-formed XML "
                             f"({_norm(str(e))}); re-download or re-export it") from None


_CONTENT_EXTS = (".xhtml", ".html", ".htm", ".xml", ".opf", ".ncx", ".txt")
_HTML_TYPES = {"application/xhtml+xml", "text/html", "text/x-oeb1-document", "application/xml"}


def _check_drm(ep: _Epub, content_docs: set[str] | None = None) -> None:
    if ep.member("META-INF/rights.xml"):
        raise InputError(f"{ep.where} is DRM-protected (it has META-INF/rights.xml) and cannot be read; "
                         f"use a DRM-free copy of the book")
    if not ep.member("META-INF/encryption.xml"):
        return
    root = ep.xml("META-INF/encryption.xml", "encryption file")
    for data in root.iter():
        if _local(data.tag) != "encrypteddata":
            continue
        for ref in data.iter():
            if _local(ref.tag) != "cipherreference":
                continue
            uri = unquote(ref.get("URI", "")).replace("\\", "/").lstrip("/")
            target = posixpath.normpath(uri) if uri else ""
            is_content = target.lower().endswith(_CONTENT_EXTS) or (content_docs is not None and target in content_docs)
            if is_content:
                raise InputError(f"{ep.where} is DRM-protected (META-INF/encryption.xml lists encrypted content "
                                 f"such as {uri!r}) and cannot be read; use a DRM-free copy of the book")


@dataclass
class _TocEntry:
    label: str
    doc: str
    frag: str
    depth: int


def _nav_entries(ep: _Epub, path: str) -> list[_TocEntry]:
    root = ep.xml(path, "navigation document", html_fallback=True)
    navs = [e for e in root.iter() if _local(e.tag) == "nav"]
    nav = next((n for n in navs if "toc" in _attr_tokens(n, "type") or "doc-toc" in _attr_tokens(n, "role")),
               navs[0] if navs else None)
    if nav is None:
        return []
    base = posixpath.dirname(path)
    out: list[_TocEntry] = []

    def walk(lst: ET.Element, depth: int) -> None:
        for li in lst:
            if _local(li.tag) != "li":
                continue
            label_el = next((c for c in li if _local(c.tag) in ("a", "span")), None)
            if label_el is not None and label_el.get("href"):
                href = label_el.get("href", "")
                doc = ep.resolve(base, href, "a table-of-contents link")
                if doc is not None:
                    out.append(_TocEntry(_norm("".join(label_el.itertext())), doc,
                                         unquote(href.split("#", 1)[1]) if "#" in href else "", depth))
            for sub in li:
                if _local(sub.tag) in ("ol", "ul"):
                    walk(sub, depth + 1)

    lst = next((e for e in nav.iter() if _local(e.tag) in ("ol", "ul")), None)
    if lst is not None:
        walk(lst, 1)
    return out


def _ncx_entries(ep: _Epub, path: str) -> list[_TocEntry]:
    root = ep.xml(path, "NCX table of contents")
    navmap = next((e for e in root.iter() if _local(e.tag) == "navmap"), None)
    if navmap is None:
        return []
    base = posixpath.dirname(path)
    out: list[_TocEntry] = []

    def walk(el: ET.Element, depth: int) -> None:
        for point in el:
            if _local(point.tag) != "navpoint":
                continue
            label = ""
            src = ""
            for c in point:
                t = _local(c.tag)
                if t == "navlabel":
                    label = _norm(" ".join(x.text or "" for x in c.iter() if _local(x.tag) == "text"))
                elif t == "content":
                    src = c.get("src", "")
            if src:
                doc = ep.resolve(base, src, "an NCX entry")
                if doc is not None:
                    out.append(_TocEntry(label, doc, unquote(src.split("#", 1)[1]) if "#" in src else "", depth))
            walk(point, depth + 1)

    walk(navmap, 1)
    return out


def _load_epub(p: Path, footnotes: str = "skip", front_matter: bool = False) -> Book:
    where = _show(p)
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError,
            NotImplementedError):
        raise InputError(f"{where} is not a valid EPUB (corrupt zip); re-download or re-export it") from None
    with zf:
        ep = _Epub(p, zf)
        _check_drm(ep)
        container = ep.xml("META-INF/container.xml", "container file")
        rootfiles = [e for e in container.iter() if _local(e.tag) == "rootfile" and e.get("full-path")]
        rootfiles.sort(key=lambda e: e.get("media-type") != "application/oebps-package+xml")
        if not rootfiles:
            raise InputError(f"{where} is not a valid EPUB: META-INF/container.xml names no package (OPF) file; "
                             f"re-download or re-export it")
        opf_path = ep.resolve("", rootfiles[0].get("full-path", ""), "the package file path")
        if not opf_path:
            raise InputError(f"{where} is not a valid EPUB: its package file path is not usable; re-export it")
        opf = ep.xml(opf_path, "package file")
        return _read_package(ep, p, opf_path, opf, footnotes, front_matter)


def _matter_docs(ep: _Epub, opf: ET.Element, base: str, nav: str | None) -> set[str]:
    """Documents the OPF guide or the nav's landmarks mark as front/back matter (whole documents)."""
    out: set[str] = set()
    links: list[tuple[set[str], str, str]] = []
    for e in opf.iter():
        if _local(e.tag) == "reference" and e.get("href"):
            links.append(({(e.get("type") or "").strip().lower()}, e.get("href", ""), base))
    if nav:
        try:
            root = ep.xml(nav, "navigation document", html_fallback=True)
        except InputError:
            root = None
        for n in (root.iter() if root is not None else ()):
            if _local(n.tag) == "nav" and "landmarks" in _attr_tokens(n, "type"):
                for a in n.iter():
                    if _local(a.tag) == "a" and a.get("href"):
                        links.append((_attr_tokens(a, "type"), a.get("href", ""), posixpath.dirname(nav)))
    for types, href, b in links:
        if types & _MATTER_TYPES and "#" not in href.strip("#"):
            doc = ep.resolve(b, href.split("#", 1)[0], "a landmark link")
            if doc:
                out.add(doc)
    return out


def _read_package(ep: _Epub, p: Path, opf_path: str, opf: ET.Element, footnotes: str = "skip",
                  front_matter: bool = False) -> Book:
    where = ep.where
    base = posixpath.dirname(opf_path)
    title = ""
    for e in opf.iter():
        if _local(e.tag) == "title" and (e.text or "").strip():
            title = _norm("".join(e.itertext()))
            break
    author = None
    for e in opf.iter():
        if _local(e.tag) == "creator" and (e.text or "").strip():
            role = e.get("{http://www.idpf.org/2007/opf}role") or e.get("role") or "aut"
            if role == "aut":
                author = _norm("".join(e.itertext()))
                break
    manifest: dict[str, tuple[str, str, set[str]]] = {}
    for e in opf.iter():
        if _local(e.tag) == "item" and e.get("id") and e.get("href") is not None:
            path = ep.resolve(base, e.get("href", ""), f"manifest item {e.get('id')!r}")
            if path:
                manifest[e.get("id", "")] = (path, (e.get("media-type") or "").lower(),
                                             set((e.get("properties") or "").split()))
    spine_el = next((e for e in opf.iter() if _local(e.tag) == "spine"), None)
    spine: list[tuple[str, bool]] = []
    if spine_el is not None:
        for ref in spine_el:
            if _local(ref.tag) == "itemref" and ref.get("idref") in manifest:
                path, mt, _props = manifest[ref.get("idref", "")]
                if mt in _HTML_TYPES or path.lower().endswith((".xhtml", ".html", ".htm")):
                    spine.append((path, ref.get("linear", "yes").strip().lower() != "no"))
    if not spine:
        raise InputError(f"{where} is not a valid EPUB: its package file lists no readable documents in the "
                         f"spine; re-download or re-export it")
    _check_drm(ep, {path for path, _ in spine} | {m[0] for m in manifest.values() if m[1] in _HTML_TYPES})

    toc: list[_TocEntry] = []
    nav = next((m[0] for m in manifest.values() if "nav" in m[2]), None)
    if nav:
        toc = _nav_entries(ep, nav)
    if not toc:
        ncx_id = spine_el.get("toc") if spine_el is not None else None
        ncx = manifest.get(ncx_id or "", (None,))[0] or next(
            (m[0] for m in manifest.values() if m[1] == "application/x-dtbncx+xml"), None)
        if ncx and ep.member(ncx):
            toc = _ncx_entries(ep, ncx)
    toc_docs = {e.doc for e in toc}
    matter_docs = set() if front_matter else _matter_docs(ep, opf, base, nav)

    # read the spine into one stream of blocks
    stream: list[_Block] = []
    anchors: dict[str, int] = {}
    doc_start: dict[str, int] = {}
    doc_order: list[str] = []
    skipped: set[str] = set()
    for path, linear in spine:
        if path in doc_start or (not linear and path not in toc_docs) or path in matter_docs:
            continue
        root = ep.xml(path, "content document", html_fallback=True)
        ex = _Extractor(footnotes, front_matter).run(root)
        doc_start[path] = len(stream)
        doc_order.append(path)
        for k, v in ex.anchors.items():
            anchors[f"{path}#{k}"] = len(stream) + v
        skipped |= {f"{path}#{k}" for k in ex.skipped_ids}
        stream.extend(ex.blocks)

    # Project Gutenberg START/END markers written as text
    lo, hi = 0, len(stream)
    for k, b in enumerate(stream):
        if _PG_START_RE.match(b.text):
            lo = k + 1
            break
    for k in range(lo, len(stream)):
        if _PG_END_RE.match(stream[k].text):
            hi = k
            break
    stream = stream[lo:hi]

    def shift(pos: int) -> int | None:
        """A position in the cut stream; None past its end."""
        return None if pos >= hi else max(pos, lo) - lo

    # chapter starts: (position, title, depth)
    starts: list[tuple[int, str, int]] = []
    for e in toc:
        key = f"{e.doc}#{e.frag}" if e.frag else None
        if key and key in skipped:
            continue  # points into Project Gutenberg boilerplate
        if key and key in anchors:
            pos = anchors[key]
        elif e.doc in doc_start:
            pos = doc_start[e.doc]
        else:
            continue
        s = shift(pos)
        if s is not None:
            starts.append((s, e.label, e.depth))
    if not starts:
        # no usable TOC: each document with an h1/h2 starts a chapter titled by it
        bounds = [doc_start[d] for d in doc_order] + [lo + len(stream) if hi == lo + len(stream) else hi]
        for a, b in zip(bounds, bounds[1:]):
            s = shift(a)
            if s is None:
                continue
            heading = next((blk for blk in stream[s:max(s, min(b, hi) - lo)] if 1 <= blk.level <= 2), None)
            if heading is not None:
                starts.append((s, heading.text, 1))
    starts.sort(key=lambda t: t[0])

    book_title = title or p.stem
    segments: list[tuple[str | None, int, list[_Block]]] = []
    first = starts[0][0] if starts else len(stream)
    segments.append((None, 0, stream[:first]))
    for k, (pos, label, depth) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(stream)
        segments.append((label, depth, stream[pos:end]))

    _front_title, paras0 = _segment_paragraphs(None, segments[0][2])
    merged: list[tuple[str, int, list[str]]] = [(title, 0, paras0)] if paras0 else []
    # empty entries: a parent ("Part One") lends its label to its first child; others are dropped
    pending: list[tuple[str, int]] = []
    for label, depth, blocks in segments[1:]:
        t, paras = _segment_paragraphs(label, blocks)
        if not paras:
            pending = [(pt, pd) for pt, pd in pending if pd < depth] + [(t, depth)]
            continue
        merged.append((_chain_titles([pt for pt, pd in pending if pd < depth and pt] + [t]), depth, paras))
        pending = []
    # leading front matter without prose (title page, contents, edition notice) is left out
    k = 0
    while k < len(merged) - 1 and not _has_prose(merged[k][2]) and any(_has_prose(c[2]) for c in merged[k + 1:]):
        k += 1
    merged = merged[k:]
    if not merged:
        raise InputError(f"{where} has no readable text in its documents; pass a book with text")
    return Book(title=book_title, source=p, format="epub",
                chapters=[Chapter(i + 1, t, ps) for i, (t, _d, ps) in enumerate(merged)], author=author,
                title_known=bool(title))


def _chain_titles(titles: list[str]) -> str:
    out = ""
    for t in titles:
        out = _join_title(out, t) if out else _norm(t)
    return out


def _segment_paragraphs(title: str | None, blocks: list[_Block]) -> tuple[str, list[str]]:
    """Drop leading headings that repeat the title and contents lists; the rest are paragraphs."""
    title = title or ""
    k = 0
    if title:
        tt = _tokens(title)
        pos = 0
        while k < len(blocks) and pos < len(tt):
            b = blocks[k]
            ht = _tokens(b.text)
            if not b.level and len(ht) > 12:
                break
            if not ht:
                k += 1
                continue
            if tt[pos:pos + len(ht)] == ht:
                pos += len(ht)
                k += 1
                continue
            if pos == 0 and b.level and ht[:len(tt)] == tt:
                title = b.text  # the heading says more than the TOC label
                k += 1
            break
    rest = blocks[k:]
    # contents lists: 3+ short blocks linking into the book (and a "Contents" label before them)
    out: list[_Block] = []
    i = 0
    while i < len(rest):
        b = rest[i]
        if b.xref and len(b.text.split()) <= 20:
            e = i
            while e < len(rest) and rest[e].xref and len(rest[e].text.split()) <= 20:
                e += 1
            label_before = bool(out) and _CONTENTS_LABEL_RE.match(out[-1].text) is not None
            if e - i >= 3 or label_before or _CONTENTS_LABEL_RE.match(title):
                if label_before:
                    out.pop()
                i = e
                continue
            out.extend(rest[i:e])
            i = e
            continue
        out.append(b)
        i += 1
    if out and _CONTENTS_LABEL_RE.match(title) and all(_CONTENTS_LABEL_RE.match(b.text) for b in out):
        out = []
    return title, [b.text for b in out]


# --------------------------------------------------------------------------- front and back matter


_MATTER_TITLE_RE = re.compile(
    r"^(?:about\s+the\s+(?:authors?|translators?|editors?|illustrators?)|(?:table\s+of\s+)?contents|index"
    r"|copyright(?:\s+page)?|colophon|(?:also|other\s+(?:books|titles|works))\s+by\b.*|list\s+of\s+illustrations)"
    r"[.:]?$", re.I)
_ISBN_RE = re.compile(r"^\s*(?:e-?)?ISBN(?:-1[03])?[:\s]*[\dXx][\d\s\-Xx]{8,20}(?:\s*\([^)]{0,40}\))?[.;]?\s*$", re.I)
_COPYRIGHT_RE = re.compile(r"(?:\bcopyright\b|\u00a9|\(c\)\s*\d{4})", re.I)
_RIGHTS_RE = re.compile(r"all rights reserved|\bISBN\b|no part of this (?:publication|book)|first published|"
                        r"printed in|library of congress", re.I)


def _is_copyright_chapter(ch: Chapter) -> bool:
    """A short chapter that is a copyright notice / colophon (copyright and rights or ISBN lines)."""
    text = " ".join(ch.paragraphs)
    return (len(text.split()) <= 300 and bool(_COPYRIGHT_RE.search(text)) and bool(_RIGHTS_RE.search(text))
            and not any(_is_prose(p) and len(p.split()) > 60 for p in ch.paragraphs))


def _drop_matter(chapters: list[Chapter]) -> list[Chapter]:
    """Chapters without front/back matter: chapters titled "About the Author", "Contents", "Index",
    "Copyright", "Also by ..."; short copyright notices among the first three chapters; ISBN-only
    paragraphs; a trailing "About the Author" section inside the last chapter (a heading-like
    paragraph of its own, followed by at most 400 words)."""
    out: list[Chapter] = []
    n = len(chapters)
    for k, ch in enumerate(chapters):
        title = (ch.title or "").strip()
        if title and _MATTER_TITLE_RE.match(title):
            continue
        if k < 3 and k < n - 1 and _is_copyright_chapter(ch):
            continue
        paras = [p for p in ch.paragraphs if not _ISBN_RE.match(p)]
        if k == n - 1:
            for j, para in enumerate(paras):
                if j > 0 and re.match(r"^about\s+the\s+authors?[.:]?$", para, re.I) \
                        and len(" ".join(paras[j + 1:]).split()) <= 400:
                    paras = paras[:j]
                    break
        if paras:
            out.append(Chapter(ch.index, ch.title, paras))
    return out
