"""Small text helpers shared by the format loaders.

Whitespace normalisation, the "is this prose?" test behind the front-matter rule, separator
lines (``* * *``), title tokens and joining a heading with its title, the "Contents" label, and
how a path is shown in a one-line message. Knows nothing of any file format.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path


def _show(p: Path | str) -> str:
    """A path for a one-line message (control characters escaped)."""
    s = str(p)
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        s = repr(s)[1:-1]
    return s


#: Dropped from every paragraph, title and author: invisible marks (soft hyphen, zero-width space,
#: word joiner, BOM), the bidi controls (U+061C, U+200E/F, embeddings and overrides U+202A-U+202E,
#: isolates U+2066-U+2069: "\u202egpj.exe" shows reversed in tags and lists), and the C0 and C1
#: control characters (terminal escapes) that are not whitespace.
_INVISIBLE = dict.fromkeys(
    [*map(ord, "\u00ad\u200b\u2060\ufeff\u061c\u200e\u200f"), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
     *(c for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)] if not chr(c).isspace())], None)
_WS_RE = re.compile(r"\s+")
#: Zero-width non-joiner and joiner (U+200C, U+200D): they shape the letters of scripts that join (Persian,
#: Devanagari), so they stay between two such letters; anywhere else (a line's start, a Latin word, a space)
#: they are invisible leftovers of a conversion and go like the marks above.
_JOINER_RE = re.compile(r"[\u200c\u200d]+")


def _joins(c: str) -> bool:
    return bool(c) and unicodedata.category(c)[0] in "LM"


def _keep_joiner(m: re.Match) -> str:
    s, i, j = m.string, m.start(), m.end()
    before, after = s[i - 1:i], s[j:j + 1]
    if _joins(before) and _joins(after) and max(ord(before), ord(after)) > 0x36F:
        return m.group(0)  # inside a word of a script that joins (a virama is a mark)
    return ""


def _drop_invisible(s: str) -> str:
    """The text without its invisible marks (``_INVISIBLE``) and stray joiners, its lines and line ends kept:
    a zero-width space before a heading's hashes ("\u200b## THE THIRD CHAPTER") or a line's words hides them."""
    s = s.translate(_INVISIBLE)
    return _JOINER_RE.sub(_keep_joiner, s) if ("\u200c" in s or "\u200d" in s) else s


def _norm(s: str) -> str:
    """Whitespace-normalise: one space between words, none at the ends; drop invisible marks, bidi
    controls and control characters (see ``_INVISIBLE``) and stray joiners (``_drop_invisible``)."""
    return " ".join(_drop_invisible(s).split())


_SENTENCE_END_RE = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]_*]*$")


_CAPS_UMLAUT_RE = re.compile(r"(?<=[AOU])e(?=[A-Z])")
"""An umlaut written in ASCII inside a word in capitals ("OLMUeTZ", "KOeCHEL" for OLMÜTZ, KÖCHEL)."""


_CAST_LABEL_RE = re.compile(r"^(?:dr[a\u0101]matis\s+pers[o\u014d]n\S*|(?:the\s+)?persons\s+(?:in|of)\s+the\s+play|persons\s+represented"
                            r"|(?:the\s+)?actors[\u2019']?\s+names|(?:the\s+)?names\s+of\s+the\s+actors"
                            r"|(?:the\s+)?characters(?:\s+in\s+the\s+play|\s+(?:and\s+)?(?:the\s+)?original\s+cast)?"
                            r"|cast(?:\s+of\s+characters)?)\b\W*$",
                            re.I)
"""The label of a play's cast list ("Dramatis Personae", "THE PERSONS IN THE PLAY", "THE ACTORS NAMES.", "DR\u0100MATIS PERS\u014cNAE" with
its Latin vowels marked long, "CHARACTERS   ORIGINAL CAST" over the parts and their first players)."""


_DEDICATION_LINE_RE = re.compile(r"^(?:(?i:to|for)\s+(?:(?i:the\s+memory|my)\b|[A-Z])"
                                 r"|(?i:in\s+memory\s+of|dedicated\s+to)\s"
                                 r"|(?i:this\s+(?:book|volume)\s+is\s+(?:(?:\w+ly\s+)?dedicated\s+)?(?:to|for))\s+[A-Z])")
"""A dedication's first words: "To Romain Rolland", "To the Memory of ...", "Dedicated to ...", "This book is for
Hadley" (not "To be or ...")."""


def _is_prose(p: str) -> bool:
    """A paragraph that reads as running text (not a title, credit or edition line): twenty words or more, or
    three or more, some letters in lower case, ending a sentence (a line in capitals, "OLMUeTZ" and all, is
    no prose, nor a block of twenty words or more four fifths in capitals)."""
    words = p.split()
    if len(words) >= 20:
        # a long block in capitals is a title page's credit ("TRANSLATED INTO ENGLISH RHYMING VERSE WITH
        # EXPLANATORY NOTES BY GILBERT MURRAY LL.D., ... REGIUS PROFESSOR OF GREEK ..."), not text
        letters = [c for c in p if c.isalpha()]
        return sum(c.isupper() for c in letters) < 0.8 * len(letters)
    if len(words) < 3 or p.lower().startswith("by "):
        return False
    return any(c.islower() for c in _CAPS_UMLAUT_RE.sub("", p)) and bool(_SENTENCE_END_RE.search(p))


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


_ILLUSTRATIONS_LABEL_RE = re.compile(r"^(?:list\s+of\s+(?:the\s+)?)?(?:illustrations|plates|drawings|engravings|woodcuts)[.:]?$",
                                     re.I)
"""The label over a list of the book's pictures: "ILLUSTRATIONS", "List of Plates", "LIST OF DRAWINGS"."""
_CONTENTS_LABEL_RE = re.compile(r"^(?:(?:(?:table|analysis|synopsis|summary)\s+of\s+(?:the\s+)?)?contents(?:\s+of\s+(?:the\s+)?"
                                r"(?:vol(?:ume)?\.?\s*(?:[ivxlcdm]+|\d{1,2})|\w+\s+volume))?"
                                r"|index\s+of\s+first\s+lines)[.:]?$", re.I)
"""The label over a contents list, also naming the volume it lists ("CONTENTS OF VOLUME II.", "Contents of the
Second Volume"), or over an index of first lines (a poetry book's contents by first line)."""
