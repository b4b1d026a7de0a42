"""Chapters -> paragraphs -> sentences -> utterances.

An utterance is what the engine synthesizes in one go. Normally it is one
sentence. A sentence whose phoneme sequence is longer than ``max_phonemes`` is
split at clause boundaries (``; : , — –``) and, as a last resort, between
words. Utterance texts are exact, stripped slices of the paragraph text, in
order, so joining them gives back every word of the paragraph exactly once.

Each utterance carries the kind of pause that follows it (:class:`PauseKind`); the seconds are the
job's and are applied when chapters are assembled (:mod:`jobs.finalize`). The chapter's paragraph kinds
(``Chapter.kinds``, None: all text) decide the section pauses: a "heading" paragraph is spoken as a
heading and followed by the section pause (the text before it ends with one too); a "break"
paragraph (a scene break, also any paragraph that is only a marker such as "* * *") is not spoken
at all and becomes the section pause after the utterance before it. This module does not find
headings or breaks in the text (``jobs/ingest`` does), nor decide the pause between chapters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from jobs.normalize import is_scene_break
from jobs.phonemize import Phonemes

# A sentence ends after . ! ? … (plus closing quotes/brackets) followed by whitespace.
_SENTENCE_END = re.compile(r"""[.!?…]+["'”’»)\]]*\s+""")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st prof sr jr vs etc e.g i.e vol ch p pp fig mt capt col gen lt sgt rev hon".split()
)
#: "No. 5": the full stop ends no sentence before a number ("Say no. It is" ends one).
_BEFORE_NUMBER = frozenset({"no", "nos"})
#: Units written with a full stop after a number ("3 in. of rain"): no sentence end before a lower-case word.
_UNITS = frozenset("in ft yd yds mi lb lbs oz pt qt gal sec secs min mins hr hrs".split())
# Clause boundaries: the punctuation stays with the piece before it.
# Only before whitespace, so "1,234" or "well—known" are never cut inside.
_CLAUSE_END = re.compile(r"""(?:[;:,]|\s[—–-]{1,2}|[—–])["'”’»)\]]*(?=\s)\s*""")
_WORD = re.compile(r"\S+")
#: When a piece is this many times ``max_phonemes`` long in characters, it is split by characters
#: before being phonemized (espeak-ng on a multi-megabyte line is slow and pointless).
_PRESPLIT_CHARS_PER_PHONEME = 3


class PauseKind(str, Enum):
    """What follows an utterance in the chapter audio."""

    TITLE = "title"
    SECTION = "section"
    """After a section heading, before one, and where a scene break stood."""
    PARAGRAPH = "paragraph"
    SENTENCE = "sentence"
    CLAUSE = "clause"


@dataclass
class Utterance:
    """One unit of synthesis, with where it sits in the book."""

    book_index: int
    chapter_index: int
    utterance_index: int
    """0-based position inside its chapter (the chapter's reading order)."""
    paragraph_index: int
    """-1 for the chapter title, else 0-based paragraph of the chapter."""
    sentence_index: int
    """0-based sentence inside the paragraph."""
    text: str
    phoneme_ids: list[int]
    missing_phonemes: int
    pause: PauseKind
    speakable: bool
    spoken_text: str | None = None
    """What was given to the phonemizer (normalised, lexicon applied); None: ``text`` itself."""


def paragraph_kind(chapter, i: int) -> str:
    """"text", "heading" or "break" for paragraph ``i`` of ``chapter`` (``Chapter.kinds``; a chapter
    without kinds is all text, except paragraphs that are only a scene-break marker)."""
    kinds = getattr(chapter, "kinds", None)
    kind = kinds[i] if kinds is not None else "text"
    if kind == "text" and is_scene_break(chapter.paragraphs[i]):
        return "break"
    return kind


def _section_pause_before(out: list["Utterance"]) -> None:
    """The utterance before a section heading or a scene break is followed by the section pause
    (the chapter title keeps its own pause)."""
    if out and out[-1].pause != PauseKind.TITLE:
        out[-1].pause = PauseKind.SECTION


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences; the pieces are stripped slices in order."""
    return _split_by(paragraph, _SENTENCE_END, joins=_ends_with_abbreviation)


def _ends_with_abbreviation(candidate: str, rest: str = "") -> bool:
    """"Mr. Smith", "J. R. R. Tolkien", "No. 5", "3 in. of rain": the full stop does not end the
    sentence (``rest``: the text after it)."""
    words = candidate.rsplit(None, 2)
    last_word = words[-1].rstrip(".").lower()
    nxt = rest.lstrip()[:1]
    if last_word in _BEFORE_NUMBER:
        return nxt.isdigit() or nxt == "#"
    if last_word in _UNITS and len(words) > 1 and words[-2].replace(",", "").replace(".", "").isdigit():
        return nxt.islower()
    # "a.m.", "U.N.", "e.g.", "Ph.D.": dotted initialisms do not end a sentence either
    return (last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]", last_word) is not None
            or re.fullmatch(r"[(\[\"'“‘]?(?:[a-z]{1,2}\.)+[a-z]{1,2}", last_word) is not None)


def _split_by(text: str, pattern: re.Pattern, joins=None) -> list[str]:
    """Stripped pieces of ``text`` ending at each match of ``pattern``; a match where ``joins(piece,
    rest)`` is true (``rest``: the text after the match) does not end a piece (the piece runs on to
    the next match)."""
    pieces, start = [], 0
    for m in pattern.finditer(text):
        if m.end() > start:
            piece = text[start : m.end()].strip()
            if piece and joins is not None and joins(piece, text[m.end():]):
                continue
            if piece:
                pieces.append(piece)
            start = m.end()
    rest = text[start:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def _chunks_of_words(text: str, max_chars: int) -> list[str]:
    """Greedy runs of whole words, each at most ``max_chars`` (a single longer word stands alone)."""
    out, cur_start, cur_end = [], None, None
    for m in _WORD.finditer(text):
        if cur_start is None:
            cur_start, cur_end = m.start(), m.end()
        elif m.end() - cur_start <= max_chars:
            cur_end = m.end()
        else:
            out.append(text[cur_start:cur_end])
            cur_start, cur_end = m.start(), m.end()
    if cur_start is not None:
        out.append(text[cur_start:cur_end])
    return out


class Segmenter:
    """Splits chapter paragraphs into utterances that fit ``max_phonemes``.

    ``phonemize`` is the voice's frontend (:class:`jobs.phonemize.Phonemizer`).
    """

    def __init__(self, phonemize: Callable[[str], Phonemes], max_phonemes: int,
                 speak: Callable[[str, bool], str] | None = None) -> None:
        if max_phonemes < 8:
            raise ValueError("max_phonemes must be at least 8")
        self._phonemize_spoken = phonemize
        self.max_phonemes = max_phonemes
        #: written text -> spoken text (``speak(text, heading)``: normalisation, lexicon); None: as written
        self.speak = speak
        self._heading = False
        self._spoken: dict[str, str] = {}

    def phonemize(self, text: str) -> Phonemes:
        """Phonemes of the spoken form of ``text`` (remembered, for the utterance's ``spoken_text``)."""
        return self._phonemize_spoken(self.spoken(text))

    def spoken(self, text: str) -> str:
        if self.speak is None:
            return text
        key = f"{int(self._heading)}{text}"
        if key not in self._spoken:
            if len(self._spoken) > 4096:
                self._spoken.clear()
            self._spoken[key] = self.speak(text, self._heading)
        return self._spoken[key]

    def _fits(self, ph: Phonemes) -> bool:
        return len(ph.symbols) <= self.max_phonemes

    def split_long(self, text: str) -> list[tuple[str, Phonemes]]:
        """Pieces of ``text`` whose phonemes fit, splitting at clauses, then between words."""
        if len(text) <= self.max_phonemes * _PRESPLIT_CHARS_PER_PHONEME:
            ph = self.phonemize(text)
            if self._fits(ph):
                return [(text, ph)]
        clauses = _split_by(text, _CLAUSE_END)
        if len(clauses) > 1:
            return self._pack(clauses)
        words = _chunks_of_words(text, max(1, (len(text) + 1) // 2))
        if len(words) <= 1:
            # One enormous "word" (no spaces): cut it by characters as a last resort.
            if len(text) <= 1:
                return [(text, self.phonemize(text))]
            half = len(text) // 2
            return self.split_long(text[:half]) + self.split_long(text[half:])
        if len(text) > self.max_phonemes * _PRESPLIT_CHARS_PER_PHONEME:
            words = _chunks_of_words(text, self.max_phonemes)
        out: list[tuple[str, Phonemes]] = []
        for w in words:
            out.extend(self.split_long(w))
        return out

    def _pack(self, clauses: list[str]) -> list[tuple[str, Phonemes]]:
        """Greedily join consecutive clauses while the joined piece still fits."""
        out: list[tuple[str, Phonemes]] = []
        cur: str | None = None
        cur_ph: Phonemes | None = None
        for clause in clauses:
            if cur is None:
                parts = self.split_long(clause)
                *done, (cur, cur_ph) = parts
                out.extend(done)
                continue
            joined = f"{cur} {clause}"
            ph = self.phonemize(joined) if len(joined) <= self.max_phonemes * _PRESPLIT_CHARS_PER_PHONEME else None
            if ph is not None and self._fits(ph):
                cur, cur_ph = joined, ph
            else:
                out.append((cur, cur_ph))
                *done, (cur, cur_ph) = self.split_long(clause)
                out.extend(done)
        if cur is not None:
            out.append((cur, cur_ph))
        return out

    def chapter_utterances(self, book_index: int, chapter, announce: str | None = None) -> list[Utterance]:
        """Utterances of one :class:`jobs.ingest.Chapter`, title first, in reading order.

        ``announce`` ("Title, by Author."), when given, is spoken first (paragraph index -2). A chapter's
        opening matter (its first ``Chapter.opening`` paragraphs: a dedication, an epigraph) comes between
        the announcement and the title (paragraph index -1), with the section pause before the title."""
        out: list[Utterance] = []

        def add(p_i: int, s_i: int, piece: str, ph: Phonemes, pause: PauseKind) -> None:
            spoken = self.spoken(piece)
            out.append(Utterance(book_index, chapter.index, len(out), p_i, s_i, piece, ph.ids,
                                 ph.missing, pause, ph.speakable, spoken if spoken != piece else None))

        def heading(p_i: int, text: str | None) -> None:
            text = " ".join((text or "").split())
            if not text:
                return
            # a dictionary's section letter ("C") is said as the letter, not as a heading's roman numeral
            self._heading = not (p_i == -1 and getattr(chapter, "title_is_letter", False))
            try:
                pieces = self.split_long(text)
                for piece, ph in pieces:
                    add(p_i, 0, piece, ph, PauseKind.CLAUSE)
            finally:
                self._heading = False
            out[-1].pause = PauseKind.TITLE

        opening = getattr(chapter, "opening", 0) or 0
        if not 0 < opening < len(chapter.paragraphs):
            opening = 0  # no opening matter (or none that leaves text after the title): the title first
        heading(-2, announce)
        for p_i, paragraph in enumerate(chapter.paragraphs):
            if p_i == opening:
                if opening and chapter.title.strip():
                    _section_pause_before(out)
                heading(-1, chapter.title)
            kind = paragraph_kind(chapter, p_i)
            if kind == "break":
                _section_pause_before(out)
                continue
            if kind == "heading":
                text = " ".join(paragraph.split())
                if not text:
                    continue
                _section_pause_before(out)
                self._heading = True
                try:
                    for piece, ph in self.split_long(text):
                        add(p_i, 0, piece, ph, PauseKind.CLAUSE)
                finally:
                    self._heading = False
                out[-1].pause = PauseKind.SECTION
                continue
            sentences = split_sentences(paragraph)
            for s_i, sentence in enumerate(sentences):
                pieces = self.split_long(sentence)
                for k, (piece, ph) in enumerate(pieces):
                    if k < len(pieces) - 1:
                        pause = PauseKind.CLAUSE
                    elif s_i < len(sentences) - 1:
                        pause = PauseKind.SENTENCE
                    else:
                        pause = PauseKind.PARAGRAPH
                    add(p_i, s_i, piece, ph, pause)
        if not chapter.paragraphs:
            heading(-1, chapter.title)
        return out
