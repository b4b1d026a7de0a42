"""Markdown: text -> heading and paragraph items (and the title H1).

A line-based block reader for the Markdown books are written in: ATX (``#``) and setext
headings, fenced code (its text is kept), block quotes, bullet and numbered lists, thematic
breaks, link reference definitions, HTML comments and raw ``<script>``/``<style>``/``<template>``
elements with their content (dropped); inline clean-up turns links into
their text and drops images, tags, footnote references and escapes. :func:`_md_items` picks the
chapter level ("# Part" / "## Chapter") and the book-title H1 (or the title and author that field
headings opening the file state: "# Title: ...", "## Author: ..."); a file without Markdown headings
falls back to the plain-text heading heuristics of ``jobs.ingest.text``.

Works on decoded, Gutenberg-stripped text; does not know decoding, how items become chapters
(``jobs.ingest.chapters``) or EPUB.
"""

from __future__ import annotations

import html
import re

from jobs.ingest.common import _CAST_LABEL_RE, _is_separator, _norm
from jobs.ingest.text import _ROMAN_ALONE_RE, _caps_line, _clean_inline, _Item, _match_heading, _txt_items


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
#: Raw HTML elements whose content a reader never sees (so it is never spoken): from the opening tag
#: to its closing tag, or to the end of the text when it is not closed (as CommonMark reads it).
_HIDDEN_HTML_RE = re.compile(r"<(script|style|template)(?=[\s/>])[^>]{0,2000}>.*?(?:</\1\s*>|\Z)", re.S | re.I)
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
    item = [False]  # the paragraph being read is a bulleted item (a setext underline after it is a rule)

    def end_para() -> None:
        item[0] = False
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

    body = _HIDDEN_HTML_RE.sub(lambda m: "\n\n" if "\n" in m.group(0) else " ", _COMMENT_RE.sub("", body))
    for line in body.split("\n"):
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
        if m and para and not item[0]:
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
            item[0] = True
            line = _BULLET_RE.sub("", line)
        elif _ORDERED_RE.match(line) and (not para or re.match(r"^[ \t]*1[.)]", line)):
            end_para()  # only a list starting at 1 interrupts a paragraph ("1984. Then" may wrap)
        para.append(line.strip())
    if fence:
        end_code()
    end_para()
    return [b for b in out if b[0] == "heading" or b[2].strip()]


_META_RE = re.compile(r"^(?P<key>title|subtitle|author|authors|translator|editor|illustrator|year|date|published"
                      r"|publisher|language|source)[ \t]*:[ \t]*(?P<value>\S.*)$", re.I)
"""A metadata heading at the top of a file: "# Title: The Tempest", "## Author: William Shakespeare",
"## Year: 1610"."""


def _md_metadata(blocks: list[tuple[str, int, str, bool]]) -> tuple[list[tuple[str, int, str, bool]], dict[str, str]]:
    """Headings before the first paragraph that read "Label: value" (Title:, Author:, Year: ...) are the
    file's metadata, not headings of the book: they are taken out, and their values returned by label."""
    first = next((k for k, b in enumerate(blocks) if b[0] != "heading"), len(blocks))
    meta: dict[str, str] = {}
    out = []
    for k, b in enumerate(blocks):
        m = _META_RE.match(b[2]) if k < first and b[0] == "heading" else None
        if m:
            meta.setdefault(m.group("key").lower(), _norm(m.group("value")))
        else:
            out.append(b)
    return out, meta


_KEYWORD_HEAD_RE = re.compile(r"^(\w+\s+\w+)([.:])\s+\S")


def _heading_match(text: str):
    """The kind and number of a Markdown heading. The markup already makes it a heading, so a keyword and
    number at its start ("Section 16.") give them however long the title after them runs ("Section 16. How
    the Stranger vainly endeavoured to reveal to me in words the mysteries of Spaceland"), where a line of
    plain text that long is no heading."""
    h = _match_heading(text)
    if h is not None:
        return h
    m = _KEYWORD_HEAD_RE.match(text)
    h = _match_heading(m.group(1) + m.group(2)) if m else None
    return h if h is not None and h.style not in ("numtitle", "named", "roman") and h.num is not None else None


def _title_only(text: str) -> bool:
    """A heading that is a title in capitals with no keyword or number of its own ("LOST HEARTS")."""
    return _caps_line(text) and _match_heading(text) is None


def _stray_chapters(blocks: list[tuple[str, int, str, bool]], headings: list[tuple[int, tuple[str, int, str, bool]]],
                    level: int) -> set[int]:
    """Headings one level below the chapter level that are chapters all the same, as a file converted from
    print gets some of its chapter headings at the wrong level: one before the first chapter heading with text
    under it (no chapter holds it: "### PART 1" over the preface, "### CANON ALBERIC'S SCRAP-BOOK" before "##
    LOST HEARTS"), and, when every chapter heading is a title in capitals with no number, a title in capitals
    printed the same way that is the only heading of its level between two chapter headings ("### 'OH,
    WHISTLE, AND I'LL COME TO YOU, MY LAD'" between "## COUNT MAGNUS" and "## THE TREASURE OF ABBOT THOMAS";
    numbered ones, "### I", "### II", stay sections), and every title in capitals one level below where two or
    more chapter headings group such titles right under them (a collection whose poems sit under "## POEMS OF
    LATER LIFE" at "###", some of them slipped up to "##")."""
    below = min((b[1] for _, b in headings if b[1] > level), default=None)
    tops = [k for k, b in headings if b[1] == level]
    if below is None or not tops:
        return set()
    out = set()
    for k, b in headings:
        if b[1] == below and k < tops[0] and k + 1 < len(blocks) and blocks[k + 1][0] == "para":
            out.add(k)
    titles = sum(1 for k in tops if _title_only(blocks[k][2]))
    # two or more chapter-level headings right over a title one level below ("## POEMS OF LATER LIFE" / "### THE
    # RAVEN"), nine in ten chapter headings titles in capitals: that level holds the pieces, the upper one groups
    # them and some pieces slipped up to it; every title in capitals one level below is a piece (numbered ones,
    # "### I.", stay sections)
    level_of = {k: b[1] for k, b in headings}
    groups = sum(1 for k in tops if level_of.get(k + 1) == below and _title_only(blocks[k + 1][2]))
    if groups >= 2 and 10 * titles >= 9 * len(tops):
        return out | {k for k, b in headings if b[1] == below and _title_only(b[2])}
    if titles < len(tops):
        return out
    bounds = [*tops, len(blocks)]
    for start, end in zip(bounds, bounds[1:]):
        inside = [(k, b) for k, b in headings if start < k < end and b[1] > level]
        if len(inside) == 1 and inside[0][1][1] == below and _title_only(inside[0][1][2]):
            out.add(inside[0][0])
    return out


_CONT_RE = re.compile(r"^(.*?)[\s.,:;\u2014-]*[(\[]\s*(?:cont(?:inued|'d)?)\.?\s*[)\]]\.?$", re.I)


def _heading_number(text: str) -> tuple[str, int] | None:
    """A Markdown heading's keyword and number ("CHAPTER II" -> ("chapter", 2)), or ("digits", n) for a bare
    number ("2."); None for a heading without one."""
    h = _heading_match(_norm(text))
    if h is not None and h.style not in ("numtitle", "") and h.num is not None:
        return h.style, h.num
    bare = re.fullmatch(r"(\d{1,3})\.?", text.strip())
    return ("digits", int(bare.group(1))) if bare else None


def _numbered_below(headings: list[tuple[int, tuple[str, int, str, bool]]], level: int) -> set[int]:
    """Numbered chapter headings a level or more below the chapters' level that go on with the chapters' own
    numbering: "### CHAPTER II - INFLUENCE OF LINCOLN" after "## CHAPTER I - EARLIEST IMPRESSIONS" and before "##
    CHAPTER IV - ..." (a file converted from print, some chapter headings set a level too low). Each is numbered
    one on from the last chapter of its keyword, and a later chapter at the chapters' level numbers on past it."""
    out: set[int] = set()
    last: int | None = None  # the last chapter number read
    marks = [(k, lvl, num[1]) for k, (_kind, lvl, text, _toc) in headings
             if (num := _heading_number(text)) is not None and num[0] == "chapter"]
    for i, (k, lvl, num) in enumerate(marks):
        if lvl <= level:
            last = num
            continue
        later = next((n for _k, lv, n in marks[i + 1:] if lv <= level), None)
        if last == num - 1 and later is not None and later > num:
            out.add(k)
            last = num
    return out


def _continued_below(headings: list[tuple[int, tuple[str, int, str, bool]]], level: int) -> set[int]:
    """Chapter-level headings that go on with a numbered run begun below that level inside the chapter: under
    "## THE DEAD SMILE", "### CHAPTER I" and then "## CHAPTER II", "## CHAPTER III" (a file converted from print,
    its later headings slipped up a level). Each continues the story's sections, numbered one on from the last,
    of the same keyword (or bare numbers), at the story heading's own level or above, where the markup cannot
    make them its children: they stay sections of the story, no chapters of their own. (Below the story's
    level they are its chapters, the first one slipped down: "## THE FIRST BOOK" / "##### CHAPTER I" /
    "#### CHAPTER II".)"""
    out: set[int] = set()
    run: tuple[str, int] | None = None  # the keyword and number of the last section of the current run
    top = 0  # the level of the chapter heading the run is under
    for k, (_kind, lvl, text, _toc) in headings:
        num = _heading_number(text)
        if lvl > level:
            if num is not None and (num[1] == 1 or run is not None and num == (run[0], run[1] + 1)):
                run = num
            continue
        if run is not None and num == (run[0], run[1] + 1) and lvl <= top:
            out.add(k)
            run = num
            continue
        run, top = None, lvl
    return out


def _is_continuation(text: str, previous: str | None) -> bool:
    """A heading that repeats the previous chapter heading with "(Cont.)"/"(continued)" after it ("IX (Cont.)"
    after "IX", added by a file's owner partway through a chapter) continues that chapter: no new chapter."""
    m = _CONT_RE.match(text)
    return bool(m and previous and m.group(1).strip(" .").casefold() == previous.strip(" .").casefold())


_SUBHEAD_WORDS = 15
"""A Markdown heading below the chapters' level with more words than this is a sentence marked up as a
heading, read as a paragraph."""


def _flat_titles(blocks: list[tuple[str, int, str, bool]], headings: list[tuple[int, tuple[str, int, str, bool]]],
                 skip: int) -> bool:
    """Whether the book's headings, at two levels or more, are all titles in capitals (no keyword, no number) and
    none stands right over another heading: nothing groups anything, the levels are the converter's whim ("#
    LAST DAYS OF BOMEFREE." between "## DEATH OF MAU-MAU BETT." and "## COMMENCEMENT OF ISABELLA'S TRIALS IN
    LIFE.", later ones at "###"), so each heads a chapter."""
    hs = [(k, b) for k, b in headings if k != skip]
    return len(hs) >= FLAT_TITLES_MIN and all(_title_only(b[2]) for _k, b in hs) \
        and not any(k + 1 < len(blocks) and blocks[k + 1][0] == "heading" for k, _b in hs)


FLAT_TITLES_MIN = 6
"""The fewest headings from which :func:`_flat_titles` reads their levels as meaningless."""


def _numbered_over_topics(blocks: list[tuple[str, int, str, bool]],
                          headings: list[tuple[int, tuple[str, int, str, bool]]], skip: int, top: int, below: int) -> bool:
    """Whether the upper headings are bare numerals ("## I.", "## II.") each right over a topic's heading one level
    below, in capitals with no number ("### EPIDEMIC OF MOB-LAW."): an essay's numbered parts, each under its topics,
    so the numerals head the chapters and the topics are their sections."""
    tops = [k for k, b in headings if k != skip and b[1] == top]
    unders = [b for k, b in headings if k != skip and b[1] == below]
    bare = all(_ROMAN_ALONE_RE.match(blocks[k][2].strip()) or re.fullmatch(r"\d{1,3}\.?", blocks[k][2].strip())
               for k in tops)
    return len(tops) >= 2 and bare \
        and all(k + 1 < len(blocks) and blocks[k + 1][0] == "heading" and blocks[k + 1][1] == below for k in tops) \
        and all(not any(c.islower() for c in b[2]) and _heading_match(b[2]) is None for b in unders)


def _md_items(body: str) -> tuple[list[_Item], str | None, str | None]:
    """Markdown -> items, the title H1 (if the file has one) and the author its metadata names. Falls back
    to plain-text headings."""
    blocks, meta = _md_metadata(_md_blocks(body))
    headings = [(k, b) for k, b in enumerate(blocks) if b[0] == "heading" and b[2]]
    if not headings:
        # no Markdown headings: find plain-text chapter headings ("CHAPTER I.") as in a TXT file
        return _txt_items("\n\n".join(b[2] for b in blocks)), meta.get("title"), meta.get("author")
    title_h1 = meta.get("title")
    skip = -1
    h1s = [k for k, b in headings if b[1] == 1]
    if title_h1 is None and len(h1s) == 1 and headings[0][1][1] == 1 and len(headings) > 1:
        skip = headings[0][0]
        title_h1 = headings[0][1][2]
    levels = sorted({b[1] for k, b in headings if k != skip})
    level = levels[0] if levels else 1
    if len(levels) > 1:
        nxt = levels[1]
        n_top = sum(1 for k, b in headings if k != skip and b[1] == level)
        n_next = sum(1 for k, b in headings if k != skip and b[1] == nxt)
        if n_next >= 2 and n_next > n_top and not _numbered_over_topics(blocks, headings, skip, level, nxt):
            level = nxt  # "# Part" / "## Chapter": chapters are the finer level, parts prefix them
    if len(levels) > 1 and _flat_titles(blocks, headings, skip):
        level = levels[-1]  # titles in capitals at levels that mean nothing: every one heads a chapter
    promoted = _stray_chapters(blocks, [(k, b) for k, b in headings if k != skip], level) \
        | _numbered_below(headings, level)
    demoted = _continued_below(headings, level)
    items = []
    last_heading = None
    for k, (kind, lvl, text, toc) in enumerate(blocks):
        if k == skip:
            continue
        text = _norm(text)
        if kind == "heading" and text and (lvl <= level or k in promoted) and k not in demoted \
                and not _CAST_LABEL_RE.match(text):
            if _is_continuation(text, last_heading):
                continue  # "IX (Cont.)" after "IX": the same chapter goes on, no new one
            last_heading = text
            # a keyword heading ("ACT I", "SCENE II.", "PART ONE", "EPILOGUE") gets its kind and number as a
            # heading line of a text book does, so the outline ranks it the same way (scenes inside acts)
            h = _heading_match(text)
            keyword = h is not None and h.style != "numtitle"
            items.append(_Item("heading", text, style=h.style if keyword else "", num=h.num if keyword else None))
        elif text and not _is_separator(text):
            # a cast list's label ("### Dramatis Personae") is read as in a text book: the playbill, no chapter;
            # a quotation headed below the chapters right under a PART heading is that part's epigraph
            epigraph = kind == "heading" and text[:1] in "\"\u201c'\u2018" and bool(items) \
                and items[-1].kind == "heading" and items[-1].style in ("part", "book", "volume")
            # any other heading below the chapters' level (a poem's "### I.", a story's "### II", a subtitle) is
            # a heading inside its chapter: said as one, with the pause after it, never run into the text
            subhead = kind == "heading" and not epigraph and not toc and len(text.split()) <= _SUBHEAD_WORDS
            items.append(_Item("para", text, toc, epigraph=epigraph, subhead=subhead))
    return items, title_h1, meta.get("author")
