"""Text and Markdown: decoded text -> :class:`Book` (items -> chapters).

:func:`_load_text` is the TXT/Markdown loader: it normalises line ends, strips Project Gutenberg
boilerplate, gets items from ``jobs.ingest.text`` or ``jobs.ingest.markdown``, finds the title
and author (title case when the title page is in capitals), and :func:`_build_chapters` turns the
items into chapters through the document outline (``jobs.ingest.outline``: contents lists, levels,
front matter, headings as spoken, the overrides). Markdown without blank lines is read as text.

Does not read files or decode bytes (``jobs.ingest`` and ``jobs.ingest.text`` do), does not
know Markdown or TXT syntax, and does not drop front/back matter (``jobs.ingest.matter``).
"""

from __future__ import annotations

import re
from pathlib import Path

from core.errors import InputError
from jobs.ingest.book import Book, Chapter
from jobs.ingest.common import _CONTENTS_LABEL_RE, _drop_invisible, _is_prose, _norm
from jobs.ingest.markdown import _MD_ESCAPE_RE, _md_items
from jobs.ingest.outline import Structure, build_outline, closing_sections, merge_fragments, title_case, to_chapters
from jobs.ingest.text import _Item, _pg_author, _strip_gutenberg, _txt_items, _unspace_letters


def _build_chapters(items: list[_Item], book_title: str, author: str | None = None,
                    split_level: str = "chapter") -> list[Chapter]:
    """Items -> chapters through the document outline (``jobs.ingest.outline``)."""
    items = _drop_toc_para_runs(items)
    outline = build_outline(items, book_title, author)
    if not outline.nodes:  # no headings at all: one chapter with everything (title page left out)
        paras = [it.text for it in items if it.kind == "para"]
        kept = outline.front or [it for it in items if it.kind == "para"]
        texts = [it.text for it in kept] or paras
        return [Chapter(1, "", texts)] if texts else []
    return closing_sections(merge_fragments(to_chapters(outline, split_level)))


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
            if len(author.split()) > 8 and author[:1].islower():
                continue  # "BY late accounts from Rotterdam, that city seems ...": a tale's first sentence
            return a, (author if 1 <= len(author.split()) <= 8 else "")
    return None


def _has_blank_lines(body: str) -> bool:
    """Whether the text separates its paragraphs with blank lines (1 % of its lines or more)."""
    lines = body.strip().split("\n")
    if len(lines) < 50:
        return True
    return sum(1 for ln in lines if not ln.strip()) >= 0.01 * len(lines)


def _load_text(p: Path, where: str, text: str, fmt: str, structure: Structure | None = None) -> Book:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")
    text = _drop_invisible(re.sub(r"[\x00-\x08\x0b\x0e-\x1f\x7f]", "", text))
    if not text.strip():
        raise InputError(f"{where} contains only whitespace; nothing to read (pass a file with the book's text)")
    text = _unspace_letters(text)
    body, pg_title, pg = _strip_gutenberg(text)
    if not body.strip():
        raise InputError(f"{where} holds only a Project Gutenberg header/licence and no book text; "
                         f"pass the complete book file")
    h1 = md_author = None
    structure = structure or Structure()
    if fmt == "md" and not _has_blank_lines(body):
        # Markdown converted from print without blank lines: no Markdown block structure to read;
        # read it as plain text with its backslash escapes undone
        first_line = text.count("\n", 0, max(text.find(body), 0)) + 1
        items = _txt_items(_MD_ESCAPE_RE.sub(r"\1", body), structure.line_test(where, first_line, text.count("\n") + 1))
    elif fmt == "md":
        items, h1, md_author = _md_items(body)
        items = structure.force_items(where, items)
    else:
        first_line = text.count("\n", 0, max(text.find(body), 0)) + 1
        items = _txt_items(body, structure.line_test(where, first_line, text.count("\n") + 1))
    guessed = _guess_title_author(items)
    known = pg_title or h1 or (guessed[0] if guessed else None)
    if known and not pg_title and not h1:
        known = title_case(known)  # a title page in capitals is not shouted in the announcement
    title = known or p.stem
    author = _pg_author(text) if pg_title else md_author
    if author is None and guessed and (not pg_title or guessed[0] == known):
        author = guessed[1] or None
    if author:
        author = title_case(author)
    # the outline knows the book's title line by the main title, without a header's subtitle
    chapters = _build_chapters(items, (known or "").split(": ")[0] if pg_title else known or "", author,
                               structure.split_level)
    if not chapters:
        raise InputError(f"{where} has no readable text{' after the Project Gutenberg header' if pg else ''}; "
                         f"pass a file with the book's text")
    return Book(title=title, source=p, format=fmt, chapters=chapters, author=author, title_known=bool(known))
