"""Text and Markdown: decoded text -> :class:`Book` (items -> chapters).

:func:`_load_text` is the TXT/Markdown loader: it normalises line ends, strips Project Gutenberg
boilerplate, gets items from ``jobs.ingest.text`` or ``jobs.ingest.markdown``, finds the title
and author, and :func:`_build_chapters` turns the items into chapters: contents lists dropped
(heading runs and runs of local-link paragraphs), heading pairs merged, text before the first
heading kept as chapter 1 only if it is prose.

Does not read files or decode bytes (``jobs.ingest`` and ``jobs.ingest.text`` do), does not
know Markdown or TXT syntax, and does not drop front/back matter (``jobs.ingest.matter``).
"""

from __future__ import annotations

import re
from pathlib import Path

from core.errors import InputError
from jobs.ingest.book import Book, Chapter
from jobs.ingest.common import _CONTENTS_LABEL_RE, _has_prose, _is_prose, _join_title, _norm, _tokens
from jobs.ingest.markdown import _md_items
from jobs.ingest.text import _Item, _pg_author, _strip_gutenberg, _txt_items


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
