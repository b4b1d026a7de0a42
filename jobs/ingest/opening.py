"""Opening matter: what a book prints before its first heading, spoken as the opening of its first chapter.

The loaders keep the text before a book's first heading (after the title page) as an untitled first
chapter. When that text is only opening matter (a dedication, an epigraph, a motto, verse, a
dedicatory letter or a short note), it is no chapter a reader would name: :func:`fold_opening` makes it
the opening of the first titled chapter instead (:attr:`jobs.ingest.book.Chapter.opening`), spoken in
print order, after the announcement and before that chapter's heading. Longer prose (an unheaded
introduction, a story that starts without a heading) stays a chapter of its own; a short piece under its
own title in capitals (a prefatory poem) is a chapter titled by that line, with what comes before the line
as its opening (:func:`_title_the_piece`); several such pieces ("NOTICE", then "EXPLANATORY") are a chapter
each (:func:`_split_pieces`).

Works on :class:`Chapter` lists only (every format); does not decide what is front matter that is never
spoken (``jobs.ingest.outline``'s title page rules and ``jobs.ingest.matter`` do).
"""

from __future__ import annotations

import re

from jobs.ingest.book import Chapter
from jobs.ingest.common import _is_prose
from jobs.ingest.outline import _BY_RE, title_case

MAX_OPENING_WORDS = 600
"""An untitled first chapter of more words than this is a chapter, whatever it holds."""
MAX_PLAIN_PROSE_WORDS = 100
"""An untitled first chapter with more words than this of plain prose (running text that is no dedication,
quotation, verse or letter) is a chapter: an unheaded introduction, foreword or story."""

_DEDICATION_START_RE = re.compile(r"^(?:to|for|in\s+memory\s+of)\s+\S", re.I)
_READER_RE = re.compile(r"\breaders?\b", re.I)
_DEDICATION_HEADING_RE = re.compile(r"^(?:the\s+)?dedication\W*$", re.I)
_DEDICATES_RE = re.compile(r"\bdedicat(?:e|ed|es|ion)\b", re.I)
_QUOTE_OPENERS = "\"'\u201c\u2018"
_VERSE_LINE_START_RE = re.compile(
    r"(?<=[a-z,\-\u2014)])\s+(?:And|But|Or|Nor|The|That|Thy|Thou|Thee|To|In|Of|With|For|From|By|As|Is|Are|Was|Were"
    r"|Where|When|Which|Who|Whose|What|How|Than|Then|So|Yet|If|Though|Till|Until|Like|Into|Upon|On|At|No|Not"
    r"|My|Our|His|Her|Its|Their|Your|We|You|He|She|It|They|Shall|May|Can|Will|Would|Could|Should|Be|A|An"
    r"|Such|There|Here|Thus|Let|All)\b")
"""A verse line's start inside a paragraph whose lines were joined: a capitalised small word right after a
word or a comma ("... unclouded brow And dreaming eyes ...")."""
_SIGNATURE_WORD_RE = re.compile(r"^[A-Z][\w.'\u2019\-]*[.,]?$")
_INITIALS_RE = re.compile(r"^(?:[A-Z][A-Za-z]?\.)+$")


def fold_opening(chapters: list[Chapter]) -> list[Chapter]:
    """An untitled first chapter that :func:`opening_matter` calls opening matter becomes the opening of the
    titled chapter after it: its paragraphs go first in that chapter, and that chapter's ``opening`` counts
    them (they are spoken before its heading). So does a first chapter headed by a dedication's address
    (:func:`_dedication_chapter`), its heading the first paragraph of that opening. The chapters after it are
    renumbered."""
    if len(chapters) < 2:
        return chapters
    first, nxt = chapters[0], chapters[1]
    if _dedication_chapter(first) and nxt.title.strip() and not nxt.opening:
        # its heading is the dedication's first line, spoken with it
        first = Chapter(1, "", [first.title, *first.paragraphs], None if first.kinds is None else
                        ["text", *first.kinds], first.part)
    elif first.title.strip() or first.opening or not nxt.title.strip() or nxt.opening:
        return chapters
    elif not opening_matter([p for i, p in enumerate(first.paragraphs) if first.kind(i) == "text"]):
        pieces = _split_pieces(_title_the_piece(first))
        return [*pieces, *(_renumbered(c, len(pieces) + i + 1) for i, c in enumerate(chapters[1:]))]
    kinds = [first.kind(i) for i in range(len(first.paragraphs))] + [nxt.kind(i) for i in range(len(nxt.paragraphs))]
    merged = Chapter(1, nxt.title, list(first.paragraphs) + list(nxt.paragraphs),
                     None if all(k == "text" for k in kinds) else kinds, nxt.part,
                     title_is_letter=nxt.title_is_letter, opening=len(first.paragraphs))
    rest = [Chapter(i + 2, c.title, c.paragraphs, c.kinds, c.part, title_is_letter=c.title_is_letter,
                    opening=c.opening) for i, c in enumerate(chapters[2:])]
    return [merged, *rest]


def _dedication_chapter(ch: Chapter) -> bool:
    """A first chapter headed by a dedication's address is opening matter, whatever its text: a heading
    "To ..." of eight words at most that addresses no reader ("To Samuel Johnson, LL.D." over a dedicatory
    letter; "To the Reader" heads a preface), or "Dedication", over :data:`MAX_OPENING_WORDS` words at
    most."""
    title = ch.title.strip()
    address = bool(_DEDICATION_START_RE.match(title)) and title.split()[0].casefold() == "to" \
        and len(title.split()) <= 8 and not _READER_RE.search(title)
    return (address or bool(_DEDICATION_HEADING_RE.match(title))) and not ch.opening \
        and sum(len(p.split()) for i, p in enumerate(ch.paragraphs) if ch.kind(i) == "text") <= MAX_OPENING_WORDS


def _title_the_piece(ch: Chapter) -> Chapter:
    """An untitled first chapter of :data:`MAX_OPENING_WORDS` words at most that holds a piece under its own
    title (:func:`_titled_piece`: "THE PASTURE" over a prefatory poem), with nothing or only opening matter
    (:func:`opening_matter`: a dedication) before that line, is titled by the line, in title case; the
    paragraphs before it are its opening, spoken before the title. Any other chapter is returned as it is."""
    at = [i for i in range(len(ch.paragraphs)) if ch.kind(i) == "text"]
    texts = [ch.paragraphs[i] for i in at]
    k = _titled_piece(texts) if sum(len(p.split()) for p in texts) <= MAX_OPENING_WORDS else None
    if k is None or k and not opening_matter(texts[:k]):
        return ch
    i = at[k]
    kinds = None if ch.kinds is None else ch.kinds[:i] + ch.kinds[i + 1:]
    return Chapter(ch.index, title_case(texts[k]), ch.paragraphs[:i] + ch.paragraphs[i + 1:], kinds, ch.part,
                   title_is_letter=ch.title_is_letter, opening=i)


def _renumbered(c: Chapter, index: int) -> Chapter:
    if c.index == index:
        return c
    return Chapter(index, c.title, c.paragraphs, c.kinds, c.part, title_is_letter=c.title_is_letter, opening=c.opening)


def _split_pieces(ch: Chapter) -> list[Chapter]:
    """A chapter titled by its piece's line (:func:`_title_the_piece`) that holds further pieces under their own
    titles (a line in capitals over a paragraph of 20 words or more, no dedication: "NOTICE" over the
    author's notice, then "EXPLANATORY" over his explanatory note) is split at each of those lines: each
    piece is a chapter titled by its line, in title case. Any other chapter is returned alone."""
    if not ch.title.strip() or ch.opening and not opening_matter(ch.paragraphs[:ch.opening]):
        return [ch]
    at = [i for i in range(ch.opening, len(ch.paragraphs)) if ch.kind(i) == "text"]
    texts = [ch.paragraphs[i] for i in at]
    cuts = [at[n] for n, (a, b) in enumerate(zip(texts, texts[1:]))
            if n and _caps_title(a) and not _DEDICATION_START_RE.match(a) and len(b.split()) >= 20]
    if not cuts:
        return [ch]
    out: list[Chapter] = []
    bounds = [ch.opening, *cuts, len(ch.paragraphs)]
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        start, title, opening = (0, ch.title, ch.opening) if n == 0 else (a + 1, title_case(ch.paragraphs[a]), 0)
        kinds = None if ch.kinds is None else ch.kinds[start:b]
        out.append(Chapter(ch.index + n, title, ch.paragraphs[start:b], kinds, ch.part,
                           title_is_letter=ch.title_is_letter, opening=opening))
    return out


def opening_matter(paras: list[str]) -> bool:
    """The text before a book's first heading is opening matter, not a chapter, when it holds at most
    :data:`MAX_OPENING_WORDS` words, no titled piece (:func:`_titled_piece`: a prefatory poem under its own
    title is a chapter), and at most :data:`MAX_PLAIN_PROSE_WORDS` words of plain prose: paragraphs of
    running text that are no dedication ("To ...", "For ...", "... I dedicate this volume"), quotation
    (opening with a quotation mark), verse (:func:`_verse`) or part of a letter (:func:`_letter`: the text
    under a dedication's address, after a salutation, or signed)."""
    if not paras or sum(len(p.split()) for p in paras) > MAX_OPENING_WORDS or _titled_piece(paras) is not None:
        return False
    if _letter(paras):
        return True
    plain = sum(len(p.split()) for p in paras
                if _running_text(p) and not (_dedication(p) or p.lstrip()[:1] in _QUOTE_OPENERS or _verse(p)))
    return plain <= MAX_PLAIN_PROSE_WORDS


def _running_text(p: str) -> bool:
    """Prose (:func:`jobs.ingest.common._is_prose`) in words: half its words or more are lower-case words (a
    chess problem's moves "1. Alice meets R. Q. 1. R. Q. to K. R.'s 4th" are not)."""
    words = p.split()
    return _is_prose(p) and 2 * sum(1 for w in words if w.strip(".,;:!?()\"'\u2019\u201c\u201d").isalpha()
                                    and w.strip(".,;:!?()\"'\u2019\u201c\u201d").islower()) >= len(words)


def _dedication(p: str) -> bool:
    """A dedication: a short paragraph opening "To ...", "For ..." or "In memory of ...", or one that
    dedicates ("This volume is dedicated to my Wife", "I dedicate this volume")."""
    return bool(_DEDICATES_RE.search(p)) or bool(_DEDICATION_START_RE.match(p)) and len(p.split()) <= 40


def _verse(p: str) -> bool:
    """Verse whose lines were run together into one paragraph: three or more line starts
    (:data:`_VERSE_LINE_START_RE`), one in every 15 words or more."""
    starts = len(_VERSE_LINE_START_RE.findall(p))
    return starts >= 3 and starts * 15 >= len(p.split())


def _address_word(p: str) -> bool:
    return p.strip(" .,:;").casefold() in ("to", "for")


def _signature(p: str) -> bool:
    """A signature line: four words at most, each capitalised, one of them initials ("R. L. S.", "J.B.",
    "FR. ST. ALBAN")."""
    words = p.split()
    return 1 <= len(words) <= 4 and all(_SIGNATURE_WORD_RE.match(w) for w in words) \
        and any(_INITIALS_RE.match(w) for w in words)


def _letter(paras: list[str]) -> bool:
    """A dedicatory letter: a dedication's address set in lines (a paragraph that is only "To", then the
    addressee's lines: "To" / "Caroline Grosvenor"), a salutation (six words at most, ending with a comma or
    a colon, before running text: "My Dear Tommy,", "EXCELLENT LORD:"), or a signature (:func:`_signature`)
    after running text or verse."""
    if any(_address_word(p) for p in paras[:3]):
        return True
    for a, b in zip(paras, paras[1:]):
        if len(a.split()) <= 6 and a.rstrip().endswith((",", ":")) and len(b.split()) >= 20:
            return True
        if len(a.split()) >= 20 and _signature(b):
            return True
    return False


def _caps_title(p: str) -> bool:
    letters = [c for c in p if c.isalpha()]
    return 1 <= len(p.split()) <= 8 and len(letters) >= 3 and all(c.isupper() for c in letters) \
        and not p.rstrip().endswith((",", ":", ";"))


def _titled_piece(paras: list[str]) -> int | None:
    """Where a piece under its own title starts (the index of its title line), or None: a line in capitals
    (eight words at most) directly over a paragraph of 20 words or more ("THE PASTURE" over a prefatory
    poem), where the line is no dedication or address ("TO THE HESITATING PURCHASER") and no line of an
    address set in lines (the lines after a paragraph that is only "To", up to the first paragraph of 20
    words or more: "TO" / "MY DEAR FRIEND" / "HOMMY-BEG")."""
    in_address = False
    for n, (a, b) in enumerate(zip(paras, paras[1:])):
        if _address_word(a):
            in_address = True
            continue
        if in_address and len(a.split()) < 20:
            continue
        in_address = False
        if _caps_title(a) and not _DEDICATION_START_RE.match(a) and not _SIGNED_NAME_RE.match(a) \
                and not _BY_RE.match(a) and len(b.split()) >= 20:  # "WRITTEN BY HERSELF." is a credit
            return n
    return None


_SIGNED_NAME_RE = re.compile(r"^(?:[A-Z]\.[ \t]?){1,3}[A-Z][A-Z'\u2019-]+\b")
"""A name signed under a quotation, its first names as initials: "A.C. SWINBURNE", "W.C. HAZLITT ON LAMB'S LETTERS."."""
