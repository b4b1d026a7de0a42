"""``plan``'s view of each book's outline: a tree of parts, chapters and sections, and ``plan --json``.

:func:`outline_lines` gives the tree as text lines: a book line, then each part once (where the
book has parts) and its chapters under it, each chapter with its number, spoken title, length in
characters, estimated duration and first words, the first words of the book's opening matter where
the chapter speaks it before its title (a dedication, an epigraph: "before the title: ...") and its
section headings under it. A chapter not selected by ``--chapters`` is marked ``-``. :func:`outline_json` gives the same as one JSON-ready
dict for scripts.

Reads only a planned job (its ``job.json`` meta and plan rows); does not infer the outline
(``jobs.ingest.outline``) nor print the job's other settings (``commands.local``).
"""

from __future__ import annotations

from jobs.plan import SECONDS_PER_PHONEME_ID


def _chapter_seconds(job) -> dict[tuple[int, int], float]:
    """Estimated audio seconds per (book, chapter), from the planned utterances' phoneme ids."""
    scale = job.scales.length_scale
    out: dict[tuple[int, int], float] = {}
    for r in job.rows:
        if r.batch_id >= 0:
            key = (r.utt.book_index, r.utt.chapter_index)
            out[key] = out.get(key, 0.0) + len(r.utt.phoneme_ids) * SECONDS_PER_PHONEME_ID * scale
    return out


def _utterances(job) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for r in job.rows:
        key = (r.utt.book_index, r.utt.chapter_index)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _duration(s: float) -> str:
    s = round(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def outline_json(job) -> dict:
    """The books' outlines as a dict: ``{"books": [{"title", "author", "path", "format", "outline":
    [{"part": str | None, "chapters": [{"index", "title", "selected", "file", "chars",
    "estimated_s", "utterances", "first_words", "sections", "opening"}]}]}]}``; ``opening`` is None, or
    ``{"paragraphs": n, "first_words": ...}`` for the opening matter spoken before the chapter's title
    (absent from a job planned before openings were kept: None)."""
    seconds, counts = _chapter_seconds(job), _utterances(job)
    books = []
    for b_i, book in enumerate(job.meta["books"]):
        groups: list[dict] = []
        for ch in book["chapters"]:
            part = ch.get("part")
            if not groups or groups[-1]["part"] != part:
                groups.append({"part": part, "chapters": []})
            groups[-1]["chapters"].append({
                "index": ch["index"], "title": ch["title"], "selected": ch["selected"], "file": ch["file"],
                "chars": ch.get("chars"), "estimated_s": round(seconds.get((b_i, ch["index"]), 0.0), 1),
                "utterances": counts.get((b_i, ch["index"]), 0), "first_words": ch.get("first_words"),
                "sections": ch.get("sections", []), "opening": ch.get("opening")})
        books.append({"title": book["title"], "author": book.get("author"), "path": book["path"],
                      "format": book["format"], "outline": groups})
    return {"books": books}


def outline_lines(job) -> list[str]:
    """The tree, one string per line (see the module docstring)."""
    lines = []
    for book in outline_json(job)["books"]:
        n = sum(len(g["chapters"]) for g in book["outline"])
        by = f", by {book['author']}" if book.get("author") else ""
        lines.append(f"{book['title']}{by}  ({book['path']}, {book['format']}, {n} chapters)")
        for group in book["outline"]:
            indent = " "
            if group["part"]:
                lines.append(f"  {group['part']}")
                indent = "   "
            for ch in group["chapters"]:
                mark = " " if ch["selected"] else "-"
                size = f"{ch['chars']:,} chars" if ch.get("chars") is not None else ""
                words = f'  "{ch["first_words"]}..."' if ch.get("first_words") else ""
                lines.append(f"{indent}{mark}{ch['index']:4d}  {(ch['title'] or '(untitled)')[:60]:60s} "
                             f"{ch['utterances']:6d} utterances  {size:>14s}  ~{_duration(ch['estimated_s'])}{words}")
                if ch.get("opening"):
                    lines.append(f'{indent}        before the title: "{ch["opening"]["first_words"]}..."')
                for sec in ch["sections"]:
                    lines.append(f"{indent}        - {sec}")
    return lines
