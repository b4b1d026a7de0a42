"""The document outline of a plain-text or Markdown book: items -> parts, chapters, sections -> chapters.

:func:`build_outline` takes the heading / paragraph / break / contents-list items that
``jobs.ingest.text`` and ``jobs.ingest.markdown`` read and infers the book's structure from its own
signals: which headings are parts (PART, BOOK, VOLUME), chapters (CHAPTER, STAVE, LETTER, ACT,
"I. A SCANDAL IN BOHEMIA", PROLOGUE...) and sections inside a chapter (a story's bare "II.", SCENE),
the book's contents list (dropped, and used as evidence for the headings it names), and checks that
the numbering runs in sequence. :func:`to_chapters` cuts the outline into files at the chosen
``split_level`` and gives each chapter its spoken title and paragraph kinds (``Chapter.kinds``).

The spoken form of headings is decided here (:func:`spoken_heading`): capitals become title case,
a bare numeral chapter is "Chapter IV.", a story's numbered part is "Part II." (the numbers are
read as words by ``jobs.normalize``).

Does not read files, decode, or know TXT/Markdown syntax; does not drop copyright pages or
"About the Author" (``jobs.ingest.matter``); knows nothing of EPUB.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace

from core.errors import InputError
from jobs.ingest.book import Chapter, renumbered
from jobs.ingest.common import (_CAST_LABEL_RE, _CONTENTS_LABEL_RE, _DEDICATION_LINE_RE, _ILLUSTRATIONS_LABEL_RE, _has_prose,
                                _is_prose, _join_title, _tokens)
from jobs.ingest.matter import PRINTING_WORKS, STATIONERS_HALL, _NOTE_LABEL_RE, _PRICE_RE, _producer_notes, _the_end
from jobs.ingest.text import (_CONNECTING_END_RE, _ORDINAL_HEADING_RE, _ROMAN_ALONE_RE, _Item, _caps_line, _SECTION_RE,
                               _match_heading, _number_value, _roman_value)

SPLIT_LEVELS = ("part", "chapter", "section")

PART_STYLES = {"part", "book", "volume", "capspart"}
SECTION_STYLES = {"scene", "section", "numpart", "piece"}
UNIT_STYLES = {"sermon", "lecture", "discourse", "essay", "epistle", "homily"}
"""A numbered piece of a collection by its own name ("SERMON I.", "LECTURE III", "Essay 2"): a chapter."""
NUMBERED_CHAPTER_STYLES = {"chapter", "stave", "letter", "adventure", "canto", "act", "numtitle", "serial",
                           *UNIT_STYLES}
RANKED_CHAPTER_STYLES = {"chapter", "stave", "act"}
"""The keywords that outrank the others: a book numbered by them is cut at them."""
INNER_STYLES = {"letter", "contents", "caps"}
"""Headings that are sections when they come inside a RANKED_CHAPTER_STYLES sequence (a letter, a
journal heading the contents list names, a line in capitals)."""


@dataclass
class Node:
    """One heading of the outline with the items under it (up to the next heading)."""

    level: str  # "part" | "chapter" | "section"
    title: str  # as printed (whitespace-normalised)
    style: str = ""
    num: int | None = None
    items: list[_Item] = field(default_factory=list)


@dataclass
class Outline:
    """Front matter (items before the first heading, title page removed) and the headings in order."""

    front: list[_Item]
    nodes: list[Node]


# --------------------------------------------------------------------------- overrides


@dataclass(frozen=True)
class Structure:
    """The user's say over the outline: ``--chapter-pattern``, ``--chapters-file``, ``--split-level``."""

    chapter_pattern: str | None = None
    """A regular expression; a line it matches (``re.search``) starts a chapter."""
    chapter_marks: tuple[str, ...] | None = None
    """The chapters file's lines: heading lines as printed, or 1-based line numbers of the book file."""
    chapters_file: str = "--chapters-file"
    """Where the marks come from, for messages."""
    split_level: str = "chapter"
    """What becomes a file: ``part``, ``chapter`` or ``section``."""

    def _rx(self) -> re.Pattern | None:
        return compile_pattern(self.chapter_pattern) if self.chapter_pattern else None

    def _marks(self) -> tuple[set[int], set[tuple[str, ...]]]:
        numbers, headings = set(), set()
        for m in self.chapter_marks or ():
            if m.strip().isdigit():
                numbers.add(int(m))
            elif m.strip():
                headings.add(tuple(_tokens(m)))
        return numbers, headings

    def line_test(self, where: str, first_line: int, n_lines: int):
        """The ``force(line_index, line)`` test of ``jobs.ingest.text._split_blocks`` for a body whose
        first line is line ``first_line`` of the file; None without overrides. A line number past the
        end of the file is an :class:`InputError`."""
        rx = self._rx()
        numbers, headings = self._marks()
        if rx is None and not numbers and not headings:
            return None
        past = [n for n in numbers if n > n_lines or n < 1]
        if past:
            raise InputError(f"{self.chapters_file}: line {min(past)} is past the end of {where} "
                             f"({n_lines} lines); give line numbers of the book file (1-{n_lines})")

        def force(k: int, line: str) -> bool:
            return (first_line + k in numbers or (rx is not None and rx.search(line) is not None)
                    or bool(headings) and tuple(_tokens(line)) in headings)
        return force

    def force_items(self, where: str, items: list[_Item]) -> list[_Item]:
        """Markdown: items whose text the pattern or a heading line of the chapters file names start
        chapters (line numbers are for plain text only)."""
        rx = self._rx()
        numbers, headings = self._marks()
        if numbers:
            raise InputError(f"{self.chapters_file}: line numbers work on plain-text books only; for {where} "
                             f"give the heading lines as printed")
        if rx is None and not headings:
            return items
        return [_Item("heading", it.text, style="forced", forced=True)
                if it.kind in ("heading", "para") and ((rx is not None and rx.search(it.text))
                                                     or tuple(_tokens(it.text)) in headings) else it
                for it in items]


def compile_pattern(pattern: str) -> re.Pattern:
    """``--chapter-pattern``, compiled; a bad expression is an :class:`InputError`."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InputError(f"--chapter-pattern {pattern!r} is not a valid regular expression ({e}); "
                         f"fix it, e.g. '^CHAPTER [0-9]+'") from None


def read_chapters_file(path: str) -> tuple[str, ...]:
    """The lines of a ``--chapters-file`` (heading lines or line numbers, one per line; blank lines
    and lines starting with ``#`` left out); an unreadable file is an :class:`InputError`."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise InputError(f"--chapters-file {path}: cannot read it ({e.strerror or e}); check the path") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"--chapters-file {path}: not UTF-8 text; save it as UTF-8, one heading line "
                         f"or line number per line") from None
    lines = tuple(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
    if not lines:
        raise InputError(f"--chapters-file {path}: holds no heading lines or line numbers; "
                         f"write one per line")
    return lines


# --------------------------------------------------------------------------- contents lists


def _confirmed_toc(items: list[_Item], k: int) -> bool:
    """A contents-list block is one when a "Contents" label precedes it or at least half of the
    titles it names come again later in the book, as headings or short lines (a numbered heading's title after
    its keyword and number: "CHAPTER I. THE EPITAPH OF SUMMER" for "I The Epitaph of Summer")."""
    it = items[k]
    if it.label:
        return True
    later = set()
    for other in items[k + 1:]:
        if other.kind in ("heading", "para") and len(other.text) <= 120:
            later.add(tuple(_tokens(_strip_number(other.text))))
            toks = tuple(_tokens(other.text))
            later.add(toks)
            if other.kind == "heading" and other.num is not None:  # "CHAPTER I. THE EPITAPH OF SUMMER"
                later.add(_after_number(toks))
    hits = sum(1 for e in it.entries or [] if tuple(_tokens(e)) in later)
    return hits * 2 >= len(it.entries or [])


_LEADING_NUMBER_RE = re.compile(r"^(?:[IVXLCDM]+|\d{1,3})\.\s+")


_NUMERAL_TOKEN_RE = re.compile(r"^(?:[ivxlcdm]+|\d{1,4})$")


def _after_number(toks: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A numbered heading's words after its keyword and number ("chapter i the epitaph of summer" -> "the epitaph
    of summer"); all of them when no number stands among the first three."""
    cut = next((i + 1 for i, t in enumerate(toks[:3]) if _NUMERAL_TOKEN_RE.match(t)), 0)
    return tuple(toks[cut:])


def _strip_number(s: str) -> str:
    return _LEADING_NUMBER_RE.sub("", s, count=1)


def _group_start(out: list[_Item], labelled: bool) -> int:
    """Where the group labels right before a contents block start: the headings over it ("BOOK I"), and
    in a list under a "Contents" label also a group's title line under its heading ("SECOND PART." /
    "LIFE'S MISSION. 1815-1822. (Continued.)", eight words at most)."""
    j = len(out)
    while j:
        if out[j - 1].kind == "heading":
            j -= 1
        elif labelled and j >= 2 and out[j - 1].kind == "para" and out[j - 2].kind == "heading" \
                and len(out[j - 1].text.split()) <= 8 and not _CONTENTS_LABEL_RE.match(out[j - 1].text):
            j -= 2
        else:
            break
    return j


def _resolve_toc(items: list[_Item]) -> tuple[list[_Item], list[list[tuple[str, ...]]], int]:
    """Drop confirmed contents-list blocks (with their "Contents" label and the contents headings
    between the label and the block) and a list of plates under its label; others become paragraphs again. Returns the items, the entries
    the contents named, each as the forms of its words (:func:`_entry_forms`: evidence for headings),
    and the position after the last contents list."""
    out: list[_Item] = []
    entries: list[list[tuple[str, ...]]] = []
    after = 0
    for k, it in enumerate(items):
        if it.kind != "toc":
            out.append(it)
            continue
        if out and out[-1].kind == "para" and _ILLUSTRATIONS_LABEL_RE.match(out[-1].text):
            out.pop()  # "LIST OF THE PLATES" over its captions and pages: it names no headings
            continue
        if _confirmed_toc(items, k):
            entries.extend(_entry_forms(e) for e in it.entries or [])
            j = _group_start(out, it.label)
            if j and out[j - 1].kind == "para" and _CONTENTS_LABEL_RE.match(out[j - 1].text):
                j -= 1
            del out[j:]
            after = len(out)
        else:
            out.append(_Item("para", it.text))
    return out, entries, after


def _contents_groups(items: list[_Item]) -> list[tuple[set[tuple[str, ...]], set[tuple[str, ...]]]]:
    """The groups of a confirmed contents list printed in two indentations: each entry at the outer one
    (its forms, :func:`_entry_forms`) with the forms of the two or more entries indented under it."""
    groups: list[tuple[set[tuple[str, ...]], set[tuple[str, ...]]]] = []
    for k, it in enumerate(items):
        if it.kind != "toc" or not it.hung or not _confirmed_toc(items, k):
            continue
        for entry, hung in zip(it.entries or [], it.hung):
            if not hung:
                groups.append((set(_entry_forms(entry)), set()))
            elif groups:
                groups[-1][1].update(_entry_forms(entry))
    return [(outer, inner) for outer, inner in groups if len(inner) >= 2]


def _listed_sections(items: list[_Item], levels: dict[int, str],
                     groups: list[tuple[set[tuple[str, ...]], set[tuple[str, ...]]]]) -> None:
    """Headlines a contents list indents under a chapter's entry are that chapter's sections: a lecture's
    title ("THE FIDDLE AND THE BOW.") over its headlines in capitals ("CHERISH THE LITTLE ONES.", "THE
    BANQUET."), which the list prints indented under it. The chapter's heading has text of its own before
    its first headline, most of the title-only headings up to the next listed chapter are named by its
    indented entries (the others, printed a little otherwise, go with them), and for the last listed
    chapter only headings up to its last named headline are taken. A part's heading directly over its
    chapters is no chapter with text of its own, so a PART over listed chapters is left alone."""
    if not groups:
        return

    def forms(text: str) -> set[tuple[str, ...]]:
        return {tuple(_tokens(text)), tuple(_tokens(_strip_number(text)))}

    heads = [k for k, it in enumerate(items) if it.kind == "heading" and levels.get(k) in ("chapter", "part")]
    starts = []  # (position in heads, group)
    for n, k in enumerate(heads):
        g = next((g for g in groups if forms(items[k].text) & g[0]), None)
        if g is not None and levels[k] == "chapter":
            starts.append((n, g))
    for s_i, (n, (_outer, inner)) in enumerate(starts):
        last = s_i == len(starts) - 1
        end = starts[s_i + 1][0] if not last else len(heads)
        span = []
        for k in heads[n + 1:end]:
            if levels[k] != "chapter" or items[k].style not in ("caps", "contents", ""):
                break
            span.append(k)
        named = [k for k in span if forms(items[k].text) & inner]
        if len(named) < 2 or 2 * len(named) < len(span):
            continue
        if last:
            span = span[:span.index(named[-1]) + 1]
        k0 = heads[n]
        if not any(items[x].kind == "para" and _is_prose(items[x].text) for x in range(k0 + 1, span[0])):
            continue
        for k in span:
            levels[k] = "section"


_TRADE_RE = re.compile(r"\b(?:Co\.|CO\.|Company|COMPANY|Address|ADDRESS|Manager|MANAGER|Dealers?|DEALERS?"
                       r"|Manufacturers?|MANUFACTURERS?|Agents\s+wanted|AGENTS\s+WANTED|for\s+sale|Rates"
                       r"|Merchants|MERCHANTS|Purveyors|PURVEYORS|Sold\s+by|SOLD\s+BY)(?:\W|$)")
"""A tradesman's advertisement's words: its firm ("JESSE FRENCH PIANO & ORGAN CO.", "TEA MERCHANTS"), "ADDRESS",
"Manager", "Dealers in Watches", "AGENTS WANTED", "for sale", "Rates", "Sold by Grocers"."""


def _without_trade_advertisements(items: list[_Item]) -> list[_Item]:
    """The book without the tradesmen's advertisements bound in after its text: from a scene-break row on
    to the end, three or more pieces between such rows, each short (250 words at most, no chapter heading),
    the first and two in three of them naming a price or a firm (:data:`_PRICE_RE`, :data:`_TRADE_RE`: a
    syrup "in 50 cent bottles", "CALIFORNIA FIG SYRUP CO.", "Rates $2.50"), the whole run less than a third
    of the book's words."""
    total = sum(len(it.text.split()) for it in items)

    def trade(piece: list[_Item]) -> bool:
        text = " ".join(it.text for it in piece)
        return bool(_PRICE_RE.search(text) or _TRADE_RE.search(text))

    pieces = words = ads = 0  # the pieces between the break at ``b`` and the end, read from the end
    start = None
    end = len(items)
    for b in range(len(items) - 1, -1, -1):
        if items[b].kind != "break":
            continue
        piece = items[b + 1:end]
        end = b
        if not piece:
            continue
        n_words = sum(len(it.text.split()) for it in piece)
        words += n_words
        if 3 * words > total or n_words > 250 or any(it.kind == "heading" and it.style not in ("named", "")
                                                      for it in piece):
            break
        pieces += 1
        first_is_ad = trade(piece)
        ads += first_is_ad
        if pieces >= 3 and ads >= 3 and 3 * ads >= 2 * pieces and first_is_ad:
            start = b
    return items[:start] if start is not None else items


def _without_front_advertisements(items: list[_Item], title: str) -> list[_Item]:
    """The book without the tradesmen's advertisements bound in before its title page: where the title page's
    lines spell the book's title ("A PLAIN" / "COOKERY BOOK" / "FOR THE" / "WORKING CLASSES.") before the first
    heading, and what stands before them is three or more pieces between scene-break rows, two in three of
    them naming a price or a firm (as after the text: :func:`_without_trade_advertisements`), the book starts
    at the title page."""
    title_t = _tokens(title)
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), len(items))
    if len(title_t) < 2:
        return items
    for r in range(1, first):
        got: list[str] = []
        for it in items[r:min(first, r + 6)]:
            if it.kind != "para" or len(it.text.split()) > 8:
                break
            got += _tokens(it.text)
            if len(got) >= len(title_t):
                break
        if got != title_t:
            continue
        pieces: list[list[_Item]] = [[]]
        for it in items[:r]:
            if it.kind == "break":
                pieces.append([])
            else:
                pieces[-1].append(it)
        pieces = [pc for pc in pieces if pc]
        trade = sum(1 for pc in pieces if any(_PRICE_RE.search(it.text) or _TRADE_RE.search(it.text) for it in pc))
        if len(pieces) >= 3 and trade >= 3 and 3 * trade >= 2 * len(pieces):
            return items[r:]
        return items
    return items


def _credit_headings(items: list[_Item]) -> list[_Item]:
    """A title page's credit marked up as a heading before any prose ("###  Translated by R. Farquharson Sharp" over
    "###  ACT I"): a line of the title page (:data:`_BY_RE`, twelve words at most), no heading."""
    out = list(items)
    for k, it in enumerate(items):
        if it.kind == "para" and _is_prose(it.text):
            break
        if it.kind == "heading" and not it.forced and _BY_RE.match(it.text) and len(it.text.split()) <= 12:
            out[k] = _Item("para", it.text)
    return out


def _listed_pieces(items: list[_Item], levels: dict[int, str]) -> list[_Item]:
    """A chapter heading whose first paragraph is the list of the numbered, titled pieces under it, word for word
    ("LEGENDS OF THE PROVINCE-HOUSE." / "I.--HOWE'S MASQUERADE. II.--EDWARD RANDOLPH'S PORTRAIT. ..." over "I." /
    "HOWE'S MASQUERADE." ...): each piece is a chapter, the group's heading, left without text, is said with the
    first piece's title ("Legends of the Province-House. Howe's Masquerade."), and the list, a contents, is not
    spoken. Returns the items without such lists; ``levels`` is updated in place (keys of the items after a
    dropped list move down with them)."""
    drop: set[int] = set()
    heads = [k for k, it in enumerate(items) if it.kind == "heading" and levels.get(k) in ("chapter", "part", "section")]
    for n, k in enumerate(heads):
        if levels[k] != "chapter" or k + 1 >= len(items) or items[k + 1].kind != "para":
            continue
        listed = _tokens(items[k + 1].text)
        pieces, got = [], []
        for k2 in heads[n + 1:]:
            if levels[k2] not in ("section", "chapter") or len(got) >= len(listed):
                break
            pieces.append(k2)
            got += _tokens(items[k2].text)
        if len(pieces) >= 2 and got == listed:
            for k2 in pieces:
                levels[k2] = "chapter"
            drop.add(k + 1)
    if not drop:
        return items
    kept = [k for k in range(len(items)) if k not in drop]
    moved = {old: new for new, old in enumerate(kept)}
    new_levels = {moved[k]: v for k, v in levels.items() if k in moved}
    levels.clear()
    levels.update(new_levels)
    return [items[k] for k in kept]


def _all_listed(items: list[_Item], entries: list[list[tuple[str, ...]]], after: int) -> bool:
    """Every entry of the contents list (three or more) names a heading line after the list, by its
    words or a form of them (:func:`_entry_forms`), the heading's number aside: the list is the book's
    whole table of its chapters, none left for a line it misprints."""
    heads: set[tuple[str, ...]] = set()
    for it in items[after:]:
        if it.kind == "heading":
            heads.update((tuple(_tokens(it.text)), tuple(_tokens(_strip_number(it.text)))))
    return len(entries) >= 3 and all(any(form in heads for form in forms) for forms in entries)


_SENTENCE_STOP_RE = re.compile(r"[.!?](?:\s|$)")


def _glossed_title(entry: str) -> str | None:
    """The title of a contents entry that glosses it in lower case after its title in capitals ("HANDS,
    concerning Wing Biddlebaum", "INTRODUCTION by Irving Howe", "GODLINESS, a Tale in Four Parts I,
    concerning ..."): the capitals ("HANDS"); None for any other entry, or a gloss that holds a sentence."""
    words = entry.split()
    n = 0
    while n < len(words) and not any(c.islower() for c in words[n]):
        n += 1
    lead = " ".join(words[:n]).rstrip(",;:")
    if not n or n == len(words) or not words[n][:1].islower() or sum(c.isupper() for c in lead) < 2 \
            or _SENTENCE_STOP_RE.search(" ".join(words[n:])) or len(words) > 40:
        return None
    return lead


def _entry_forms(entry: str) -> list[tuple[str, ...]]:
    """The words of a contents entry, and of the heading it names when that is printed otherwise: the title
    of an entry glossed in lower case ("HANDS" for "HANDS, concerning Wing Biddlebaum"), or, for an entry
    inverted at its one comma as an index of names prints it ("Armstrong, Hannah", "Tanner, Robert Fulton",
    "Spooniad, The"), the words after the comma first ("Hannah Armstrong", "Robert Fulton Tanner", "The
    Spooniad")."""
    forms = [tuple(_tokens(entry))]
    glossed = _glossed_title(entry)
    if glossed:
        forms.append(tuple(_tokens(glossed)))
    elif entry.count(",") == 1:
        last, first = entry.split(",")
        forms.append(tuple(_tokens(first)) + tuple(_tokens(last)))
    return forms


def _names_start(line: tuple[str, ...], named: set[tuple[str, ...]]) -> bool:
    """The line is the start of an entry the contents list names, the entry adding a subtitle
    ("THE CUSTOM-HOUSE." for "THE CUSTOM HOUSE.--INTRODUCTORY"): two words or more, half the entry."""
    return len(line) >= 2 and any(len(e) > len(line) and e[:len(line)] == line and 2 * len(line) >= len(e)
                                  for e in named)


_BRACKETED_TAIL_RE = re.compile(r"\s+\([^()]{1,80}\)\W*$")
"""A note in brackets after a heading's name, which its contents entry leaves out."""


def _promote_named(items: list[_Item], named: set[tuple[str, ...]], after: int, title: str) -> list[_Item]:
    """A short line after the contents list that the list names is a chapter heading (not the
    book's own title line), also with a note in brackets after the name the list gives; so is a bare numeral's
    heading with its title that the list names with the numeral ("I" / "THE SHADOW OF YEARS" for "I.  THE
    SHADOW OF YEARS  3"), though numerals under the list's other chapters would be their parts. A line ending
    with a comma over a short date line is no heading: a letter's place line ("Heaviland Manor," / "_Wednesday,
    August 3rd_." for the entry "HEAVILAND MANOR")."""
    if not named:
        return items
    out = list(items)
    title_t = tuple(_tokens(title))
    for k, it in enumerate(out):
        if k < after or tuple(_tokens(it.text)) == title_t or _bylined(out, k):
            continue
        if it.kind == "heading" and it.style == "roman" and " " in it.text \
                and tuple(_tokens(it.text)) in named:
            # "I" / "THE SHADOW OF YEARS" under an entry "I.    THE SHADOW OF YEARS    3": a chapter the list names
            out[k] = _Item("heading", it.text, style="listedroman", num=it.num)
            continue
        if it.kind != "para" or len(it.text.split()) > 14 or k + 1 >= len(out) or not (
                out[k + 1].kind == "para" or _first_part(out[k + 1])):
            continue
        if _is_prose(it.text) and not it.text.rstrip().endswith("."):
            continue
        if it.text.rstrip().endswith(",") and len(out[k + 1].text.split()) <= 8 \
                and (_MONTH_WORD_RE.search(out[k + 1].text) or re.search(r"\d", out[k + 1].text)):
            continue  # a letter's place line, its date under it ("Heaviland Manor," / "_Wednesday, August 3rd_.")
        bare = _BRACKETED_TAIL_RE.sub("", _FOOTNOTE_MARK_RE.sub("", it.text))  # "Jonathan Swift Somers (Author of
        # the Spooniad)", "Almighty Death[1]"
        if tuple(_tokens(_strip_number(it.text))) in named or tuple(_tokens(it.text)) in named \
                or _names_start(tuple(_tokens(it.text)), named) or _renamed_entry(it.text, named) \
                or bare != it.text and tuple(_tokens(bare)) in named:
            out[k] = _Item("heading", it.text, style="contents", caps=it.caps, apart=it.apart)
        elif (rest := _after_title(it.text, title_t)) and tuple(_tokens(rest)) in named:
            # the book's title over a listed heading, one block ("The Song of Hiawatha" / "Introduction"): a
            # half-title, not said again; the heading is the entry's
            out[k] = _Item("heading", rest, style="contents", caps=it.caps, apart=it.apart)
    return out


def _bylined(items: list[_Item], k: int) -> bool:
    """A title page's title over its byline ("LAYS OF THE SCOTTISH CAVALIERS" / "BY" / "W.E. AYTOUN."), before any
    prose: no heading, even where the contents or a part later bears the same words."""
    nxt = items[k + 1] if k + 1 < len(items) else None
    return nxt is not None and nxt.kind == "para" and (nxt.text.strip(" .").casefold() == "by"
                                                       or bool(_BY_RE.match(nxt.text)) and len(nxt.text.split()) <= 8) \
        and not any(it.kind == "para" and _is_prose(it.text) for it in items[:k])


def _after_title(text: str, title_t: tuple[str, ...]) -> str:
    """What follows the book's title at the start of ``text`` (whole words), or ""."""
    words = text.split()
    if not title_t:
        return ""
    for n in range(1, min(len(words), len(title_t) + 3)):
        head = tuple(_tokens(" ".join(words[:n])))
        if head == title_t:
            return " ".join(words[n:])
        if len(head) > len(title_t):
            break
    return ""


_BARE_PART_RE = re.compile(r"^(?:PART|Part)\s+(?:\d{1,2}|[IVX]{1,4})\.?$")
"""A part's heading that is its keyword and number alone: "Part 1.", "PART II"."""


def title_in_lines(items: list[_Item], title: str) -> set[int]:
    """The items that print the book's title in capitals over two or three lines, perhaps with its alternative
    title after an "OR" on a line of its own ("THE" / "SPIRIT OF THE AGE:" / "OR" / "CONTEMPORARY PORTRAITS."; a
    half-title "THE" / "SPIRIT OF THE AGE."; "THE" / '"MIND THE PAINT"' / "GIRL"): no line of it is a heading,
    even where a contents list names one of its lines."""
    title_t = tuple(_tokens(title))
    if not title_t:
        return set()
    forms = {title_t, tuple(_tokens(title.split(", ")[0])), tuple(_tokens(title.split(":")[0]))}

    def title_line(m: int) -> bool:
        it = items[m] if m < len(items) else None
        return it is not None and (it.kind == "para" or it.kind == "heading" and it.style in ("contents", "caps")) \
            and (it.caps or _shouted(it.text)) and len(it.text.split()) <= 8

    def or_line(m: int) -> bool:
        return m < len(items) and items[m].kind == "para" and items[m].text.strip(" ,.").casefold() == "or"

    found: set[int] = set()
    for k in range(len(items)):
        toks: tuple[str, ...] = ()
        for m in range(k, min(k + 3, len(items))):
            if not title_line(m):
                break
            toks += tuple(_tokens(items[m].text))
            if m > k and toks in forms:
                end = m + 2 if or_line(m + 1) and title_line(m + 2) else m  # "OR" / "CONTEMPORARY PORTRAITS."
                found.update(range(k, end + 1))
                break
    return found


def _first_part(it: _Item) -> bool:
    """The heading of a chapter's first numbered part ("I", "1. HOW THEY WENT ...", a play's "SCENE I"): a title
    line right above it heads the chapter."""
    return it.kind == "heading" and it.style in ("roman", "numtitle", "listedroman", "scene") and it.num == 1


def _renamed_entry(line: str, named: set[tuple[str, ...]]) -> bool:
    """A numbered line ("10.  The Guardian of the Gate") that has all but one of the words of a
    contents entry of about its length ("The Guardian of the Gates", "The Wonderful City of Oz" for "The
    Emerald City of Oz"): the same chapter, its title printed a little differently at its head."""
    if not _LEADING_NUMBER_RE.match(line):
        return False
    toks = _tokens(_strip_number(line))
    if len(toks) < 3:
        return False
    return any(abs(len(e) - len(toks)) <= 1 and len(set(toks) & set(e)) >= len(set(e)) - 1 >= 3 for e in named)


_PART_LINE_RE = re.compile(r"^([IVXLCDM]+|\d{1,3})\.\s*(?:--|\u2014|\u2013)\s*\S")
"""A numbered part's line with its title after a dash: "III.\u2014ON FALLING IN LOVE"."""
_ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
_ORDINAL_LINE_RE = re.compile(rf"^({'|'.join(_ORDINALS)})\s+\w+\.?$", re.I)


def _entry_of(line: str, label: str) -> bool:
    """The line heads a numbered entry of the section ``label`` names: the label's words, then a number
    ("GLOSSARY 12. WEED ASHES." under "GLOSSARY")."""
    words = _tokens(label)
    got = _tokens(line)
    return 1 <= len(words) <= 3 and got[:len(words)] == words and len(got) > len(words) \
        and got[len(words)].isdigit()


def _promote_caps(items: list[_Item], title: str, author: str | None = None, listed: bool = False) -> list[_Item]:
    """Title-only headings: short lines in capitals set apart by two or more blank lines ("STORY OF
    THE DOOR", "HANS IN LUCK") are chapter headings when there are three or more of them, each
    followed by text (or by the numbered heading of its first part), and the book has no numbered
    chapter headings, or far fewer (a third) than such lines: then the numbered titles that start at
    1 again under one of them are its sections ("1. HOW THEY WENT TO THE MOUNTAINS"), as are lines
    "FIRST STORY", "SECOND STORY" when the first comes right under a chapter's line. Once six or
    more such lines set the pattern, a line in capitals after a single blank line that stands
    between two paragraphs of prose is one too. The book's own title line is not one, nor is its author's
    name on the title page ("SHERWOOD ANDERSON" over "Winesburg, Ohio"), nor a name the title page credits
    ("With a Preface by RICHARD LE GALLIENNE.": the preface's signature), nor the line that closes the text
    ("THE END", "F  I  N  I  S.": what follows it is no chapter, see ``jobs.ingest.matter``). Where five or more of them are
    single letters (a dictionary's "A" ... "Z", see ``jobs.ingest.text._letter_headings``), only the
    letters are from the first letter on ("AUTHOR'S PREFACE" before it still is): the other lines in
    capitals set apart among the letters are an entry's word or a verse's title. Where the book's contents
    list names a heading for every one of its entries (``listed``, :func:`_all_listed`), it is the table of
    the chapters and no line it leaves out after its first entry's heading is one: lines in capitals set
    apart inside the chapters are a picture's placeholder ("GRAPHIC"), a decoded cipher ("AM HERE ABE
    SLANEY."), a signature or a headline quoted in the text ("MURDER IN WESTMINSTER"); one before the
    first entry's heading (a preface the list leaves out) may still be one."""
    numbered = NUMBERED_CHAPTER_STYLES | PART_STYLES | {"roman", "number", "listedroman"}  # "number": "216." alone
    title_t = tuple(_tokens(title))
    author_t = tuple(_tokens(author or ""))
    # the title line may print only the main title: "LEGEND LAND" for "Legend Land, Vol. 1"
    title_forms = {title_t, tuple(_tokens(title.split(", ")[0]))} if title_t else set()

    # a bare "Part 1." right under a line in capitals ("THE FOLLY OF SLANDER." / "Part 1.", later "Part 2."): the
    # line's label, one title with it, as the contents prints it ("The Folly of Slander. Part 1.")
    labels = {k + 1 for k in range(len(items) - 1) if items[k].kind == "para" and items[k].caps
              and items[k + 1].kind == "heading" and items[k + 1].style == "part" and _BARE_PART_RE.match(items[k + 1].text)
              and k + 2 < len(items) and items[k + 2].kind == "para"}

    def followed(k: int) -> bool:
        if k + 1 >= len(items):
            return False
        nxt = items[k + 1]
        return nxt.kind == "para" or _first_part(nxt) or k + 1 in labels

    # the names the title page credits ("With a Preface by RICHARD LE GALLIENNE."): a line of one is a signature
    first_head = next((k for k, it in enumerate(items) if it.kind == "heading"), len(items))
    credited = {tuple(_tokens(m.group(1))) for it in items[:first_head] if it.kind == "para"
                and len(it.text.split()) <= 30 for m in [re.search(r"\bby\s+([^.,;:]+)\W*$", it.text, re.I)] if m}

    # a title page's line that starts the title, before any prose: "THE BEGGAR'S OPERA" over its subtitle
    # "to which is prefixed the Musick to each Song" ("THE CALL OF THE WILD" of "... and Other Stories" may
    # be a story's heading)
    def title_start(k: int, t: tuple[str, ...]) -> bool:
        return (2 <= len(t) < len(title_t) and title_t[:len(t)] == t and title_t[len(t)] not in ("and", "with", "or")
                and not any(it.kind == "para" and _is_prose(it.text) for it in items[:k]))

    # a play's cast list from its label ("DRAMATIS PERSONAE.") to the next prose or heading: "MEN.", "WOMEN."
    cast: set[int] = set()
    for k, it in enumerate(items):
        if it.kind == "para" and _CAST_LABEL_RE.match(it.text):
            j = k + 1
            while j < len(items) and items[j].kind != "heading" and not (items[j].kind == "para" and _is_prose(items[j].text)):
                cast.add(j)
                j += 1

    # the title printed over two lines in capitals ("THE" / "LIBERTY MINSTREL."), on the title page or as a
    # half-title: neither line is a heading
    split_title: set[int] = set()
    for k in range(len(items) - 1):
        a, b = items[k], items[k + 1]
        if a.kind == b.kind == "para" and a.caps and b.caps and b.apart <= 1 \
                and tuple(_tokens(a.text)) + tuple(_tokens(b.text)) in title_forms:
            split_title.update((k, k + 1))

    split_title |= title_in_lines(items, title)
    # a series' or archive's name over the title line ("ALBERT EINSTEIN REFERENCE ARCHIVE" / "RELATIVITY: ...")
    split_title |= {k for k in range(len(items) - 1) if items[k + 1].kind == "para" and items[k + 1].apart <= 1
                    and items[k + 1].caps and title_t and tuple(_tokens(items[k + 1].text))[:len(title_t)] == title_t}

    def cand(k: int, it: _Item, apart: int) -> bool:
        return (it.kind == "para" and it.caps and it.apart >= apart and followed(k) and k not in cast
                and k not in split_title and not _author_named(tuple(_tokens(it.text)), author_t)
                and not title_start(k, tuple(_tokens(it.text))) and not _ILLUSTRATIONS_LABEL_RE.match(it.text)
                and tuple(_tokens(it.text)) not in title_forms | {author_t} and tuple(_tokens(it.text)) not in credited
                and not _BY_RE.match(it.text) and not _the_end(it.text)
                and not _NOTES_LABEL_RE.match(it.text) and not _CAST_LABEL_RE.match(it.text)
                and not _bylined(items, k)
                and not (_PUBLISHER_RE.search(it.text) and len(it.text.split()) <= 8))  # "MEREDITH PRESS / NEW YORK"

    # where the contents names every chapter, the lines from its first entry's heading on are text
    limit = next((k for k, it in enumerate(items) if it.kind == "heading" and it.style == "contents"),
                 len(items)) if listed else len(items)
    cands = [k for k, it in enumerate(items) if k < limit and cand(k, it, 2)]
    # a line naming the notes of the title above it ("NOTES TO HANS PFAAL") is no chapter: its notes stay
    # with that chapter, as under a "FOOTNOTES." label; nor is an entry headed by the name of the line
    # above it and its number ("GLOSSARY 1. MONDAY MORNING--" ... under "GLOSSARY"): entries of that section
    above, notes = "", set()
    for k, it in enumerate(items):
        if k in cands and above and (_notes_of(it.text, above) or _entry_of(it.text, above)):
            notes.add(k)
        elif k in cands or it.kind == "heading":
            above = it.text
    cands = [k for k in cands if k not in notes]
    # lines of the same kind that the contents list has already made headings count for the pattern: a
    # line its list misprints ("The Little Boy Pound" for THE LITTLE BOY FOUND) is found by its likeness
    named = sum(1 for it in items if it.kind == "heading" and it.style == "contents" and it.caps and it.apart >= 2)
    # bare numerals that start at I right under such a line, or under a named heading ("INTRODUCTION" / "I" ...
    # "IV"), and run on are its parts, not chapters
    parts: set[int] = set()
    for k in sorted(set(cands) | {k for k, it in enumerate(items) if it.kind == "heading" and it.style == "named"}):
        expect, j = 1, k + 1
        while j < len(items) and not (j != k + 1 and j in cands):
            it = items[j]
            if it.kind == "heading" and it.style == "roman" and it.num == expect:
                parts.add(j)
                expect += 1
            elif it.kind == "heading":
                break
            j += 1
    n_numbered = sum(1 for k, it in enumerate(items)
                     if it.kind == "heading" and it.style in numbered and k not in parts
                     and not (k in labels and k - 1 in cands))
    # the title page's own title line in capitals set apart shows the same typography: it counts for the pattern
    # (never a heading itself)
    shown = bool(title_t) and any(it.kind == "para" and it.caps and it.apart >= 2 and tuple(_tokens(it.text)) in title_forms
                                  for it in items[:limit])
    if not cands or len(cands) + named + shown < 3 or n_numbered * 3 > len(cands) + named:
        # after a play's last act the play's own title may head the editor's notes: any line in capitals set apart
        return _back_pieces(_front_pieces(items, [k for k, it in enumerate(items) if cand(k, it, 1)]),
                            [k for k, it in enumerate(items) if it.kind == "para" and it.caps and it.apart >= 3
                             and followed(k) and not _the_end(it.text) and not _BY_RE.match(it.text)
                             and not _CAST_LABEL_RE.match(it.text)])
    letters = [k for k in cands if re.fullmatch(r"[A-Z]\.?", items[k].text)]
    if len(letters) >= 5:  # a dictionary's sections "A" ... "Z": its other lines in capitals are entries, verses
        cands = [k for k in cands if k < letters[0] or k in letters]
    elif len(cands) + named >= 6:  # the pattern is set: the same lines after one blank line, between prose
        cands = sorted(set(cands) | {k for k, it in enumerate(items)
                                     if k < limit and cand(k, it, 1) and k and items[k - 1].kind == "para"
                                     and _is_prose(items[k - 1].text) and _is_prose(items[k + 1].text)})
        cands = sorted(set(cands) | set(_mixed_case_titles(items, cands, limit, title_forms | {author_t})))
    out = list(items)
    for k in cands:
        label = f" {items[k + 1].text}" if k + 1 in labels else ""
        out[k] = _Item("heading", title_case(items[k].text) + label if label else items[k].text, style="caps",
                       apart=items[k].apart)
    labelled = {k + 1 for k in cands if k + 1 in labels}
    out = [it for k, it in enumerate(out) if k not in labelled]
    # a chapter told in parts headed by ordinals ("THE WEDDING OF MRS FOX", then "FIRST STORY" at once,
    # later "SECOND STORY"): the ordinal lines are its sections
    prev_caps, expect = None, 0
    for k, it in enumerate(out):
        if it.kind != "heading" or it.style != "caps":
            continue
        m = _ORDINAL_LINE_RE.match(it.text)
        if m and _ORDINALS.index(m.group(1).lower()) == expect and (expect or prev_caps == k - 1):
            out[k] = _Item("heading", it.text, style="numpart", num=expect + 1)
            expect += 1
        else:
            expect = 0
        prev_caps = k
    expect = 0  # lines in capitals that go on numbering a chapter's bare-numeral parts: "III.--ON FALLING IN LOVE"
    for k, it in enumerate(out):
        if it.kind != "heading":
            continue
        m = _PART_LINE_RE.match(it.text) if it.style == "caps" else None
        if it.style == "roman" and it.num == expect + 1:
            expect += 1
        elif m and expect and _number_value(m.group(1)) == expect + 1:
            out[k] = _Item("heading", it.text, style="numpart", num=expect + 1)
            expect += 1
        else:
            expect = 0
    if n_numbered:
        under = False  # inside a caps chapter whose numbered titles restart at 1: its parts
        for k, it in enumerate(out):
            if it.kind != "heading":
                continue
            if it.style == "caps":
                under = True
                expect = 1
            elif under and it.style == "numtitle" and it.num == expect:
                out[k] = _Item("heading", it.text, style="numpart", num=it.num)
                expect += 1
            else:
                under = False
    return out


def _mixed_case_titles(items: list[_Item], cands: list[int], limit: int, names: set[tuple[str, ...]]) -> list[int]:
    """Titles printed in mixed case among titles in capitals, set apart exactly as they are: where four in five of
    the lines in capitals (``cands``) stand after the same number of blank lines, three or more, a short line in
    mixed case after as many blank lines ("The Slave Boy's Wish.", "How long! O! how long!" among "GONE, SOLD AND
    GONE.", ... in a songbook) is a title too (eight words at most, not the book's title or author's name, not a
    credit "by ...", followed by text); one before the first line in capitals is the title page's."""
    gaps = Counter(items[k].apart for k in cands)
    apart, n = gaps.most_common(1)[0]
    if apart < 3 or n * 5 < len(cands) * 4:
        return []
    return [k for k in range(cands[0] + 1, min(limit, len(items) - 1))
            if items[k].kind == "para" and not items[k].caps and items[k].apart == apart
            and len(items[k].text.split()) <= 8 and items[k].text[:1].isupper()
            and items[k + 1].kind == "para" and items[k - 1].kind == "para"
            and tuple(_tokens(items[k].text)) not in names and not _BY_RE.match(items[k].text)
            and not _the_end(items[k].text)]


def _front_pieces(items: list[_Item], cands: list[int]) -> list[_Item]:
    """A book cut at numbered acts or chapters with pieces before the first that are headed by lines in
    capitals ("CLAUD LOVAT FRASER", a memoir of the designer; "NOTE ON THE SCENE AND COSTUMES ...", before
    "ACT I. SCENE I."): such a line is a chapter heading when three paragraphs of prose or more (150 words or
    more) follow it before the next such line or heading (``cands``: the lines in capitals after one blank line
    or more). Lines in capitals among the chapters are not."""
    first = next((k for k, it in enumerate(items) if it.kind == "heading" and it.style in RANKED_CHAPTER_STYLES
                  and it.num == 1), None)
    if first is None:
        return items
    out, marked = list(items), set(cands)
    for k in (c for c in cands if c < first):
        end = next((j for j in range(k + 1, first) if j in marked or items[j].kind == "heading"), first)
        prose = [it.text for it in items[k + 1:end] if it.kind == "para" and _is_prose(it.text)]
        if len(prose) >= 3 and sum(len(t.split()) for t in prose) >= 150:
            out[k] = _Item("heading", items[k].text, style="caps")
    return out


def _back_pieces(items: list[_Item], cands: list[int]) -> list[_Item]:
    """A play cut at its numbered acts with pieces after the last that are headed by lines in capitals set apart
    by three blank lines or more (an editor's apparatus headed "PHILASTER." after the fifth act's exit): such a
    line is a chapter heading when three paragraphs of prose or more (150 words or more) follow it before the
    next such line or heading (``cands``), fewer than three of them with a price (more: the publisher's list of
    other books). Lines in capitals inside the acts are not."""
    acts = [k for k, it in enumerate(items) if it.kind == "heading" and it.style == "act"]
    if len(acts) < 2:
        return items
    out, marked = list(items), set(cands)
    for k in (c for c in cands if c > acts[-1]):
        end = next((j for j in range(k + 1, len(items)) if j in marked or items[j].kind == "heading"), len(items))
        prose = [it.text for it in items[k + 1:end] if it.kind == "para" and _is_prose(it.text)]
        if len(prose) >= 3 and sum(len(t.split()) for t in prose) >= 150 \
                and sum(1 for it in items[k + 1:end] if _PRICE_RE.search(it.text)) < 3:  # a publisher's list
            out[k] = _Item("heading", items[k].text, style="backpiece")
    return out


_TITLE_WORD_RE = re.compile(r"^[\"'\u2018\u201c(]?[A-Z]")
_MONTH_WORD_RE = re.compile(r"\b(?:January|February|March|April|May|June|July|August|September|October|November"
                            r"|December|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b", re.I)


def _titled_line(text: str) -> bool:
    """A short line as a title is printed: two to seven words, each capitalised but the small ones, and no
    stop, comma or colon at its end ("After the Fall", "At Eve's Grave", "EXTRACT FROM ADAM'S DIARY")."""
    words = text.split()
    if not 2 <= len(words) <= 7 or text.rstrip()[-1:] in ".,;:!?-\u2014" or not _TITLE_WORD_RE.match(words[0]) \
            or any(c.isdigit() for c in text) or _MONTH_WORD_RE.search(text):
        return False  # a letter's date line ("25th August", "Christmas Eve, December") is no title
    return all(_TITLE_WORD_RE.match(w) or w.lower() in _SMALL for w in words[1:])


def _promote_set_apart(items: list[_Item], title: str, author: str | None) -> list[_Item]:
    """A book with no heading found at all, whose text is parted by short title lines set apart (two blank lines
    or more before, prose right after), in mixed case or capitals ("Translated from the Original", "EXTRACT
    FROM ADAM'S DIARY", "After the Fall", "Forty Years Later", "At Eve's Grave"): three such lines or more
    are its chapter headings. The book's title, its author and a "by ..." line are not."""
    if any(it.kind == "heading" for it in items):
        return items
    title_t, author_t = tuple(_tokens(title)), tuple(_tokens(author or ""))
    cands = [k for k, it in enumerate(items)
             if it.kind == "para" and it.apart >= 2 and _titled_line(it.text) and k + 1 < len(items)
             and items[k + 1].kind == "para" and _is_prose(items[k + 1].text)
             and tuple(_tokens(it.text)) not in (title_t, author_t) and not re.search(r"\bby\b", it.text, re.I)]
    if len(cands) < 3:
        return items
    out = list(items)
    for k in cands:
        out[k] = _Item("heading", items[k].text, style="caps", caps=items[k].caps, apart=items[k].apart)
    return out


def _source_line(it: _Item) -> bool:
    """A quotation's source on a line of its own, in capitals and ending with a full stop ("SOPHOCLES.",
    "PILGRIM'S PROGRESS.", "W. P. BANNATYNE."), six words at most."""
    return it.kind in ("para", "heading") and it.style in ("", "caps") and _shouted(it.text) \
        and len(it.text.split()) <= 6 and it.text.endswith(".")


def _epigraph_end(items: list[_Item], k: int) -> int | None:
    """Where an epigraph that starts at ``k`` ends: one or two quotations (paragraphs not in capitals, 80
    words at most), each followed by its source line (:func:`_source_line`); None when none starts there."""
    j, n = k, 0
    while j + 1 < len(items) and items[j].kind == "para" and not _shouted(items[j].text) \
            and len(items[j].text.split()) <= 80 and _source_line(items[j + 1]):
        j += 2
        n += 1
    return j if 1 <= n <= 2 else None


def _epigraph_sources(items: list[_Item]) -> list[_Item]:
    """A quotation's source line in capitals (:func:`_source_line`, no numeral, three words at most unless the
    quotation opens with a quotation mark: "MOTHER BOMBIE.", "GARRICK.") right under a
    quotation that stands under a heading (and its subtitle in capitals: "THE BOAR'S HEAD TAVERN, EASTCHEAP." /
    "A SHAKESPEARIAN RESEARCH." / "\"A tavern is the rendezvous ...\""), is the epigraph's, not a heading; unless
    there are more than three such lines and they are a fifth of the headings in capitals or more (a play's
    speakers over their speeches)."""
    found = []
    for k in range(2, len(items)):
        it, quote = items[k], items[k - 1]
        if not (it.kind == "heading" and it.style == "caps" and _source_line(it) and quote.kind == "para"
                and not any(_NUMERAL_TOKEN_RE.match(t) for t in _tokens(it.text))  # "CHAP. III." heads
                and (quote.text.lstrip()[:1] in "\"\u201c'\u2018" or len(it.text.split()) <= 3)
                and not _shouted(quote.text) and len(quote.text.split()) <= 80):
            continue
        over = items[k - 2]
        if over.kind == "heading" or k >= 3 and items[k - 3].kind == "heading" and over.kind == "para" \
                and _shouted(over.text) and len(over.text.split()) <= 10:
            found.append(k)
    caps = sum(1 for it in items if it.kind == "heading" and it.style == "caps")
    if len(found) > 3 and 5 * len(found) > caps:
        return items  # a play's speakers in capitals over their speeches, not epigraphs
    return [_Item("para", it.text, epigraph=True) if k in found else it for k, it in enumerate(items)]


def _epigraph_parts(items: list[_Item]) -> list[_Item]:
    """Parts headed in capitals over an epigraph: a line in capitals set apart (perhaps with a note in
    brackets after it: "UPPER GEVAUDAN (continued)") whose only text is an epigraph, one or two
    quotations each followed by its source in capitals ("SOPHOCLES.", "JOB."), with a chapter headed in
    capitals right after it, heads a part (style "capspart") when two or more such lines occur: the
    chapters after it, up to the next such line, are its chapters, and its epigraph is said at the start
    of its first chapter. The source lines are text of the epigraph, never headings."""
    found: list[tuple[int, int]] = []
    for k, it in enumerate(items):
        if found and k < found[-1][1]:
            continue  # a source line inside the epigraph just found
        bare = _BRACKETED_TAIL_RE.sub("", it.text)
        line = it.kind == "heading" and it.style == "caps" \
            or it.kind == "para" and it.apart >= 2 and (it.caps or bare != it.text and _shouted(bare))
        end = _epigraph_end(items, k + 1) if line else None
        if end is not None and end + 1 < len(items) and items[end].kind == "heading" \
                and items[end].style == "caps" and items[end + 1].kind == "para":
            found.append((k, end))
    if len(found) < 2:
        return items
    out = list(items)
    for k, end in found:
        out[k] = _Item("heading", items[k].text, style="capspart")
        for j in range(k + 1, end):
            out[j] = _Item("para", items[j].text, epigraph=True)
    return out


def _heading_runs(items: list[_Item]) -> list[_Item]:
    """Runs of headings with no text between them: a contents list written as headings (three or
    more, or after a "Contents" label) is dropped, its last line kept when it is the real start; two
    headings in a row stay apart: their levels decide how they are spoken (:func:`to_chapters`)."""
    last_seen: dict[tuple, int] = {}
    for n, it in enumerate(items):
        if it.kind == "heading":
            last_seen[tuple(_tokens(it.text))] = n
            if it.num is not None:  # "ACT III." in a list of scenes, "THIRD ACT" at the act itself
                last_seen[(it.style, it.num)] = n
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
        elif len(run) == 2 and _tokens(run[0].text) == _tokens(run[1].text):
            out.append(run[1])  # a heading printed twice (over an illustration and over the text)
        elif (len(run) >= 3 and not all(h.forced for h in run) and not _opening_trio(run)) or labels:
            if out and out[-1].kind == "para" and _CONTENTS_LABEL_RE.match(out[-1].text):
                out.pop()
            last = run[-1]
            if max(last_seen[tuple(_tokens(last.text))], last_seen.get((last.style, last.num), -1)) < e:
                out.append(last)
        else:  # two in a row ("BOOK ONE", "CHAPTER I."): the levels decide (see to_chapters)
            out.extend(run)
        k = e
    return out


def _opening_trio(run: list[_Item]) -> bool:
    """A part's heading, its title and its first chapter's heading in a row ("BOOK I" / "PROLOGUE" / "CHAPTER I"):
    three headings of three kinds, the first a part's, the last a numbered chapter's, no contents list."""
    return len(run) == 3 and run[0].style in PART_STYLES and run[2].style in NUMBERED_CHAPTER_STYLES \
        and run[2].num is not None and len({h.style for h in run}) == 3


# --------------------------------------------------------------------------- levels


def _in_sequence(nums: list[int | None]) -> list[bool]:
    """For numbered headings of one style in reading order: does each belong to a run (its number
    follows the one before, or the next one follows it, or it restarts at 1)?"""
    ok = []
    for n, v in enumerate(nums):
        prev = nums[n - 1] if n else None
        nxt = nums[n + 1] if n + 1 < len(nums) else None
        ok.append(v is None or (prev is not None and v == prev + 1) or (nxt is not None and nxt == v + 1)
                  or (v == 1 and nxt in (None, 2)))
    return ok


def _first_ranked_chapter(heads: list[tuple[int, _Item]]) -> int | None:
    """The position of the first heading of the book's numbered CHAPTER (STAVE, ACT) sequence, when it
    has one (two or more such headings, most of them numbered in sequence); None otherwise."""
    ranked = [(k, it) for k, it in heads if it.style in RANKED_CHAPTER_STYLES]
    if len(ranked) < 2 or 2 * sum(_in_sequence([it.num for _k, it in ranked])) < len(ranked):
        return None
    return ranked[0][0]


def _instalments(heads: list[tuple[int, _Item]]) -> list[int]:
    """A magazine's issue: where every numbered CHAPTER (STAVE, ACT, PART) heading is a first one ("CHAPTER I." of
    two serials, "PART I." of a series), two CHAPTER headings or more, under articles' titles in capitals (three or
    more, the first heading one of them), the titles are the chapters and these headings instalments inside them:
    their positions (:func:`_assign_levels`); none otherwise."""
    numbered = [(k, it) for k, it in heads if it.style in RANKED_CHAPTER_STYLES | PART_STYLES and it.style != "capspart"]
    chapters = sum(1 for _k, it in numbered if it.style in RANKED_CHAPTER_STYLES)
    if chapters >= 2 and all(it.num == 1 for _k, it in numbered) and heads[0][1].style == "caps" \
            and sum(1 for _k, it in heads if it.style == "caps") >= 3:
        return [k for k, _it in numbered]
    return []


def _assign_levels(items: list[_Item]) -> dict[int, str]:
    """The level of each heading item (by position): part, chapter or section; None-level headings
    (a numbered title out of sequence) are turned back into paragraphs by the caller."""
    heads = [(k, it) for k, it in enumerate(items) if it.kind == "heading"]
    levels: dict[int, str] = {}
    if any(it.forced for _k, it in heads):
        for k, it in heads:
            levels[k] = "chapter" if it.forced else ("part" if it.style in PART_STYLES else "section")
        return levels
    # numbered story titles ("I. A SCANDAL IN BOHEMIA") only in sequence
    numtitles = [(k, it) for k, it in heads if it.style == "numtitle"]
    for (k, _it), good in zip(numtitles, _in_sequence([it.num for _k, it in numtitles])):
        if not good:
            levels[k] = "para"
    # ACT headings quoted inside a book of CHAPTERs (an act-scheme set out as an example: "ACT I.--THE INCURABLE
    # OPTIMIST.--Dr. Stockmann announces his"), fewer than half the chapters and all after the first: text
    chapter_heads = [k for k, it in heads if it.style == "chapter"]
    act_heads = [k for k, it in heads if it.style == "act"]
    if len(chapter_heads) >= 5 and act_heads and 2 * len(act_heads) < len(chapter_heads) \
            and act_heads[0] > chapter_heads[0]:
        for k in act_heads:
            levels[k] = "para"
    heads = [(k, it) for k, it in heads if levels.get(k) != "para"]
    core = [k for k, it in heads if it.style in NUMBERED_CHAPTER_STYLES
            or it.style in ("contents", "caps", "", "listedroman")]
    romans_are_sections = False
    if core:
        # bare numerals that start again at one after each chapter heading are the chapters' parts; so are
        # numerals starting at two under a chapter whose text comes first (its part one, unheaded)
        restarts = 0
        seen_core = None
        for k, it in heads:
            if k in core:
                seen_core = k
                first_after = True
                continue
            if it.style == "roman" and seen_core is not None and first_after:
                restarts += it.num == 1 or it.num == 2 and any(
                    items[x].kind == "para" and _is_prose(items[x].text) for x in range(seen_core + 1, k))
                first_after = False
        # one run longer than the chapter headings is the book's own chapter sequence (a preface and
        # an introduction, then "I." to "XXIV."), not a story's parts
        romans = sum(1 for _k, it in heads if it.style == "roman")
        romans_are_sections = restarts >= 2 or restarts == 1 and romans <= len(core)
    # PART headings whose numbers start again at I under each heading of another kind ("SECTION IV.",
    # "PART I.", "PART II.", "SECTION V.", "PART I.") are the parts of what holds them: its sections
    restarts, under_other = 0, False
    for _k, it in heads:
        if it.style in PART_STYLES:
            restarts += under_other and it.num == 1
            under_other = False
        else:
            under_other = True
    inner_parts = {k for k, it in heads if it.style in PART_STYLES} if restarts >= 2 else set()
    has_parts = any(it.style in PART_STYLES and k not in inner_parts for k, it in heads)
    # numbered letters or entries ("216." alone on its line) are chapters too: a PART over them is a part
    has_chapters = bool(core) or any(it.style == "roman" and not romans_are_sections or it.style == "number"
                                     for _k, it in heads)
    instalments = _instalments(heads)
    first_ranked = None if instalments else _first_ranked_chapter(heads)
    # parts over numbered sections and nothing else ("PART I", "Section 1." ... "Section 12.", "PART II"):
    # the sections are the chapters and the parts stay parts, when there are two sections or more a part
    n_parts = sum(1 for k, it in heads if it.style in PART_STYLES and k not in inner_parts)
    n_sections = sum(1 for _k, it in heads if it.style in SECTION_STYLES and it.num is not None)
    parts_over_sections = not has_chapters and not core and n_parts and n_sections >= 2 * n_parts
    for k, it in heads:
        if first_ranked is not None and k > first_ranked and it.style in INNER_STYLES:
            levels[k] = "section"  # a journal heading or a letter inside a numbered chapter
        elif k in inner_parts:
            levels[k] = "section"
        elif it.style in PART_STYLES:
            levels[k] = "part" if has_chapters or parts_over_sections else "chapter"
        elif it.style in SECTION_STYLES:
            levels[k] = "section" if has_chapters or has_parts and core else "chapter"
        elif it.style == "roman":
            levels[k] = "section" if romans_are_sections else "chapter"
        else:
            levels[k] = "chapter"
    for k in instalments:
        levels[k] = "section"
    _inside_numbered_pieces(heads, levels)
    _lower_caps(heads, levels)
    _named_sections(heads, levels, core)
    _named_parts(heads, levels)
    _numbered_pieces(heads, levels)
    _postscripts(heads, levels)
    return levels


def _inside_numbered_pieces(heads: list[tuple[int, _Item]], levels: dict[int, str]) -> None:
    """Pieces numbered with their titles ("I. Stories Shorter Still" ... "XVII. Humour as I See It"), five or more
    in one run from one, hold what other chapter headings stand between the first and the last of them, fewer than they are: a
    parody's "CHAPTER I" ... "CHAPTER IV" or a mock story's title in capitals inside a sketch are its sections."""
    pieces = [k for k, it in heads if it.style == "numtitle" and levels.get(k) == "chapter"]
    nums = [it.num for k, it in heads if k in pieces]
    if len(pieces) < 5 or nums != list(range(1, len(pieces) + 1)):
        return  # one run, numbered on from one (series that start again at I have their own prefaces)
    inside = [k for k, it in heads if pieces[0] < k < pieces[-1] and levels.get(k) == "chapter" and it.style != "numtitle"]
    if len(inside) < len(pieces):
        for k in inside:
            levels[k] = "section"


_NUMBER_ONLY_RE = re.compile(r"^(?:(?:chapter|chap|section|sect|no|number)\.?\s+)?(?:[IVXLCDM]+|\d{1,4})\W*$", re.I)
"""A heading that is a number and nothing else: "CHAP. II.", "CHAPTER I.", "17", "XII."."""
PASSAGES_MIN = 100
"""Numbered passages: at least this many untitled numbered chapters, ..."""
PASSAGES_MIN_GROUPS = 3
"""... under at least this many parts ..."""
PASSAGE_MAX_MEDIAN_WORDS = 400
"""... whose median text is at most this many words (a novel's chapters run to thousands; sayings, fables,
recipes and sonnets to about a hundred each, a philosopher's aphorisms to a few hundred, and those with titles
or without parts are not passages)."""


def passages_short(words: list[int], groups: int) -> bool:
    """Whether numbered headings that hold ``words`` words each, under ``groups`` groups, are a book's numbered
    passages (:data:`PASSAGES_MIN`, :data:`PASSAGES_MIN_GROUPS`, :data:`PASSAGE_MAX_MEDIAN_WORDS`); the same test
    for text, Markdown and EPUB (``jobs.ingest.epub._numbered_passages``)."""
    return len(words) >= PASSAGES_MIN and groups >= PASSAGES_MIN_GROUPS \
        and sorted(words)[len(words) // 2] <= PASSAGE_MAX_MEDIAN_WORDS


def _numbered_passages(items: list[_Item], levels: dict[int, str]) -> None:
    """A book of numbered sayings or fragments ("BOOK I. HSIO R." over "CHAP. I." ... "CHAP. XVI.", each a few
    sentences long, 499 of them in twenty books): when the chapters are numbers alone (:data:`PASSAGES_MIN` of
    them or more, nine in ten untitled), short (a median of :data:`PASSAGE_MAX_MEDIAN_WORDS` words at most) and
    grouped in :data:`PASSAGES_MIN_GROUPS` parts or more, the parts are the book's chapters and the numbered
    passages their sections, each said under its number. Changes ``levels`` in place."""
    heads = sorted(k for k, lv in levels.items() if items[k].kind == "heading")
    parts = [k for k in heads if levels[k] == "part"]
    chapters = [k for k in heads if levels[k] == "chapter" and parts and k > parts[0]]
    if len(chapters) < PASSAGES_MIN or len(parts) < PASSAGES_MIN_GROUPS \
            or sum(1 for k in chapters if _NUMBER_ONLY_RE.match(items[k].text.strip())) < 0.9 * len(chapters):
        return
    ends = {k: nxt for k, nxt in zip(heads, heads[1:] + [len(items)])}
    words = [sum(len(items[x].text.split()) for x in range(k + 1, ends[k]) if items[x].kind == "para") for k in chapters]
    if not passages_short(words, len(parts)):
        return
    for k in chapters:
        levels[k] = "section"
    for k in parts:
        levels[k] = "chapter"


def _lower_caps(heads: list[tuple[int, _Item]], levels: dict[int, str]) -> None:
    """Titles in capitals in two tiers: where most chapter lines in capitals stand after three blank lines or
    more (an article's title: "VARIETIES.", "ANSWERS TO CORRESPONDENTS."), those after two blank lines that
    follow one of them ("SINGING SERVANTS.", "EDUCATIONAL.") are its sections, when they are the fewer and one
    of them at least stands right under such a title, with no text between ("ANSWERS TO CORRESPONDENTS." /
    "EDUCATIONAL."). (A line after one blank line that the pattern took, see :func:`_promote_caps`, is no
    lower tier.)"""
    caps = [(k, it) for k, it in heads if it.style == "caps" and levels.get(k) == "chapter"]
    upper = [k for k, it in caps if it.apart >= 3]
    if len(upper) < 3:
        return
    after = [(k, it) for k, it in caps if k > upper[0]]
    lower = [k for k, it in after if it.apart == 2]
    under = {b for (a, _ia), (b, _ib) in zip(caps, caps[1:]) if a in upper and b == a + 1}
    if lower and len(lower) < len(upper) and under & set(lower) and all(it.apart >= 2 for _k, it in after):
        for k in lower:
            levels[k] = "section"


_POSTSCRIPT_RE = re.compile(r"^postscript\W*$", re.I)


def _postscripts(heads: list[tuple[int, _Item]], levels: dict[int, str]) -> None:
    """A postscript headed as such ("POSTSCRIPT.") right after a numbered letter ("336." alone on its line,
    "LETTER IV") is that letter's: a section of it, not a chapter."""
    letter = False
    for k, it in heads:
        if levels.get(k) == "chapter" and _POSTSCRIPT_RE.match(it.text) and letter:
            levels[k] = "section"
        elif levels.get(k) in ("chapter", "part"):
            letter = it.style in ("number", "letter")


def _named_sections(heads: list[tuple[int, _Item]], levels: dict[int, str], core: list[int]) -> None:
    """Bare numerals that start at I right under a named heading (an editor's "INTRODUCTION." in parts
    "I.", "II.", "III.") are its sections when the book's chapters are headed otherwise, by keyword or
    title, and two or more of those follow the run ("CHAPTER I." ... "CHAPTER V." after it)."""
    for n, (_k, it) in enumerate(heads):
        if it.style != "named" or levels.get(_k) != "chapter":
            continue
        run = []
        for k2, it2 in heads[n + 1:]:
            if it2.style != "roman" or it2.num != len(run) + 1:
                break
            run.append(k2)
        if run and sum(1 for c in core if c > run[-1]) >= 2:
            for k2 in run:
                levels[k2] = "section"


def _named_parts(heads: list[tuple[int, _Item]], levels: dict[int, str]) -> None:
    """In a book whose parts hold its chapters ("PART VI" over "CHAPTER I" ...), a named heading after the
    last part ("EPILOGUE") directly over bare numerals from I that run to the end ("I", "II") is a part like
    the others, and its numerals are its chapters."""
    parts = [n for n, (k, it) in enumerate(heads) if levels.get(k) == "part" and it.style in PART_STYLES]
    if len(parts) < 2 or not any(levels.get(k) == "chapter" for k, _it in heads[parts[0] + 1:parts[1]]):
        return
    for n in range(parts[-1] + 1, len(heads) - 2):
        k, it = heads[n]
        run = heads[n + 1:]
        if it.style == "named" and all(r.style == "roman" and r.num == m + 1 for m, (_k, r) in enumerate(run)):
            levels[k] = "part"
            for k2, _r in run:
                levels[k2] = "chapter"
            return


_ARABIC_RE = re.compile(r"^(\d{1,3})\.\s")


def _numbered_pieces(heads: list[tuple[int, _Item]], levels: dict[int, str]) -> None:
    """Titles numbered 1., 2., 3. that start right under a chapter heading numbered otherwise (a
    roman numeral, a keyword, or none: "XLI" / "North-West Passage", then "1. Good-Night") are that
    chapter's pieces: sections, as long as their numbers run on."""
    n = 0
    while n < len(heads):
        k, it = heads[n]
        m = _ARABIC_RE.match(it.text)
        if m and m.group(1) == "1" and n and heads[n - 1][0] == k - 1 \
                and levels.get(heads[n - 1][0]) == "chapter" and not _ARABIC_RE.match(heads[n - 1][1].text):
            expect = 1
            while n < len(heads):
                mm = _ARABIC_RE.match(heads[n][1].text)
                if not mm or int(mm.group(1)) != expect:
                    break
                levels[heads[n][0]] = "section"
                expect += 1
                n += 1
            continue
        n += 1


# --------------------------------------------------------------------------- spoken headings


_SMALL = {"a", "an", "the", "and", "or", "nor", "but", "of", "in", "on", "at", "to", "by", "for", "with",
          "from", "as", "into", "upon"}
_ROMAN_TOKEN_RE = re.compile(r"^(?=[IVXLCDM])M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})[.:]?$")


def _shouted(s: str) -> bool:
    letters = [c for c in s if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def title_case(s: str) -> str:
    """A heading written in capitals, in title case ("THE RED-HEADED LEAGUE" -> "The Red-Headed
    League"); roman numerals stay as they are, so that ``jobs.normalize`` reads them as numbers.
    Text not in capitals is returned as it is."""
    if not _shouted(s):
        return s
    words = s.split()
    out = []
    for n, w in enumerate(words):
        if _ROMAN_TOKEN_RE.match(w) and (n == 0 or words[n - 1].rstrip(".").lower() in _KEYWORDS or len(w) > 1):
            out.append(w)
            continue
        if n and re.fullmatch(r"[A-Z][.:]?", w) and words[n - 1].rstrip(".").lower() in _LETTERED:
            out.append(w)  # "APPENDIX A": the appendix's letter, not the article
            continue
        low = w.lower()
        core = low.strip("\"'\u201c\u2018([_*.,:;!?")
        prev = words[n - 1] if n else ""
        if n and core in _SMALL and not prev.endswith((".", ":", "--", "\u2014", "\u2013")) \
                and not (n == 1 and prev.isdigit()):
            out.append(low)  # ("190 A FOUR-LEAVED CLOVER": the title after its number starts with a capital)
        else:
            out.append("\u2014".join("-".join(_cap(p) for p in part.split("-")) for part in low.split("\u2014")))
    return " ".join(out)


_KEYWORDS = {"chapter", "book", "part", "volume", "stave", "canto", "act", "scene", "letter", "adventure", "section",
             *UNIT_STYLES}
_LETTERED = {"appendix", "part", "section", "note", "plate", "schedule", "table"}
"""Words a letter after them numbers ("APPENDIX A", "PART A")."""


def _cap(w: str) -> str:
    for i, c in enumerate(w):
        if c.isalpha():
            return w[:i] + c.upper() + w[i + 1:]
    return w


_FOOTNOTE_MARK_RE = re.compile(r"\s?\[\d{1,3}\](?=[\s.,;:]|$)")


def spoken_heading(it: _Item, level: str) -> str:
    """What a listener hears for a heading: capitals in title case; a story's numbered title without
    its numeral ("I. A SCANDAL IN BOHEMIA" -> "A Scandal in Bohemia"); a bare numeral chapter as
    "Chapter IV." and a bare numeral section as "Part II." (numbers are read as words later); a
    footnote mark in it ("OF PROBABILITY[9].") is not said."""
    text = _FOOTNOTE_MARK_RE.sub("", it.text)
    if it.style == "capspart":  # "UPPER GEVAUDAN (continued)": the capitals de-shouted, the note as printed
        bare = _BRACKETED_TAIL_RE.sub("", text)
        return title_case(bare) + text[len(bare):]
    m = _PART_LINE_RE.match(text) if it.style == "numpart" else None
    if m:  # "III.\u2014ON FALLING IN LOVE", a part like the bare "II." before it: "Part III. On Falling in Love"
        return f"Part {m.group(1)}. " + title_case(text[m.end() - 1:])
    if it.style == "numtitle" and level == "chapter":
        text = _strip_number(text)
    elif it.style in ("roman", "listedroman"):
        numeral, _, rest = text.partition(" ")
        numeral = numeral if numeral.endswith(".") else numeral + "."
        text = f"{'Chapter' if level == 'chapter' else 'Part'} {numeral}" + (f" {title_case(rest)}" if rest else "")
    if it.style == "serial":  # "FEDERALIST No. 10": the series' name de-shouted, its number as printed
        name, _, rest = text.partition(" ")
        m = re.match(r"^(\d+\.)\s+(\S.*)$", rest) if name.casefold() == "no." else None
        if m:  # "No. 1. BOILED BEEF.": the entry's title de-shouted
            return f"No. {m.group(1)} {title_case(m.group(2))}"
        return f"{title_case(name) if _shouted(name) else name} {rest}"
    if it.style in _KEYWORDS and it.style != "forced":
        # "CHAPTER XIV." as printed, its title de-shouted, also after a dash ("LECTURE I--SESAME. OF ...")
        m = re.match(r"^(\S+\s+[\w'\u2019-]+?[.:]?)(?:(\s*(?:--|\u2014|\u2013)\s*|\s+)(\S.*))?$", text)
        if m and m.group(3) and not _ORDINAL_HEADING_RE.match(text) and not _shouted(m.group(3)):
            m = re.match(r"^(\S+\s+\S+?[.:]?)()(?:\s+(.*))?$", text)  # "SCENE II.--At" + "LADY SNEERWELL'S"
        if m and m.group(3) and not _ORDINAL_HEADING_RE.match(text):  # "THE FIRST BOOK" as printed too
            sep = m.group(2) if m.group(2).strip() else " "
            return m.group(1) + sep + title_case(m.group(3).strip())
        return text
    return title_case(text)


# --------------------------------------------------------------------------- front matter


_BY_RE = re.compile(r"^(?:by(?!\s+order\s+of\b)|written\s+by|illustrated\s+by"
                    r"|translated(?:\s+(?:into|from)\s+(?:the\s+)?[\w-]+(?:\s+text)?)?\s+by|(?:with\s+)?illustrations\s+by"
                    r"|(?:(?:translated|edited)(?:\s+and\s+\w+)?\s*,?\s+)?with\s+(?:an?d?\s+)?(?:introduction|preface"
                    r"|foreword|notes|memoir|essay|introductory\s+note)(?:\s+(?:in|on|of)\s+\w+)?"
                    r"(?:\s+and\s+(?:notes|an?\s+\w+))?\s+by"
                    r"|edited(?:\s+and\s+\w+)?\s+by)\s+\S", re.I)
"""A title page's credit line: "by ...", "Translated by ...", "Translated from the Sanskrit Text by Sir Edwin
Arnold", "With an Introduction by W. L. Courtney, LL.D.",
"WITH AN ESSAY IN CHARACTER by Sir Andrew Macphail" (also misprinted "WITH AND ESSAY"); "BY ORDER OF THE AUTHOR"
signs a notice and is no credit."""
_PUBLISHER_RE = re.compile(r"\b(?:publish|PUBLISH)(?:ing|ers?|ING|ERS?)\b|\w,\s+(?:Ltd|LTD)\."
                           r"|\b[A-Z][^\W\dA-Z_]+\s+Press\b(?!\s+(?:of|and)\b)|" + PRINTING_WORKS +
                           r"|\b(?:Co|CO)\.,?\s+(?:Ltd|Limited|Inc|LTD|LIMITED|INC)\b"
                           r"|\s(?:&|and|AND)\s+(?:Co|CO)\.(?:\W|$)|\s(?:&|and|AND)\s+(?:Company|COMPANY)\b(?!\s+of\b)|^\W*(?i:published\s+(?:in\s+[\w ,]{1,30}?\s+)?by)\s"
                           r"|^\W*(?:THE\s+)?[A-Z]{3,}(?:\s+[A-Z]{2,})?\s+PRESS\W*(?:[/,:]\s*[A-Z][A-Z .]{2,30})?$")
"""A publisher's line on the title page ("The Walter Scott Publishing Co., Ltd.", "Smith, Elder & Co.",
"SIMPKIN, MARSHALL, HAMILTON, KENT & CO. LIMITED", "BOSTON: OLIVER DITSON & CO., 277 WASHINGTON STREET.", "GINN AND
COMPANY", "Methuen & Company", "The Athen\u00e6um Press", "MEREDITH PRESS / NEW YORK",
"Published by DeLONG RICE & COMPANY. Nashville, Tenn.", "Published in 1922 by THE GREAT WESTERN RAILWAY",
"D. B. Updike \u00b7 The Merrymount Press \u00b7 Boston", "BOSTON: G. W. COTTRELL, PUBLISHER, 36 Cornhill.",
"Truslove, Hanson & Comba, Ltd.", the printers' "Butler & Tanner, The Selwood Printing Works, Frome, and London.")."""
_ADDRESS_RE = re.compile(r"\b\d{1,4},?\s+(?:[A-Z]+\s+){1,3}(?:(?:STREET|ROW|SQUARE|LANE|ROAD|PLACE|COURT|AVENUE|STRAND)\b"
                         r"|ST\.)")
"""A publisher's street address on a title page in capitals ("J. W. ARROWSMITH, 11 QUAY STREET", "120 NASSAU ST.")."""
_PRINTING_RE = re.compile(r"\b(?:printed|reprinted|edition|impression)\b.*\b(?:1[5-9]\d\d|M{1,2}[DCLXVI]{2,})\W*$", re.I)
"""A line of a book's printing history: a printing named, ending with its year, in figures or roman numerals
("First printed serially in the Commonweal, 1890.", "Kelmscott Press Edition, 1892.", "Since reprinted March 1895;
... and January 1908.", "LONDON PRINTED MDCLXXXVIII")."""
_PLACE_FIRM_RE = re.compile(r"^[A-Z]{3,}(?:[ -][A-Z]{3,})?:\s+[A-Z][A-Z.'\u2019]*(?:,?\s+[A-Z][A-Z.'\u2019]*){0,4}"
                            r"\s+(?:AND|&)\s+[A-Z][A-Z.'\u2019]+\.?$")
"""The title page's place and the publishers' names in capitals, joined by "and" ("AUBURN: DERBY AND MILLER.",
"BUFFALO: DERBY, ORTON AND MULLIGAN.")."""
_DEDICATION_RE = re.compile(r"^(?:to\s+\S|for\s+\S|dedicated\s+to\b|in\s+memory\s+of\b"
                            r"|this\s+(?:book|volume)\s+is\s+(?:(?:\w+ly\s+)?dedicated\s+)?(?:to|for)\s)", re.I)
"""A dedication's first words, as :data:`jobs.ingest.common._DEDICATION_LINE_RE` in any case ("TO ...", "This book
is for Hadley")."""
_NOTE_RE = re.compile(r"^\[?\s*(?:transcriber|transcriber\u2019s|transcriber's|produced\s+by"
                      r"|(?:this\s+)?e-?(?:text|book)\s+(?:was\s+)?(?:prepared|created|produced|made)\s+by"
                      r"|transcribed\s+(?:from|by)\b|scanned\s+(?:and\s+proofread\s+)?by\b"
                      r"|(?:(?:first|second|third|final)\s+)?proof(?:ed|read|s|ing)?\s+by\b"
                      r"|this\s+e-?(?:book|text)\s+is\s+for\s+the\s+use\s+of)", re.I)


_IMPRINT_RE = re.compile(r"\bcopyright\b|\u00a9|all\s+rights\s+reserved"
                         r"|^\[?\s*(?:[A-Z][\w .]{1,25}:\s*)?(?:(?:electrotyped|stereotyped)\s+and\s+)?(?:re)?printed,?"
                         r"(?:\s+the\s+[\w-]+\s+time,?)?\s+(?:in|by|for)\b"
                         r"|^\W*entered,?\s+according\s+to\s+(?:the\s+)?act\s+of\s+congress\b"
                         r"|^\W*" + STATIONERS_HALL +
                         r"|\bpublic\s+domain\b|\bedition\s+produced\b|\b(?:first|originally)\s+published\b"
                         r"|^\W*(?:extracted|reprinted|reproduced)\s+from\b|\breprint\s+of\s+the\s+(?:\w+\s+)?edition\b"
                         r"|^\W*this\s+(?:book\s+|volume\s+)?is\s+a\s+reprint\b"
                         r"|^\W*this\s+series\b[^.]{0,80}\b(?:is|are|was)\s+published\b"
                         r"|\bthe\s+text\s+(?:here\s+given\s+|of\s+this\s+edition\s+)?is\s+(?:taken|reprinted|printed)\s+from\b"
                         r"|^\W*(?:(?:an?\s+)?(?:(?:twenty|thirty|forty|fifty)[\s-])?(?:first|second|third|fourth|fifth|sixth"
                         r"|seventh|eighth|ninth|tenth|eleventh|twelfth|twentieth|new|revised"
                         r"|\d+(?:st|nd|rd|th))\W+(?:edition|impression|printing)\b)"
                         r"|\bclerk(?:'s|\u2019s)\s+office\s+of\s+the\b"
                         r"|\b(?:literary|dramatic|acting|performing|stage|translation)\s+(?:and\s+\w+\s+)?rights\b",
                         re.I)  # the last: a rights notice ("The literary and dramatic rights of ... belong to ...")
"""A publisher's or producer's line in the front matter: copyright (and the copyright entry "Entered according
to Act of Congress, in the year 1845 ...", its English counterpart "Entered in London at Stationers' Hall."), rights,
printer ("Printed for W. OSBORNE, ...", "REPRINTED, THE SIXTH TIME, BY A. MILLAR, ..."), edition notes,
the edition a text was taken from ("Reprinted from The Posthumous Edition of 1777", "Extracted from:",
"Being a _Facsimile_ Reprint of the First Edition published in 1653."),
edition and impression lines ("Second Edition, 1902", "SEVENTH IMPRESSION", "TWENTY SECOND EDITION.", "_First Edition_ _May_ 1888", "A new
edition, with several additions in the body of the work.", "This is a reprint in book form of ...")."""
_BEING_RE = re.compile(r"^\W*being\s+(?:a|an|the|some|his|her|their)\s", re.I)
"""A title page's subtitle that tells what the book is: "Being a collection of some of the OLD TALES told ...",
"Being the Memoirs of ..." (a line of the title page, not the first sentence of its text)."""

_ETEXT_PREFACE_RE = re.compile(r"^(?:preface|note|notes|introduction|foreword)\s+(?:to|on)\s+(?:the|this)\s+"
                               r"(?:project\s+gutenberg\s+)?(?:e-?text|e-?book|electronic\s+(?:edition|text|version))\b",
                               re.I)
"""The heading of a preface the e-text's maker wrote ("Preface to the Project Gutenberg Etext")."""




_ROMAN_YEAR_RE = re.compile(r"^M{1,2}(?:CM|CD|D?C{0,4})(?:XC|XL|L?X{0,4})(?:IX|IV|V?I{0,4})\.?$")
"""A year in roman numerals alone, an imprint's date ("MDCCLXXVI")."""


_PLACE_YEAR_RE = re.compile(r"^[A-Z][A-Z .]{2,20}:\s+\S.*\b1[5-9]\d\d\.?$")
"""The title page's place, publisher and year on one line: "LONDON: William Heinemann 1921"."""


def _imprint_line(t: str) -> bool:
    """A publisher's, printer's or producer's line of the title page (:data:`_IMPRINT_RE`, :data:`_PUBLISHER_RE`,
    :data:`_ADDRESS_RE`, :data:`_PRINTING_RE`, :data:`_PLACE_YEAR_RE`, :data:`_PLACE_FIRM_RE`; a list of the
    booksellers with two street addresses or more), or its date alone in roman numerals ("MDCCLXXVI")."""
    n = len(t.split())
    return bool(_IMPRINT_RE.search(t) and n <= 120 or _PUBLISHER_RE.search(t) and n <= 30
                or _ADDRESS_RE.search(t) and n <= 12 or len(_ADDRESS_RE.findall(t)) >= 2 and n <= 60
                or _PRINTING_RE.search(t) and n <= 25
                or n <= 10 and (_PLACE_YEAR_RE.match(t) or _PLACE_FIRM_RE.match(t))
                or len(t.strip(" .")) >= 4 and _ROMAN_YEAR_RE.match(t.strip()))


RUN_ON_WORDS = 12
"""The longest line taken as the rest of a publisher's line broken over lines (:func:`_run_on_lines`)."""


def _run_on_lines(paras: list[str], drop: list[bool]) -> list[bool]:
    """``drop`` widened to the lines that carry on a dropped publisher's or rights line set out over several
    ("All rights reserved. No part of this book" / "may be reproduced in any form without the" / "permission of
    Charles Scribner's Sons."): each short line (:data:`RUN_ON_WORDS` words at most) that starts in lower case
    right after a dropped line that ends without a stop."""
    out = list(drop)
    for i in range(1, len(paras)):
        if out[i - 1] and not out[i] and not re.search(r"[.!?:;][\"'\u201d\u2019)\]]*$", paras[i - 1].rstrip()) \
                and re.match(r"^[^\w]*[a-z]", paras[i]) and len(paras[i].split()) <= RUN_ON_WORDS:
            out[i] = True
    return out


_NOTICE_LABEL_RE = re.compile(r"^(?:(?:the\s+)?author(?:'s|\u2019s)\s+)?(?:notice|explanatory|advertisement)\W*$", re.I)
"""The label of an author's short note before the chapters, alone on its line: "NOTICE", "EXPLANATORY",
"ADVERTISEMENT", "Author's Notice"."""


def _without_transcriber_pages(front: list[_Item]) -> list[_Item]:
    """The front matter without a transcriber's note set out as a page of its own: its label ("TRANSCRIBER'S
    NOTES", "PREPARER'S NOTE", set apart) and everything under it up to the next block set apart by three blank
    lines or more, the next page (sixty paragraphs at most: a note on how italics, brackets, notes and music are
    written in the e-text, with its examples)."""
    out: list[_Item] = []
    k = 0
    while k < len(front):
        it = front[k]
        if it.kind == "para" and it.apart >= 2 and len(it.text.split()) <= 6 and _NOTE_LABEL_RE.match(it.text):
            e = k + 1
            while e < len(front) and e - k <= 60 and front[e].apart < 3 and front[e].kind != "heading":
                e += 1
            if e < len(front) and e - k <= 60:
                k = e
                continue
        out.append(it)
        k += 1
    return out


def _quoted_caps(t: str) -> bool:
    """A title in capitals in quotes, as a title page lists the pieces a book holds ('"THE PARADISE OF
    FOOLS",'): a title-page line, not a quotation opening the text."""
    return _shouted(t) and len(t.split()) <= 10


def _without_title_lines(paras: list[_Item], title: str) -> list[_Item]:
    """The front without the title page's lines in capitals that spell a run of the book's title, two words or
    more ("FOR THE" / "WORKING CLASSES." of "A Plain Cookery Book for the Working Classes"), and without a line
    in any case that is a stretch of the title of three words or more ("To which is Prefixed the MUSICK to each
    SONG." of "The Beggar's Opera to which is prefixed the Musick to each Song"): the announcement says the
    title, and "FOR THE" alone is no dedication."""
    title_t = _tokens(title)

    def in_title(words: list[str]) -> bool:
        return any(title_t[i:i + len(words)] == words for i in range(len(title_t) - len(words) + 1))

    drop: set[int] = set()
    r = 0
    while r < len(paras):
        got: list[str] = []
        e = r  # the run r..e-1: short lines in capitals whose words, read on, are a stretch of the title
        while e < min(len(paras), r + 6) and _shouted(paras[e].text) and len(paras[e].text.split()) <= 8 \
                and in_title(got + _tokens(paras[e].text)):
            got += _tokens(paras[e].text)
            e += 1
        if len(got) >= 2:
            drop.update(range(r, e))
            r = e
        else:
            r += 1
    for n, it in enumerate(paras):  # a line that is a stretch of the title, in any case: "The BEGGAR'S OPERA."
        if len(it.text) <= 200 and len(it.text.split()) <= 12 and len(words := _tokens(it.text)) >= 3 and in_title(words):
            drop.add(n)
    return [it for n, it in enumerate(paras) if n not in drop]


def _front(front: list[_Item], title: str, author: str | None) -> list[_Item]:
    """Front matter worth reading: the title page (lines before the first prose, dedication or
    epigraph: the title, "by ...", edition lines), notes by transcribers and producers, imprint lines
    (copyright, "All rights reserved", "Printed in ...", an edition's production note, a publisher's
    street address, a printing history's lines "Reprinted April, June 1891; March 1892.", the date in roman
    numerals "MDCCLXXVI" and the place of publication in capitals over the printer's line), the title again with
    its byline under it ("Common Sense" / "By Thomas Paine": the announcement says both), a play's cast
    list from its label ("Dramatis Personae") on, and the contents label go; the rest stays when it holds prose, a dedication or an epigraph.
    The title page ends at a notice's label (:data:`_NOTICE_LABEL_RE`: "NOTICE") over prose: the label stays."""
    cast = next((n for n, it in enumerate(front) if it.kind == "para" and _CAST_LABEL_RE.match(it.text)), None)
    if cast is not None:
        front = front[:cast]  # a play's cast list and scenes up to its first act: the playbill
    front = [it for it in _without_etext_prefaces(front) if it.kind == "para"]
    imprint = [_imprint_line(it.text) for it in front]
    # the place of publication over the printer's line ("PHILADELPHIA" / "Printed and sold by W. & T. Bradford")
    place = {n for n, it in enumerate(front[:-1]) if imprint[n + 1] and len(it.text.split()) <= 2
             and (_caps_line(it.text) or re.fullmatch(r"[A-Z][A-Z .-]{2,24}:", it.text.strip()))}  # "NEW-YORK:"
    # and the year under the publishers' names ("NEW-YORK:" / "LEAVITT & ALDEN, 7 CORNHILL, ..." / "1844.")
    place |= {n for n, it in enumerate(front) if n and imprint[n - 1] and _YEAR_LINE_RE.match(it.text)}
    paras = [it for n, it in enumerate(front) if not _NOTE_RE.match(it.text) and not imprint[n] and n not in place]
    notes = _producer_notes([it.text for it in paras], front=True)
    paras = [it for n, it in enumerate(paras) if n not in notes]  # "Please see eBook #17405 for a version ..."
    paras = _without_title_lines(_without_other_books([it for it in paras if not _front_advert(it.text)]), title)
    start = 0
    while start < len(paras):
        t = paras[start].text
        # a credit line and the subtitle "Being a collection of ..." under the title are the title page's
        title_line = (_BY_RE.match(t) and len(t.split()) <= 20
                      or _BEING_RE.match(t) and len(t.split()) <= 40 and not t.rstrip().endswith((".", "!", "?")))
        if (_is_prose(t) or _DEDICATION_RE.match(t) or t.startswith(("\u201c", '"')) and not _quoted_caps(t)
                or t.strip(" .").casefold() in ("to", "for")) and not title_line:
            break
        if _NOTICE_LABEL_RE.match(t) and start + 1 < len(paras) and _is_prose(paras[start + 1].text):
            break  # "NOTICE" over the author's few sentences: the notice's title, not a title-page line
        start += 1
    kept = paras[start:]
    title_t, author_t = tuple(_tokens(title)), tuple(_tokens(author or ""))
    byline = title_t + ("by",) + author_t  # a half-title with its byline in one block: "Common Sense" / "By Thomas Paine"
    kept = [it for it in kept if tuple(_tokens(it.text)) not in (title_t, author_t, ("by",), byline)
            and not _BY_RE.match(it.text) and not _CONTENTS_LABEL_RE.match(it.text)
            and not _ILLUSTRATIONS_LABEL_RE.match(it.text)
            and not (_caps_line(it.text) and _author_named(tuple(_tokens(it.text)), author_t))]
    texts = [it.text for it in kept]
    if not kept or not (_has_prose(texts) or any(_DEDICATION_RE.match(t) for t in texts)
                        or len(texts) >= 2 and texts[0].strip(" .").casefold() in ("to", "for")):
        return []  # (a dedication set in lines: "TO" / "THE RIGHT HONOURABLE" / ... / "THE AUTHOR.")
    return kept


_MONEY_RE = re.compile(r"\b\d{1,2}s\.?(?:\s?\d{1,2}d\.?)?(?=[\s.,;)]|$)|\$\s?\d|\b\d+\s+cents\b", re.I)
_BOOK_TRADE_RE = re.compile(r"\b(?:cloth|paper(?:\s+cover)?|boards|edition|portrait|net|post(?:paid|age)|price|copies"
                            r"|bound|vols?\.|volumes?|4to|8vo|12mo|16mo)\b", re.I)


def _front_advert(t: str) -> bool:
    """A publisher's advertisement among the front pages: a short paragraph (40 words at most) with a price in
    money and the book trade's words ("This Play can be had in library form, 4to, cloth, with a portrait, 5s.",
    "THE PINERO BIRTHDAY BOOK ... cloth extra, price 2s 6d.")."""
    return len(t.split()) <= 40 and bool(_MONEY_RE.search(t)) and bool(_BOOK_TRADE_RE.search(t))


_YEAR_LINE_RE = re.compile(r"^\W*1[5-9]\d\d\W*$")
"""A year alone on its line ("1844.")."""


def _author_named(t: tuple[str, ...], author_t: tuple[str, ...]) -> bool:
    """Whether a line's words name the author as a title page or a signature shortens the name: "GEO. W.
    CLARK." or "G.W. CLARK." for George W. Clark (the surname, and initials or shortenings of the names
    before it)."""
    return len(author_t) >= 2 and 2 <= len(t) <= len(author_t) and t[-1] == author_t[-1] \
        and all(any(a.startswith(w) for a in author_t[:-1]) for w in t[:-1])


_OTHER_BOOKS_RE = re.compile(r"^[\W_]*(?:author\s+of|(?:also\s+)?by\s+the\s+same\s+(?:author|writer)|also\s+by"
                            r"|(?:other\s+)?(?:books|works)\s+by)\b", re.I)
"""The title page's label over the author's other books: "Author of", "By the same author", "Also by ..."."""


def _titles_list(text: str) -> bool:
    """A list of book titles run on with commas ("\u201cThe Shuttle,\u201d \u201cThe Making of a Marchioness,\u201d ...
    etc."): three or more pieces of eight words at most, the list's "etc." aside."""
    listed = re.sub(r"\betc\.?[\W_]*$", "", text.strip())
    pieces = [p for p in re.split(r"\s*[,;]\s*", listed) if p.strip(" ._\u201c\u201d\"'")]
    return len(pieces) >= 3 and all(len(p.split()) <= 8 for p in pieces)


_QUOTED_TITLES_RE = re.compile(r"(?:[\"\u201c][^\"\u201c\u201d]{1,60}[\"\u201d]\W*(?:,|\band\b|&)?\s*)+(?:etc\.?)?\W*")
"""Book titles in quotation marks, joined by commas or "and": '"Verses" and "Bits of Travel."'."""
_QUOTED_TITLE_LINE_RE = re.compile(r"[\"\u201c][^\"\u201c\u201d]{1,60}[\"\u201d]\W*(?:[\w-]+\s+(?:printing|edition|impression)\W*)?",
                                   re.I)
"""One of the author's other books in quotation marks on a line of its own, perhaps with its printing:
'"Journeys to Bagdad" _Sixth printing_.'."""


def _without_other_books(paras: list[_Item]) -> list[_Item]:
    """The author's other books on the title page go: an "Author of" label ("_Author of_" / "\u201cThe Shuttle,\u201d
    \u201cThe Making of a Marchioness,\u201d ... etc.") and the list of titles under it or run on after it, also one
    title and "etc." ("Author of The Danger Trail, Etc.", 'Author of "Little Women," etc.'), or titles in
    quotation marks ('Author of "Verses" and "Bits of Travel."'), also one to a line under "Other Books by the Same
    Author:" (:data:`_QUOTED_TITLE_LINE_RE`)."""
    out: list[_Item] = []
    n = 0
    while n < len(paras):
        t = paras[n].text
        m = _OTHER_BOOKS_RE.match(t)
        rest = t[m.end():].strip(" :_") if m else ""
        if m and not rest and n + 1 < len(paras) and _titles_list(paras[n + 1].text):
            n += 2
            continue
        if m and (not rest or re.fullmatch(r"the\s+same\s+(?:author|writer)", rest, re.I)) \
                and n + 1 < len(paras) and _QUOTED_TITLE_LINE_RE.fullmatch(paras[n + 1].text):
            n += 1  # the label over titles in quotation marks, one to a line, each perhaps with its printing
            while n < len(paras) and _QUOTED_TITLE_LINE_RE.fullmatch(paras[n].text):
                n += 1
            continue
        if m and rest and (_titles_list(rest) or len(rest.split()) <= 8 and not _is_prose(rest)
                           or len(rest.split()) <= 20 and (re.search(r"\betc\.?\W*$", rest, re.I)
                                                           or _QUOTED_TITLES_RE.fullmatch(rest))):
            n += 1
            continue
        out.append(paras[n])
        n += 1
    return out


def _without_etext_prefaces(front: list[_Item]) -> list[_Item]:
    """A preface the e-text's maker wrote ("Preface to the Project Gutenberg Etext") goes with what
    is under it, up to the next rule or scene break (or the end of the front matter)."""
    out: list[_Item] = []
    skipping = False
    for it in front:
        if it.kind == "para" and _ETEXT_PREFACE_RE.match(it.text):
            skipping = True
        elif it.kind != "para":
            skipping = False
        if not skipping:
            out.append(it)
    return out


# --------------------------------------------------------------------------- outline -> chapters


_PAGED_ENTRY_RE = re.compile(r"^(?P<title>\S.{0,90}?)(?:[ \t]*\.){0,40}[ \t]+(?P<page>\d{1,4})$")


def _paged(it: _Item) -> bool:
    m = _PAGED_ENTRY_RE.match(it.text) if it.kind == "para" else None
    return bool(m) and len(it.text.split()) <= 14 and not _is_prose(m.group("title"))


def _paged_runs(items: list[_Item]) -> list[_Item]:
    """A contents list or list of illustrations printed one entry per block: three or more short
    paragraphs in a row that end with a page number ("THE PRISON DOOR 49"; a short group label such
    as "THE SCARLET LETTER." may stand between two of them) become one contents-list item, labelled
    when a "Contents" label (and a "PAGE" column header) comes right before it. A list of
    illustrations is dropped with its label (and one credit line under it): it names no headings."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        if not _paged(items[k]):
            out.append(items[k])
            k += 1
            continue
        e, entries = k, []
        while e < len(items):
            if _paged(items[e]):
                entries.append(_PAGED_ENTRY_RE.match(items[e].text).group("title").rstrip(" ."))
                e += 1
            elif (items[e].kind == "para" and len(items[e].text.split()) <= 6 and e + 1 < len(items)
                  and _paged(items[e + 1]) and entries):
                e += 1  # a group label inside the list
            else:
                break
        if len(entries) < 3:
            out.extend(items[k:e])
            k = e
            continue
        j = len(out)
        while j and out[j - 1].kind == "para" and out[j - 1].text.strip(" .:").casefold() in ("page", "pages"):
            j -= 1
        back = [it.text for it in out[max(0, j - 2):j]]
        if back and _ILLUSTRATIONS_LABEL_RE.match(back[-1]):
            del out[j - 1:]
        elif len(back) == 2 and _ILLUSTRATIONS_LABEL_RE.match(back[0]) and len(back[1].split()) <= 30:
            del out[j - 2:]
        else:
            label = bool(j) and out[j - 1].kind == "para" and bool(_CONTENTS_LABEL_RE.match(out[j - 1].text))
            del out[j:]
            out.append(_Item("toc", " ".join(it.text for it in items[k:e]), entries=entries, label=label))
        k = e
    return out


def _labelled_title_lines(items: list[_Item]) -> list[_Item]:
    """A "Contents" label over plain titles printed one per block ("THE LADY WITH THE DOG", "A DOCTOR'S
    VISIT", ... with no numbers or pages): three or more short lines that are no prose, up to the line
    that says the first entry again (the first story's own heading) or a line with prose under it, are
    a contents list when the list ends at its first entry again or half of them come again later; they
    become one labelled contents-list item."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        it = items[k]
        out.append(it)
        k += 1
        if it.kind != "para" or not _CONTENTS_LABEL_RE.match(it.text):
            continue
        e, first, again = k, None, False
        while e < len(items):
            cur = items[e]
            if cur.kind != "para" or not _glossed_title(cur.text) and (len(cur.text.split()) > 14 or _is_prose(
                    cur.text)) or _LEADING_NUMBER_RE.match(cur.text) or _PAGED_ENTRY_RE.match(cur.text):
                break
            if first is not None and tuple(_tokens(cur.text)) == first:
                again = True
                break  # the list is over: its first entry again, as the heading of its chapter
            if e + 1 < len(items) and items[e + 1].kind == "para" and _is_prose(items[e + 1].text) \
                    and not _glossed_title(items[e + 1].text):
                break  # a heading with its text under it
            first = first or tuple(_tokens(cur.text))
            e += 1
        entries = [items[j].text for j in range(k, e)]
        later = {tuple(_tokens(x.text)) for x in items[e:] if x.kind in ("para", "heading") and len(x.text) <= 120}
        seen = sum(1 for t in entries if any(form in later for form in _entry_forms(t)))
        if len(entries) >= 3 and (again or 2 * seen >= len(entries)):
            out.append(_Item("toc", " ".join(entries), entries=entries, label=True))
            k = e
    return out


_PAGED_CAPTION_RE = re.compile(r"(?:\s\d{1,4}|\bfrontispiece|\btitle(?:-page)?)[\W_]*$", re.I)
"""A caption in a list of illustrations, ending with its page: "... exaggerated patience      8", "_Frontispiece_"."""


_NUMBERED_ENTRY_START_RE = re.compile(r"^(?:(?i:contents|table\s+of\s+contents)[.:]?\s+)?(\d{1,3})\.\s+\S")


_RUN_ON_ENTRY_RE = re.compile(r"(?:^|\s)(\d{1,3})\.\s+[A-Z\"'\u201c]")


_RUN_ON_ROMAN_RE = re.compile(r"(?:^|\s)([IVXLC]+)\.\s+[A-Z\"'\u201c]")


def _entry_run(text: str) -> bool:
    """A paragraph of three numbered contents entries or more run on, numbered up by one ("18. Special and General
    Principle of Relativity 19. The Gravitational Field 20. ...")."""
    nums = [int(n) for n in _RUN_ON_ENTRY_RE.findall(text)]
    return len(nums) >= 3 and all(b == a + 1 for a, b in zip(nums, nums[1:])) and len(text.split()) <= 12 * len(nums)


def _roman_list(text: str) -> bool:
    """A paragraph that lists titles numbered in roman from I, five or more, perhaps under a label in capitals
    ("TITLES I. Of Justice and Law II. Of the law of nature, the law of nations, and the civil law III. ...")."""
    m = re.match(r"^(?:[A-Z]{3,}\s+)?I\.\s", text)
    nums = [_numeral(n) for n in _RUN_ON_ROMAN_RE.findall(text)]
    return bool(m) and len(nums) >= 5 and nums == list(range(1, len(nums) + 1)) and len(text.split()) <= 14 * len(nums)


def _run_on_contents(items: list[_Item]) -> list[_Item]:
    """What a contents list leaves when its numbered entries run on in paragraphs under its part lines ("Part II: The
    General Theory of Relativity" / "18. Special and General Principle of Relativity 19. The Gravitational Field
    ..." / "Part III: ..." / "30. ..." / "Appendices:" / "01. ..."): two such paragraphs or more (:func:`_entry_run`),
    the part lines over them, short labels ending with a colon and a note on the list after them ("Note: The fifth
    Appendix was added ..."): dropped; the part lines are no headings. So is one paragraph right under a heading that
    lists titles numbered in roman (:func:`_roman_list`: "TITLES I. Of Justice and Law II. ..." under "BOOK I.")."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        j, runs = k, 0
        while j < len(items):
            t = items[j]
            if t.kind == "para" and _entry_run(t.text):
                runs += 1
            elif t.kind == "heading" and j + 1 < len(items) and items[j + 1].kind == "para" and _entry_run(items[j + 1].text):
                pass
            elif t.kind == "para" and runs and t.text.rstrip().endswith(":") and len(t.text.split()) <= 3:
                pass  # "Appendices:"
            elif t.kind == "para" and runs >= 2 and re.match(r"^note\s*:", t.text, re.I) and len(t.text.split()) <= 60:
                j += 1
                break
            else:
                break
            j += 1
        if runs >= 2:
            k = j
            continue
        if items[k].kind == "para" and k and items[k - 1].kind == "heading" and _roman_list(items[k].text):
            k += 1  # a list of titles in one paragraph under a book's heading
            continue
        out.append(items[k])
        k += 1
    return out


def _numbered_contents(items: list[_Item]) -> list[_Item]:
    """A contents list of numbered summaries under its label ("CONTENTS" / "1. The description of the family of
    Wakefield; in which ...", the label run into the first entry or not), five entries or more whose numbers run
    up from 1 (two run together in one paragraph skip one), 60 words at most each: dropped with its label. The
    chapters' headings ("CHAPTER 1" over the same summary) are found without it."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        it = items[k]
        labelled = it.kind == "para" and _CONTENTS_LABEL_RE.match(it.text)
        first = k + 1 if labelled else k
        m = _NUMBERED_ENTRY_START_RE.match(items[first].text) if first < len(items) and items[first].kind == "para" else None
        if m and int(m.group(1)) == 1 and (labelled or m.group(0)[:1].isalpha()):
            e, last = first, 0
            while e < len(items) and items[e].kind == "para" and len(items[e].text.split()) <= 60:
                n = _NUMBERED_ENTRY_START_RE.match(items[e].text)
                if n is None or not last < int(n.group(1)) <= last + 2:
                    break
                last = int(n.group(1))
                e += 1
            if e - first >= 5:
                k = e
                continue
        out.append(it)
        k += 1
    return out


def _caption_lists(items: list[_Item]) -> list[_Item]:
    """A list of illustrations printed without page numbers: an "ILLUSTRATIONS" ("List of
    Illustrations") label and three or more captions (thirty words at most, with the artist's name or not),
    one per block, up to the next heading or a caption's words again set apart by three blank lines or more (the
    first play's title, which the list named for its picture), is dropped with its label: it names no headings. So is
    one whose captions, of any length, each end with their page ("FACING PAGE" over the first)."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        it = items[k]
        if it.kind == "para" and _ILLUSTRATIONS_LABEL_RE.match(it.text):
            e = k + 1
            seen: set[tuple[str, ...]] = set()
            while e < len(items) and items[e].kind == "para" and len(items[e].text.split()) <= 30 \
                    and not (items[e].apart >= 3 and tuple(_tokens(items[e].text)) in seen):
                seen.add(tuple(_tokens(items[e].text)))
                e += 1  # (a caption's words again, set apart by three blank lines or more: the text's heading)
            if e - k - 1 >= 3 and (e == len(items) or items[e].kind != "para" or items[e].apart >= 3):
                k = e
                continue
            e = k + 1  # captions of any length, each ending with its page: "... patience      8", "_Frontispiece_"
            while e < len(items) and (items[e].kind == "toc" or items[e].kind == "para" and len(items[e].text.split()) <= 80
                                      and _PAGED_CAPTION_RE.search(items[e].text)):
                e += 1
            if e - k - 1 >= 3:
                k = e
                continue
        out.append(it)
        k += 1
    return out


def _listed_ahead(items: list[_Item]) -> list[_Item]:
    """A numbered CHAPTER, STAVE, ACT, LETTER or SERMON (:data:`UNIT_STYLES`) heading that comes again later (a
    play's list of scenes, "ACT I. The Octagon Room", before "FIRST ACT"; a contents list of letters, each with its
    summary) and has no prose under it, or a tenth of the words the later one has, is an entry of a list, not a
    start (unless a PART, BOOK or VOLUME heading comes between the two): it becomes a paragraph of the front matter (where a cast list's rules drop it). So does a PART (BOOK,
    VOLUME) heading with no prose under it that comes again later after one numbered lower (a note naming
    "Part II" before "PART I.")."""
    heads = [k for k, it in enumerate(items) if it.kind == "heading"]
    out = list(items)
    for n, k in enumerate(heads):
        it = items[k]
        if it.style in PART_STYLES and it.num is not None:
            # a note naming a later part ("Part II, The Country of the Saints, deals much with ...") before the
            # part numbered lower that starts the book's sequence, with no prose under it, is no heading
            later = [items[j] for j in heads[n + 1:] if items[j].style == it.style and items[j].num is not None]
            lower = next((m for m, h in enumerate(later) if h.num < it.num), None)
            if lower is not None and any(h.num == it.num for h in later[lower + 1:]) \
                    and not _has_prose(_body_words(items, heads, n)):
                out[k] = _Item("para", it.text)
            continue
        if it.style not in RANKED_CHAPTER_STYLES | UNIT_STYLES | {"letter"} or it.num is None:
            continue
        again = next((m for m in range(n + 1, len(heads))
                      if items[heads[m]].style == it.style and items[heads[m]].num == it.num), None)
        if again is None or any(items[j].style in PART_STYLES for j in heads[n + 1:again]):
            continue  # numbers that start again in the next part (BOOK II, CHAPTER I) are no list
        body = _body_words(items, heads, n)
        stop = next((heads[m] for m in range(again + 1, len(heads)) if items[heads[m]].style == it.style), len(items))
        later = [b.text for b in items[heads[again] + 1:stop] if b.kind == "para"]  # its sub-headings' text too
        if not _has_prose(body) or 10 * sum(len(b.split()) for b in body) < sum(len(b.split()) for b in later):
            out[k] = _Item("para", it.text)
    return out


def _dash_summary(text: str) -> bool:
    """A chapter's summary as a contents list prints it, phrases joined by dashes ("Purpose and scope of this
    book--Not written for professional musicians, ...--..."): a dash for every twelve words, three at least."""
    dashes = text.count("--") + text.count("\u2014")
    return dashes >= max(3, len(text.split()) // 12)


def _contents_of_titles(items: list[_Item]) -> list[_Item]:
    """A "Contents" label over the book's headings printed again as plain lines before the next heading, each
    entry run together with what the book prints under its heading and a page number ("SERMON I." / "GOD'S
    WORLD." / "PSALM civ. 24. O Lord, how manifold ... 1"), or taken for headings with nothing under them
    ("LECTURE ON PLATINUM." / "NOTES."), or over entries already found to be a list
    (:func:`_listed_ahead`: "LETTER I" over the letter's summary): when the titles of three or more, and of at
    least three in five, of the numbered headings that follow (or, for a heading whose title the list does not
    print, its keyword and number: "CHAPTER II" for "CHAPTER II. 1847-1854") are found in order between the label and the next
    heading with a paragraph of 40 words or more under it, in paragraphs of 100 words at most (or longer summaries
    of phrases joined by dashes, :func:`_dash_summary`), that run is the contents list and is dropped with its
    label. With its label gone already, the run is the short lines and summaries right before the first such
    heading, six paragraphs or more (titles over their summaries, a list of plates, "INDEX Page 351")."""
    def listed(a: int, nxt: int) -> bool:
        span = tuple(t for x in items[a:nxt] for t in _tokens(x.text))
        titles = []
        for h in items[nxt:]:
            if h.kind != "heading" or h.num is None:
                continue
            toks = tuple(_tokens(h.text))
            after = _after_number(toks)
            # "LETTER I" with no title: its keyword and number; a title the list does not print ("CHAPTER II.
            # 1847-1854" listed as "CHAPTER II" over its summary): either
            titles.append((after, toks[:len(toks) - len(after)]) if after and len(after) < len(toks) else (toks,))
        found, at = 0, 0
        for forms in titles:
            hit = None
            for t in forms:
                hit = next((i + len(t) for i in range(at, len(span) - len(t) + 1) if span[i:i + len(t)] == t), None)
                if hit is not None:
                    break
            if hit is not None:
                found, at = found + 1, hit
        return found >= 3 and 5 * found >= 3 * len(titles)

    def text_under(k: int, heads: list[int]) -> bool:
        e = next((h for h in heads if h > k), len(items))
        return any(len(x.text.split()) >= 40 for x in items[k + 1:e] if x.kind == "para")

    heads = [k for k, it in enumerate(items) if it.kind == "heading"]
    for label, it in enumerate(items):
        if it.kind != "para" or not _CONTENTS_LABEL_RE.match(it.text.strip()):
            continue
        nxt = next((k for k in heads if k > label and text_under(k, heads)), None)
        if nxt is None or any(len(x.text.split()) > 100 and not _dash_summary(x.text) for x in items[label + 1:nxt]):
            continue
        if listed(label + 1, nxt):
            return items[:label] + items[nxt:]
    first = next((k for k in heads if items[k].num is not None and text_under(k, heads)), None)
    if first is None:
        return items
    start = first
    while start and items[start - 1].kind in ("para", "break") \
            and (len(items[start - 1].text.split()) <= 12 or _dash_summary(items[start - 1].text)):
        start -= 1
    if first - start >= 6 and listed(start, first):
        return items[:start] + items[first:]
    return items


def _labelled_entry_runs(items: list[_Item]) -> list[_Item]:
    """A "Contents" label over entries printed one per block: numbered headings ("CHAPTER II." then "OF
    THE LIBERTY OF THOUGHT AND DISCUSSION 28") or numbered lines ("II. ON THE SITUATION, FEELINGS, AND
    PLEASURES OF AN AMERICAN / FARMER", its title over two lines), with short lines between them (no
    prose: titles, page numbers, a column header "LETTER"). With three or more numbered entries, the label
    and everything up to the last entry are a contents list and are dropped; an entry's title may run to a long
    line in capitals ("LECTURE V." / "OXYGEN PRESENT IN THE AIR--NATURE OF THE ATMOSPHERE--..."). A heading with
    prose under it ends the list (it is the first chapter) unless it ends with a page number ("CHAPTER V.
    APPLICATIONS 177")."""
    def entry(it: _Item) -> bool:  # a numbered line of the list: "XI. FROM MR. IW--N AL--Z, A RUSSIAN ..."
        return it.kind == "para" and bool(_LEADING_NUMBER_RE.match(it.text)) and len(it.text.split()) <= 40 \
            and (_shouted(it.text) or not _is_prose(it.text))

    out: list[_Item] = []
    k = 0
    while k < len(items):
        it = items[k]
        if it.kind == "para" and _CONTENTS_LABEL_RE.match(it.text):
            e, entries, last = k + 1, 0, k
            while e < len(items):
                cur = items[e]
                if cur.kind == "heading" and cur.num is not None:
                    nxt = items[e + 1] if e + 1 < len(items) else None
                    if (nxt is None or nxt.kind == "para" and _is_prose(nxt.text) and not entry(nxt)
                            and not (_shouted(nxt.text) and len(nxt.text.split()) <= 40)) \
                            and not re.search(r"\s\d{1,4}$", cur.text):
                        break
                    entries, last = entries + 1, e
                elif cur.kind == "heading" and entries and e + 1 < len(items) \
                        and not (items[e + 1].kind == "para" and _is_prose(items[e + 1].text)):
                    last = e  # an unnumbered entry taken for a heading, nothing under it ("LECTURE ON PLATINUM.")
                elif entry(cur):
                    entries, last = entries + 1, e
                elif not (cur.kind == "para" and (len(cur.text.split()) <= 14 and not _is_prose(cur.text)
                                                  or _shouted(cur.text) and len(cur.text.split()) <= 40)):
                    break
                e += 1
            if entries >= 3:
                k = last + 1
                continue
        out.append(it)
        k += 1
    return out


def _cast_lists(items: list[_Item]) -> list[_Item]:
    """A play's cast list after an introduction: its label ("CHARACTERS.", "Dramatis Personae") and what
    follows it up to the play's first numbered act (or chapter) heading, with no other heading between,
    are the playbill, not spoken (in the front matter the same rule holds, see :func:`_front`). So is a cast
    list under the play's title when the title is printed again over the play's text ("A ROMAN SCHOOL" / "90
    B.C." / "DRAMATIS PERSONAE" / ... / "A ROMAN SCHOOL"): the play is headed once, by the second."""
    items = _retitled_playbills(items)
    for k, it in enumerate(items):
        if it.kind != "para" or not _CAST_LABEL_RE.match(it.text):
            continue
        h = next((j for j in range(k + 1, len(items)) if items[j].kind == "heading"), None)
        if h is not None and h - k <= 60 and items[h].style in RANKED_CHAPTER_STYLES and items[h].num in (1, None) \
                and any(j < k for j in range(len(items)) if items[j].kind == "heading"):
            return items[:k] + items[h:]
    return items


def _retitled_playbills(items: list[_Item]) -> list[_Item]:
    """Items without each playbill that sits between a play's title and the same title again (see
    :func:`_cast_lists`): the first heading and what follows it up to the second go."""
    heads = [k for k, it in enumerate(items) if it.kind == "heading"]
    drop: set[int] = set()
    for a, b in zip(heads, heads[1:]):
        if b - a <= 60 and _tokens(items[a].text) == _tokens(items[b].text) \
                and any(items[j].kind == "para" and _CAST_LABEL_RE.match(items[j].text) for j in range(a + 1, b)):
            drop.update(range(a, b))
    return [it for k, it in enumerate(items) if k not in drop] if drop else items


_NOTES_LABEL_RE = re.compile(r"^(?:foot\s*)?notes?[.:]?$", re.I)
"""The label over a chapter's notes ("FOOTNOTES."): never a heading of its own."""


_NOTES_ENTRY_RE = re.compile(r"^(?:foot|end)?notes?\b\W*(?:(?:to|on|for)\b)?(?P<subject>.*)$", re.I)
"""A notes entry: "Notes", "FOOTNOTES.", "Notes to Hans Pfaal", "Footnotes\u2014Four Beasts"."""


def _folded(s: str) -> set[str]:
    """The words of ``s`` without accents ("Rog\u00eat" -> "roget"), small words left out."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))
    return set(_tokens(plain)) - _SMALL


def _notes_of(label: str, before: str) -> bool:
    """``label`` heads the notes of the chapter titled ``before``: a notes label alone ("Notes",
    "FOOTNOTES.") or with what it is about ("Notes to Hans Pfaal", "Footnotes\u2014Four Beasts") when every
    word of that is in ``before`` ("THE UNPARALLELED ADVENTURES OF ONE HANS PFAAL"), accents aside."""
    m = _NOTES_ENTRY_RE.match(label.strip())
    return bool(m) and bool(before.strip()) and _folded(m.group("subject")) <= _folded(before)


def _body_words(items: list[_Item], heads: list[int], n: int) -> list[str]:
    end = heads[n + 1] if n + 1 < len(heads) else len(items)
    return [b.text for b in items[heads[n] + 1:end] if b.kind == "para"]


_SCENE_LINE_RE = re.compile(r"^(?:scene|time|place)\s*:\s*\S", re.I)
"""A half-title's line of scene and time ("Scene:  The Mississippi Valley Time:  Forty to fifty years ago")."""


def build_outline(items: list[_Item], title: str, author: str | None) -> Outline:
    """Items -> the outline: contents lists resolved, heading runs merged, levels assigned. The title again
    (the header's title, or its part before a comma: "Adventures of Huckleberry Finn, Complete") over the first
    heading is a half-title and is not spoken, nor a genre line in capitals ("PLAY IN FOUR ACTS.") or a line
    of scene and time ("Scene:  The Mississippi Valley ...") under it."""
    items = _numbered_contents(_caption_lists(_paged_runs(_credit_headings(_labelled_title_lines(items)))))
    groups = _contents_groups(items)
    items, entries, after = _resolve_toc(items)
    items = _without_front_advertisements(_without_trade_advertisements(items), title)
    items = _promote_named(items, {form for forms in entries for form in forms}, after, title)
    lines = title_in_lines(items, title)  # a title line the contents names ('"MIND THE PAINT"') heads nothing
    items = [_Item("para", it.text, caps=True, apart=it.apart) if k in lines and it.kind == "heading" else it
             for k, it in enumerate(items)]
    items = _epigraph_parts(_epigraph_sources(_promote_caps(items, title, author,
                                                             listed=_all_listed(items, entries, after))))
    items = _run_on_contents(_promote_set_apart(items, title, author))
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), len(items))
    items = _without_transcriber_pages(items[:first]) + items[first:]
    paras = [k for k, it in enumerate(items) if it.kind == "para"]
    notes = {paras[n] for n in _producer_notes([items[k].text for k in paras], front=False)}  # label and note
    items = [it for k, it in enumerate(items) if k not in notes and not (it.kind == "para" and _NOTE_RE.match(it.text))]
    items = _without_bylines(_labelled_entry_runs(items), author)
    items = _heading_runs(items)
    items = _contents_of_titles(_listed_ahead(items))
    items = _cast_lists(items)
    title_t = tuple(_tokens(title))
    titles = {title_t, tuple(_tokens(title.split(", ")[0]))} if title_t else set()
    half = set()  # the title again over the story's first heading: a half-title, and a genre line under it
    for k, it in enumerate(items):
        if it.kind == "para" and tuple(_tokens(it.text)) in titles:
            if k + 1 < len(items) and items[k + 1].kind == "heading":
                half.add(k)
            elif k + 2 < len(items) and items[k + 2].kind == "heading" and items[k + 1].kind == "para" \
                    and (_shouted(items[k + 1].text) and len(items[k + 1].text.split()) <= 6
                         or _SCENE_LINE_RE.match(items[k + 1].text) and len(items[k + 1].text.split()) <= 16):
                half.update((k, k + 1))  # "HEDDA GABLER." / "PLAY IN FOUR ACTS."; "Scene:  The Mississippi Valley"
    items = [it for k, it in enumerate(items) if k not in half]
    items = _addresses_announced(_volume_title_pages(_openings_named(items, title), title))
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), None)
    if first is not None and _title_page_heading(items, first, title):
        items[first] = _Item("para", items[first].text)
    items = _named_pieces(items)
    levels = _assign_levels(items)
    _numbered_passages(items, levels)
    _listed_sections(items, levels, groups)
    items = _listed_pieces(items, levels)
    front: list[_Item] = []
    nodes: list[Node] = []
    for k, it in enumerate(items):
        level = levels.get(k)
        if it.kind == "heading" and level != "para":
            nodes.append(Node(level or "chapter", it.text, it.style, it.num))
            nodes[-1].items.append(it)  # the heading item itself, first
        elif it.kind == "heading":
            (nodes[-1].items if nodes else front).append(_Item("para", it.text))
        elif nodes:
            nodes[-1].items.append(it)
        else:
            front.append(it)
    _epigraphs_forward(front, nodes)
    for n, node in enumerate(nodes[:3]):  # the contents printed after a foreword: not read either
        later = [tuple(_tokens(nd.title)) for nd in nodes[n + 1:] if nd.level == "chapter"]
        node.items[1:] = _listed_entries(node.items[1:], later)
    return Outline(_front(_without_listed_titles(front, nodes), title, author), nodes)


_TITLE_VOLUME_RE = re.compile(r"\b(?:Vol|Volume)\.?\s+(\w+)\.?$", re.I)


def _title_page_heading(items: list[_Item], first: int, title: str) -> bool:
    """Whether the book's first heading is a line of its title page: a series' "VOLUME 3" over the book's title
    on the same line, or a "VOLUME" line that is the book's only one and names the volume the title names
    ("VOLUME ONE" of "Legend Land, Vol. 1") or a series' number over the title's lines ("SCANDINAVIAN CLASSICS" /
    "VOLUME VI" / "MODERN ICELANDIC" / "PLAYS")."""
    it, title_t = items[first], tuple(_tokens(title))
    if it.style in PART_STYLES and title_t and tuple(_tokens(it.text))[-len(title_t):] == title_t \
            and len(_tokens(it.text)) - len(title_t) <= 3:
        return True
    if it.style != "volume" or any(later.kind == "heading" and later.style == "volume" for later in items[first + 1:]):
        return False
    if _title_volume(title) == it.num:
        return True
    got: tuple[str, ...] = ()
    for it in items[first + 1:first + 5]:
        if it.kind != "para":
            break
        got += tuple(_tokens(it.text))
        if got == title_t:
            return True
    return False


def _title_volume(title: str) -> int | None:
    """The volume a book's title names at its end ("Legend Land, Vol. 1", "Essays, Volume II"), or None."""
    m = _TITLE_VOLUME_RE.search(title)
    return _number_value(m.group(1)) if m else None


_PIECE_RE = re.compile(r"^(?P<name>.*[^\W\d_].*?)\s+[-\u2013\u2014:]\s*(?P<num>[IVXLC]{1,7}|\d{1,3})\.?$")


def _piece(it: _Item) -> tuple[str, int] | None:
    """(name, number) of a heading that is a numbered piece of a named text ("BUTTERFLIES - II"): a title,
    a dash and a numeral, with no heading keyword of its own."""
    if it.kind != "heading" or it.style not in ("", "caps", "contents"):
        return None
    m = _PIECE_RE.match(it.text)
    if m is None or _match_heading(m.group("name")) is not None:
        return None
    num = m.group("num")
    value = int(num) if num.isdigit() else _roman_value(num)
    return (" ".join(_tokens(m.group("name"))), value) if value else None


def _named_pieces(items: list[_Item]) -> list[_Item]:
    """Headings that repeat one name with a running number ("BUTTERFLIES - I", "BUTTERFLIES - II" ...
    "BUTTERFLIES - IV", two or more, numbered from one, with nothing but their own text between them) are
    the numbered pieces of one text: it is one chapter titled by the name ("BUTTERFLIES", unless a heading
    of that name is already right before the first piece), and the pieces are its sections."""
    out: list[_Item] = []
    k = 0
    while k < len(items):
        first = _piece(items[k])
        if first is None or first[1] != 1:
            out.append(items[k])
            k += 1
            continue
        run, n = [k], k + 1
        while n < len(items):
            if items[n].kind == "heading":
                nxt = _piece(items[n])
                if nxt is None or nxt != (first[0], len(run) + 1):
                    break
                run.append(n)
            n += 1
        if len(run) < 2:
            out.append(items[k])
            k += 1
            continue
        named = bool(out) and out[-1].kind == "heading" and tuple(_tokens(out[-1].text)) == tuple(first[0].split())
        if not named:
            out.append(_Item("heading", _PIECE_RE.match(items[k].text).group("name").strip()))
        for j in range(k, n):
            it = items[j]
            out.append(_Item("heading", it.text, style="piece", num=run.index(j) + 1) if j in run else it)
        k = n
    return out


def _without_listed_titles(front: list[_Item], nodes: list[Node]) -> list[_Item]:
    """A paragraph of the front matter that names three or more of the chapters' titles, those names making
    half its words (:func:`_lists_titles`), is the book's contents run together in one block (a title page's
    "SUBJECTS": "Of the Origin and Design of Government in general, with concise Remarks on the English
    Constitution. Of Monarchy and Hereditary Succession ..."): not spoken, as in an EPUB's first pages."""
    titles = [t for nd in nodes for t in {tuple(_tokens(nd.title)), tuple(_tokens(_strip_number(nd.title)))} if t]
    front = [it for it in front if not (it.kind == "para" and _lists_titles(it.text, titles))]
    return _listed_entries(front, [tuple(_tokens(nd.title)) for nd in nodes if nd.level == "chapter"])


def _listed_entries(front: list[_Item], titles: list[tuple[str, ...]]) -> list[_Item]:
    """Short paragraphs in the front matter, one entry each, that start with the chapters' titles in their order
    ("Introduction by Professor Henry Morley.", "Against Foolish Talking and Jesting.", ... "The Folly of Slander.
    Part 2."), three or more in a row and as many as half the chapters: the contents (its label gone already),
    not spoken, with a "CONTENTS." label right above them."""
    def entry(it: _Item, at: int) -> int | None:
        t = tuple(_tokens(it.text))
        if it.kind != "para" or len(t) > 20:
            return None
        return next((n for n in range(at, len(titles)) if titles[n] and t[:len(titles[n])] == titles[n]), None)

    k = 0
    while k < len(front):
        e, at = k, 0
        while e < len(front):
            hit = entry(front[e], at)
            if hit is None:
                break
            e, at = e + 1, hit + 1
        if e - k >= 3 and 2 * (e - k) >= len(titles):
            k -= 1 if k and front[k - 1].kind == "para" and _CONTENTS_LABEL_RE.match(front[k - 1].text.strip()) else 0
            return front[:k] + front[e:]
        k = max(e, k + 1)
    return front


def _without_bylines(items: list[_Item], author: str | None) -> list[_Item]:
    """A line that only says "by" and the book's author ("by EMILY DICKINSON" on the title page of a later series
    inside the book) is a byline the announcement has said: never spoken, wherever it stands."""
    byline = ("by",) + tuple(_tokens(author or ""))
    if len(byline) < 2:
        return items
    return [it for it in items if not (it.kind == "para" and tuple(_tokens(it.text)) == byline)]


_TO_READER_LINE_RE = re.compile(r"^(?:the\s+\w+\s+)?to\s+the\s+reader\b", re.I)
_ALTERNATIVE_TITLE_RE = re.compile(r"^or\b\W", re.I)


def _openings_named(items: list[_Item], title: str) -> list[_Item]:
    """In a book with three or more headings, two short lines set apart (two or more blank lines before
    them) in the text after its first heading head a chapter when prose follows them: an address to the
    reader in mixed case ("To the Reader of
    this Discourse: But especially, To the honest ANGLER.", 16 words at most), and the book's own title
    again ("The Complete ANGLER.", the title up to its first comma), with an alternative title under it
    ("OR, The contemplative Mans RECREATION.") joined to it: the first chapter headed with the book's
    title. Before the first heading the title is the title page's, or a half-title. With fewer headings,
    or a title of one word, the title again heads a chapter only in capitals and right after the text of an
    introduction or preface headed as such ("INTRODUCTION." ... "APOLOGY"): the work after its editor's
    essay."""
    main_t = tuple(_tokens(re.split(r"[,;:]", title, maxsplit=1)[0]))
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), len(items))
    few = sum(1 for it in items if it.kind == "heading") < 3
    last_heading: dict[int, _Item | None] = {}  # position -> the heading above it
    above = None
    for k, it in enumerate(items):
        last_heading[k] = above
        if it.kind == "heading":
            above = it

    def prose_after(k: int) -> bool:
        nxt = items[k + 1:k + 3]
        return any(it.kind == "para" and _is_prose(it.text) for it in nxt) and all(it.kind != "heading" for it in nxt)

    out = list(items)
    skip: set[int] = set()
    for k in range(first + 1, len(items)):
        it = items[k]
        if it.kind != "para" or it.apart < 2 or len(it.text.split()) > 16 or it.text.endswith((",", ";")):
            continue
        head = last_heading[k]
        after_intro = it.caps and head is not None and head.style == "named" \
            and bool(_FRONT_KEYWORD_RE.match(head.text))
        if few and not after_intro:
            continue
        if _TO_READER_LINE_RE.match(it.text) and prose_after(k) and not few:
            out[k] = _Item("heading", it.text, style="named")
        elif main_t and (len(main_t) >= 2 or after_intro) and tuple(_tokens(it.text)) == main_t:
            text = it.text
            if k + 1 < len(items) and items[k + 1].kind == "para" and _ALTERNATIVE_TITLE_RE.match(items[k + 1].text) \
                    and len(items[k + 1].text.split()) <= 10:
                text = f"{text} {items[k + 1].text}"
                skip.add(k + 1)
            if prose_after(k + (k + 1 in skip)):
                out[k] = _Item("heading", text, style="named")
            else:
                skip.discard(k + 1)
    return [it for k, it in enumerate(out) if k not in skip]


_SERIES_LINE_RE = re.compile(r"^(?:(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\s+"
                             r"(?:series|volume)|(?:series|volume)\s+(?:[IVX]+|\d{1,2}))\.?$", re.I)
"""A later volume's line on its title page: "Third Series", "Volume II"."""


def _volume_title_pages(items: list[_Item], title: str) -> list[_Item]:
    """A later volume's title page inside the book (after its first heading): the book's title up to its first
    colon or comma, set apart ("POEMS" of "Poems: Three Series, Complete"), a series or volume line within the
    next two lines ("Third Series"), then its credit lines (eight words at most each: "Edited by" / "MABEL
    LOOMIS TODD"). When text follows them rather than a heading (the volume's prefatory poem), the series line
    heads a chapter of that text and the title line goes (the announcement said it); over a heading
    ("PREFACE") the title page is left as it is."""
    main_t = tuple(_tokens(re.split(r"[,;:]", title, maxsplit=1)[0]))
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), len(items))
    out, drop = list(items), set()
    for k in range(first + 1, len(items)):
        it = items[k]
        if not main_t or it.kind != "para" or it.apart < 2 or tuple(_tokens(it.text)) != main_t:
            continue
        series = next((j for j in range(k + 1, min(k + 3, len(items)))
                       if items[j].kind == "para" and _SERIES_LINE_RE.match(items[j].text.strip())), None)
        if series is None:
            continue
        end = series + 1
        while end < len(items) and items[end].kind == "para" and len(items[end].text.split()) <= 8 \
                and not items[end].text.rstrip().endswith((".", "!", "?", ",", ";", ":")):
            end += 1
        if end < len(items) and items[end].kind == "para":
            out[series] = _Item("heading", items[series].text.strip(), style="named")
            drop.add(k)
    return [it for k, it in enumerate(out) if k not in drop]


_ADDED_ADDRESS_RE = re.compile(r"\b(?:address|letter|epistle)\s+to\s+(?:the\s+)?(?P<whom>[^.;:!?]+)", re.I)
"""What a title page says the book adds: "together with an address to the people called Quakers"."""
_ADDRESS_OPENING_RE = re.compile(r"^\W*to\s+\S", re.I)


def _addresses_announced(items: list[_Item]) -> list[_Item]:
    """An address that the title page says the book adds ("To which is added an appendix; together with an
    address to the people called Quakers.") heads a chapter where the text opens it: a paragraph after the
    first heading that starts "To ..." and names those it is addressed to (the title page's words for them,
    "people called Quakers", in a row), one sentence of 80 words at most, with prose under it ("To the
    Representatives of the Religious Society of the People called Quakers, or to so many of them as were
    concerned in publishing the late piece, entitled ...")."""
    first = next((k for k, it in enumerate(items) if it.kind == "heading"), None)
    if first is None:
        return items
    whom = [tuple(_tokens(m.group("whom"))) for it in items[:first] if it.kind == "para"
            for m in _ADDED_ADDRESS_RE.finditer(it.text)]
    whom = [w for w in whom if 2 <= len(w) <= 8]
    if not whom:
        return items
    out = list(items)
    for k in range(first + 1, len(items) - 1):
        it, nxt = items[k], items[k + 1]
        if it.kind != "para" or not _ADDRESS_OPENING_RE.match(it.text) or len(it.text.split()) > 80 \
                or _SENTENCE_STOP_RE.search(it.text.rstrip(" .\"'\u201d\u2019")) \
                or nxt.kind != "para" or not _is_prose(nxt.text):
            continue
        toks = tuple(_tokens(it.text))
        if any(toks[i:i + len(w)] == w for w in whom for i in range(len(toks) - len(w) + 1)):
            out[k] = _Item("heading", it.text, style="named")
    return out


def _epigraphs_forward(front: list[_Item], nodes: list[Node]) -> None:
    """An epigraph printed before its chapter's heading belongs to that chapter: a line naming the
    chapter ("HISTORY." before "I. HISTORY.") and the verse or quotations under it (no heading or
    scene break among them, none naming a chapter as a contents list does, 250 words at most), at the end of the text before the heading, move to
    the start of the chapter; the naming line, which the heading says again, is not spoken."""
    titles = {tuple(_tokens(t)) for nd in nodes for t in (nd.title, _strip_number(nd.title))} - {()}
    for n, node in enumerate(nodes):
        if node.level != "chapter":
            continue
        before = nodes[n - 1].items if n else front
        lo = 1 if n else 0  # a node's first item is its own heading
        names = {tuple(_tokens(node.title)), tuple(_tokens(_strip_number(node.title)))} - {()}
        for k in range(len(before) - 2, max(lo, len(before) - 16) - 1, -1):
            it = before[k]
            if it.kind != "para":
                break
            if tuple(_tokens(it.text)) in names and not (n == 0 and _bylined(before, k)):  # (a title page)
                tail = before[k + 1:]
                if all(t.kind == "para" and tuple(_tokens(t.text)) not in titles for t in tail) \
                        and sum(len(t.text.split()) for t in tail) <= 250:
                    node.items[1:1] = tail
                    del before[k:]
                break


def _body(node: Node) -> list[_Item]:
    return node.items[1:]


def to_chapters(outline: Outline, split_level: str = "chapter") -> list[Chapter]:
    """Cut the outline into chapters (one per file) at ``split_level``.

    ``chapter``: parts are announced at their first chapter ("Part One. Chapter I. ..."), a part
    with text of its own before its first chapter is a chapter of its own; sections are "heading"
    paragraphs. ``part``: a file per part, its chapters' titles become "heading" paragraphs (a book
    without parts is cut at chapters). ``section``: a file per section as well, titled "<chapter>.
    <section>"."""
    if split_level not in SPLIT_LEVELS:
        raise ValueError(split_level)
    levels_present = {n.level for n in outline.nodes}
    cut = {"part": {"part"} if "part" in levels_present else {"part", "chapter"},
           "chapter": {"part", "chapter"},
           "section": {"part", "chapter", "section"}}[split_level]
    out: list[tuple[str, list[str], list[str]]] = []  # (title, paragraphs, kinds)
    parts: list[str | None] = []  # the part each of out's chapters belongs to
    if outline.front:
        out.append(("", [], []))  # the title is announced; the front matter is not titled again
        parts.append(None)
        _add_items(out[-1], outline.front)
    part: str | None = None
    pending: list[str] = []  # spoken headings waiting for a file to start (a part before its chapter)
    held: list[_Item] = []  # a part's epigraph, waiting for its first chapter
    chapter_title = ""
    for n, node in enumerate(outline.nodes):
        spoken = spoken_heading(node.items[0], node.level)
        body = _body(node)
        if node.level == "part" and n + 1 < len(outline.nodes) and _title_lines(body):
            for it in body:  # "THIRD PART" / "LIFE'S TROUBLES AND CLOSE."; "... GLUBBDUBDRIB, AND" / "JAPAN."
                line = title_case(it.text)
                spoken = f"{spoken} {line}" if _CONNECTING_END_RE.search(spoken) else _join_title(spoken, line)
            body = []
        if node.level == "part" and "chapter" in cut and n + 1 < len(outline.nodes) \
                and outline.nodes[n + 1].level == "chapter" and (_epigraph_only(body) or _summary_only(body)):
            held, body = body, []  # said after the part's heading, at the start of its first chapter
        elif held:
            body, held = held + body, []
        has_text = any(it.kind == "para" for it in body)
        if node.level == "chapter":
            chapter_title = spoken
        elif node.level == "part":
            part = spoken
        if node.level in cut:
            pending.append(spoken if node.level != "section" or not chapter_title or pending
                           else f"{chapter_title.rstrip('.')}. {spoken}")
            if has_text or node is outline.nodes[-1]:
                out.append((_join_all(pending), [], []))
                parts.append(part)
                pending = []
        elif pending:
            out.append((_join_all(pending), [spoken], ["heading"]))
            parts.append(part)
            pending = []
        elif out:
            out[-1][1].append(spoken)
            out[-1][2].append("heading")
        else:
            out.append((spoken, [], []))
            parts.append(part)
        if body:
            if pending:
                out.append((_join_all(pending), [], []))
                parts.append(part)
                pending = []
            _add_items(out[-1], body)
    chapters = []
    for (title, paras, kinds), in_part in zip(out, parts):
        while kinds and kinds[-1] != "text":  # nothing after a last heading or break
            paras.pop()
            kinds.pop()
        if any(k == "text" for k in kinds):
            chapters.append(Chapter(len(chapters) + 1, title, paras,
                                    None if all(k == "text" for k in kinds) else kinds,
                                    in_part if split_level != "part" else None))
    return chapters


def merge_fragments(chapters: list[Chapter]) -> list[Chapter]:
    """The comparable-lengths check: a titled chapter whose text is under 1 % of the median chapter's
    and is no prose (a contents fragment) or the next chapter's opening words again (a part's heading
    with a teaser line), or whose text is only a summary of what follows ("Prologue" over "Giving an account of
    Robin Hood and his adventure ...", :func:`_summary_only`), is no chapter of its own. Its title
    joins the next chapter's ("PART 2. CHAPTER TWENTY-FOUR. Gossip"); its text goes first in that
    chapter, or is dropped when it is that chapter's opening words again (a teaser ending in "...").
    Untitled chapters (a dedication before the first heading) and the last chapter are kept."""
    if len(chapters) < 3:
        return chapters

    def texts(c: Chapter) -> list[str]:
        return [p for i, p in enumerate(c.paragraphs) if c.kind(i) == "text"]

    def opens(c: Chapter, nxt: Chapter) -> bool:
        first = _tokens(next(iter(texts(nxt)), ""))
        return all(first[:len(_tokens(t))] == _tokens(t) for t in texts(c))

    words = [sum(len(p.split()) for p in texts(c)) for c in chapters]
    median = sorted(words)[len(words) // 2]
    out: list[Chapter] = []
    carry: Chapter | None = None
    for n, ch in enumerate(chapters):
        if carry is not None:
            teaser = opens(carry, ch)
            paras = ([] if teaser else list(carry.paragraphs)) + list(ch.paragraphs)
            kinds = ([] if teaser else [carry.kind(i) for i in range(len(carry.paragraphs))]) \
                + [ch.kind(i) for i in range(len(ch.paragraphs))]
            ch = Chapter(ch.index, _join_title(carry.title, ch.title), paras,
                         None if all(k == "text" for k in kinds) else kinds, ch.part or carry.part)
            carry = None
        if ch.title and n + 1 < len(chapters) and (words[n] * 100 < median
                                                   and (not _has_prose(texts(ch)) or opens(ch, chapters[n + 1]))
                                                   or _summary(texts(ch))):
            carry = ch
            continue
        out.append(Chapter(len(out) + 1, ch.title, ch.paragraphs, ch.kinds, ch.part))
    return out


_ATTRIBUTED_RE = re.compile(r"(?:--|\u2014)\s*[A-Z][^\"\u201d]{0,60}$")
"""A quotation's source after a dash at its end ('...for women."--ESDRAS.', '--R. BROWNING.')."""


def _epigraph_only(body: list[_Item]) -> bool:
    """A part's own text is only its epigraph: one to four quotations (each opening with a quotation mark,
    its source after a dash at its end), 150 words at most in all."""
    paras = [it.text for it in body if it.kind == "para"]
    return 1 <= len(paras) <= 4 and all(it.kind in ("para", "break") for it in body) \
        and sum(len(t.split()) for t in paras) <= 150 \
        and all(it.epigraph or it.text.lstrip()[:1] in "\"\u201c'\u2018" and _ATTRIBUTED_RE.search(it.text)
                for it in body if it.kind == "para")


_SUMMARY_START_RE = re.compile(r"^(?:in\s+which|wherein|containing|telling|giving|showing|which\s+tells)\b", re.I)


def _summary_only(body: list[_Item]) -> bool:
    """A part's own text is only a summary of what it holds: one paragraph of 80 words at most that opens as
    summaries do ("Telling how the Sheriff of Nottingham swore that he would deal dole to Robin Hood. ...")."""
    return all(it.kind in ("para", "break") for it in body) and _summary([it.text for it in body if it.kind == "para"])


def _summary(paras: list[str]) -> bool:
    """Text that is one paragraph of 80 words at most opening as summaries do ("Giving an account of ...")."""
    return len(paras) == 1 and len(paras[0].split()) <= 80 and bool(_SUMMARY_START_RE.match(paras[0].strip()))


def _title_lines(body: list[_Item]) -> bool:
    """A part's own text is only its title: one or two short lines in capitals, twelve words at most in all
    ("LIFE'S TROUBLES AND CLOSE. 1823 TO 1827." under "THIRD PART"), said with the part's heading."""
    paras = [it.text for it in body if it.kind == "para"]
    return 1 <= len(paras) <= 2 and all(it.kind == "para" for it in body) \
        and sum(len(t.split()) for t in paras) <= 12 and all(_shouted(t) for t in paras)


def _join_all(titles: list[str]) -> str:
    t = ""
    for x in titles:
        t = _join_title(t, x)
    return t


def _spoken_subhead(text: str) -> str:
    """What is said for a heading inside a chapter that Markdown marks below the chapters' level: a bare
    numeral as a section ("### II." -> "Part II.", as a bare numeral section of a text book is said),
    capitals de-shouted, any other heading as printed."""
    text = text.strip()
    if _BARE_NUMERAL_RE.match(text):
        return f"Part {text.rstrip('.')}."
    return title_case(text)


def _add_items(chapter: tuple[str, list[str], list[str]], items: list[_Item]) -> None:
    _t, paras, kinds = chapter
    for it in items:
        if it.kind == "para" and it.subhead:
            paras.append(_spoken_subhead(it.text))
            kinds.append("heading")
        elif it.kind == "para":
            paras.append(it.text)
            kinds.append("text")
        elif it.kind == "break" and kinds and kinds[-1] == "text":
            paras.append("")
            kinds.append("break")


# --------------------------------------------------------------------------- plan's view


def outline_entry(chapter: Chapter) -> dict:
    """What ``plan`` shows of a chapter beside its title: its part, its section headings, its first
    words after the title and its length in characters (spoken text only); for a chapter that opens with
    the book's opening matter (``Chapter.opening``), ``opening``: how many paragraphs are spoken before the
    title and their first words."""
    def first_words(paras: range) -> str:
        text = [chapter.paragraphs[i] for i in paras if chapter.kind(i) == "text"]
        return " ".join(" ".join(text)[:80].split()[:10])

    d = {"sections": [p for i, p in enumerate(chapter.paragraphs) if chapter.kind(i) == "heading"],
         "first_words": first_words(range(chapter.opening, len(chapter.paragraphs))),
         "chars": sum(len(p) for p in chapter.paragraphs)}
    if chapter.part:
        d["part"] = chapter.part
    if chapter.opening:
        d["opening"] = {"paragraphs": chapter.opening, "first_words": first_words(range(chapter.opening))}
    return d


# --------------------------------------------------------------------------- EPUB


_BARE_NUMERAL_RE = re.compile(r"^(?:[IVXLCDM]+|\d{1,3})\.?$")
_ENDS_WITH_NUMERAL_RE = re.compile(r"^(?P<title>.*\S)\s+(?P<num>[IVXLCDM]+|\d{1,3})\.?$")


def _numeral(s: str) -> int:
    s = s.strip().rstrip(".")
    return int(s) if s.isdigit() else _roman_value(s)


def _with_parts(chapters: list[Chapter]) -> list[Chapter]:
    """Nav entries that are a story's numbered parts ("I.", "II.", "III." under "I. A Scandal in
    Bohemia") are sections, not chapters: a chapter titled by a bare numeral that continues the
    numbering of the chapter before it joins that chapter, its title a "Part II." heading. A
    chapter whose title ends with the first part's numeral ("... Bohemia. I.") when the next chapter is
    part two gets a "Part I." heading instead."""
    out: list[Chapter] = []
    last = None  # the number of the last part in out[-1]
    for n, ch in enumerate(chapters):
        bare = _BARE_NUMERAL_RE.match(ch.title.strip())
        if bare and out and last is not None and _numeral(ch.title) == last + 1:
            prev = out[-1]
            kinds = (list(prev.kinds) if prev.kinds else ["text"] * len(prev.paragraphs)) + ["heading"] \
                + (list(ch.kinds) if ch.kinds else ["text"] * len(ch.paragraphs))
            heading = f"Part {ch.title.strip().rstrip('.')}."
            out[-1] = Chapter(prev.index, prev.title, [*prev.paragraphs, heading, *ch.paragraphs], kinds, prev.part)
            last += 1
            continue
        last = None
        nxt = chapters[n + 1].title.strip() if n + 1 < len(chapters) else ""
        m = _ENDS_WITH_NUMERAL_RE.match(ch.title.strip())
        if m and _BARE_NUMERAL_RE.match(nxt) and _numeral(m.group("num")) == 1 and _numeral(nxt) == 2:
            kinds = ["heading"] + (list(ch.kinds) if ch.kinds else ["text"] * len(ch.paragraphs))
            ch = Chapter(ch.index, m.group("title").rstrip(" ."), ["Part I.", *ch.paragraphs], kinds, ch.part)
            last = 1
        out.append(ch)
    return out


_DASHED_SECTION_RE = re.compile(r"^(?P<num>[IVXLC]+)\.?\s*--\s*\S", re.I)
_FIRST_DASHED_SECTION_RE = re.compile(r"(?:^|\.\s)I\.?\s*--\s*\S")


def _dashed_sections(chapters: list[Chapter]) -> list[Chapter]:
    """Numbered sections of an appendix listed as entries of their own: where a chapter's title ends with its
    first section ("APPENDIX C. THE TOWN CYCLES. I.--THE YORK PAGEANTS"), the entries "II.--THE WAKEFIELD PLAYS",
    "III.--THE CHESTER PLAYS" ... that number on from it are read inside it under their headings."""
    out: list[Chapter] = []
    last = None  # the number of the last section in out[-1]
    for ch in chapters:
        title = ch.title.strip()
        m = _DASHED_SECTION_RE.match(title)
        if m and out and last is not None and _roman_value(m.group("num").upper()) == last + 1:
            head = m.group("num").upper() + title[len(m.group("num")):m.end() - 1] + title_case(title[m.end() - 1:])
            out[-1] = _with_heading(out[-1], replace(ch, title=head))
            last += 1
            continue
        last = 1 if _FIRST_DASHED_SECTION_RE.search(title) else None
        out.append(ch)
    return out


def _lists_titles(para: str, titles: list[tuple[str, ...]]) -> bool:
    """The paragraph is a contents list: it names three or more of the later chapters' titles, and
    those names make at least half of its words."""
    toks = tuple(_tokens(para))
    if len(toks) < 6:
        return False
    hits, covered = 0, 0
    for t in set(titles):
        if t and any(toks[i:i + len(t)] == t for i in range(len(toks) - len(t) + 1)):
            hits += 1
            covered += len(t)
    return hits >= 3 and 2 * covered >= len(toks)


def _names_in_order(para: str, titles: list[tuple[str, ...]]) -> int:
    """How many of ``titles`` (two words or more) the paragraph names one after another in their order."""
    toks = tuple(_tokens(para))
    pos, found = 0, 0
    for t in titles:
        if len(t) < 2:
            continue
        at = next((i for i in range(pos, len(toks) - len(t) + 1) if toks[i:i + len(t)] == t), None)
        if at is not None:
            found += 1
            pos = at + len(t)
    return found


_FRONT_KEYWORD_RE = re.compile(r"^(?:introduction|preface|foreword|prefatory\s+note|translator\S*\s+(?:introduction"
                               r"|preface))\b", re.I)
_CHAPTER_KEYWORD_RE = re.compile(r"^(?:chapter|book|part|volume|stave|canto|act|letter|section)\s+(?:[IVXLCDM]+\b|\d|"
                                 r"(?:one|two|three|four|five|six|seven|eight|nine|ten|the\s+first)\b)", re.I)
_KEYWORD_START_RE = re.compile(r"^(?:chapter|book|part|volume|stave|canto|act|scene|letter|section|prologue|epilogue"
                               r"|preface|introduction|foreword|afterword|appendix|contents)\b", re.I)


def _introduction_sections(chapters: list[Chapter]) -> list[Chapter]:
    """Nav entries for the sub-headings of an introduction or preface: in a book whose nav has a
    numbered CHAPTER (BOOK, PART ...) sequence, the entries after an INTRODUCTION / PREFACE entry and
    before the first numbered entry that carry no keyword of their own ("YOUTH", "THE MAN AND HIS
    WORKS", a "DEDICATION") are its sections: a "heading" paragraph each, not chapters."""
    numbered = [n for n, c in enumerate(chapters) if _CHAPTER_KEYWORD_RE.match(c.title.strip())]
    if len(numbered) < 2:
        return chapters
    out: list[Chapter] = []
    host = False  # out[-1] is an introduction taking the entries after it
    for n, ch in enumerate(chapters):
        if n >= numbered[0]:
            host = False
        if host and ch.title.strip() and not _KEYWORD_START_RE.match(ch.title.strip()):
            prev = out[-1]
            kinds = (list(prev.kinds) if prev.kinds else ["text"] * len(prev.paragraphs)) + ["heading"] \
                + (list(ch.kinds) if ch.kinds else ["text"] * len(ch.paragraphs))
            heading = title_case(ch.title) if _shouted(ch.title) else ch.title
            out[-1] = Chapter(prev.index, prev.title, [*prev.paragraphs, heading, *ch.paragraphs], kinds, prev.part)
            continue
        host = n < numbered[0] and bool(_FRONT_KEYWORD_RE.match(ch.title.strip()))
        out.append(ch)
    return out


def _with_heading(prev: Chapter, ch: Chapter) -> Chapter:
    """``prev`` with ``ch`` read inside it: ``ch``'s title a "heading" paragraph (title case when in
    capitals), then its paragraphs."""
    kinds = (list(prev.kinds) if prev.kinds else ["text"] * len(prev.paragraphs)) + ["heading"] \
        + (list(ch.kinds) if ch.kinds else ["text"] * len(ch.paragraphs))
    heading = title_case(ch.title) if _shouted(ch.title) else ch.title
    return Chapter(prev.index, prev.title, [*prev.paragraphs, heading, *ch.paragraphs], kinds, prev.part)


def _heading_style(title: str) -> str:
    """The kind of heading a chapter's title starts with ("ACT I. SCENE I--A pass of rocks, ..." is an act's)."""
    h = _match_heading(title.strip()) or _match_heading(re.split(r"(?<=\.)\s", title.strip(), maxsplit=1)[0])
    return h.style if h else ""


def _play_sections(chapters: list[Chapter]) -> list[Chapter]:
    """A play's nav or files: in a book with two or more ACT entries ("Act I.", "ACT IV.", "FIRST ACT"),
    a SCENE entry after an act ("Scene 1.I.", "SCENE II.") is a section of that act, read inside it with
    its heading, whether the nav nests it under the act or lists it at the act's level; an entry titled
    by a cast-list label ("Dramatis personae", "Persons Represented") before the first act is the
    playbill, not spoken (as in a text book's front matter)."""
    styles = [_heading_style(ch.title) for ch in chapters]
    acts = [n for n, s in enumerate(styles) if s == "act"]
    if len(acts) < 2:
        return chapters
    out: list[Chapter] = []
    for n, ch in enumerate(chapters):
        if n < acts[0] and _CAST_LABEL_RE.match(ch.title.strip()):
            continue
        if n > acts[0] and styles[n] == "scene" and out:
            out[-1] = _with_heading(out[-1], ch)
            continue
        out.append(ch)
    return out


def _notes_sections(chapters: list[Chapter]) -> list[Chapter]:
    """Notes headed after a work: an entry titled by a notes label ("Notes", "FOOTNOTES") alone, or with
    what it is about ("Notes to Hans Pfaal", "Footnotes\u2014Four Beasts") when every word of that names
    the chapter just before it ("THE UNPARALLELED ADVENTURES OF ONE HANS PFAAL"), is that chapter's: read
    inside it under its heading, not a chapter of its own. Notes naming something else ('NOTES ON "THE
    WASTE LAND"' after part V of the poem) stay a chapter."""
    out: list[Chapter] = []
    for ch in chapters:
        if out and _notes_of(ch.title, out[-1].title):
            out[-1] = _with_heading(out[-1], ch)
            continue
        out.append(ch)
    return out


_POSTSCRIPT_TITLE_RE = re.compile(r"^(?:a\s+)?post-?script\b", re.I)
"""A postscript's heading, alone or with what it is ("Postscript. Found in the Handwriting of ...")."""


def _short_postscripts(chapters: list[Chapter]) -> list[Chapter]:
    """A postscript headed after a piece ("Postscript." after "Rip Van Winkle", "POSTSCRIPT, FOUND IN THE
    HANDWRITING OF MR. KNICKERBOCKER."), 600 words at most and not the book's last chapter, is read inside that
    piece under its heading."""
    out: list[Chapter] = []
    for n, ch in enumerate(chapters):
        if out and n < len(chapters) - 1 and _POSTSCRIPT_TITLE_RE.match((ch.title or "").strip()) \
                and len(" ".join(ch.paragraphs).split()) <= 600:
            out[-1] = _with_heading(out[-1], ch)
            continue
        out.append(ch)
    return renumbered(out)


def closing_sections(chapters: list[Chapter]) -> list[Chapter]:
    """Pieces headed after a chapter that belong to it: postscripts (:func:`_short_postscripts`) and notes on each story
    titled by the story again (:func:`title_notes`)."""
    return title_notes(_short_postscripts(chapters))


_NOTES_HEAD_RE = re.compile(r"^(?:foot\s*|end\s*)?notes?(?:\s+(?:and|&)\s+(?:references|sources|illustrations))?\W*$",
                            re.I)
"""The label over a book's closing notes, as a paragraph: "NOTES AND REFERENCES", "Notes."."""


_APPENDIX_TITLE_RE = re.compile(r"^appendix\b", re.I)
"""A chapter titled as an appendix ("Appendix. The Rape of the Lock: First Edition"): back matter of its own."""


def title_notes(chapters: list[Chapter]) -> list[Chapter]:
    """Notes on each story headed by the story's title again ("I. CONNLA AND THE FAIRY MAIDEN." ... "XXVI. LAD WITH
    THE GOAT SKIN." under "NOTES AND REFERENCES", after the 26 tales): a closing run of three or more chapters, the
    last half of the book's chapters at most and fewer words than the chapters before it, whose titles, numeral
    aside, name earlier chapters in their order (every word of one in the earlier title, or half the words of
    both shared), four in five of them, with four in five of those titles their own, is read as sections of one
    notes chapter: the chapter before the run is split at its notes label when it has one (the notes' own
    introduction is that chapter's text), else the notes are read inside it. No run holds an appendix: it is
    back matter of its own after them."""
    folded = [{w for w in _folded(_strip_number(ch.title or ""))
               if w not in _KEYWORDS and not _NUMERAL_TOKEN_RE.match(w) and _number_value(w) is None}
              for ch in chapters]  # "Chapter VII." names nothing: numbers start again in each book ("RECORD
    # TWENTY-NINE" names no "RECORD TWENTY": number words are numbers too)
    words = [len(" ".join(ch.paragraphs).split()) for ch in chapters]

    def names(k: int, j: int) -> bool:
        a, b = folded[k], folded[j]
        return bool(a) and (a <= b or 2 * len(a & b) >= max(len(a), len(b)))

    n = len(chapters)
    best = None
    for s in range(max(2, n - n // 2), n - 2):
        if any(_APPENDIX_TITLE_RE.match(ch.title or "") for ch in chapters[s:]):
            break  # an appendix closes the book after any notes ("Appendix. The Rape of the Lock: First Edition")
        if not any(names(s, j) for j in range(s)) or sum(words[s:]) >= sum(words[:s]) \
                or 5 * len({frozenset(f) for f in folded[s:]}) < 4 * (n - s):  # "Note I", "Note II": one name
            continue
        at, hits = 0, 0
        for k in range(s, n):
            j = next((j for j in range(at, s) if names(k, j)), None)
            if j is not None:
                hits, at = hits + 1, j + 1
        if hits >= 3 and 5 * hits >= 4 * (n - s):
            best = s
            break
    if best is None:
        return chapters
    host = chapters[best - 1]
    label = next((i for i in range(len(host.paragraphs) - 1, 0, -1)
                  if host.kind(i) == "text" and _NOTES_HEAD_RE.match(host.paragraphs[i].strip())), None)
    out = chapters[:best - 1]
    if label is not None:
        kinds = list(host.kinds) if host.kinds else None
        out.append(Chapter(host.index, host.title, host.paragraphs[:label], kinds[:label] if kinds else None,
                           host.part, title_is_letter=host.title_is_letter, opening=host.opening))
        host = Chapter(host.index + 1, title_case(host.paragraphs[label]), host.paragraphs[label + 1:],
                       kinds[label + 1:] if kinds else None, host.part)
    for ch in chapters[best:]:
        host = _with_heading(host, ch)
    out.append(host)
    return renumbered(out)


_GLOSSARY_RE = re.compile(r"^(?:an?\s+|the\s+)?(?:glossary|vocabulary|glossarial\s+index)"
                          r"(?:\s+(?:of|to|and)\b[^.]{0,80})?\W*$", re.I)
"""A glossary's heading: "VOCABULARY", "Glossary.", "A Glossary Of Archaic Words And Phrases"."""


def glossary_sections(chapters: list[Chapter]) -> list[Chapter]:
    """A glossary after the book's last chapter ("VOCABULARY" after the last canto, "A Glossary Of
    Archaic Words And Phrases" after the last essay) is back matter, as an index is, not a chapter of its
    own: it is read inside the chapter before it, under its heading. A glossary before other chapters
    stays a chapter."""
    out = list(chapters)
    while len(out) >= 2 and _GLOSSARY_RE.match((out[-1].title or "").strip()):
        last = out.pop()
        out[-1] = _with_heading(out[-1], last)
    return out


CONTENTS_ENTRY_PARAGRAPHS = 3
"""Under an entry titled "Contents", a "CHAPTER I" paragraph with at most this many paragraphs (itself and its title
or summary) before the next is an entry of the list, not a chapter's start."""
BARE_NUMERAL_RUN = 10
"""The fewest paragraphs that are bare numerals (I, II, III ... on by one) that split an EPUB entry into chapters
the nav left out (:func:`_bare_numeral_chapters`)."""
BARE_NUMERAL_LEAD_WORDS = 1000
"""The fewest words of the entry's own text before its first bare numeral: the numerals begin another work."""
BARE_NUMERAL_PIECE_WORDS = 100
"""The fewest words under the median numeral: chapters, not the numbered items of a list ("I. ... II. ...")."""


def _spans(at: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """(start, end) of the paragraphs from each (position, number) of ``at`` up to the next one, the last up to
    ``end``."""
    return [(a, b) for (a, _n), (b, _m) in zip(at, [*at[1:], (end, 0)])]


def _bare_numeral_chapters(ch: Chapter) -> list[tuple[int, int]]:
    """(position, number) of the paragraphs of an EPUB entry that are chapter numerals alone ("I", "II", ... "XLIV"),
    where the nav left those chapters out: :data:`BARE_NUMERAL_RUN` or more, numbered one on from I, after at least
    :data:`BARE_NUMERAL_LEAD_WORDS` words of the entry's own text (Lang's introduction before Longinus's treatise,
    all under "INTRODUCTION"), with :data:`BARE_NUMERAL_PIECE_WORDS` words or more under the median one; none
    otherwise (a story's numbered parts stay its sections, a letter's numbered rules its paragraphs)."""
    at = [(i, _roman_value(p.strip().rstrip("."))) for i, p in enumerate(ch.paragraphs)
          if ch.kind(i) == "text" and _ROMAN_ALONE_RE.match(p.strip())]
    if len(at) < BARE_NUMERAL_RUN or [n for _i, n in at] != list(range(1, len(at) + 1)):
        return []
    lead = sum(len(p.split()) for p in ch.paragraphs[:at[0][0]])
    pieces = sorted(sum(len(p.split()) for p in ch.paragraphs[a + 1:b]) for a, b in _spans(at, len(ch.paragraphs)))
    return at if lead >= BARE_NUMERAL_LEAD_WORDS and pieces[len(pieces) // 2] >= BARE_NUMERAL_PIECE_WORDS else []


_CHAPTER_PARA_RE = re.compile(r"^(?:CHAPTER|Chapter)[ \t]+(?P<num>[IVXLCDM]+|\d{1,3})\b\.?"
                              r"[ \t]*(?:[-\u2013\u2014:.][ \t]*\S.*)?$")
"""A paragraph that names a chapter and says what happens in it: "Chapter I - The crystal sea, God commands Adam,
expelled from Eden, to live in the Cave of Treasures."."""


def _chapter_paragraphs(chapters: list[Chapter], front_matter: bool = False) -> list[Chapter]:
    """An EPUB chapter whose chapters are marked only by paragraphs ("Chapter I - The crystal sea ...", no heading
    markup and no contents entry): three or more such paragraphs of 40 words at most, numbered I, II, III ... on
    by one, split it, each opening a chapter titled by it; the text before the first keeps the chapter's title,
    or takes a named heading it opens with ("Prologue"), said as a title. Chapters headed by a numeral alone that
    the nav left out split it the same way (:func:`_bare_numeral_chapters`).

    Where three or more of those paragraphs name chapters that follow as entries of their own ("Chapter 2.
    Variation Under Nature." before the entry "CHAPTER II. VARIATION UNDER NATURE."), they are a detailed
    contents (each title over its chapter's summary), whatever its label says ("DETEAILED CONTENTS."): from its
    first such paragraph on it is not read, unless ``front_matter``. An entry titled "Contents" whose "CHAPTER I"
    paragraphs have no text under them (their title or summary only, :data:`CONTENTS_ENTRY_PARAGRAPHS`) is not
    split: they are the list's (jobs.ingest.matter leaves it out whole)."""
    out: list[Chapter] = []
    for n, ch in enumerate(chapters):
        at = []
        for i, p in enumerate(ch.paragraphs):
            m = _CHAPTER_PARA_RE.match(p.strip()) if ch.kind(i) == "text" and len(p.split()) <= 40 else None
            if m:
                at.append((i, _number_value(m.group("num"))))
        if len(at) < 3:
            at = _bare_numeral_chapters(ch)
        if len(at) < 3 or [n for _i, n in at] != list(range(1, len(at) + 1)) \
                or not front_matter and _CONTENTS_LABEL_RE.match((ch.title or "").strip()) \
                and all(b - a <= CONTENTS_ENTRY_PARAGRAPHS for a, b in _spans(at, len(ch.paragraphs))):
            out.append(ch)  # (under a "CONTENTS" entry, "CHAPTER I" / "Going Away" are the list's: no text under them)
            continue
        kinds = list(ch.kinds) if ch.kinds else ["text"] * len(ch.paragraphs)
        first = at[0][0]
        later = {_after_number(tuple(_tokens(c.title or ""))) for c in chapters[n + 1:]} - {()}
        if not front_matter and sum(_after_number(tuple(_tokens(ch.paragraphs[i]))) in later for i, _n in at) >= 3:
            # (an entry before them naming a chapter too, "INTRODUCTION.", is the contents' first)
            keep = [i for i in range(first) if _after_number(tuple(_tokens(ch.paragraphs[i]))) not in later]
            if any(kinds[i] == "text" for i in keep):
                out.append(Chapter(ch.index, ch.title, [ch.paragraphs[i] for i in keep], [kinds[i] for i in keep],
                                   ch.part, title_is_letter=ch.title_is_letter,
                                   opening=sum(1 for i in keep if i < ch.opening)))
            continue
        head, paras, hk = ch.title, ch.paragraphs[:first], kinds[:first]
        lead = next((j for j, k in enumerate(hk) if k == "text"), None)
        if lead is not None and lead >= ch.opening and _SECTION_RE.match(paras[lead].strip()):
            head, paras, hk = paras[lead].strip(), paras[:lead] + paras[lead + 1:], hk[:lead] + hk[lead + 1:]
        if any(k == "text" for k in hk):
            out.append(Chapter(ch.index, head, paras, hk, ch.part, title_is_letter=ch.title_is_letter,
                               opening=min(ch.opening, len(paras))))
        bounds = [i for i, _n in at] + [len(ch.paragraphs)]
        for a, b in zip(bounds, bounds[1:]):
            out.append(Chapter(ch.index, ch.paragraphs[a].strip(), ch.paragraphs[a + 1:b], kinds[a + 1:b], ch.part))
    return renumbered(out)


def epub_checks(chapters: list[Chapter], title: str | None, author: str | None,
                front_matter: bool = False) -> list[Chapter]:
    """The checks EPUB chapters (found from the nav/NCX and ``epub:type``) share with text books:
    a play's scenes listed as entries go into their act and its cast list is not spoken
    (:func:`_play_sections`), notes headed after a work go into it (:func:`_notes_sections`),
    numbered parts listed as entries of their own go back into their chapter (:func:`_with_parts`),
    an introduction's sub-headings listed before the numbered chapters become its sections
    (:func:`_introduction_sections`), a first entry titled by the book's title is left untitled (the
    announcement says the title), titles in capitals said in title case, and the title page's lines (the book's title, its author,
    "by ...") at the start of the first chapter not spoken again after the announcement, nor, unless ``front_matter``,
    the publisher's lines among the first chapters' paragraphs."""
    chapters = title_notes(_notes_sections(_introduction_sections(_dashed_sections(_with_parts(_play_sections(
        _chapter_paragraphs(chapters, front_matter)))))))
    title_t, author_t = tuple(_tokens(title or "")), tuple(_tokens(author or ""))
    named = [tuple(_tokens(_strip_number(ch.title or ""))) for ch in chapters]
    out = []
    for n, ch in enumerate(chapters):
        paras, kinds = list(ch.paragraphs), list(ch.kinds) if ch.kinds else None
        untitled = False
        if n < 2:  # a contents list printed as running text in the first pages
            later = [t for t in named[n + 1:] if len(t) >= 1]
            keep = [not _lists_titles(p, later) for p in paras]
            # an expanded contents under its label (titles with their summaries), or titles numbered in roman run on
            for i in range(len(paras) - 1):
                if _CONTENTS_LABEL_RE.match(paras[i].strip()) and (_names_in_order(paras[i + 1], later) >= 3
                                                                    or _roman_list(paras[i + 1])):
                    keep[i] = keep[i + 1] = False
            paras = [p for p, ok in zip(paras, keep) if ok]
            kinds = [kd for kd, ok in zip(kinds, keep) if ok] if kinds else kinds
        if n < 2:  # the title page: the first document, or the second after a producer's page
            while paras and (tuple(_tokens(paras[0])) in (title_t, author_t, ("by",)) or _BY_RE.match(paras[0])
                             and author_t and tuple(_tokens(paras[0]))[-len(author_t):] == author_t):
                paras.pop(0)
                if kinds:
                    kinds.pop(0)
            run = _title_page_lines(paras, title or "", ch.title if n == 0 else "")
            if run and n == 0 and _titled_as_book(ch.title, title or ""):
                untitled = True  # the title page's own entry: the announcement said its title
            if run:
                paras = paras[:run.start] + paras[run.stop:]
                kinds = kinds[:run.start] + kinds[run.stop:] if kinds else kinds
            # the publisher's imprint among the opening lines ("CASSELL & COMPANY, Limited: LONDON, PARIS & MELBOURNE.",
            # "BOSTON: PUBLISHED FOR THE AUTHOR 1861.") and, in the first chapter, a credit ("EDITED BY L. MARIA CHILD");
            # a copyright or "Printed in U.S.A." line stays: it marks a copyright page, which jobs.ingest.matter drops whole
            # (a copyright notice stays: it marks a copyright page, which jobs.ingest.matter leaves out whole)
            drop = [not front_matter and bool((_PUBLISHER_RE.search(p) or _imprint_line(p) and not _COPY_PAGE_RE.search(p)
                                               or _BY_RE.match(p) and n == 0) and len(p.split()) <= 12) for p in paras]
            keep = [not d for d in _run_on_lines(paras, drop)]
            paras = [p for p, ok in zip(paras, keep) if ok]
            kinds = [kd for kd, ok in zip(kinds, keep) if ok] if kinds else kinds
            if not paras:
                continue
        spoken = title_case(ch.title) if _shouted(ch.title) else ch.title
        tt = tuple(_tokens(spoken))
        if not out and title_t and tt and len(tt) % len(title_t) == 0 and tt == title_t * (len(tt) // len(title_t)) \
                or untitled:
            spoken = ""  # front matter under the title page's entry: the announcement said the title
        out.append(Chapter(len(out) + 1, spoken, paras, kinds, ch.part))
    return _dedications_opening(out) or chapters


_COPY_PAGE_RE = re.compile(r"\bcopyright\b|\u00a9|\bprinted\s+in\b", re.I)


def _title_page_lines(paras: list[str], title: str, head: str = "") -> range:
    """The lines of a title page printed after other opening matter (an epigraph over "PERPETUAL PEACE A
    PHILOSOPHICAL ESSAY"): from a short line that starts with the book's title (its part before a colon) or its
    subtitle (four words or more: "To which is prefix'd A PARTICULAR ACCOUNT ..." under "LETTERS OF Abelard and
    Heloise."), the short lines under it that are no prose, or are credits ("BY IMMANUEL KANT", "TRANSLATED ...
    BY ...", "WITH A PREFACE BY ..."), imprint or edition lines, up to the first other paragraph; an empty range
    when there is none. Under a ``head`` that starts with the book's title (the title page's own entry) the lines
    run from the first paragraph, one or more, up to a dedication or an epigraph."""
    main, _, sub = title.partition(":")
    main_t, sub_t = tuple(_tokens(main)), tuple(_tokens(sub))
    if len(main_t) < 1:
        return range(0)
    if _titled_as_book(head, title):
        return range(0, _title_page_end(paras, 0, sub_t))
    for i, p in enumerate(paras[:30]):
        words = tuple(_tokens(p))
        if len(p.split()) <= 15 and words[:len(main_t)] == main_t and (not _is_prose(p) or words == main_t) \
                or _subtitle_line(p, sub_t):
            e = _title_page_end(paras, i + 1, sub_t)
            return range(i, e) if e - i >= 2 else range(0)
    return range(0)


def _subtitle_line(p: str, sub_t: tuple[str, ...]) -> bool:
    """A paragraph that starts with the book's subtitle (four words or more), eighty words at most."""
    return len(sub_t) >= 4 and tuple(_tokens(p))[:len(sub_t)] == sub_t and len(p.split()) <= 80


def _titled_as_book(head: str, title: str) -> bool:
    """Whether a heading starts with the book's title (its part before a colon), accents aside ("Bhagavad-Gita"
    for "Bhagavad-G\u00eet\u00e2"): the title page's own entry."""
    def plain(t: str) -> tuple[str, ...]:
        return tuple(_tokens("".join(c for c in unicodedata.normalize("NFKD", t) if not unicodedata.combining(c))))

    main_t = plain(title.split(":")[0])
    return bool(main_t) and len(head.split()) <= 20 and plain(head)[:len(main_t)] == main_t


_DEDICATION_LABEL_RE = re.compile(r"^\W*dedicat(?:ion|ory(?:\s+\w+)?)\W*$", re.I)
"""A dedication's label alone on its line: "Dedication", "DEDICATORY EPISTLE"."""


def _title_page_end(paras: list[str], e: int, sub_t: tuple[str, ...] = ()) -> int:
    """Where a title page's lines from ``e`` end: at the first paragraph of more than forty words, or of prose that
    is no credit nor imprint line, or that opens a dedication or a quotation (an epigraph); the subtitle
    (:func:`_subtitle_line`) is a line of it."""
    while e < len(paras) and (_subtitle_line(paras[e], sub_t) or len(paras[e].split()) <= 40 and (
            _BY_RE.match(paras[e]) or _imprint_line(paras[e]) or not _is_prose(paras[e]))
            and not _DEDICATION_RE.match(paras[e]) and not _DEDICATION_LABEL_RE.match(paras[e])
            and not paras[e].lstrip().startswith(("\u201c", '"'))):
        e += 1
    return e


def _dedications_opening(chapters: list[Chapter]) -> list[Chapter]:
    """An untitled piece inside the book that is only a dedication ("Dedicated to Wilhelm Gundert, my cousin in
    Japan", under a part's heading) opens the titled chapter after it: spoken before that chapter's heading
    (``Chapter.opening``), no chapter of its own. (Before the first chapter, ``jobs.ingest.opening`` does so.)"""
    out: list[Chapter] = []
    k = 0
    while k < len(chapters):
        ch = chapters[k]
        nxt = chapters[k + 1] if k + 1 < len(chapters) else None
        if out and nxt is not None and not ch.title.strip() and nxt.title.strip() and not nxt.opening \
                and 1 <= len(ch.paragraphs) <= 2 and _DEDICATION_LINE_RE.match(ch.paragraphs[0]) \
                and all(len(p.split()) <= 40 for p in ch.paragraphs):
            kinds = None if ch.kinds is None and nxt.kinds is None else \
                [*(ch.kinds or ["text"] * len(ch.paragraphs)), *(nxt.kinds or ["text"] * len(nxt.paragraphs))]
            out.append(Chapter(len(out) + 1, nxt.title, [*ch.paragraphs, *nxt.paragraphs], kinds, nxt.part,
                               opening=len(ch.paragraphs)))
            k += 2
            continue
        out.append(Chapter(len(out) + 1, ch.title, ch.paragraphs, ch.kinds, ch.part, opening=ch.opening))
        k += 1
    return out
