"""Plain text: bytes -> str -> heading and paragraph items.

Three stages, in the order a TXT file goes through them:

* decoding (:func:`_decode_text`): UTF-8 (BOM allowed) or the ``--encoding`` codec, refusing
  binary files, zips and PDFs given a text name, and UTF-16/32 without ``--encoding``;
* Project Gutenberg (:func:`_strip_gutenberg`, :func:`_pg_author`): the START/END markers, the
  ``Title:``/``Author:`` header lines and the "Produced by" credit; the marker regexes are also
  used by the EPUB loader on block text;
* TXT structure (:func:`_txt_items`): blank-line blocks, chapter-heading heuristics ("CHAPTER I.",
  roman numerals in sequence, a title line after a bare heading), emphasis and
  ``[Illustration]`` clean-up, producing :class:`_Item` s.

Does not know Markdown syntax (``jobs.ingest.markdown``), how items become chapters
(``jobs.ingest.chapters``) or anything about EPUB.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from dataclasses import dataclass

from core.errors import EncodingError, InputError
from jobs.ingest.common import _CONTENTS_LABEL_RE, _ILLUSTRATIONS_LABEL_RE, _is_separator, _join_title, _norm, _tokens



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
        declared = None if encoding else _declared_legacy(where, data)
        if declared is None and not encoding:
            declared = _undeclared_western(where, data)
        if declared is not None:
            return declared
        pos = e.start
        line = data.count(b"\n", 0, pos) + 1
        col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
        hint = f"--encoding {_guess_legacy(data)} (or the file's real encoding)"
        if not encoding and _high_share(data) > _WESTERN_HIGH_SHARE:
            hint = "--encoding with the file's real encoding (such as cp1251, koi8-r or iso-8859-7)"
        raise EncodingError(
            f"{where} is not valid {label} text: byte 0x{data[pos]:02X} at byte offset {pos} (line {line}, "
            f"column {col}) cannot be decoded; re-save it as UTF-8 or pass {hint}") from None
    text = text.lstrip("\ufeff")
    if "\x00" in text:
        raise InputError(f"{where} contains NUL characters; it is not a text book (pass a .txt, .md or .epub file)")
    return text


_DECLARED_CHARSET_RE = re.compile(rb"^[ \t]*Character[ \t]+set[ \t]+encoding:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.I | re.M)
"""Project Gutenberg's header line naming the file's encoding ("Character set encoding: ISO-8859-1")."""
_LATIN1_NAMES = {"iso88591", "isolatin1", "latin1", "iso885915", "isolatin9", "latin9", "windows1252", "cp1252"}


def _declared_charset(data: bytes) -> str | None:
    """The encoding a Project Gutenberg header names before its START marker, as written; None if none."""
    start = _pg_start(data[:65536].decode("latin-1"))
    m = _DECLARED_CHARSET_RE.search(data[:start.start() if start else 16384])
    return m.group(1).decode("ascii", "replace").strip() if m else None


def _declared_legacy(where: str, data: bytes) -> str | None:
    """A file that is not UTF-8 but whose Project Gutenberg header declares an 8-bit Western encoding
    (ISO-8859-1, Latin-1, ISO-8859-15, Windows-1252: Gutenberg's "-8.txt" files), decoded as declared, with
    a log line saying so; Windows punctuation bytes (0x80-0x9F, control codes in ISO-8859-1) make it
    Windows-1252, which agrees with ISO-8859-1 everywhere else. None when nothing is declared before the
    START marker, or the declaration is no such encoding, or the bytes do not decode with it."""
    said = _declared_charset(data)
    if said is None:
        return None
    if re.sub(r"[^a-z0-9]", "", said.lower()) not in _LATIN1_NAMES:
        return None
    codec = "cp1252" if re.search(rb"[\x80-\x9f]", data) else "latin-1"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        return None
    import logging

    logging.getLogger("booktts.ingest").warning(
        "%s is not valid UTF-8; read as %s, the encoding its Project Gutenberg header declares (%r)%s; "
        "pass --encoding to read it otherwise", where, "Windows-1252" if codec == "cp1252" else "ISO-8859-1",
        said, " (its bytes 0x80-0x9F read as Windows punctuation)" if codec == "cp1252" else "")
    text = text.lstrip("\ufeff")
    if "\x00" in text:
        return None
    return text


_NOT_ASCII_LETTERS = bytes(b for b in range(256) if not (65 <= b <= 90 or 97 <= b <= 122))
_ASCII_BYTES = bytes(range(128))
_WESTERN_HIGH_SHARE = 0.25
"""Western text written in an 8-bit code page: its accented letters and Windows punctuation (bytes 0x80-0xFF)
are a few in a hundred of its letters, even in French or Icelandic; in Cyrillic, Greek or Hebrew text
read the same way they are nearly all of them."""


def _high_share(data: bytes) -> float:
    """Bytes 0x80-0xFF as a share of those bytes and the ASCII letters together."""
    high = len(data.translate(None, _ASCII_BYTES))
    letters = len(data.translate(None, _NOT_ASCII_LETTERS))
    return high / (high + letters) if high else 0.0


def _undeclared_western(where: str, data: bytes) -> str | None:
    """A file that is not UTF-8 and declares no encoding its bytes are in (no declaration, or one such as
    "Character set encoding: ASCII" that its bytes belie), read as Windows-1252, the 8-bit encoding of Western
    text (ISO-8859-1 with printable punctuation at 0x80-0x9F, so it reads Latin-1 files alike), with a warning
    line naming the encoding and ``--encoding``. None when that is implausible: a byte Windows-1252 leaves
    undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D), or bytes 0x80-0xFF making up more than a quarter of the letters
    (a Cyrillic, Greek or Hebrew code page, which would be spoken as accented garbage)."""
    if _high_share(data) > _WESTERN_HIGH_SHARE:
        return None
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    text = text.lstrip("\ufeff")
    if "\x00" in text:
        return None
    declared = _declared_charset(data)
    said = f"its header declares {declared!r}, which its bytes are not" if declared is not None else \
        "it declares no encoding"
    import logging

    logging.getLogger("booktts.ingest").warning(
        "%s is not valid UTF-8 and %s; read as Windows-1252 (ISO-8859-1 with Windows punctuation), the usual "
        "8-bit encoding of Western text; pass --encoding to read it otherwise", where, said)
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
    r"|^\*END\*?[ \t]*THE[ \t]+SMALL[ \t]+PRINT!.*$"
    r"|^[ \t]*(?:\\?\*){2,}\\?_?[ \t]*START[ \t]*OF[ \t]*TH(?:E|IS)[ \t]*PROJECT[ \t]*GUTENBERG[ \t]*E-?(?:BOOK|TEXT).*$",
    re.I | re.M)  # the last: a marker once letter-spaced ("S T A R T O F ...") and escaped for Markdown


def _pg_start(text: str) -> re.Match | None:
    """The START marker that ends the header; the line closing the small print counts only with the book after it:
    an old etext prints its small print before the book or after it (then little or nothing follows the line)."""
    for m in _PG_START_RE.finditer(text):
        if not (m.group(0).lstrip().startswith("*END") and 10 * (len(text) - m.end()) < m.start()):
            return m
    return None


_PG_END_RE = re.compile(
    r"^[ \t]*(?:\*{3}[ \t]*END[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG"
    r"|End[ \t]+of[ \t]+(?:the[ \t]+|this[ \t]+)?Project[ \t]+Gutenberg(?:'s|\u2019s)?\b"
    r"|(?:\\?\*){2,}\\?_?[ \t]*END[ \t]*OF[ \t]*TH(?:E|IS)[ \t]*PROJECT[ \t]*GUTENBERG)", re.I | re.M)
_PG_TITLE_RE = re.compile(r"^Title:[ \t]*(\S.*)$((?:\n[ \t]+\S.*$)*)", re.M)
_PG_AUTHOR_RE = re.compile(r"^Author:[ \t]*(\S.*)$", re.M)
_PG_CREDIT_RE = re.compile(r"^(?:Produced by|(?:This )?e-?(?:text|book) (?:was )?(?:prepared|created|produced|made) by"
                           r"|Transcribed (?:from|by)|Scanned (?:and proofread )?by)\b", re.I)


_PGDP_RE = re.compile(r"\bDistributed\s+Proofread(?:ing|ers)\b", re.I)
"""A credit line without "Produced by": "Steve Harris, Charles Franks and the Online Distributed Proofreading Team."."""
_OLD_HEADER_RE = re.compile(r"\A\W*The\s+Project\s+Gutenberg\s+E-?(?:text|book)\b[\s\S]{0,3000}?"
                            r"Please\s+do\s+not\s+remove\s+this(?:\s+header|\.)", re.I)
_SMALL_PRINT_LATER_RE = re.compile(r"^[^\n]*\blegal\s+small\s+print\b[^\n]*\n(?:[^\n]*\S[^\n]*\n)*?"
                                   r"[^\n]*\bused\.[ \t]*$", re.I | re.M)
"""The paragraph that closes a 2002-2003 header: 'The "legal small print" and other information about this book
may now be found at the end of this file. ... restrictions in how the file may be used.'"""
_LONE_STARS_RE = re.compile(r"^[ \t]*\*{3}[ \t]*$", re.M)
_ETEXT_LINE_RE = re.compile(r"\A[ \t]*\**[ \t]*(?:The[ \t]+)?Project Gutenberg(?:'s|\u2019s)? E-?text of (\S[^*\n]*?)"
                            r"(?:, by ([^*\n]+?))?[ \t]*\**[ \t]*$", re.I | re.M)
"""An old (1990s) etext's first line, which names the book and its author: "*Project Gutenberg Etext of Five
Children and It, by E. Nesbit*", "***The Project Gutenberg Etext of Lady Susan, by Jane Austen***"."""
_ETEXT_NUMBER_LINE_RE = re.compile(r"\A[ \t]*\**[ \t]*(\S[^*\n]*?)[ \t]*:[ \t]+(?:Project[ \t]+)?Gutenberg[ \t]+E-?text"
                                   r"[ \t]+#?\d+[ \t]*\**[ \t]*$", re.I | re.M)
"""The same line in another form, the book's title and the etext's number: "*The Autobiography of Benjamin
Franklin:  Gutenberg Etext #148*"."""


_CONNECTING_END_RE = re.compile(r"(?:[,;:\-\u2014]|\b(?:of|and|the|a|an|in|to|or|for|with|from|on|by|at))\s*$", re.I)
"""A title line that runs on into the next ("The Life and Adventures of" / "Robinson Crusoe")."""
_CONNECTING_START_RE = re.compile(r"(?:of|and|as|in|to|or|for|with|from|on|by|at|upon)\s", re.I)
"""A title line that carries on the line above it ("AS AN ARGUMENT FOR THE GENERAL POSTULATE")."""


def _old_header_end(text: str) -> re.Match | None:
    """The end of an old (2001-2003) Project Gutenberg header that has no START marker: it opens the file
    ("The Project Gutenberg Etext of ...", then "Please do not remove this header information." or "Please
    do not remove this.") and ends at the first line of three asterisks alone, or at the paragraph sending
    the reader to the "legal small print" at the end of the file, within 12000 characters."""
    m = _OLD_HEADER_RE.match(text)
    if not m:
        return None
    stars = _LONE_STARS_RE.search(text, m.end(), m.end() + 12000)
    later = _SMALL_PRINT_LATER_RE.search(text, m.end(), m.end() + 12000)
    # without the asterisks, the paragraph sending the reader to the small print at the end closes it
    return stars if stars and not (later and later.start() < stars.start()) else later


_SPACED_RE = re.compile(r"(?<![\w'\u2019])[A-Z](?: [A-Z]){3,}(?![\w'\u2019])")
_SPACED_KEYWORD_RE = re.compile(r"^(CHAPTER|BOOK|PART|VOLUME|STAVE|CANTO|ACT|SCENE|LETTER)([IVXLCDM]+)$")


def _unspace_letters(text: str) -> str:
    """Letter-spaced capitals written for print ("C H A P T E R I I.") joined into words ("CHAPTER II.");
    a keyword run together with its numeral is split again."""
    def join(m: re.Match) -> str:
        word = m.group(0).replace(" ", "")
        k = _SPACED_KEYWORD_RE.match(word)
        return f"{k.group(1)} {k.group(2)}" if k else word
    return _SPACED_RE.sub(join, text) if " " in text else text


def _pg_author(text: str) -> str | None:
    """The header's ``Author:`` line, else the author an old etext's first line names (:data:`_ETEXT_LINE_RE`)."""
    start = _pg_start(text) or _old_header_end(text)
    m = _PG_AUTHOR_RE.search(text, 0, start.start()) if start else None
    if m:
        return _norm(m.group(1))
    etext = _ETEXT_LINE_RE.match(text) if start else None
    return _norm(etext.group(2)) if etext and etext.group(2) else None


_ARTICLE_RE = re.compile(r"^(?:the|an?)\s+", re.I)
_ALIAS_RE = re.compile(r"^(?:also|otherwise)\s+(?:known|called|titled)\b", re.I)
"""A ``Title:`` continuation line that gives the book another name ("Also known as "The Death of Socrates"")."""


def _strip_gutenberg(text: str) -> tuple[str, str | None, bool]:
    """Return (body, title from the header, whether PG markers were found)."""
    title = None
    found = False
    start = _pg_start(text) or _old_header_end(text)
    if start:
        found = True
        m = _PG_TITLE_RE.search(text, 0, start.start())
        if m:
            first = _norm(m.group(1))
            more = [_norm(ln) for ln in m.group(2).split("\n") if ln.strip()]
            # a line that starts with the title again, also after an article, is another name for the book
            # ("Peter Pan" / "Peter Pan and Wendy", "Essays" / "The Essays Or Counsels, Civil And Moral,
            # Of Francis Ld." / "Verulam ..."), and so is one that says so ("Also known as ..."): not the title's
            # continuation; nor are the lines that go on with it
            again = [n for n, ln in enumerate(more) if _ARTICLE_RE.sub("", ln).casefold().startswith(first.casefold())
                     or _ALIAS_RE.match(ln)]
            more = more[:again[0]] if again else more
            if more and more[0][:1].isupper() and not _CONNECTING_END_RE.search(first):
                more[0] = ": " + more[0]  # a subtitle ("Hedda Gabler" / "Play In Four Acts"), said after a pause
            title = _norm(" ".join([first, *more])).replace(" : ", ": ")
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
    etext = _ETEXT_LINE_RE.match(text) if start else None
    if etext:
        # an old (1990s) etext names itself on its first line ("*Project Gutenberg Etext of Five Children and
        # It, by E. Nesbit*"): the book's title; without an END marker it closes with that line again
        title = title or _norm(etext.group(1))
        again = re.compile(r"^" + re.escape(etext.group(0).strip()) + r"[ \t]*$", re.M).search(text, body_start)
        if again and (not end or again.start() < end.start()):
            end = again  # the line again before the notes and small print that close the file
    numbered = _ETEXT_NUMBER_LINE_RE.match(text) if start and not title else None
    if numbered:
        title = _norm(numbered.group(1))
    if end:
        found = True
        body = text[body_start:end.start()]
    else:
        body = text[body_start:]
    if start:
        # a "Produced by ..." credit paragraph right after the START marker
        stripped = body.lstrip()
        cut = re.search(r"\n[ \t]*\n", stripped)
        first = stripped[:cut.start()] if cut else stripped
        if _PG_CREDIT_RE.match(stripped) or len(first.split()) <= 40 and _PGDP_RE.search(first):
            body = stripped[cut.end():] if cut else ""
    return body, title, found


# --------------------------------------------------------------------------- TXT structure


@dataclass
class _Item:
    kind: str  # "heading" | "para" | "break" (a scene break: nothing is spoken)
    text: str
    toc: bool = False  # a paragraph that is a contents-list entry (a local link)
    style: str = ""  # headings: what kind of heading line ("chapter", "part", "roman", "numtitle", ...)
    num: int | None = None  # headings: the number the heading carries, if any
    forced: bool = False  # headings: the line was named by --chapter-pattern / --chapters-file
    entries: list[str] | None = None  # "toc" items: the titles a contents-list block names
    apart: int = 0  # blank lines before the block (a line set apart has two or more)
    caps: bool = False  # a paragraph that is one short line in capitals (a heading the outline may take)
    label: bool = False  # "toc" items: right after a "Contents" label
    hung: list[bool] | None = None  # "toc" items: per entry, indented under a shallower entry above it
    epigraph: bool = False  # a quotation marked up as a part's epigraph (a Markdown heading under a PART heading)
    subhead: bool = False  # a Markdown heading below the chapters' level (a poem's "### I.", a subtitle)


_ROMAN = r"(?=[IVXLCDM])M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
_NUMWORD = (rf"(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[- ](?:{_UNITS}))?"
            rf"|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|{_UNITS})")
_ORDINAL = (r"(?:the\s+)?(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
            r"|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|last)")
_KEYWORD = (r"(?:CHAPTER|Chapter|BOOK|Book|PART|Part|VOLUME|Volume|STAVE|Stave|CANTO|Canto|ACT|Act|SCENE|Scene"
            r"|LETTER|Letter|ADVENTURE|Adventure|SECTION|Section|SERMON|Sermon|LECTURE|Lecture|DISCOURSE|Discourse"
            r"|ESSAY|Essay|EPISTLE|Epistle|HOMILY|Homily|CHAP\.|Chap\.)")
_HEADING_RE = re.compile(
    rf"^(?P<head>(?P<kw>{_KEYWORD})[ \t]+(?P<num>{_ROMAN}|\d{{1,4}}|(?i:{_NUMWORD})|(?i:{_ORDINAL}))\b\.?)"
    rf"(?:[ \t]*(?:--|[.,:\u2014\u2013-])?[ \t]*(?P<title>\S.*))?$")
_GLUED_HEADING_RE = re.compile(
    rf"^(?P<kw>CHAPTER|BOOK|PART|VOLUME|STAVE|CANTO|ACT|SCENE|LETTER)(?P<num>{_ROMAN})\.(?:[ \t]+(?P<title>\S.*))?$")
"""A keyword in capitals run together with its numeral and a full stop, as a typesetting slip: "BOOKXXXV."."""
_ORDINAL_HEADING_RE = re.compile(rf"^(?P<num>(?i:{_ORDINAL}))[ \t]+(?P<kw>{_KEYWORD})\.?$")
"""A keyword after its ordinal word: "FIRST ACT", "The Second Book" (no title on the line)."""
_LATIN_ORDINALS = {w: k + 1 for k, w in enumerate(
    "primus secundus tertius quartus quintus sextus septimus octavus nonus decimus".split())}
_LATIN_ACT_RE = re.compile(
    rf"^(?P<head>(?:ACTUS|Actus)[ \t]+(?P<num>(?i:{'|'.join(_LATIN_ORDINALS)})|{_ROMAN})\.?)"
    rf"(?:[ \t]*[.,:]?[ \t]*(?P<title>(?i:sc(?:ae|\u00e6|oe|\u0153|e)na)[ \t]+"
    rf"(?:(?i:prima|secunda|tertia|quarta|quinta|sexta|septima)|{_ROMAN}|\d{{1,2}})\.?))?$")
"""An act of an old play headed in Latin, perhaps with its first scene: "Actus primus. Scena prima.",
"ACTUS II. SCAENA I."."""
_NUMTITLE_RE = re.compile(rf"^(?P<head>(?P<num>{_ROMAN}|\d{{1,3}})\.)[ \t]+(?P<title>\S.*)$")
"""A numbered title on one line: "I. A SCANDAL IN BOHEMIA" (a story of a collection)."""
_COUNTED_RE = re.compile(r"^(?P<ord>(?:[A-Za-z]+-)?[A-Za-z]+(?:st|nd|rd|th))[ \t]+[A-Z][a-z]{2,12}\.?$")
"""A numbered title that is its own number again as an ordinal and a noun: "1. First Day.", "21. Twenty-first
Day." (the title of the reading comes on a later line)."""
_SECTION_RE = re.compile(
    r"^(?P<head>(?:(?:THE |The )?(?:PROLOGUE|Prologue)|EPILOGUE|Epilogue"
    r"|(?:(?:THE |The )?(?:AUTHOR['\u2019]S|Author['\u2019]s) |ORIGINAL |Original )?(?:PREFACE|Preface|INTRODUCTION|Introduction)"
    r"|FOREWORD|Foreword"
    r"|AFTERWORD|Afterword|INTERLUDE|Interlude|PRELUDE|Prelude|FINALE|Finale|CODA|Coda|CONCLUSION|Conclusion"
    r"|POSTSCRIPT|APPENDIX|(?:THE |The )?(?:FORETHOUGHT|Forethought|AFTERTHOUGHT|Afterthought)"
    r"|L['\u2019](?:ENVOI|Envoi)|BIBLIOGRAPHY)\.?)"
    r"(?:[ \t]*[.:\u2014\u2013-][ \t]*(?P<title>\S.*))?$")
_SECTION_TO_RE = re.compile(r"^(?P<head>(?:PREFACE|INTRODUCTION|FOREWORD|PROLOGUE|EPILOGUE|AFTERWORD)"
                            r"[ \t]+(?:TO|(?:WRITTEN[ \t]+|SPOKEN[ \t]+)?BY)[ \t]+[A-Z\u201c\"'].*)$(?P<title>(?!))?")
"""A named heading with what it belongs to or who wrote it, in capitals: "PREFACE TO THE SECOND EDITION.",
"PROLOGUE WRITTEN BY MR. GARRICK"."""
_TO_READER_RE = re.compile(r"^(?P<head>(?:THE[ \t]+(?:EDITOR|AUTHOR|TRANSLATOR|PUBLISHERS?)[ \t]+)?TO[ \t]+THE[ \t]+READER\.?"
                           r"|AN?[ \t]+LETTER[ \t]+FROM[ \t]+[A-Z][A-Z .,'\u2019-]{2,60}[ \t]+TO[ \t]+[A-Z][A-Z .,'\u2019-]{2,60})$"
                           r"(?P<title>(?!))?")
"""An address to the reader, or a letter's heading naming its writer and reader, on a line of its own in
capitals: "THE EDITOR TO THE READER.", "TO THE READER", "A LETTER FROM CAPTAIN GULLIVER TO HIS COUSIN SYMPSON."."""
_UNIT_ON_RE = re.compile(r"^(?P<head>(?:LECTURE|SERMON|DISCOURSE|ESSAY|HOMILY)[ \t]+(?:ON|UPON|OF|CONCERNING)[ \t]+"
                         r"[A-Z\u201c\"'][^.]{1,60}\.?)$(?P<title>(?!))?")
"""A piece of a collection named by its subject, in capitals on a line of its own: "LECTURE ON PLATINUM.", "SERMON ON
THE MOUNT"."""
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


def _dashed_title(line: str, m: re.Match, title: str) -> bool:
    """A title after a dash that starts with a small word: "Book the Second--the Golden Thread"."""
    sep = line[m.end("head"):m.start("title")].strip()
    return sep in ("--", "\u2014", "\u2013") and title[:1].islower() and _title_like(title[0].upper() + title[1:]) \
        and any(w[:1].isupper() for w in title.split()[1:])


@dataclass
class _Heading:
    head: str
    title: str | None
    roman: bool = False
    style: str = ""
    num: int | None = None


def _number_value(s: str) -> int | None:
    """The value of a heading's number: digits, a roman numeral, a number word ("twenty-one") or an
    ordinal ("the First"); None when it has none."""
    s = s.strip().rstrip(".")
    if s.isdigit():
        return int(s)
    if s and re.fullmatch(_ROMAN, s):
        return _roman_value(s)
    return _word_value(s)


_WORD_VALUES = {w: k + 1 for k, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_WORD_VALUES.update({w: k + 1 for k, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())})
_TENS = {w: 10 * (k + 2) for k, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}


_TENTHS = {w: 10 * (k + 3) for k, w in enumerate(
    "thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split())}


def _word_value(s: str) -> int | None:
    words = re.split(r"[- ]+", s.casefold().removeprefix("the ").strip())
    if len(words) == 1 and words[0] in _TENTHS:
        return _TENTHS[words[0]]
    if len(words) == 1 and words[0] in _WORD_VALUES:
        return _WORD_VALUES[words[0]]
    if words and words[0] in _TENS:
        rest = _WORD_VALUES.get(words[1], 0) if len(words) == 2 else 0
        return _TENS[words[0]] + rest if len(words) <= 2 and (len(words) == 1 or rest) else None
    return None


def _shouted(s: str) -> bool:
    """Written in capitals: every letter upper case (and at least two of them)."""
    letters = [c for c in s if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def _match_heading(line: str) -> _Heading | None:
    line = line.strip().replace("\u00a0", " ")  # "ACT\u00a0I. SCENE I.": a no-break space set after the keyword
    if not line or len(line) > 100:
        return None
    if line[0] in "_*" and line.rstrip(".")[-1:] in ("_", "*"):
        # a numbered heading set in italics ("_Actus Secundus.  Scena Prima_."); a word in italics
        # ("_Introduction_" in a contents list) is no heading by its looks alone
        bare = _strip_emphasis(line)
        h = _match_heading(bare) if bare != line and "_" not in bare and "*" not in bare else None
        if h is not None and h.num is not None and h.style != "roman":
            return h
    m = _HEADING_RE.match(line)
    if m and not m.group("num"):
        m = None  # the numeral pattern matched nothing: "ACT DROP" is no heading
    g = None if m else _GLUED_HEADING_RE.match(line)
    if g and g.group("num"):
        title = g.group("title")
        if title is None or _title_like(title):
            head = f"{g.group('kw')} {g.group('num')}."
            return _Heading(head, title, style=g.group("kw").lower(), num=_roman_value(g.group("num")))
    if m:
        title = m.group("title")
        if title is not None and not _title_like(title) and not _dashed_title(line, m, title):
            return None
        style = "chapter" if m.group("kw").lower() == "chap." else m.group("kw").lower()  # "CHAP. II."
        return _Heading(m.group("head"), title, style=style, num=_number_value(m.group("num")))
    m = _LATIN_ACT_RE.match(line)
    if m:
        num = m.group("num")
        value = _LATIN_ORDINALS.get(num.casefold()) or _roman_value(num)
        return _Heading(m.group("head"), m.group("title"), style="act", num=value)
    m = _ORDINAL_HEADING_RE.match(line)
    if m and m.group("num").split()[-1].casefold() != "last":
        return _Heading(line, None, style=m.group("kw").lower(), num=_number_value(m.group("num")))
    m = _SECTION_RE.match(line)
    if m is None and _shouted(line):  # "PREFACE TO THE SECOND EDITION.", "INTRODUCTION TO PYGMALION."
        m = _SECTION_TO_RE.match(line) or _TO_READER_RE.match(line) or _UNIT_ON_RE.match(line)
    if m:
        title = m.group("title")
        if title is not None and not _title_like(title):
            return None
        return _Heading(m.group("head"), title, style="named")
    if _ROMAN_ALONE_RE.match(line):
        return _Heading(line, None, roman=True, style="roman", num=_roman_value(line))
    m = _NUMTITLE_RE.match(line)
    o = _COUNTED_RE.match(m.group("title")) if m else None
    if o and _word_value(o.group("ord")) == _number_value(m.group("num")):
        return _Heading(line, None, style="numtitle", num=_number_value(m.group("num")))  # "1. First Day."
    if m and _title_like(m.group("title")) and _shouted(m.group("title")) and not _INITIALS_RE.match(line) \
            and not re.search(r"\s\d{1,4}$", m.group("title")):  # "I. THE PRISON-DOOR 51": a paged entry
        return _Heading(m.group("head"), m.group("title"), style="numtitle", num=_number_value(m.group("num")))
    m = _NO_NUMTITLE_RE.match(line)
    if m and _title_like(m.group("title")):  # "No. 1--THE GATEWAY OF THE MONSTER": a collection's numbered piece
        return _Heading(m.group("head"), m.group("title"), style="numtitle", num=int(m.group("num")))
    m = _DASHED_NUMTITLE_RE.match(line)
    if m and re.match(rf"{m.group('num')}\b", m.group("title")):
        m = None  # a speaker's stammer, "I-- I suppose so.", "I-- I've no fancy ...", is no numbered title
    if m and _title_like(m.group("title")) and not _shouted(m.group("title")) \
            and not re.search(r"\s\d{1,4}$", m.group("title")):
        return _Heading(m.group("head"), m.group("title"), style="numtitle", num=_number_value(m.group("num")))
    return None


_INITIALS_RE = re.compile(r"^(?:[A-Z]\.[ \t]*){2,4}$")
"""A writer's initials signing a letter ("I. L. B."), not a numbered title ("I." and "L. B.")."""
_NO_NUMTITLE_RE = re.compile(r"^(?P<head>No\.[ \t]*(?P<num>\d{1,3})[ \t]*(?:--|\u2014|\u2013))[ \t]*"
                             r"(?P<title>[A-Z\"'\u201c\u2018].*)$")
"""A piece numbered "No." with its title after a dash: "No. 1--THE GATEWAY OF THE MONSTER" (like "I. A SCANDAL IN
BOHEMIA", a heading only as a line set apart and in sequence)."""
_DASHED_NUMTITLE_RE = re.compile(rf"^(?P<head>(?P<num>{_ROMAN}|\d{{1,3}})\.?[ \t]*(?:--|\u2014|\u2013))[ \t]*"
                                 r"(?P<title>[A-Z\"'\u201c\u2018].*)$")
"""A chapter's number and its title after a dash, in mixed case: "1--A Face on Which Time Makes but Little
Impression" (a heading only as a line set apart, or over two lines, and only in sequence, like "I. A SCANDAL IN
BOHEMIA"; in capitals, "III.\u2014ON FALLING IN LOVE", it is an essay's numbered part, see
``jobs.ingest.outline``)."""


def _dashed_title_over_two_lines(lines: list[str]) -> bool:
    """A dashed chapter title run over two lines ("4--Cheerfulness Again Asserts Itself at Blooms-End, and Clym
    Finds His" / "Vocation"): the first line unfinished, the second six words at most, capitalised."""
    return len(lines) == 2 and _DASHED_NUMTITLE_RE.match(lines[0]) is not None \
        and not lines[0].rstrip().endswith((".", "!", "?", ":", ";")) \
        and len(lines[1].split()) <= 6 and lines[1][:1].isupper()


_QUOTED_WORDS_END_RE = re.compile(r"[^\W_][\"\u201d\u2019]$")
"""A line ending in a closing quote right after a letter or digit: a quoted name ('Tom's "First Half"'),
not a quoted sentence ('"Come here."'), whose stop comes before the quote."""


_CAPS_ADDRESSEE_RE = re.compile(r"^TO[ \t]+[A-Z][A-Z .'\u2019-]{1,50}[A-Z.],$")
"""A letter's addressee in capitals ending in a comma, as the letter's title: "TO COLERIDGE,", "TO MR. MOXON,"."""


def _strict_title_line(block: list[str]) -> str | None:
    """A block that is only a chapter title: one short line, no sentence punctuation at its end; a
    closing quote may end it when it closes quoted words (``Tom's "First Half"``, ``"The Young Idea"``),
    not a quoted sentence."""
    if len(block) != 1:
        return None
    s = block[0].strip()
    if _CAPS_ADDRESSEE_RE.match(s):
        return s  # a letter's addressee in capitals under its number: "TO COLERIDGE,"
    if not _title_like(s) or _match_heading(s):
        return None
    letters = [c for c in s if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        return s
    if re.search(r"[.!?:\u2026\"'\u201d\u2019]$", s) and not _QUOTED_WORDS_END_RE.search(s):
        return None
    return s


_RULE_LINE_RE = re.compile(r"^[ \t]*(?:-{5,}|={5,}|_{5,})[ \t]*$")
"""A rule line: five or more hyphens, equals signs or underscores alone on a line."""


def _split_blocks(text: str, force=None) -> tuple[list[list[str]], set[int], list[int]]:
    """Blank-line separated blocks of lines, the indices of forced heading blocks, and the number of
    blank lines before each block. A text written
    one paragraph per line, with (almost) no blank lines and long unwrapped lines, gets one block per
    line instead. ``force(line_index, line)`` (0-based in ``text``) names lines that start a chapter
    (the overrides): each becomes a block of its own."""
    lines = text.split("\n")
    forced: set[int] = set()
    blocks: list[list[str]] = []
    full = [ln for ln in lines if ln.strip()]
    per_line = False
    unbroken = 0  # > 0: wrapped text without blank lines; a line shorter than this ends a paragraph
    if len(full) >= 8:
        blank_runs = sum(1 for a, b in zip(lines, lines[1:]) if a.strip() and not b.strip())
        lengths = sorted(len(ln.strip()) for ln in full)
        per_line = blank_runs < 0.1 * len(full) and lengths[len(lengths) // 2] > 150
        if not per_line and len(full) >= 50 and blank_runs <= max(1.0, 0.01 * len(full)):
            unbroken = int(0.75 * lengths[len(lengths) // 2])
    cur: list[str] = []
    gaps: list[int] = []
    blank = 0

    def start() -> None:
        nonlocal blank
        gaps.append(blank)
        blank = 0

    for n, line in enumerate(lines):
        if force is not None and line.strip() and force(n, line):
            if cur:
                blocks.append(cur)
                cur = []
            forced.add(len(blocks))
            start()
            blocks.append([line.rstrip()])
        elif line.strip():
            if per_line:
                start()
                blocks.append([line.rstrip()])
            elif _RULE_LINE_RE.match(line):
                # a rule printed across the page ("-----"): it ends the block above it, and the block
                # after it starts afresh; right under a single line of about its length it underlines
                # that line (a heading), and is no scene break
                under = len(cur) == 1 and abs(len(line.strip()) - len(cur[0].strip())) <= 3
                if cur:
                    blocks.append(cur)
                    cur = []
                if not under:
                    start()
                    blocks.append([line.strip()])
            else:
                heading = unbroken and (_match_heading(line) is not None or _is_separator(line.strip()))
                if heading and cur:  # no blank lines: a heading starts a block of its own
                    blocks.append(cur)
                    cur = []
                if not cur:
                    start()
                cur.append(line.rstrip())
                if unbroken and (len(line.strip()) < unbroken or heading):
                    blocks.append(cur)  # no blank lines: a short line (or a heading) ends the block
                    cur = []
        else:
            blank += 1
            if cur:
                blocks.append(cur)
                cur = []
    if cur:
        blocks.append(cur)
    return blocks, forced, gaps


def _caps_line(s: str) -> bool:
    """A short line in capitals that can be a heading ("STORY OF THE DOOR", "THE LAMB")."""
    letters = [c for c in s if c.isalpha()]
    s = s.strip()
    return (len(letters) >= 3 and all(c.isupper() for c in letters) and len(s.split()) <= 16 and len(s) <= 90
            and (s[0].isupper() or s[0].isdigit() or s[0] in _OPEN_CHARS) and not s.endswith((",", ";", ":")))


def _caps_title_lines(lines: list[str]) -> bool:
    """A title in capitals printed over two lines, the first left unfinished ("OF THE ORIGIN AND DESIGN OF
    GOVERNMENT IN GENERAL," / "WITH CONCISE REMARKS ON THE ENGLISH CONSTITUTION."): each line in capitals, the
    first ending in a comma or a connecting word; it can head a chapter like a title on one line."""
    if len(lines) == 2 and _CONNECTING_END_RE.search(lines[0]) is not None \
            and _caps_line(lines[0].rstrip(",;:-\u2014 \t")) and _caps_line(lines[1]):
        return True
    # over two or three lines, each running on into the next by a connecting word at its end or the next one's
    # start ("THE APPARENT INCOMPATIBILITY OF THE" / "LAW OF PROPAGATION OF LIGHT WITH THE" / "PRINCIPLE OF
    # RELATIVITY"; "THE EQUALITY OF INERTIAL AND GRAVITATIONAL MASS" / "AS AN ARGUMENT FOR ...") or wrapped at a long
    # line's end ("TITLE XX. OF ATILIAN GUARDIANS, AND THOSE APPOINTED UNDER THE LEX IULIA" / "ET TITIA")
    return 2 <= len(lines) <= 3 and sum(len(ln.split()) for ln in lines) <= 25 \
        and all(_caps_line(ln.strip()) and ln.strip()[-1:] not in ",;:-\u2014" for ln in lines) \
        and all(_CONNECTING_END_RE.search(a) or _CONNECTING_START_RE.match(b.strip()) or len(a.strip()) >= 60
                for a, b in zip(lines, lines[1:]))


_LETTER_FROM_RE = re.compile(r"^(?:Letter|LETTER)\s+(?:from|to|FROM|TO)\s+(?:(?:Mr|Mrs|Dr|Sir|the)\.?\s+)?[A-Z]")
_UNDER_LETTER_RE = re.compile(r"^(?:\([^()]{1,60}\)\.?|[\"\u201c]?[A-Z][A-Za-z .'\u2019-]{1,40},\s+\S.{0,40}\b1[5-9]\d\d\.?)$")
"""What a letter's heading line may have under it in its block: a note in brackets ("(received in Paris).")
or a dateline ('"PARIS, January 31, 1783.')."""


def _letter_heading(lines: list[str]) -> bool:
    """A block that is a letter's heading, named by who wrote it or to whom ("Letter from Mr. Abel James, with
    Notes of my Life" / "(received in Paris)."; "Letter from Mr. Benjamin Vaughan." over its dateline): the
    line alone, twelve words at most, or with a note in brackets or a dateline under it."""
    return _LETTER_FROM_RE.match(lines[0]) is not None and len(lines[0].split()) <= 12 \
        and not _SENTENCE_END_INSIDE_RE.search(lines[0]) \
        and (len(lines) == 1 or len(lines) == 2 and _UNDER_LETTER_RE.match(lines[1]) is not None)


_SENTENCE_END_INSIDE_RE = re.compile(r"(?<!\bMr)(?<!\bMrs)(?<!\bDr)(?<!\bSt)[.!?]\s+\S")


_YEARS_LINE_RE = re.compile(r"^\d{3,4}(?:\s*(?:-|--|\u2013|\u2014)\s*\d{2,4})?\.?$")


def _caps_dated_title(lines: list[str]) -> bool:
    """A title in capitals over two or three lines with the years it covers under it ("BENJAMIN FRANKLIN" /
    "HIS AUTOBIOGRAPHY" / "1706-1757"): twelve words at most; it can head a chapter like a title on one line."""
    return 2 <= len(lines) <= 3 and _YEARS_LINE_RE.match(lines[-1]) is not None \
        and all(_caps_line(ln) for ln in lines[:-1]) and len(" ".join(lines).split()) <= 12


_TOC_ENTRY_RE = re.compile(
    rf"^(?:(?:{_KEYWORD})[ \t]+)?(?:(?P<num>{_ROMAN}|\d{{1,3}}|(?i:{_NUMWORD}))(?![^\W\d_]|['\u2019]))?[.:)]?[ \t]*"
    r"(?P<title>[^\s.].{0,90}?)(?:[ \t]*(?:\.[ \t]*){2,}|[ \t]{2,})?(?:[ \t]*(?P<page>\d{1,4}))?$")


_ROMAN_ONLY_RE = re.compile(rf"^{_ROMAN}$")


def _numbered_entries_follow(lines: list[str]) -> bool:
    """Two or more lines follow, most of them numbered contents entries ("I.  Of Our Spiritual Strivings",
    "II.  Of the Dawn of Freedom"): the named heading over them ("The Forethought", "Preface") is the first
    entry of a contents list, not a heading."""
    numbered = [ln for ln in lines if (m := _TOC_ENTRY_RE.match(ln.strip())) and m.group("num")]
    return len(numbered) >= 2 and 3 * len(numbered) >= 2 * len(lines)


def _without_glosses(block: list[str]) -> list[str]:
    """A contents block printed at three or more indentations ("Part I" / "Into My Own" / "The youth is
    persuaded ..."), whose most indented lines hang under the lines above them and read as prose (most
    of their runs end with a stop: "... for having forsworn the world.", "about love;"): those lines are
    the glosses of the entries, not entries; the other lines are returned."""
    indents = sorted({_indent(ln) for ln in block if ln.strip()})
    if len(indents) < 3:
        return block
    deep = indents[-1]
    runs: list[str] = []
    for k, ln in enumerate(block):
        if _indent(ln) == deep and ln.strip():
            if k == 0:
                return block
            if _indent(block[k - 1]) == deep:
                runs[-1] += " " + ln.strip()
            else:
                runs.append(ln.strip())
    if 2 * sum(1 for r in runs if r.endswith((".", ";", ":", ","))) < len(runs):
        return block
    return [ln for ln in block if _indent(ln) != deep]


_COLUMN_HEADER_RE = re.compile(r"^(?:chap(?:ter)?s?\.?|no\.|number|section|lecture|essay)[ \t]{2,}(?:page|pages|pp?\.)$", re.I)
"""The names of a contents list's columns on a line of their own: "CHAPTER    PAGE", "CHAP.    PAGE"."""
_PAGED_LINE_RE = re.compile(r"^(?P<title>\S.*?\S)(?:[ \t]*(?:\.[ \t]*){2,}|[ \t]{2,})(?:\d{1,4}|[ivxlc]{1,7})$")
"""A contents line with its page after a gap or dot leaders, in figures or small roman numerals: "POSTSCRIPT    ix"."""


def _toc_entries(block: list[str], after_label: bool) -> list[str] | None:
    """The entry titles of a contents-list block, or None when the block is not one.

    A contents list is three or more short lines that are all numbered ("I. A Scandal in Bohemia",
    "CHAPTER I. Down the Rabbit-Hole"; also bulleted: "- LETTER I. Lady Howard to ...") or all end with a page
    number ("The Start .... 7"); right
    after a "Contents" label, any block of three or more short title lines is one, and so is a block of two
    numbered entries (a list's last group)."""
    block = [ln for ln in block if ln.strip().casefold() not in ("page", "pages", "page.")]  # a column header
    if len(block) >= 3 and all(_BULLET_RE.match(ln) for ln in block):
        block = [_BULLET_RE.sub("", ln, count=1) for ln in block]  # "- LETTER I. Lady Howard to ...": a bulleted list
    if after_label:
        block = _without_glosses(block)
    if after_label and 1 <= len(block) < 3 and all(_PAGED_LINE_RE.match(ln.strip()) for ln in block):
        # a list printed in short groups under its label ("I.  THE SHADOW OF YEARS  3" / "_A Litany at Atlanta_ 14")
        return [_PAGED_LINE_RE.match(ln.strip()).group("title") for ln in block]
    short = after_label and len(block) == 2  # the last group of a list in groups: "_CHAPTER XXII_ CHARACTER ..."
    if len(block) < 3 and not short or any(len(ln.strip()) > 100 for ln in block):
        return None
    titles: list[str] = []
    numbered = paged = bad = 0
    for ln in block:
        line = ln.strip()
        m = _TOC_ENTRY_RE.match(line)
        worded = bool(m and m.group("num") and m.group("num").isalpha() and line.startswith(m.group("num"))
                      and line[len(m.group("num")):][:1] in (" ", "\t") and not _ROMAN_ONLY_RE.match(m.group("num")))
        # "Two Kings", "Six and One": a title that starts with a number word, not a numbered entry
        title = (line[:m.start("page")].strip() if m.group("page") else line) if worded else m and m.group("title")
        if not m or not (_title_like(title) or m.group("page")):
            bad += 1  # an entry the scan spoiled ("y Pretty Rose-Tree") among good ones
            continue
        numbered += m.group("num") is not None and not worded
        paged += m.group("page") is not None
        titles.append(title.strip())
    if bad > 0.1 * len(block) or len(titles) < (2 if short else 3):
        return None
    if short:  # numbered, perhaps with the keyword in italics
        heads = [_match_heading(_strip_emphasis(ln.strip())) for ln in block]
        return titles if all(h is not None and h.num is not None for h in heads) else None
    if numbered == len(titles) or paged >= 0.8 * len(titles) or after_label:
        return titles
    return None


_BULLET_RE = re.compile(r"^[ \t]*[-*\u2022][ \t]+(?=\S)")
"""A list item's bullet: "- ", "* ", "\u2022 "."""
_KEYWORD_NUMBER_RE = re.compile(rf"^{_KEYWORD}[ \t]+(?:{_ROMAN}|\d{{1,4}})\.")
_NUMBER_START_RE = re.compile(rf"^(?:{_ROMAN}|\d{{1,4}})\.\s")


def _hung_entries(block: list[str], titles: list[str]) -> list[bool] | None:
    """Which of a contents block's entries (``titles``, from :func:`_toc_entries`) are printed indented under
    an entry above them: a lecture's headlines under its title ("  "THE FIDDLE AND THE BOW."  9" /
    "    Cherish the Little Ones  19"). The block's first line is its least indented and two entries or
    more hang under it; None for a block printed flush."""
    lines = [ln for ln in block if ln.strip()]
    depth: list[int] = []
    j = 0
    for t in titles:
        while j < len(lines) and t not in lines[j]:
            j += 1
        if j == len(lines):
            return None
        depth.append(_indent(lines[j]))
        j += 1
    if not depth or min(_indent(ln) for ln in lines) != depth[0] or _indent(lines[0]) != depth[0]:
        return None
    hung = [d > depth[0] for d in depth]
    numbered = sum(1 for ln in lines[1:] if _NUMBER_START_RE.match(ln.strip()))
    if _KEYWORD_NUMBER_RE.match(lines[0].strip()) and numbered >= 2 and 3 * numbered >= 2 * (len(lines) - 1):
        return None  # "CHAPTER I. The Widow ..." / "      II. The Old Mint": numerals set flush right, one list
    return hung if sum(hung) >= 2 else None


_ILLUSTRATION_RE = re.compile(r"\[\s*(?:Illustrations?|Image|Picture|Frontispiece|Plate|Side-?notes?"
                             r"|Transcriber(?:'s|\u2019s|s)?\s+Notes?)\b[^\]\[]{0,2000}\]", re.I)
"""Picture notes, margin notes and transcriber's notes in brackets ("[Illustration: ...]", "[Sidenote: The book's
appeal.]", "[Transcriber's Note: ...]"): the page's furniture, not read."""
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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _pushed_right(line: str) -> bool:
    """A line set flush right, well past where a centred one would start: a signature under a preface
    ("                                                            DELONG RICE."), never a heading."""
    n = len(line.strip())
    return _indent(line) >= 40 and _indent(line) + n >= 60 and _indent(line) > (72 - n) / 2 + 10


def _centred_title(block: list[str]) -> bool:
    """A numeral, then a title set further in than the text that follows it with no blank line
    between ("XLI" / "North-West Passage" centred over a poem's first line)."""
    return (len(block) >= 3 and _indent(block[1]) >= _indent(block[2]) + 4 and _indent(block[0]) >= 4
            and _title_like(block[1].strip()))


_MISPRINTED_ROMAN_RE = re.compile(r"^(?P<num>[IVXLCDM]+l)(?P<stop>\.?)$")
"""A roman numeral in capitals whose last "I" is printed as a small "l": "XVl"."""


def _mend_numerals(blocks: list[list[str]]) -> list[list[str]]:
    """A numeral alone on its line whose last "I" is a small "l" ("XVl") is that numeral ("XVI") where it
    falls between the numerals alone on their lines before and after it (XV, then XVII): a misprint in a
    numbered sequence. Other blocks are returned as they are."""
    cands = []
    for k, b in enumerate(blocks):
        line = b[0].strip()
        m = _MISPRINTED_ROMAN_RE.match(line) if len(b) <= 2 else None
        fixed = m.group("num")[:-1] + "I" if m else None
        if fixed and re.fullmatch(_ROMAN, fixed):
            cands.append((k, _roman_value(fixed), fixed + m.group("stop")))
        elif (len(b) <= 2 or _centred_title(b)) and _ROMAN_ALONE_RE.match(line):
            cands.append((k, _roman_value(line), None))
    out = list(blocks)
    for n, (k, v, fixed) in enumerate(cands):
        if fixed and 0 < n < len(cands) - 1 and cands[n - 1][1] == v - 1 and cands[n + 1][1] == v + 1:
            out[k] = [blocks[k][0].replace(blocks[k][0].strip(), fixed), *blocks[k][1:]]
    return out


def _roman_headings(blocks: list[list[str]]) -> set[int]:
    """Blocks that start with a roman numeral alone and belong to a numbered sequence (k, then k+1 or k+2 later:
    one numeral may be misprinted, "Ill" for III, or missing): a letter signed "M." or a lone "C." is no
    chapter."""
    cands = [(k, _roman_value(b[0].strip())) for k, b in enumerate(blocks)
             if (len(b) <= 2 or _centred_title(b)) and _ROMAN_ALONE_RE.match(b[0].strip())]
    ok: set[int] = set()
    last = None
    for n, (k, v) in enumerate(cands):
        if (last is not None and last < v <= last + 2) or any(v2 in (v + 1, v + 2) for _k2, v2 in cands[n + 1:n + 50]):
            ok.add(k)
            last = v
    return ok


_ARABIC_ALONE_RE = re.compile(r"^(?P<num>\d{1,4})\.(?:\[\d{1,2}\])?$")
"""A bare arabic number with a full stop on a line of its own, perhaps with a note mark: "216.", "308.[1]"."""


def _arabic_headings(blocks: list[list[str]], gaps: list[int]) -> dict[int, int]:
    """Blocks that are a bare arabic number alone ("216.") set apart and running in a sequence from any
    start (a numbered letter or entry): the number must follow the last one taken by at most three, or
    start a run whose next two numbers follow within the coming candidates. A year on its own line as a
    dateline ("1818.") or a stray figure ("76.") falls outside the run and stays text."""
    cands = []
    for k, b in enumerate(blocks):
        m = _ARABIC_ALONE_RE.match(b[0].strip()) if len(b) == 1 else None
        if m and gaps[k] >= 2:
            cands.append((k, int(m.group("num"))))
    ok: dict[int, int] = {}
    last = None
    for n, (k, v) in enumerate(cands):
        ahead = {v2 for _k2, v2 in cands[n + 1:n + 20]}
        if (last is not None and last < v <= last + 3) or (v + 1 in ahead and v + 2 in ahead):
            ok[k] = v
            last = v
    return ok if len(ok) >= 5 else {}


def _set_apart_numtitles(blocks: list[list[str]], gaps: list[int]) -> dict[int, int]:
    """Blocks of one or two lines that are a number, a full stop and a title in mixed case ("I. Stories Shorter
    Still", "VI. The Two Sexes in Fives or Sixes." / "A Dinner-party Study"), each set apart by three blank lines
    or more, numbered on by one from I or 1, five or more: a book's numbered pieces titled in mixed case (in
    capitals they are headings by themselves: :func:`_match_heading`). Block -> its number."""
    cands = []
    for k, b in enumerate(blocks):
        m = _NUMTITLE_RE.match(" ".join(ln.strip() for ln in b)) if len(b) <= 2 and gaps[k] >= 3 else None
        if m and m.group("title")[:1].isupper() and not _shouted(m.group("title")) and len(m.group("title").split()) <= 20 \
                and _match_heading(b[0].strip()) is None:  # "1. First Day." is a heading of its own kind
            cands.append((k, _number_value(m.group("num"))))
    ok: dict[int, int] = {}
    for k, v in cands:
        if v == len(ok) + 1:
            ok[k] = v
    return ok if len(ok) >= 5 else {}


_ADDRESSEE_RE = re.compile(r"^To[ \t]+(?:the[ \t]+)?(?:Mr|Mrs|Miss|Ms|Dr|Sir|Lady|Lord|Revd|Rev|Capt|Captain|Messrs|Master"
                           r"|Madam|Madame|Mademoiselle|Monsieur|Colonel|Col|Major|General|Professor|Prof)\.?[ \t]+[A-Z]")
"""A letter's heading naming only whom it is written to: "To Dr LEWIS.", "To the Revd. Mr JONATHAN DUSTWICH, at--"."""
_ADDRESSEE_RUN_ON_RE = re.compile(r"^(To[ \t].+?[.,])[ \t]+([A-Z]{2,}\b.*)$")
"""An addressee line run on into the letter's place, date or salutation in capitals: "To Dr LEWIS. BATH, April 23. DEAR
DOCTOR,"."""


def _addressee_headings(blocks: list[list[str]], gaps: list[int]) -> set[int]:
    """Blocks that head a letter by its addressee alone (:data:`_ADDRESSEE_RE`), on one line of twenty words at
    most set apart by two blank lines or more, where the book has three or more such lines: an epistolary
    novel's letters ("To Dr LEWIS.", "To Sir WATKIN PHILLIPS, of Jesus college, Oxon."). A sentence that starts
    "To this proposal he ..." names nobody and is text."""
    found = {k for k, b in enumerate(blocks)
             if len(b) == 1 and gaps[k] >= 2 and _ADDRESSEE_RE.match(b[0].strip()) and len(b[0].split()) <= 20}
    return found if len(found) >= 3 else set()


_SERIAL_RE = re.compile(rf"^(?P<kw>[A-Z][A-Za-z]+)[ \t]+(?:No\.|NO\.|Number|NUMBER)[ \t]*(?P<num>\d{{1,3}}|{_ROMAN})\.?$")
"""A numbered paper of a series, headed by the series' name: "FEDERALIST No. 10", "Rambler No. 4"."""
_NO_ENTRY_RE = re.compile(r"^(?:No\.|NO\.)[ \t]*(?P<num>\d{1,4})\.[ \t]+(?P<title>[A-Z][^a-z]{2,}|[A-Z].{2,80}\.)$")
"""A numbered entry headed by "No." and its number, then its title ("No. 1. BOILED BEEF.", "No. 33. How to Dispose
of the Pig's Pluck."): a cookery book's recipes, a manual's numbered pieces."""


def _serial_headings(blocks: list[list[str]]) -> dict[int, int]:
    """Blocks whose first line heads a paper of a series ("FEDERALIST No. 1" ... "FEDERALIST No. 85"): the same
    name with "No." and a number, three times or more, the numbers mostly running on by one; so do numbered
    entries "No. 1. BOILED BEEF." ... (:data:`_NO_ENTRY_RE`), alone in their block or with their title's
    last line in capitals under them. Block -> number."""
    found: dict[str, list[tuple[int, int]]] = {}
    for k, b in enumerate(blocks):
        m = _SERIAL_RE.match(b[0].strip())
        if m:
            found.setdefault(m.group("kw").casefold(), []).append((k, _number_value(m.group("num")) or 0))
        m = _NO_ENTRY_RE.match(b[0].strip()) if len(b) <= 2 else None
        if m and (len(b) == 1 or _caps_line(b[1]) and len(b[1].split()) <= 12):  # a title may run on a line
            found.setdefault("no.", []).append((k, int(m.group("num"))))
    out: dict[int, int] = {}
    for runs in found.values():
        steps = sum(1 for (_a, x), (_b, y) in zip(runs, runs[1:]) if y == x + 1)
        if len(runs) >= 3 and 2 * steps >= len(runs) - 1:
            out.update(runs)
    return out


_ENTRY_RUN_RE = re.compile(rf"\b(?:{_KEYWORD})[ \t]+(?:{_ROMAN}|\d{{1,4}})\b")


def _run_on_entries(block: list[str]) -> list[str] | None:
    """A contents list run on across lines ("CHAPTER I CHAPTER II CHAPTER III ..."): every line names
    two or more numbered headings; None otherwise."""
    found = [[m.group(0) for m in _ENTRY_RUN_RE.finditer(ln)] for ln in block]
    if all(len(f) >= 2 for f in found) and sum(map(len, found)) >= 3:
        return [e for f in found for e in f]
    return None


def _initial(entry: str) -> str:
    return next((c for c in entry.casefold() if c.isalpha()), "")


def _index_group(items: list[_Item], block: list[str]) -> list[str] | None:
    """A group of one or two entries in a contents list printed in alphabetical order, a block for each
    initial ("Ehrenhardt, Imanuel" alone between the D and F names, "Yee Bow", "Zoll, Perry" at its end):
    the list so far, from its "Contents" label, six entries or more with their initials in alphabetical
    order (three initials at least: "CHAPTER I", "CHAPTER II" ... is no such list), and the block's initials
    coming after them; a heading line ("PRELUDE") is no entry. The first heading after such a list ("The
    Hill") starts again earlier in the alphabet and ends it."""
    lines = [ln.strip() for ln in block]
    if not 1 <= len(lines) <= 2 or not items or items[-1].kind != "toc" or not items[-1].label:
        return None
    if any(len(ln) > 60 or not _title_like(ln) or _match_heading(ln) for ln in lines):
        return None
    before: list[str] = []
    for it in reversed(items):
        if it.kind != "toc" or not it.label:
            break
        before[:0] = it.entries or []
    heads = [_initial(e) for e in before] + [_initial(ln) for ln in lines]
    if len(before) < 6 or len(set(heads)) < 4 or not all(heads) or heads != sorted(heads) \
            or heads[len(before)] == heads[len(before) - 1]:
        return None
    return lines


def _after_contents_label(items: list[_Item]) -> bool:
    """The next block continues a contents list: a "Contents" label, a contents block or contents
    headings ("THE PROLOGUE.", "ACT I") come right before it."""
    short = 0
    for it in reversed(items):
        if it.kind == "toc" or it.kind == "para" and _CONTENTS_LABEL_RE.match(it.text):
            return True
        if it.kind == "para" and len(it.text.split()) <= 8 and not short:
            short += 1  # a group label inside the list ("SONGS OF INNOCENCE")
            continue
        if it.kind != "heading":
            return False
    return False


def _single_lines(blocks: list[list[str]]) -> dict[tuple[str, ...], list[int]]:
    """Where each line set apart as a block of its own stands: its words -> the block indices, in order."""
    where: dict[tuple[str, ...], list[int]] = {}
    for n, block in enumerate(blocks):
        if len(block) == 1:
            where.setdefault(tuple(_tokens(block[0])), []).append(n)
    return where


def _titles_again(blocks: list[list[str]], i: int, singles: dict[tuple[str, ...], list[int]],
                  group: bool = False) -> list[str] | None:
    """A contents list with no label, numbers or pages: a block of three or more short title lines ("Of Truth",
    "Of Death", ... under "THE ESSAYS") each of which comes again later, in the same order, as a line set
    apart (the heading of its chapter); one in ten may be missing. With ``group`` (the block follows a "Contents"
    label or another contents block, beside such a list: :func:`_beside_titles_again`), two such lines, both
    found again, are a group of the list too ("Dedication" / "The Coming of Arthur" over "THE ROUND TABLE" and its
    idylls); a line alone there is a group's label ("The Child Alone"). None for any other block."""
    lines = [ln.strip() for ln in blocks[i]]
    if len(lines) < (2 if group else 3) \
            or not all(_title_like(ln) and len(ln.split()) <= 10 and any(c.isalpha() for c in ln) for ln in lines):
        return None
    found = _found_again(lines, singles, i)
    return lines if len(lines) - found <= len(lines) // 10 else None


def _found_again(titles: list[str], singles: dict[tuple[str, ...], list[int]], after: int) -> int:
    """How many of ``titles`` come again, in their order, as lines set apart (:func:`_single_lines`) after block
    ``after``: each is looked for after the one found before it."""
    pos, found = after, 0
    for t in titles:
        later = [n for n in singles.get(tuple(_tokens(t)), ()) if n > pos]
        if later:
            pos = later[0]
            found += 1
    return found


_ENTRY_NUMBER_RE = re.compile(rf"^(?:{_ROMAN}|\d{{1,3}})\.[ \t]+(?=\S)")
"""The number before a contents entry's title ("XII. The Pursuit of Fire")."""


def _numbered_titles_again(blocks: list[list[str]], i: int, singles: dict[tuple[str, ...], list[int]]) -> int:
    """How many blocks from ``i`` on are a contents list of numbered titles one to a block ("I. There's Pippins and
    Cheese to Come" / "II. On Buying Old Books" / ...) whose pieces are headed by their titles alone: three or more
    blocks of one line, each a number and a short title, up to a block that is no such entry, none of them found
    again with its number, and nine in ten of the titles found again later, in order, as lines set apart; 0 when
    the blocks from ``i`` are no such list."""
    k = i
    while k < len(blocks) and len(blocks[k]) == 1 and _ENTRY_NUMBER_RE.match(blocks[k][0].strip()) \
            and len(blocks[k][0].split()) <= 12:
        k += 1
    if k - i < 3 or k < len(blocks) and _ENTRY_NUMBER_RE.match(blocks[k][0].strip()) \
            or any(m > k for n in range(i, k) for m in singles.get(tuple(_tokens(blocks[n][0])), ())):
        return 0  # (the whole list, up to a block that is no numbered entry)
    found = _found_again([_ENTRY_NUMBER_RE.sub("", blocks[n][0].strip()) for n in range(i, k)], singles, k - 1)
    return k - i if (k - i) - found <= (k - i) // 10 else 0


def _titles_again_apart(blocks: list[list[str]], i: int, singles: dict[tuple[str, ...], list[int]]) -> int:
    """How many blocks from ``i`` on are a contents list set out one title to a block under its label ("CONTENTS" /
    "PREFACE" / "THE COD-FISHER" / ... each between blank lines): three or more blocks of one short title line each,
    nine in ten of them found again later, in the same order, as a line set apart (the heading of its piece); 0
    when the blocks from ``i`` are no such list."""
    k = i
    while k < len(blocks) and len(blocks[k]) == 1 and _title_like(blocks[k][0].strip()) \
            and len(blocks[k][0].split()) <= 10 and any(c.isalpha() for c in blocks[k][0]) \
            and not (k > i and _ILLUSTRATIONS_LABEL_RE.match(blocks[k][0].strip())
                     and (k + 1 == len(blocks) or len(blocks[k + 1]) > 1)):
        k += 1  # (up to the label over a list of pictures after it: "LIST OF DRAWINGS" over captions of two lines)
    if k - i < 3:
        return 0
    found = _found_again([blocks[n][0] for n in range(i, k)], singles, k - 1)
    return k - i if (k - i) - found <= (k - i) // 10 else 0


def _beside_titles_again(items: list[_Item], blocks: list[list[str]], i: int,
                         singles: dict[tuple[str, ...], list[int]]) -> bool:
    """A contents block of titles found again (:func:`_titles_again`) is right before block ``i``, or is the next
    block or the one after a group label ("THE ROUND TABLE")."""
    if items and items[-1].kind == "toc":
        return True
    return any(j < len(blocks) and len(blocks[j]) >= 3 and _titles_again(blocks, j, singles) is not None
               for j in (i + 1, i + 2))


_OPEN_NOTE_RE = re.compile(r"^\s*\[\s*(?:Illustrations?|Image|Picture|Frontispiece|Plate)\b[^\]\[]*$", re.I)


def _picture_notes(blocks: list[list[str]]) -> set[int]:
    """Blocks of a bracketed picture note printed over several blocks ("[Frontispiece Text:", the old
    title page's lines, "... Fleet Street, 1653.]"): from a block that opens one and does not close it to
    the block whose last line closes it (twelve blocks at most, no other bracket opened between)."""
    out: set[int] = set()
    k = 0
    while k < len(blocks):
        if _OPEN_NOTE_RE.match("\n".join(blocks[k])):
            j = k + 1
            while j < len(blocks) and j <= k + 12 and "[" not in "".join(blocks[j]) \
                    and not blocks[j][-1].rstrip().endswith("]") and "]" not in "".join(blocks[j]):
                j += 1
            if j < len(blocks) and j <= k + 12 and "[" not in "".join(blocks[j]) \
                    and blocks[j][-1].rstrip().endswith("]") and "".join(blocks[j]).count("]") == 1:
                out.update(range(k, j + 1))
                k = j
        k += 1
    return out


def _letter_headings(blocks: list[list[str]], gaps: list[int]) -> set[int]:
    """Blocks that are one capital letter alone, set apart (two or more blank lines before), in a run
    that goes through the alphabet (each the next letter, or one after it, five or more): the sections
    of a dictionary or a glossary ("A" ... "Z"), letters there even where they are roman numerals
    ("C", "I", "X"). Other lone capitals (a roman "I", "V", "X" of a book's numbered parts) are not."""
    cands = [(k, b[0].strip()) for k, b in enumerate(blocks)
             if len(b) == 1 and gaps[k] >= 2 and re.fullmatch(r"[A-Z]\.?", b[0].strip())]
    runs: list[list[int]] = []
    last = ""
    for k, s in cands:
        if runs and last and 1 <= ord(s[0]) - ord(last) <= 2:
            runs[-1].append(k)
        else:
            runs.append([k])
        last = s[0]
    return {k for run in runs if len(run) >= 5 for k in run}


_PAGE_MARK_RE = re.compile(r"^([ \t]*)\[(\d{1,4})\](?=[ \t]|$)[ \t]*")
_ROMAN_PAGE_MARK_RE = re.compile(r"^([ \t]*)\[[IVXLCDMivxlcdm]{1,6}\](?=[ \t]|$)[ \t]*")


def _without_page_marks(body: str) -> str:
    """The text without the printed page numbers a transcription keeps in square brackets at the starts of
    lines ("[7] A HISTORY OF FREEDOM OF THOUGHT", "[8] impossible for him, ...", "[V] CONTENTS", "[IV]" alone):
    where twenty or more such arabic numbers run on through the book, four in five of them one or two after the
    last, they are the pages (footnote numbers start again under each chapter, or are cited in the text too), and
    they and the front pages' roman ones are taken out; a line that held only a number is left blank, so line
    numbers stay."""
    lines = body.split("\n")
    vals = [int(m.group(2)) for ln in lines for m in [_PAGE_MARK_RE.match(ln)] if m]
    if len(vals) < 20 or sum(1 for a, b in zip(vals, vals[1:]) if 0 < b - a <= 2) < 0.8 * (len(vals) - 1):
        return body
    # footnotes are numbered again under each chapter, or cited in the text as well ("... the original[2]: ...")
    every = Counter(m.group(1) for m in re.finditer(r"\[(\d{1,4})\]", body))
    starts = Counter(str(v) for v in vals)
    if len(starts) < 0.9 * len(vals) or sum(1 for v in starts if every[v] > starts[v]) > 0.2 * len(starts):
        return body
    return "\n".join(_ROMAN_PAGE_MARK_RE.sub(r"\1", _PAGE_MARK_RE.sub(r"\1", ln)) for ln in lines)


def _txt_items(body: str, force=None) -> list[_Item]:
    """Plain text -> heading, paragraph, break and contents-entry ("toc") items. ``force``: see
    :func:`_split_blocks`; a forced line is a heading item with ``forced`` set."""
    blocks, forced, gaps = _split_blocks(_without_page_marks(body), force)
    blocks = _mend_numerals(blocks)
    letters = _letter_headings(blocks, gaps)
    pictures = _picture_notes(blocks)
    roman_ok = _roman_headings(blocks) - letters
    arabic_ok = _arabic_headings(blocks, gaps)
    serial = _serial_headings(blocks)
    addressed = _addressee_headings(blocks, gaps)
    numtitles = _set_apart_numtitles(blocks, gaps)
    singles = _single_lines(blocks)
    items: list[_Item] = []
    i = 0
    while i < len(blocks):
        if i in forced:
            items.append(_Item("heading", _norm(_clean_inline(blocks[i][0])), forced=True, style="forced"))
            i += 1
            continue
        if i in pictures:  # a line after a picture note stands as far apart as the note did
            if i + 1 < len(blocks):
                gaps[i + 1] = max(gaps[i + 1], gaps[i])
            i += 1
            continue
        if i in letters:  # "A" ... "Z": a line in capitals set apart, which the outline may take as a heading
            items.append(_Item("para", blocks[i][0].strip(), apart=gaps[i], caps=True))
            i += 1
            continue
        if i in numtitles:  # "I. Stories Shorter Still", a title over two lines joined
            items.append(_Item("heading", _norm(_clean_inline(" ".join(ln.strip() for ln in blocks[i]))),
                               style="numtitle", num=numtitles[i]))
            i += 1
            continue
        if i in addressed:
            line = _norm(_clean_inline(blocks[i][0]))
            run_on = _ADDRESSEE_RUN_ON_RE.match(line)
            items.append(_Item("heading", run_on.group(1) if run_on else line, style="letter"))
            if run_on:
                items.append(_Item("para", run_on.group(2)))
            i += 1
            continue
        after_label = _after_contents_label(items)
        if len(blocks[i]) == 1 and (_COLUMN_HEADER_RE.match(blocks[i][0].strip())
                                    or after_label and blocks[i][0].strip(" .").casefold() in ("page", "pages")):
            i += 1  # "CHAPTER    PAGE" over a contents list: its columns' names
            continue
        run = _numbered_titles_again(blocks, i, singles) \
            if items and items[-1].kind == "para" and _CONTENTS_LABEL_RE.match(items[-1].text) else 0
        if run:  # "I. There's Pippins and Cheese to Come" ...: a contents list; the titles head the pieces
            lines = [_norm(_clean_inline(blocks[n][0])) for n in range(i, i + run)]
            items.append(_Item("toc", " ".join(lines), label=True,
                               entries=[_ENTRY_NUMBER_RE.sub("", ln) for ln in lines]))
            i += run
            continue
        if after_label and len(blocks[i]) == 1 and (named := _match_heading(blocks[i][0].strip())) is not None \
                and named.style == "named" and _titles_again_apart(blocks, i, singles):
            _add_para(items, [blocks[i][0].strip()])  # "PREFACE" as a contents entry, not the preface's heading
            items[-1].apart, items[-1].caps = gaps[i], _caps_line(items[-1].text)
            i += 1
            continue
        entries = _toc_entries(blocks[i], after_label) or _run_on_entries(blocks[i]) \
            or _index_group(items, blocks[i]) \
            or _titles_again(blocks, i, singles, after_label and _beside_titles_again(items, blocks, i, singles))
        if entries is not None and not (i in roman_ok):
            items.append(_Item("toc", _norm(_clean_inline(" ".join(blocks[i]))),
                               entries=[_norm(_clean_inline(t)) for t in entries], label=after_label,
                               hung=_hung_entries(blocks[i], entries)))
            i += 1
            continue
        lines = [ln.strip() for ln in blocks[i]]
        i += 1
        j = 0
        last_bare = counted = False
        while j < len(lines):
            h = _match_heading(lines[j])
            if h is None and j == 0 and i - 1 in serial:
                h = _Heading(lines[0], None, style="serial", num=serial[i - 1])
            if h is None and j == 0 and _letter_heading(lines):
                h = _Heading(lines[0], "", style="named")  # the line under it is the letter's, no title
            if h is None and j == 0 and i - 1 in arabic_ok:
                h = _Heading(lines[0], None, style="number", num=arabic_ok[i - 1])
            if h is None or (h.roman and (j != 0 or i - 1 not in roman_ok)):
                break
            if h.title and _runs_on(h.title, lines[j + 1:]):
                break  # "BOOK I. (Folio), CHAPTER I. (Sperm Whale).--This whale, among the ...": a paragraph
            if h.style == "numtitle" and j == 0 and _dashed_title_over_two_lines(lines):
                items.append(_Item("heading", _norm(_clean_inline(" ".join(lines))), style="numtitle", num=h.num))
                j = len(lines)
                break
            if h.style == "numtitle" and (j != 0 or len(lines) > 1):
                break  # "I. A SCANDAL IN BOHEMIA" is a heading only as a line set apart
            if h.style == "named" and _numbered_entries_follow(lines[j + 1:]):
                break  # "The Forethought" / "I.  Of Our Spiritual Strivings" / ...: a contents list
            title = h.title
            if title is None and j + 1 < len(lines) and _match_heading(lines[j + 1]) is None \
                    and _title_like(lines[j + 1]) \
                    and not (j + 2 < len(lines) and lines[j + 2][:1].islower()):
                title = lines[j + 1]
                j += 1
            elif h.roman and len(lines) == 2:
                break  # "I" followed by a line that is no title: a paragraph
            if h.title is not None:
                text = _norm(lines[j]) if title == h.title and lines[j].startswith(h.head) \
                    else _join_title(h.head, title)
            elif title and _CONNECTING_END_RE.search(h.head):  # "No. 241. ... FOR DISTRIBUTION TO" / "THE POOR."
                text = f"{h.head} {title}"
            else:
                text = _join_title(h.head, title or "")
            items.append(_Item("heading", _norm(_clean_inline(text)), style=h.style, num=h.num))
            last_bare = title is None
            counted = h.style == "numtitle" and h.title is None
            j += 1
        if j == 0:
            n_items = len(items)
            _add_para(items, lines)
            if len(items) > n_items and items[-1].kind == "para":
                items[-1].apart = gaps[i - 1]  # blank lines before it (a title line set apart has two or more)
            elif len(items) == n_items and i < len(blocks):  # a picture note alone: the next line stands as far apart
                gaps[i] = max(gaps[i], gaps[i - 1])
            if items and items[-1].kind == "para" and (len(lines) == 1 and _caps_line(items[-1].text)
                                                       and not _pushed_right(blocks[i - 1][0])
                                                       or _caps_title_lines(lines) or _caps_dated_title(lines)):
                items[-1].caps = True
            continue
        if j < len(lines):
            _add_para(items, lines[j:])
        elif last_bare and i + 1 < len(blocks) and i not in forced:
            t = _strict_title_line(blocks[i])
            if t is None and counted and len(blocks[i]) == 1 and _title_like(blocks[i][0]) \
                    and len(blocks[i][0].split()) <= 8 and _match_heading(blocks[i][0]) is None:
                t = blocks[i][0].strip()  # "1. First Day." / "Christ's Childhood.": the day's title
            if t is not None:
                items[-1].text = _join_title(items[-1].text, _norm(_clean_inline(t)))
                i += 1
    return items


def _runs_on(title: str, rest: list[str]) -> bool:
    """A heading's title that is the start of a sentence running on through a paragraph: it ends
    mid-sentence (a lower-case word, no punctuation) or runs in after a dash, and three or more lines
    follow it in its block
    (a title printed over two lines is followed by a blank line); or a note's reference, a line that
    holds a sentence's end and the start of another and runs on in its block ('BOOK II "Both to frequent"
    (4). Gr. to mh, C. conjectures to me. The', 'BOOK V XIV. katorqwseiz (15): Acts of "rightness" ...')."""
    last = title.rstrip().split()[-1] if title.strip() else ""
    return len(rest) >= 3 and (last.isalpha() and last.islower() or _RUN_IN_RE.search(title) is not None) \
        or bool(rest) and _SENTENCE_IN_TITLE_RE.search(title) is not None


_SENTENCE_IN_TITLE_RE = re.compile(r"(?:[a-z]|\d|\)|\w{3})(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)(?<!\bJr)"
                                   r"(?<!\bSr)[.:][)\"'\u201d]?\s+\S+\s+\S")
"""A sentence's end and more words after it ("(4). Gr. to mh", "(18): This is"), not "Mr. Brooke" alone."""
_RUN_IN_RE = re.compile(r"[.)]\s*(?:\u2014|--)\s*\w")
"""A run-in heading: a label, a dash and the paragraph's first words ("(Sperm Whale).--This whale")."""


def _add_para(items: list[_Item], lines: list[str], toc: bool = False) -> None:
    if _is_separator(_norm(" ".join(lines))):
        items.append(_Item("break", ""))
        return
    text = _norm(_clean_inline(" ".join(lines)))
    if text and not _is_separator(text):
        items.append(_Item("para", text, toc))
    elif text:
        items.append(_Item("break", ""))
