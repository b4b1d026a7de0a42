"""Ingest: turn a book file (plain text, Markdown or EPUB) into chapters of paragraphs.

``load_book(path, encoding=None) -> Book`` is the only entry point. A :class:`Book` holds
:class:`Chapter` objects, 1-based and in reading order; each chapter has the title to speak
and its paragraphs, whitespace-normalised (hard-wrapped lines joined with single spaces).
Every user-caused failure is a one-line :class:`core.errors.InputError` (or its subclasses
``EncodingError`` and ``UnsafePathError``) naming the file and what to do.

Format is chosen by extension (:mod:`jobs.ingest.readers`, one :class:`~jobs.ingest.readers.Reader`
per format): ``.epub`` is EPUB, ``.md``/``.markdown`` is Markdown, anything else (``.txt``, ``.text``,
no extension, unknown) is plain text.

Modules, one per stage (this package file only checks the path, asks the reader of its suffix for
the book and drops front/back matter at the end):

``readers``   the readers by suffix (:func:`~jobs.ingest.readers.reader_for`), their size limits,
              :func:`check_input_size`.
``book``      :class:`Book` and :class:`Chapter`, what every loader returns.
``text``      bytes -> str (decoding, binary refusal), Project Gutenberg stripping, plain
              text -> heading/paragraph items (the TXT heading heuristics).
``markdown``  Markdown text -> heading/paragraph items and the title H1.
``chapters``  TXT/Markdown: items -> chapters -> :class:`Book`.
``outline``   TXT/Markdown: the document outline (front matter, parts, chapters, sections), its
              overrides (``--chapter-pattern``, ``--chapters-file``, ``--split-level``), headings as
              spoken; the checks EPUB chapters share. Its rules: docs/STRUCTURE.md, "The rules".
``html``      an XHTML/HTML element tree -> blocks (paragraphs, headings, anchors).
``epub``      the zip container, OPF/spine/nav/NCX and every archive and XML defence;
              blocks -> chapters -> :class:`Book`.
``matter``    chapters -> chapters without front/back matter (all formats).
``opening``   an untitled first chapter of opening matter (a dedication, an epigraph, a short note)
              -> the opening of the first titled chapter, spoken before its heading (all formats).
``common``    small text helpers the stages share.

Decisions (the rules other modules can rely on)
-----------------------------------------------

Text files
    UTF-8 with or without BOM, CRLF/CR/LF. ``encoding`` overrides UTF-8. A file is refused as
    binary (before decoding) when it has NUL bytes, or more than 10 % control bytes in its
    first 64 KiB; a zip or PDF given a text name gets a hint instead. UTF-16 text (BOM) needs
    ``--encoding utf-16``. A file that is not UTF-8 but whose Project Gutenberg header declares
    ISO-8859-1 (Latin-1, ISO-8859-15, Windows-1252: "Character set encoding: ISO-8859-1", Gutenberg's
    "-8.txt" files) is read as declared, as Windows-1252 when it has bytes 0x80-0x9F, and a warning
    line (logger ``booktts.ingest``) says so. Other text that is not UTF-8 (no declaration, or one its
    bytes belie, such as "ASCII") is read as Windows-1252, the 8-bit encoding of Western text, with a
    warning line naming it and ``--encoding``, unless that is implausible: a byte Windows-1252 leaves
    undefined, or bytes 0x80-0xFF making up more than a quarter of the letters (Cyrillic, Greek ...
    code pages); such text is refused in one line with a hint.

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
    Text before the first heading becomes an untitled chapter 1 (the announcement says the title;
    the title page's lines are not spoken) only if it holds
    prose: a paragraph of 3+ words with lower-case letters ending in sentence punctuation (not a
    "by ..." credit line), or one of 20+ words, or 100+ words in all. Title pages, "by Author",
    edition lines and contents lists are therefore left out. A book with no headings at all is
    one chapter with everything in it (titled the same way). An untitled chapter 1 that is only
    opening matter (a dedication, an epigraph, verse, a dedicatory letter, a note of 100 words of
    prose at most; ``jobs.ingest.opening``) is no chapter: its paragraphs open the first titled
    chapter and are spoken before that chapter's heading (``Chapter.opening`` counts them).

Clean-up for speech
    ``_italics_``, ``*em*``, ``**bold**`` markers go (words stay); Markdown links become their
    text, images, HTML comments, link reference definitions and fence lines go (code text stays),
    bullet markers go, numbered list markers stay. ``[Illustration]`` and
    ``[Illustration: caption]`` markers go, as do separator-only paragraphs (``* * *``,
    ``-----``). Curly quotes and all other punctuation are kept, as is a lone "…". Bidi controls
    (embeddings, overrides, isolates, marks) and C0/C1 control characters are dropped from every
    paragraph, chapter title, book title and author (a title taken from the file name too), so none
    reaches tags, file names or speech.

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

Sizes
    A book file's size is taken with ``fstat`` before anything hashes or reads it
    (:func:`check_input_size`): text and Markdown over :data:`MAX_TEXT_BYTES`, EPUB over
    :data:`MAX_EPUB_BYTES`, and anything that is not a regular file are refused with one line.

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

import re

from pathlib import Path

from core.errors import InputError
from jobs.ingest.book import Book, Chapter
from jobs.ingest.common import _norm, _show
from jobs.ingest.epub import MAX_UNCOMPRESSED_BYTES, MAX_ZIP_MEMBERS  # noqa: F401  (the EPUB limits, named here)
from jobs.ingest.matter import _drop_matter
from jobs.ingest.opening import fold_opening
from jobs.ingest.outline import Structure, glossary_sections
from jobs.ingest.readers import (MAX_EPUB_BYTES, MAX_TEXT_BYTES, ReadOptions, accepted, check_input_size,
                                 reader_for)

__all__ = ["Book", "Chapter", "load_book", "check_input_size", "reader_for", "MAX_UNCOMPRESSED_BYTES",
           "MAX_TEXT_BYTES", "MAX_EPUB_BYTES"]


FOOTNOTE_MODES = ("skip", "inline", "end")


def load_book(path: str | Path, encoding: str | None = None, front_matter: bool = False,
              footnotes: str = "skip", structure: Structure | None = None) -> Book:
    """Read ``path`` (TXT, Markdown or EPUB) into a :class:`Book`.

    ``encoding`` applies to TXT and Markdown (default UTF-8, BOM allowed); EPUB documents
    declare their own. ``front_matter`` keeps copyright pages, contents, indexes, "About the
    Author" and ISBN lines (see "Front and back matter"); ``footnotes`` is what happens to
    footnote/endnote bodies (EPUB notes; TXT/Markdown notes, :mod:`jobs.ingest.notes`): ``skip``,
    ``inline`` (read where they are) or ``end`` (read at the end of their document or chapter).
    ``structure``: the outline overrides of TXT/Markdown books (:class:`jobs.ingest.outline.Structure`). Raises :class:`InputError` (one line) for anything unusable.
    """
    if footnotes not in FOOTNOTE_MODES:
        raise InputError(f"--footnotes {footnotes!r}: choose one of {', '.join(FOOTNOTE_MODES)}")
    book = _load_book(path, ReadOptions(encoding, footnotes, front_matter, structure))
    # what reaches tags, file names and speech has no bidi overrides or control characters (a
    # title that is the file name included): _norm drops them
    book.title, book.author = _norm(book.title), (_norm(book.author) or None) if book.author else None
    for c in book.chapters:
        c.title = _norm(c.title)
    if not front_matter:
        kept = _drop_matter(book.chapters)
        if kept and any(c.paragraphs for c in kept):
            book.chapters = [Chapter(i + 1, c.title, c.paragraphs, c.kinds, c.part, opening=c.opening)
                             for i, c in enumerate(kept)]
    if structure is None or not (structure.chapter_pattern or structure.chapter_marks):
        book.chapters = glossary_sections(book.chapters)  # the user's own chapter marks are kept as given
    book.chapters = fold_opening(book.chapters)
    _mark_letter_titles(book.chapters)
    return book


_LETTER_TITLE_RE = re.compile(r"[A-Z]\.?")


def _mark_letter_titles(chapters: list[Chapter]) -> None:
    """Chapters titled by single capital letters that run through the alphabet in order (five or more: a
    dictionary's or a glossary's "A" ... "Z") have letters for titles, not roman numerals: "C", "D", "I",
    "L", "M", "V" and "X" among them are said as letters. Bare roman numerals ("I", "II", "III") never
    qualify: they are not all single letters, and "I", "V", "X" alone are not in alphabetical order."""
    letters = [c for c in chapters if _LETTER_TITLE_RE.fullmatch(c.title)]
    keys = [c.title[0] for c in letters]
    if len(letters) >= 5 and all(a < b for a, b in zip(keys, keys[1:])) and len(set(keys) - set("IVXLCDM")) >= 3:
        for c in letters:
            c.title_is_letter = True


def _load_book(path: str | Path, opts: ReadOptions) -> Book:
    """The path's checks every format shares, then the reader of its suffix."""
    p = Path(path)
    where = _show(p)
    try:
        if not p.exists():
            raise InputError(f"{where}: no such file; check the path")
        if p.is_dir():
            raise InputError(f"{where} is a directory, not a book file; pass a {accepted()} file")
        if not p.is_file():
            raise InputError(f"{where} is not a regular file; pass a {accepted()} file")
        size = p.stat().st_size
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise InputError(f"{where}: cannot access it ({getattr(e, 'strerror', None) or e}); "
                         f"check the path and its permissions") from None
    return reader_for(p).load(p, where, size, opts)
