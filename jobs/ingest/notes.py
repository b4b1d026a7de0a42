"""Plain-text and Markdown note bodies: chapters -> chapters with the notes skipped, kept, or read at the end.

An e-text of a printed book sets its footnotes as paragraphs of their own, where the page broke or after the
chapter: "[Footnote 1: Malfi. The presence-chamber in the palace of the Duchess.]" (possibly over several
paragraphs up to its closing bracket), or a paragraph that opens with the mark the text carried before it ("[1]
It is probable that ...", "{1} "Not yet recorded," I say ...", "<0> The country-seat of Bishop Shipley ...").
:func:`text_notes` finds them and does with them what ``--footnotes`` says, as the EPUB reader does with notes
marked up as such: ``skip`` (the default) leaves them out, ``inline`` reads them where they stand, ``end`` reads
them after the rest of their chapter. A "FOOTNOTES" label over nothing but notes goes with them.

A numbered paragraph whose mark never stood in the text before it ("(1) What is power?", a list's "[1] First
...") is text: only the explicit "[Footnote ...: ...]" form is taken without that evidence, and marks in round
brackets never are (they number lists and clauses far more often than notes).

Does not remove the marks inside sentences ("word[1]": ``jobs.normalize`` drops them when speaking), nor know
EPUB (``jobs.ingest.html``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from jobs.ingest.book import Chapter, renumbered

_LABELLED_RE = re.compile(r"^\[\s*(?:foot-?\s?note\b[^:\]]{0,12}|note\s+\d{1,3}[a-z]?\s*):", re.I)
"""A note labelled as one: "[Footnote 1: ...", "[Footnote: ...", "[Note 3: ..."; "[Note: When I say ...]" in
the text is the author's aside, read."""
_MARKED_RE = re.compile(r"^(\[\d{1,3}\]|\{\d{1,3}\}|<\d{1,3}>)\s*\S")
"""A paragraph opening with a note's mark: "[1] It is ...", "{12} See ...", "<0> The country-seat ..."."""
_LABEL_RE = re.compile(r"^(?:foot-?\s?notes?|notes)\s*[.:]?$", re.I)
"""A label over notes: "FOOTNOTES:", "Footnotes", "NOTES."."""
MAX_NOTE_PARAGRAPHS = 8
"""How many paragraphs a labelled note may run over before its closing bracket (else it is one paragraph)."""


def _closes(p: str) -> bool:
    return p.count("]") > p.count("[") or p.rstrip().endswith("]") and p.count("]") >= p.count("[")


def _note_spans(paragraphs: list[str], kinds: list[str], seen: set[str]) -> set[int]:
    """Positions of note paragraphs among one chapter's; ``seen`` holds the marks met so far inside
    sentences (updated as the chapter is read)."""
    out: set[int] = set()
    i = 0
    while i < len(paragraphs):
        p = paragraphs[i]
        if kinds[i] != "text":
            i += 1
            continue
        if _LABELLED_RE.match(p):
            end = i
            if not _closes(p):  # a note over several paragraphs, up to its closing bracket
                for j in range(i + 1, min(len(paragraphs), i + MAX_NOTE_PARAGRAPHS)):
                    if kinds[j] != "text":
                        break
                    if _closes(paragraphs[j]):
                        end = j
                        break
            out.update(range(i, end + 1))
            i = end + 1
            continue
        m = _MARKED_RE.match(p)
        if m and m.group(1) in seen:
            out.add(i)
        else:
            for mark in re.findall(r"\[\d{1,3}\]|\{\d{1,3}\}|<\d{1,3}>", p[1:]):
                seen.add(mark)
        i += 1
    # a "FOOTNOTES" label over notes only (to the chapter's end or its next heading) goes with them
    for i, p in enumerate(paragraphs):
        if kinds[i] == "text" and i not in out and _LABEL_RE.match(p.strip()):
            j = i + 1
            while j < len(paragraphs) and kinds[j] == "break":
                j += 1
            rest = range(j, next((k for k in range(j, len(paragraphs)) if kinds[k] == "heading"), len(paragraphs)))
            if len(rest) and all(k in out or kinds[k] == "break" for k in rest):
                out.add(i)
    return out


def text_notes(chapters: list[Chapter], mode: str = "skip") -> list[Chapter]:
    """The chapters with their note bodies skipped (``skip``), read where they stand (``inline``: unchanged) or
    read after the rest of their chapter (``end``). A chapter left with nothing to read (a "FOOTNOTES" chapter
    after the last, under ``skip``) is dropped; the others are numbered again."""
    if mode == "inline":
        return chapters
    seen: set[str] = set()
    out: list[Chapter] = []
    for ch in chapters:
        kinds = list(ch.kinds) if ch.kinds is not None else ["text"] * len(ch.paragraphs)
        notes = _note_spans(ch.paragraphs, kinds, seen)
        if not notes:
            out.append(ch)
            continue
        keep = [i for i in range(len(ch.paragraphs)) if i not in notes]
        order = keep + (sorted(notes) if mode == "end" else [])
        paras = [ch.paragraphs[i] for i in order]
        new_kinds = [kinds[i] for i in order]
        while keep and new_kinds and mode == "skip" and new_kinds[-1] != "text":
            paras.pop()
            new_kinds.pop()
        if not any(k == "text" for k in new_kinds):
            continue
        opening = sum(1 for i in range(ch.opening) if i not in notes)
        out.append(replace(ch, paragraphs=paras, kinds=None if all(k == "text" for k in new_kinds) else new_kinds,
                           opening=opening if opening < len(paras) else 0))
    return renumbered(out)
