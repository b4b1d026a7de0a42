"""Front and back matter: chapters -> the chapters worth reading aloud.

:func:`_drop_matter` drops, for every format, chapters titled "About the Author", "Contents",
"Index", "Copyright", "Also by ..."; a short copyright notice among the first three chapters; the printer's line closing the last chapter;
ISBN-only paragraphs; notes by the e-text's makers (:func:`_producer_notes`); what follows "THE END" in the last chapter (publishers' advertisements); a
short last chapter that only points at Project Gutenberg; a play's programme page near the front
(:func:`_is_playbill`) and its property list, light plot and light cues after the play; and
a trailing "About the Author" section in the last chapter. Used
unless ``front_matter=True``.

Works on :class:`Chapter` lists only: it does not know formats, nor EPUB's ``epub:type`` /
landmark matter, which ``jobs.ingest.html`` and ``jobs.ingest.epub`` skip while reading.
"""

from __future__ import annotations

import re
from dataclasses import replace

from jobs.ingest.book import Chapter
from jobs.ingest.common import _CAST_LABEL_RE, _is_prose, _join_title, _tokens
from jobs.ingest.text import _caps_line


_MATTER_TITLE_RE = re.compile(
    r"^(?:about\s+the\s+(?:authors?|translators?|editors?|illustrators?)|(?:table\s+of\s+)?contents"
    r"|(?:general\s+)?index(?:\s+(?:of|to)\s+(?:the\s+)?(?:proper\s+names|names|persons|places|subjects|first\s+lines"
    r"|titles|authors))?"
    r"|copyright(?:\s+page)?|colophon|(?:transcriber|preparer)(?:'s|\u2019s)?\s+notes?|(?:also|other\s+(?:books|titles|works))\s+by\b.*|(?:list\s+of\s+)?illustrations|list\s+of\s+(?:drawings|plates)"
    r"|(?:a\s+)?note\s+on\s+the\s+illustrations|typographical\s+errors(?:\s+corrected(?:\s+in\s+(?:the\s+)?text)?)?"
    r"|(?:appendix\s*:\s*)?(?:production|transcriber(?:'s|\u2019s)?)\s+notes\s+(?:for|on|to)\s+(?:the\s+|this\s+)?e-?(?:book|text)\b.*"
    r"|all\s+rights\s+reserved|description\s+of\s+(?:the\s+)?characters|publishers?(?:'s?|\u2019s?)?\s+note"
    r"|(?:a\s+)?list\s+of\s+(?:the\s+)?subscribers(?:'|\u2019)?(?:\s+names)?|subscribers(?:'|\u2019)?\s+names)"
    r"[.:]?$", re.I)
_COPYRIGHT_TITLE_RE = re.compile(r"^(?:copyright|all\s+rights\s+reserved)\b", re.I)
"""The matter titles that a speech or an essay may also bear: a chapter so titled is dropped only when it is not
prose (:func:`_speech`)."""
_ROYALTY_RE = re.compile(r"\broyalt(?:y|ies)\b", re.I)
_PERFORMING_RIGHTS_RE = re.compile(r"\broyalt|\bamateurs?\b|\bperform(?:ance|ed|ing)?\b|\bprograms?\b|\bproduc(?:ed|tion)\b", re.I)
_PRODUCTION_NOTES_RE = re.compile(r"(?:^|\s)(?:property\s+list|light(?:ing)?\s+plot|light(?:ing)?\s+cues|scene\s+plot)[.:]?$", re.I)
"""The title of a play's production appendix ("R. U. R. Property List", "LIGHT PLOT", "Light Cues"):
the stage manager's lists of furniture, lamps and cues after the play, back matter, not read aloud."""
_STAGING_CREDIT_RE = re.compile(r"^(?:staged|directed|settings(?:\s+and\s+costumes)?|costumes|scenery)\s+by\s", re.I)
"""A first production's credit line ("Staged by Philip Moeller", "Settings and Costumes by Lee Simonson")."""
_ISBN_RE = re.compile(r"^\s*(?:e-?)?ISBN(?:-1[03])?[:\s]*[\dXx][\d\s\-Xx]{8,20}(?:\s*\([^)]{0,40}\))?[.;]?\s*$", re.I)
_COPYRIGHT_RE = re.compile(r"(?:\bcopyright\b|\u00a9|\(c\)\s*\d{4})", re.I)
_RIGHTS_RE = re.compile(r"all rights reserved|\bISBN\b|no part of this (?:publication|book)|first published|"
                        r"printed in|library of congress", re.I)


STATIONERS_HALL = r"entered\s+(?:in\s+[A-Z][a-z]+\s+)?at\s+stationers(?:'|\u2019)?\s+hall\b"
"""The English copyright entry ("Entered in London at Stationers' Hall."), a pattern fragment for case-blind
expressions: here a copyright notice, in :mod:`jobs.ingest.outline` a publisher's line."""
PRINTING_WORKS = r"\bPrinting\s+(?:Works|Office)\b"
"""A printer's works named ("The Selwood Printing Works", "Government Printing Office"), a pattern fragment: here the
printer's line at the foot of the last page, in :mod:`jobs.ingest.outline` a publisher's line."""


_PRINTED_RE = re.compile(r"^\W*(?:[A-Z][\w .]{1,25}:\s*)?(?:(?:electrotyped|stereotyped)\s+and\s+)?"
                         r"printed\s+(?:by|at|in)\b", re.I)


def _printer_line(p: str) -> bool:
    """The printer's line at the foot of the last page ("THE NORTHUMBERLAND PRESS, NEWCASTLE-UPON-TYNE",
    "Printed by ...", "Cambridge: Electrotyped and Printed by ...", "Butler & Tanner, The Selwood Printing Works,
    Frome, and London."): short, and in capitals naming a press or printers, or naming printing works or office,
    or starting "Printed by"."""
    if len(p.split()) > 15:
        return False
    return bool(_PRINTED_RE.match(p)) or re.search(PRINTING_WORKS, p) is not None \
        or (not any(c.islower() for c in p) and re.search(r"\b(?:PRESS|PRINTERS?|PRINTING)\b", p) is not None)


_COLOPHON_RE = re.compile(r"^\W*(?:so\s+)?here\s+end(?:s|eth)\s+(?:the\s+)?\S.{0,300}?\b(?:printed|print|printing|press|types?)\b",
                          re.I | re.S)
"""A private press's colophon closing the book: "So here ends LOVE, LIFE AND WORK, being a book of Essays selected
from the writings of ELBERT HUBBARD, and done into print by The Roycrofters at their Shop ...", "Here endeth ...
printed at the ... Press"."""
COLOPHON_TAIL_PARAGRAPHS = 3
"""The colophon is among the last chapter's last this many paragraphs (its press's mark may follow it)."""


PRINTER_TAIL_PARAGRAPHS = 12
"""At most this many paragraphs, under a "Footnotes" label, follow the printer's line that ends the book's text."""
_FOOTNOTES_LABEL_RE = re.compile(r"^\W*(?:foot\s*)?notes?\W*$", re.I)
"""The label over the notes gathered after the text: "Footnotes", "NOTES"."""


_THE_END_RE = re.compile(r"^[_*\s]*(?:the\s+end|finis)[.!_*\s]*$", re.I)
_LETTER_SPACED_RE = re.compile(r"^[\W_]*[A-Za-z](?:\s+[A-Za-z])+[\W_]*$")


def _the_end(p: str) -> bool:
    """The line that closes a book's text: "THE END", "Finis", also letter-spaced ("F  I  N  I  S.",
    "T H E   E N D")."""
    if _LETTER_SPACED_RE.match(p):
        return re.fullmatch(r"[\W_]*(?:theend|finis)[.!_*]*", re.sub(r"\s+", "", p), re.I) is not None
    return _THE_END_RE.match(p) is not None


def _speech(ch: Chapter) -> bool:
    """A chapter of prose, not a notice: over 300 words, three paragraphs of prose over 60 words each (Mark Twain's
    speech "COPYRIGHT" before a committee of Congress)."""
    return len(" ".join(ch.paragraphs).split()) > 300 \
        and sum(1 for p in ch.paragraphs if _is_prose(p) and len(p.split()) > 60) >= 3


def _is_copyright_chapter(ch: Chapter) -> bool:
    """A short chapter that is a copyright notice / colophon (copyright and rights or ISBN lines). An acting
    edition's royalty notice ("CAUTION: Professionals and amateurs are hereby warned that ... is subject to a
    royalty", what to print on programs, who may perform it) belongs to its copyright page: when a paragraph
    speaks of a royalty, the paragraphs about royalty, amateurs, performance and programs count neither
    towards the length nor as prose."""
    text = " ".join(ch.paragraphs)
    paras = ch.paragraphs
    if any(_ROYALTY_RE.search(p) for p in paras):
        paras = [p for p in paras if not _PERFORMING_RIGHTS_RE.search(p)]
    return (len(" ".join(paras).split()) <= 300 and bool(_COPYRIGHT_RE.search(text)) and bool(_RIGHTS_RE.search(text))
            and not any(_is_prose(p) and len(p.split()) > 60 for p in paras))


def _is_gutenberg_note(ch: Chapter) -> bool:
    """A short last chapter that only points at Project Gutenberg ("More Info": "About Project
    Gutenberg"): the publisher's back page, not the book."""
    text = " ".join(ch.paragraphs)
    return len(text.split()) <= 60 and re.search(r"\bproject\s+gutenberg\b", text, re.I) is not None


_NOTE_LABEL_RE = re.compile(r"^[\[({]?\s*(?:(?:original\s+)?(?:transcriber|producer|preparer|poster|e-?text\s+editor"
                            r"|project\s+gutenberg\s+editor)(?:'s|\u2019s|s'|s)?"
                            r"\s+(?:notes?|comments?)\b"
                            r"|about\s+(?:the|this)\s+(?:online|electronic|digital|e-?text|e-?book)"
                            r"\s+(?:edition|version|text)\b)", re.I)
"""A note's label by whoever made the e-text: "Transcriber's Note:", "[Producer's comments", "About the online
edition." (The Voyage of the Beagle: how it writes degrees and italics)."""
_SUB_LABEL_RE = re.compile(r"^[A-Z][A-Za-z'\u2019 -]{0,40}:$")
"""A topic's label inside a transcriber's note ("SQUARE BRACKETS:", "CHANGES TO THE TEXT:")."""
_FILE_NOTE_RE = re.compile(r"\b(?:this|the)\s+(?:e-?texts?|e-?books?|files?|electronic\s+(?:edition|text|version))\b"
                           r"|\be-?texts\b|\b(?:images|illustrations)\s+in\s+this\b|\btranscri|\bproofread"
                           r"|\btypographical\b|\b(?:spelling|hyphenation|punctuation)\b.{0,40}\b(?:retained|preserved"
                           r"|corrected|standardi[sz]ed|original|made)"
                           r"|\bthis\s+text\b|\bto\s+indicate\s+italics\b|\bend-?notes\b"
                           r"|\bitalics?(?:\s+text)?\s+(?:is|are)\s+(?:represented|indicated|shown|marked)\b|\brenumbered\b"
                           r"|\bsquare\s+brackets\b", re.I)


_CORRECTION_RE = re.compile(r"^\W*(?:page|p\.|pg\.?)\s*\d{1,4}\b[^:]{0,30}:"
                            r"|\b(?:changed|corrected)\s+[\"\u201c'].{1,80}?[\"\u201d']\s+to\s+[\"\u201c']", re.I)
"""A transcriber's correction: "Page 83: changed "her serious, eyes" to "her serious eyes"", "Page 138: Added
missing word "we" ..."."""
_END_NOTE_RE = re.compile(r"^\[\s*(?:foot\s*)?note\s+\d{1,3}\s*:", re.I)
"""A numbered note in brackets ("[Footnote 1: Frontispiece, with the caption ...]"): under a transcriber's
label, every such note in a row is the transcriber's."""
_THIS_FILE_RE = re.compile(r"\bthis\s+(?:e-?text|e-?book|file|electronic\s+(?:edition|text|version))\b|\be-?texts?\b",
                           re.I)
_PRODUCTION_RE = re.compile(r"\b(?:images?|illustrations?|versions?|formats?|screens?|transcri\w*|proofread\w*"
                            r"|archives?|project|thanks|provid(?:e|ed|es|ing))\b|\bhttps?://|\bwww\.", re.I)
"""Words of a note on how the e-text was made or where it came from ("From:  http://www.constitution.org/... Our
Thanks to The Consitution Society for Providing This Etext!!")."""


_SOURCE_NOTE_RE = re.compile(r"^\W*(?:(?:this|the)\s+(?:e-?)?(?:text|book)\s+(?:is|was|has\s+been)\s+)?"
                             r"(?:extracted|reprinted|reproduced|taken|transcribed)\s+from\b", re.I)
"""The edition a text was taken from, in the e-text's first pages: "[This text is taken from the New York edition
of 1919.]", "Reprinted from ..."."""
_FILE_NOTE_LABEL_RE = re.compile(r"^\W*notes?\s+(?:from|on|about|to)\s+(?:the|this)\s+(?:original\s+)?"
                                 r"(?:e-?texts?|e-?books?|files?|electronic\s+(?:books?|editions?|texts?|versions?))"
                                 r"\s*:", re.I)
"""A note labelled as about the electronic file ("Note from the original file: This electronic book is being
released at this time to honor ..."): the e-text maker's, not the book's."""
_BRACED_RE = re.compile(r"^\{[^{}]+\}$")
"""A paragraph wholly in braces: printed books do not set text so; the e-text's maker does ("{Although the poem
itself is included shortly, ... — A. L.}")."""
_FACSIMILE_RE = re.compile(r"^\W*(?:\{[^{}]{0,20}\}\s*)?(?:\(?from\s+an?\s+)?facsimile\s+of\b", re.I)
"""A facsimile's caption ("{From a} Facsimile of an autograph copy of the poem ...")."""


_BRACKETED_NOTE_RE = re.compile(r"^\[\s*note\s*:", re.I)
_ERRATA_LABEL_RE = re.compile(r"^\W*(?:errata|corrigenda)\W*$", re.I)
"""The label of a list of errata ("Errata"): the list is a correction of the print, not the book's text."""
ERRATA_MAX_WORDS = 400
"""A list of errata under its label is dropped when it closes the book within this many words."""


def _bracket_end(paras: list[str], i: int, span: int) -> int | None:
    """The paragraph, among ``span`` from ``i``, in which the square bracket open at ``i`` closes; None if none does."""
    depth = 0
    for j in range(i, min(len(paras), i + span)):
        depth += paras[j].count("[") - paras[j].count("]")
        if depth <= 0:
            return j
    return None


def _bracketed_file_note(paras: list[str], i: int) -> range:
    """The paragraphs of a note in square brackets that opens at ``i`` ("[Note: ...") and closes within six
    paragraphs (or runs to the end of them), when it speaks of the text as the e-text gives it (its square brackets, "this text",
    spelling kept or corrected); an empty range for any other note (the author's "[Note: ...]" aside)."""
    j = _bracket_end(paras, i, 6)
    if j is None and len(paras) <= i + 6:
        j = len(paras) - 1  # its closing line already taken (the edition it names)
    if j is None:
        return range(0)
    note = " ".join(paras[i:j + 1])
    return range(i, j + 1) if len(note.split()) <= 300 and _FILE_NOTE_RE.search(note) else range(0)


def _closing_bracketed_notes(paras: list[str]) -> int:
    """Where the notes in square brackets that close a book start, when one of them is about the e-text
    (:data:`_FILE_NOTE_RE`: "[In this text, to keep the character set to the minimum 'vanilla ASCII': italics have
    been converted to capitals ...]", after "[The book ends with two lines of ancient Greek ...]"): paragraphs each
    wholly in brackets, 120 words at most, after the book's last paragraph; ``len(paras)`` when there are none."""
    start = len(paras)
    while start > 1 and paras[start - 1].lstrip().startswith("[") and paras[start - 1].rstrip().endswith("]") \
            and len(paras[start - 1].split()) <= 120:
        start -= 1
    return start if any(_FILE_NOTE_RE.search(p) for p in paras[start:]) else len(paras)


_EBOOK_MARK_RE = re.compile(r"^\W*(?:faded\s+page\s+e-?book\s+#?\s*\d+"
                            r"|an?\s+distributed\s+proofreaders\s+canada\s+e-?book)\W*$", re.I)
"""The mark of a Faded Page (Distributed Proofreaders Canada) e-book on its first page: "Faded Page eBook
#20150622", "* A Distributed Proofreaders Canada eBook *"."""
_EBOOK_HEADER_RE = re.compile(r"^(?:title|author|illustrator|translator|editor|date\s+of\s+first\s+publication"
                              r"|date\s+first\s+posted|date\s+last\s+updated)s?:\s+\S"
                              r"|^this\s+e-?book\s+is\s+made\s+available\s+at\s+no\s+cost\b"
                              r"|^this\s+work\s+is\s+in\s+the\s+canadian\s+public\s+domain\b", re.I)
"""The other lines of that first page: its terms ("This ebook is made available at no cost and with very few
restrictions ...", "This work is in the Canadian public domain ...") and its record of the book ("Title: ...",
"Date of first publication: 1926", "Date first posted: ...")."""
EBOOK_HEADER_LINES = 30
"""How far into a first chapter the e-book mark and its header lines are looked for."""


def _ebook_header(paras: list[str]) -> set[int]:
    """Positions of a Faded Page e-book's first page (:data:`_EBOOK_MARK_RE`, :data:`_EBOOK_HEADER_RE`) among the
    first :data:`EBOOK_HEADER_LINES` paragraphs, up to the line after its mark; none where the mark is not there."""
    head = paras[:EBOOK_HEADER_LINES]
    marks = [i for i, p in enumerate(head) if _EBOOK_MARK_RE.match(p)]
    if not marks:
        return set()
    return {i for i, p in enumerate(head[:marks[-1] + 2]) if _EBOOK_MARK_RE.match(p) or _EBOOK_HEADER_RE.match(p)}


def _producer_notes(paras: list[str], front: bool) -> set[int]:
    """Positions of notes by whoever made the electronic text, never spoken: a transcriber's note
    ("[Transcriber's Note: ...]", or the label "Transcriber's Notes:", or such a label with its note run in, or
    "[Transcriber's Notes:" opening a bracket over paragraphs up to the one that closes it, twelve at most,
    and the paragraphs under it that speak of the text, its spelling or its files, up to five, all the
    bracketed numbered notes "[Footnote 1: ...]" and corrections ("Page 83: changed ... to ...") in a row under it, and topics under labels of their own
    ("SQUARE BRACKETS:" and up to three paragraphs of prose under it), and, in the first chapters, a short
    paragraph about this file, e-book or e-text that speaks of its images, version, format or
    making ("The images in this file are ...", "There are several editions of this ebook ...", with the
    table of those editions under it) or is labelled as a note on the file ("Note from the original
    file: ..."), or is a note in square brackets on how the text is given ("[Note: The body of this novel
    contains a lot of footnotes ... inserted in square brackets ...]", over its paragraphs); "He opened the file."
    stays. Also a list of errata closing the book under its label ("Errata", :data:`ERRATA_MAX_WORDS` words at
    most), a bracketed note about the e-text over several paragraphs in the first chapters ("[This e-text includes
    characters that require UTF-8 ..." ... "... use the Latin-1 version of the file instead.]"), a paragraph wholly in braces
    ("{Although the poem itself is included shortly, ... — A. L.}"), and, in the first chapters, a line naming
    the edition the text was taken from ("[This text is taken from the New York edition of 1919.]") and a
    facsimile's caption ("{From a} Facsimile of an autograph copy of the poem ...") with the copy of the page
    above it, from its title line in capitals down, and a Faded Page e-book's first page (:func:`_ebook_header`)."""
    out: set[int] = _ebook_header(paras) if front else set()
    for i, p in enumerate(paras):
        opened = p.lstrip().startswith("[") and p.count("[") > p.count("]")
        if opened and _NOTE_LABEL_RE.match(p):
            # "[Transcriber's Notes:" over paragraphs up to its closing bracket ("... Don Kostuch ]"): all the note's
            j = _bracket_end(paras, i, 12)
            if j is not None and sum(len(q.split()) for q in paras[i:j + 1]) <= 800:
                out.update(range(i, j + 1))
                continue
        if _NOTE_LABEL_RE.match(p):
            out.add(i)
            if len(p.split()) <= 6 or not p.startswith(("[", "(")):  # a label, or one with its note run in
                j, under = i + 1, 0  # under: paragraphs still taken under a topic's label
                while j < len(paras):
                    q = paras[j]
                    if _SUB_LABEL_RE.match(q) and len(q.split()) <= 5:
                        under = 3
                    elif q.rstrip().endswith(":") and len(q.split()) <= 12 and _FILE_NOTE_RE.search(q):
                        # a line about the text that introduces the note's topics ("Comments on the preparation
                        # of this e-text:"): up to five short paragraphs under it, prose or a line ending in a
                        # colon before its example ("Leading blanks are reproduced ... Eg.:")
                        under = 5
                    elif under and (_is_prose(q) or q.rstrip().endswith(":")) and len(q.split()) <= 120:
                        under -= 1
                    elif not (j <= i + 5 and _FILE_NOTE_RE.search(q) and len(q.split()) <= 200
                              or _END_NOTE_RE.match(q) or _CORRECTION_RE.search(q) and len(q.split()) <= 60):
                        break
                    out.add(j)
                    j += 1
        elif _ERRATA_LABEL_RE.match(p) and sum(len(q.split()) for q in paras[i + 1:]) <= ERRATA_MAX_WORDS:
            out.update(range(i, len(paras)))  # a list of errata closing the book, under its label
        elif front and opened and (note := _bracketed_file_note(paras, i)):
            out.update(note)  # "[This e-text includes characters ..." over paragraphs
        elif front and len(p.split()) <= 120 and _THIS_FILE_RE.search(p) and _PRODUCTION_RE.search(p):
            out.add(i)
            j = i + 1  # and the table under it, if any: "1228 1859, First Edition", "22764 1860, Second Edition"
            while j < len(paras) and _EDITIONS_ROW_RE.match(paras[j]):
                out.add(j)
                j += 1
        elif front and len(p.split()) <= 120 and _FILE_NOTE_LABEL_RE.match(p):
            out.add(i)  # "Note from the original file: ..."
        elif front and _BRACKETED_NOTE_RE.match(p):
            out.update(_bracketed_file_note(paras, i))  # "[Note: The body of this novel ... square brackets ...]"
        elif _BRACED_RE.match(p.strip()) and len(p.split()) >= 5:
            out.add(i)  # a note in braces, the e-text maker's
        elif front and len(p.split()) <= 40 and _SOURCE_NOTE_RE.match(p):
            out.add(i)  # the edition the text was taken from
        elif front and len(p.split()) <= 40 and _FACSIMILE_RE.match(p):
            out.add(i)  # a facsimile's caption, and the copy of the page it captions, from its title line down
            top = next((j for j in range(i - 1, max(-1, i - 12), -1) if _caps_line(paras[j])), None)
            out.update(range(top if top is not None else i, i))
    return out


_EDITIONS_ROW_RE = re.compile(r"^\d{1,6}\s*\d{4},\s[^.]{0,60}\bedition\b.{0,80}$", re.I)
"""A row of Project Gutenberg's table of a book's other e-books under its note ("There are several editions of this
ebook ..."): the e-book's number, the year and the edition: "1228 1859, First Edition"."""


_ADS_HEAD_RE = re.compile(r"\b(?:books|catalogue|publications|advertisements?|(?:valuable|new|standard|recent)\s+works)\b", re.I)
_PRICE_RE = re.compile(r"\bprice\b|\bcents\b|\bcts\.|\$\s?\d|\b\d{1,2}s\.\s?(?:\d{1,2}d\.)?(?!\w)|\bshillings?\b",
                       re.I)
_PUBLISHERS_LINE_RE = re.compile(r"\bpublishers\b", re.I)


def _advertisements(paras: list[str]) -> int | None:
    """Where the publisher's advertisements at the end of a book start, if they do: a short line naming books
    ("New Picture Books for Little Children.", "Catalogue of ..."), and from it to the end only short
    paragraphs (lists of titles, series lines: 60 words at most) that name prices twice or more ("TEN CENTS
    EACH.", "PRICE, 75 Cts.", "3s. 6d.") or a price and the publishers ("McLOUGHLIN BROS., PUBLISHERS, New
    York."), less than half the chapter's words; None when there are none. A press notice quoted under a
    title (61 to 150 words) may stand among them where the list names two more prices for each such notice."""
    total = sum(len(p.split()) for p in paras)
    start = None
    for j in range(len(paras) - 1, 0, -1):
        if len(paras[j].split()) > 150:
            break
        if len(paras[j].split()) > 12 or not _ADS_HEAD_RE.search(paras[j]):
            continue
        tail = paras[j:]
        prices = sum(1 for p in tail if _PRICE_RE.search(p))
        notices = sum(1 for p in tail if len(p.split()) > 60)
        if notices and prices < 2 + 2 * notices:
            continue
        if (prices >= 2 or prices and any(_PUBLISHERS_LINE_RE.search(p) for p in tail)) \
                and 2 * sum(len(p.split()) for p in tail) < total:
            start = j  # the earliest such line opens the list
    return start


_INDEX_LABEL_RE = re.compile(r"^(?:general\s+)?index(?:\s+(?:of|to)\s+\w+(?:\s+\w+)?)?\.?$", re.I)
_FIRST_LINES_LABEL_RE = re.compile(r"^index\s+(?:of|to)\s+(?:the\s+)?first\s+lines\.?$", re.I)
FIRST_LINE_WORDS = 25
"""The longest entry of an index of first lines printed without pages (a poem's first line, one to a
paragraph)."""
_PAGE_REFS_RE = re.compile(r"\w,\s+\d{1,4}(?:[-\u2013]\d{1,4})?(?:,\s+\d{1,4}(?:[-\u2013]\d{1,4})?)*[.;]?(?=\s|$)")
"""An index entry's page references: "Accents, 92.", "Aeschylus, 70, 76.", "Amiot, 50, 57, 61, 263."."""


def _back_index(paras: list[str]) -> int | None:
    """Where the book's index starts inside its last chapter: an "INDEX" label ("General Index", "Index of
    Names") after which every paragraph is a group letter ("A.") or holds entries with page numbers ("Accents,
    92. Adagio, 189. ..."), ten page references or more in all, perhaps with "THE END." under them; or an
    "INDEX TO FIRST LINES" over three lines or more without pages (:data:`FIRST_LINE_WORDS` words each at
    most); None when there is none."""
    for j in range(len(paras) - 1, 0, -1):
        if not _INDEX_LABEL_RE.match(paras[j].strip()):
            continue
        rest = paras[j + 1:]
        while rest and _the_end(rest[-1]):
            rest = rest[:-1]  # "THE END." under the index: the book's last line, cut with it
        refs = sum(len(_PAGE_REFS_RE.findall(p)) for p in rest)
        if rest and refs >= 10 and all(len(p.strip(" .")) <= 2 or _PAGE_REFS_RE.search(p) for p in rest):
            return j
        lines = [p for p in rest if any(c.isalpha() for c in p)]
        if _FIRST_LINES_LABEL_RE.match(paras[j].strip()) and len(lines) >= 3 \
                and all(len(p.split()) <= FIRST_LINE_WORDS for p in lines):
            return j  # an index of first lines without pages: each poem's first line, one to a paragraph
        return None
    return None


def _is_playbill(ch: Chapter) -> bool:
    """A chapter near the front that names the first production's staff ("Staged by Philip Moeller",
    "Settings and Costumes by Lee Simonson") among its first lines and holds no long paragraph: the
    theatre's programme page with its cast, front matter, not a chapter."""
    paras = ch.paragraphs
    return any(_STAGING_CREDIT_RE.match(p) for p in paras[:8]) and all(len(p.split()) <= 40 for p in paras)


_PERFORMED_RE = re.compile(r"\b(?:first\s+(?:performed|produced|acted)|performed\s+(?:at|by)|produced\s+at)\b", re.I)
_CAST_ENTRY_RE = re.compile(r"^[A-Z][A-Z'\u2019.-]{2,}(?:\s+[A-Z][A-Z'\u2019.-]+)*(?:\s*[,(]|$)")
"""A cast list's entry: a name in capitals, alone or before its description ("SMITH (a young business man)")."""
_FIRST_ACT_RE = re.compile(r"^(?:act\s+(?:i|1|one|the\s+first)|first\s+act)\b\W*$", re.I)


def _play_title_pages(chapters: list[Chapter]) -> list[Chapter]:
    """A play's own page before its first act, in a book of several plays ("The Verge": when and where it was
    first performed, its persons): thirty short paragraphs at most (25 words each), one of them a performance
    note or a cast label or half of them cast entries in capitals, followed by a chapter titled as the first act
    (a verse prologue before the first act is no such page). The programme is not read (as a cast list under its
    label is not); the play's title is said with its first act ("The Verge. Act I")."""
    out: list[Chapter] = []
    k = 0
    while k < len(chapters):
        ch = chapters[k]
        nxt = chapters[k + 1] if k + 1 < len(chapters) else None
        if nxt is not None and ch.title and not _FIRST_ACT_RE.match(ch.title.strip()) \
                and _FIRST_ACT_RE.match((nxt.title or "").strip()) and 0 < len(ch.paragraphs) <= 30 \
                and all(len(p.split()) <= 25 for p in ch.paragraphs) and ch.opening == 0 \
                and (any(_PERFORMED_RE.search(p) or _CAST_LABEL_RE.match(p) for p in ch.paragraphs)
                     or 2 * sum(1 for p in ch.paragraphs if _CAST_ENTRY_RE.match(p)) >= len(ch.paragraphs) >= 3):
            out.append(replace(nxt, title=_join_title(ch.title, nxt.title)))
            k += 2
            continue
        out.append(ch)
        k += 1
    return out


_PRESS_NOTICE_RE = re.compile(r"^(?:THE\s+)?[A-Z][A-Z\u00c0-\u00de'\u2019&.]+"
                              r"(?:\s+[A-Z][A-Z\u00c0-\u00de'\u2019&.]+){0,3}"
                              r"\s*[\u2014\u2013-]{1,2}\s*[\u201c\"]")
"""A press notice of a book: the paper's name in capitals, a dash and the quotation ('ATHEN\u00c6UM.\u2014"A remarkable
achievement ...', 'THE SATURDAY REVIEW.\u2014"Here we find ...')."""


_COPYRIGHT_NOTICE_RE = re.compile(r"^\W*(?:(?:renewal|renewed)\s+)?(?:copyright\b|\u00a9"
                                  r"|entered,?\s+according\s+to\s+(?:the\s+)?act\s+of\s+congress\b"
                                  r"|" + STATIONERS_HALL + ")", re.I)
"""A copyright notice's first words: "Copyright, 1879, by ...", "\u00a9 1912", "renewal copyright, 1954, ...", "Entered
according to Act of Congress in 1855 by ...", "Entered in London at Stationers' Hall."."""


def _copyright_notices(paras: list[str]) -> set[int]:
    """Positions of copyright notices (:data:`_COPYRIGHT_NOTICE_RE`, 60 words at most) among a chapter's paragraphs:
    the title page's verso run into an epigraph, a dedication, a preface or the first chapter."""
    return {i for i, p in enumerate(paras) if len(p.split()) <= 60 and _COPYRIGHT_NOTICE_RE.match(p)}


_EBOOK_COLOPHON_RE = re.compile(r"^(?:colophon|availability|metadata|encoding|revision\s+history|external\s+references"
                                r"|corrections)\W*$", re.I)
"""A title of the e-book maker's colophon closing a Project Gutenberg HTML edition: "Colophon" over "Availability",
"Encoding", "Revision History", "External References" and "Corrections" (the list of changes made to the text)."""


def _ebook_colophon(chapters: list[Chapter]) -> int:
    """How many chapters at the end of the book are the e-book maker's colophon: a chapter titled "Colophon"
    (perhaps with its first part's title run on: "Colophon. Availability") and the chapters of its parts after it
    (:data:`_EBOOK_COLOPHON_RE`)."""
    k = len(chapters)
    while k > 1 and all(_EBOOK_COLOPHON_RE.match(t.strip()) for t in re.split(r"\.\s+", chapters[k - 1].title or "-")):
        k -= 1
        if (chapters[k].title or "").strip().lower().startswith("colophon"):
            return len(chapters) - k
    return 0


def _press_notices(paras: list[str]) -> bool:
    """The paragraphs under a closing "By the same Author" are the other book's title page and its reviews: three
    press notices or more (:data:`_PRESS_NOTICE_RE`), the rest short lines (its title, "BY", the author, "WITH ONE
    HUNDRED AND SEVENTY SKETCHES BY A.S. BOYD", "Extracts from Reviews"), of 15 words at most."""
    notices = sum(1 for p in paras if _PRESS_NOTICE_RE.match(p))
    return notices >= 3 and all(_PRESS_NOTICE_RE.match(p) or len(p.split()) <= 15 for p in paras)


def _press_chapters(chapters: list[Chapter]) -> int:
    """How many chapters at the end of the book are the publisher's notices of the author's other books: each
    headed by the other book's title and holding only press notices (:data:`_PRESS_NOTICE_RE`)."""
    k = len(chapters)
    while k > 1 and chapters[k - 1].paragraphs and all(_PRESS_NOTICE_RE.match(p) for p in chapters[k - 1].paragraphs):
        k -= 1
    return len(chapters) - k


CATALOGUE_HEAD = 5
"""A catalogue chapter names a price within its first paragraphs, this many: a last chapter whose story ends before
a long priced list (The Moorland Cottage's "CHAPTER XI." over Harper's catalogue) is the book's, its list cut at
its start by :func:`_advertisements`."""


def _catalogue_chapters(chapters: list[Chapter]) -> int:
    """How many chapters at the end of the book are the publisher's catalogue of other books: short entries (60
    words a paragraph on average at most), a quarter of them or more with a price ("New Language Exercises, Part
    I 20 cents", "Eclectic Physical Geography. 12mo. $1 00"), three prices at least, or two under a title naming
    books ("Recent Publications."), one of them within its first :data:`CATALOGUE_HEAD` paragraphs."""
    def catalogue(ch: Chapter) -> bool:
        paras = ch.paragraphs
        prices = sum(1 for p in paras if _PRICE_RE.search(p))
        return bool(paras) and (prices >= 3 and 4 * prices >= len(paras)
                                or prices >= 2 and bool(_ADS_HEAD_RE.search(ch.title or ""))) \
            and sum(len(p.split()) for p in paras) <= 60 * len(paras) \
            and any(_PRICE_RE.search(p) for p in paras[:CATALOGUE_HEAD])

    k = len(chapters)
    while k > 1 and catalogue(chapters[k - 1]):
        k -= 1
    return len(chapters) - k


def _synopsis(chapters: list[Chapter]) -> list[Chapter]:
    """The book without a synopsis set out under the headings that follow it: a run of two chapters or more at
    the front, each only a few short lines (three at most, 60 words each: "SCENE I. In the Witch's Orchard. ..."),
    whose titles the next chapters repeat in order ("Act I.", "Act II.", "Act III." over the play's "ACT I." ...).
    The synopsis is not read; what opened it (a note before it) opens the first chapter after it."""
    for m in range(len(chapters) // 2, 1, -1):
        head, body = chapters[:m], chapters[m:2 * m]
        if all(ch.title and _tokens(ch.title) == _tokens(nx.title) for ch, nx in zip(head, body)) \
                and all(0 < len(ch.paragraphs) - ch.opening <= 3 and ch.opening == (0 if k else ch.opening)
                        and all(len(p.split()) <= 60 for p in ch.paragraphs[ch.opening:])
                        for k, ch in enumerate(head)) \
                and all(len(nx.paragraphs) > 3 for nx in body):
            return [_opened_by(head[0], body[0]), *chapters[m + 1:]]
    return chapters


def _opened_by(ch: Chapter, nxt: Chapter) -> Chapter:
    """``nxt`` with what was spoken before ``ch``'s heading (its opening) put first, spoken before ``nxt``'s
    heading: for a chapter that is dropped while its opening matter is kept."""
    kinds = None if ch.kinds is None and nxt.kinds is None else \
        [*(ch.kinds or ["text"] * len(ch.paragraphs))[:ch.opening], *(nxt.kinds or ["text"] * len(nxt.paragraphs))]
    return replace(nxt, paragraphs=[*ch.paragraphs[:ch.opening], *nxt.paragraphs], kinds=kinds,
                   opening=ch.opening + nxt.opening)


_TRAILING_MATTER_RE = re.compile(r"^(?:about\s+the\s+authors?|(?:also|other\s+(?:books|titles|works))\s+by\s+\S.{0,60}"
                                 r"|by\s+the\s+same\s+author|typographical\s+errors\s+corrected(?:\s+in\s+(?:the\s+)?text)?)[.:]?$",
                                 re.I)
"""The label of a section closing the last chapter that is not the book's: "About the Author", "Other books by J.
Sheridan LeFanu", "By the same Author", the e-text's "Typographical errors corrected in text:"."""


def _drop_matter(chapters: list[Chapter]) -> list[Chapter]:
    """Chapters without front/back matter: chapters titled "About the Author", "Contents", "Index" (also "Index of
    Proper Names", "Index of First Lines" and the like), "Publishers' Note",
    "Note on the Illustrations" (the publishers' words on the edition's pictures),
    "Copyright", "All Rights Reserved", "Also by ...", "Description of Characters"; a cast list under its label
    ("Characters in the Play", "Dramatis Personae") before the last chapter, in entries of 80 words or fewer; a play's production
    appendices after the first chapter ("Property List", "Light Plot", "Light Cues"); a theatre programme page
    near the front (:func:`_is_playbill`); a play's own page (its first performance, its persons) before its
    first act in a book of plays (:func:`_play_title_pages`); a synopsis under the headings that follow it
    (:func:`_synopsis`); short copyright notices among the first three chapters, as chapters of their own or
    among prose (:func:`_copyright_notices`); ISBN-only paragraphs; the last chapter's text after a "THE END" line (or "FINIS", also
    letter-spaced: :func:`_the_end`); a private press's colophon among the last paragraphs ("So here ends ...
    done into print by The Roycrofters ...", :data:`_COLOPHON_RE`); a short last chapter about Project Gutenberg ("More Info"); the author's
    other books advertised by their press notices in chapters of their own at the end (:func:`_press_chapters`)
    or by their prices (:func:`_catalogue_chapters`); the e-book maker's "Colophon" and its parts closing the
    book (:func:`_ebook_colophon`);
    the book's index
    at the end of the last chapter (:func:`_back_index`); a trailing "About the Author" or "Other books by ..."
    section inside the last chapter (its label a paragraph of its own, :data:`_TRAILING_MATTER_RE`, followed by
    at most 400 words, or by another book's title page and its press notices: :func:`_press_notices`)."""
    out: list[Chapter] = []
    chapters = _play_title_pages(chapters)
    chapters = chapters[:len(chapters) - _press_chapters(chapters)]
    chapters = chapters[:len(chapters) - _ebook_colophon(chapters)]
    chapters = _synopsis(chapters[:len(chapters) - _catalogue_chapters(chapters)])
    n = len(chapters)
    for k, ch in enumerate(chapters):
        title = (ch.title or "").strip()
        if title and _MATTER_TITLE_RE.match(title) and not (_COPYRIGHT_TITLE_RE.match(title) and _speech(ch)):
            if ch.opening and k + 1 < n:  # what was spoken before its heading opens the next chapter
                chapters[k + 1] = _opened_by(ch, chapters[k + 1])
            continue
        if k and title and _PRODUCTION_NOTES_RE.search(title):
            continue  # a play's property list, light plot, light cues: production notes, back matter
        if k < n - 1 and title and _CAST_LABEL_RE.match(title) and ch.paragraphs \
                and all(len(p.split()) <= 80 for p in ch.paragraphs):
            continue  # a play's cast list as a chapter of its own ("CHARACTERS IN THE PLAY"): the playbill
        if k < 4 and k < n - 1 and _is_playbill(ch):
            continue
        if k < 3 and k < n - 1 and _is_copyright_chapter(ch):
            continue
        if k == n - 1 and k and _is_gutenberg_note(ch):
            continue
        notes = _producer_notes(ch.paragraphs, front=k < 2)
        if k < 3 and k < n - 1:
            notes |= _copyright_notices(ch.paragraphs)
        kept = [(p, ch.kind(i)) for i, p in enumerate(ch.paragraphs) if not _ISBN_RE.match(p) and i not in notes]
        paras = [p for p, _k in kept]
        if k == n - 1:
            while len(kept) > 1 and _printer_line(paras[-1]):
                kept, paras = kept[:-1], paras[:-1]  # the printer's line under the last page
            printer = next((j for j in range(len(paras) - 1, 0, -1) if _printer_line(paras[j])), None)
            if printer is not None and len(paras) - printer <= PRINTER_TAIL_PARAGRAPHS \
                    and _FOOTNOTES_LABEL_RE.match(paras[printer + 1]):
                kept, paras = kept[:printer], paras[:printer]  # the printer's line, then the e-text's footnotes
            colophon = next((j for j in range(max(1, len(paras) - COLOPHON_TAIL_PARAGRAPHS), len(paras))
                             if len(paras[j].split()) <= 80 and _COLOPHON_RE.match(paras[j])), None)
            if colophon is not None:
                kept, paras = kept[:colophon], paras[:colophon]  # the press's colophon and its mark
            tail = _closing_bracketed_notes(paras)
            if tail < len(paras):
                kept, paras = kept[:tail], paras[:tail]  # the e-text maker's notes in brackets after the text
            end = next((j for j, para in enumerate(paras) if _the_end(para)), None)
            if end is not None:
                kept = kept[:end + 1]  # after "THE END": the publisher's advertisements
                paras = paras[:end + 1]
            index = _back_index(paras)
            if index is not None:
                kept, paras = kept[:index], paras[:index]  # the book's index after its text
            ads = _advertisements(paras)
            if ads is not None:
                kept, paras = kept[:ads], paras[:ads]  # the publisher's list of books with their prices
            for j, para in enumerate(paras):
                if j > 0 and _TRAILING_MATTER_RE.match(para) and (len(" ".join(paras[j + 1:]).split()) <= 400
                                                                  or _press_notices(paras[j + 1:])):
                    kept = kept[:j]
                    break
        if kept:
            kinds = [kd for _p, kd in kept]
            opening = sum(1 for i in range(ch.opening) if not _ISBN_RE.match(ch.paragraphs[i]) and i not in notes)
            out.append(Chapter(ch.index, ch.title, [p for p, _k in kept], None if ch.kinds is None else kinds,
                               ch.part, opening=opening if opening < len(kept) else 0))
    return out
