"""Score how the product reads the structure of the books in ``bench/structure/``.

For each book of the set this loads the book the way ``plan`` does (``jobs.ingest.load_book``, no
synthesis, no phonemizing) and compares what comes out with the hand-written truth in
``bench/structure/truth/<slug>.json``:

chapter boundaries
    A predicted chapter matches a truth chapter when the truth's first body words (its first 5
    normalised tokens: lower case, accents and punctuation dropped) appear in the first 80 tokens of
    the predicted chapter (its title, then its paragraphs from the title on: a chapter's opening matter,
    spoken before its title, is not where it starts). Matching keeps reading order: each
    truth chapter takes the first unmatched predicted chapter after the previous match. Precision is
    matched / predicted chapters, recall matched / truth chapters, F1 their harmonic mean.
front matter spoken
    Each ``not_spoken`` phrase of the truth (contents entries, "Produced by" credits, publisher and
    licence lines, a title page's byline) counts as spoken when its tokens appear, in a row, anywhere
    in the book's spoken text: every chapter's opening matter (``Chapter.opening``), title and other
    paragraphs (paragraphs whose ``Chapter.kinds`` entry is "break" are silent and left out). The
    announcement ("Title, by Author.") is not searched: it is the one place the product says title
    and author by design, so a title page's "By A. Conan Doyle" said there is no front matter spoken
    (the title repeats below count it).
title repeats
    How many times the truth's book title (its tokens, in a row) is spoken in the first 400 tokens
    of the announcement and that text. 1 is right: the announcement says it, the title page must not
    say it again.

The spoken stream is the loader's text, before ``jobs.normalize`` turns "II." into "two": a phrase
is matched as the book prints it. The truth is written by hand from the text (docs/STRUCTURE.md,
"The test set"); this script never writes it.

Does NOT: synthesize, phonemize, look at pauses, or judge chapter titles (only where chapters
start); the outline's nesting (parts) in the truth is not scored yet.

    python bench/structure_score.py                       # every book, a table and totals per set
    python bench/structure_score.py --set heldout --json  # one JSON document for machines
    python bench/structure_score.py --book dubliners --details   # also the unmatched chapters
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.errors import InputError, TTSError  # noqa: E402

SET_DIR = ROOT / "bench" / "structure"
KEY_TOKENS = 5
"""Tokens of a truth chapter's first words that must be found."""
WINDOW_TOKENS = 80
"""How far into a predicted chapter (title + paragraphs) the key may start."""
TITLE_WINDOW_TOKENS = 400
"""Title repeats are counted in this many tokens from the start of the spoken stream."""
SETS = ("tune", "heldout", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8", "heldout9",
        "heldout10", "heldout11", "heldout12", "heldout13", "heldout14", "heldout15", "heldout16",
        "heldout17", "heldout18", "heldout19", "heldout20", "heldout21", "heldout22", "heldout23",
        "heldout24", "heldout25", "heldout26", "heldout27", "heldout28", "heldout29", "heldout30",
        "heldout31", "heldout32", "heldout33", "heldout34", "heldout35", "heldout36", "heldout37",
        "heldout38", "heldout39", "heldout40", "heldout41", "heldout42", "heldout43", "heldout44",
        "heldout45", "heldout46", "heldout47", "heldout48", "heldout49", "heldout50", "heldout51",
        "heldout52", "heldout53", "heldout54", "heldout55", "heldout56", "heldout57", "heldout58",
        "heldout59", "heldout60", "heldout61", "heldout62",
        "heldout63", "heldout64", "heldout65", "heldout66", "heldout67")
"""The sets of ``sets.json``: tune on the first, only report the held-out ones."""

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case ASCII word tokens: accents folded ("Personæ" -> "personae"), punctuation dropped."""
    folded = unicodedata.normalize("NFKD", text.replace("æ", "ae").replace("Æ", "AE").replace("œ", "oe"))
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return _TOKEN.findall(folded.lower())


def _find(needle: list[str], hay: list[str]) -> list[int]:
    """Start positions of ``needle`` in ``hay`` (token lists)."""
    n = len(needle)
    if n == 0:
        return []
    first = needle[0]
    return [i for i in range(len(hay) - n + 1) if hay[i] == first and hay[i:i + n] == needle]


@dataclass
class Predicted:
    """A chapter as the product made it: its title and the paragraphs that would be spoken."""

    title: str
    paragraphs: list[str]
    opening: int = 0
    """How many of ``paragraphs`` are spoken before the title (the book's opening matter)."""


@dataclass
class BookScore:
    slug: str
    split: str
    format: str
    truth_chapters: int
    predicted_chapters: int
    matched: int
    front_matter_spoken: list[str] = field(default_factory=list)
    front_matter_total: int = 0
    title_repeats: int = 0
    seconds: float = 0.0
    error: str | None = None
    unmatched_truth: list[str] = field(default_factory=list)
    unmatched_predicted: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.matched / self.predicted_chapters if self.predicted_chapters else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.truth_chapters if self.truth_chapters else 0.0

    @property
    def f1(self) -> float:
        return _f1(self.precision, self.recall)

    def to_dict(self) -> dict:
        return {"slug": self.slug, "set": self.split, "format": self.format,
                "truth_chapters": self.truth_chapters, "predicted_chapters": self.predicted_chapters,
                "matched": self.matched, "precision": round(self.precision, 4),
                "recall": round(self.recall, 4), "f1": round(self.f1, 4),
                "front_matter_spoken": self.front_matter_spoken, "front_matter_total": self.front_matter_total,
                "title_repeats": self.title_repeats, "seconds": round(self.seconds, 2), "error": self.error,
                "unmatched_truth": self.unmatched_truth, "unmatched_predicted": self.unmatched_predicted}


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def match_chapters(truth: list[dict], predicted: list[Predicted]) -> list[int | None]:
    """For each truth chapter, the index of the predicted chapter it matched (None: not found)."""
    windows = [tokens(" ".join([p.title, *p.paragraphs[p.opening:p.opening + 12]]))[:WINDOW_TOKENS]
               for p in predicted]
    out: list[int | None] = []
    nxt = 0
    for t in truth:
        key = tokens(t["first_words"])[:KEY_TOKENS]
        hit = None
        for j in range(nxt, len(predicted)):
            if key and _find(key, windows[j]):
                hit = j
                break
        out.append(hit)
        if hit is not None:
            nxt = hit + 1
    return out


def spoken_stream(announcement: str | None, predicted: list[Predicted]) -> list[str]:
    """Tokens of everything that would be spoken, in order."""
    parts = [announcement or ""]
    for p in predicted:
        parts.extend(p.paragraphs[:p.opening])
        parts.append(p.title)
        parts.extend(p.paragraphs[p.opening:])
    return tokens(" ".join(parts))


def score(truth: dict, announcement: str | None, predicted: list[Predicted], split: str = "") -> BookScore:
    """Score one loaded book against its truth (pure: no files are read)."""
    hits = match_chapters(truth["chapters"], predicted)
    stream = spoken_stream(announcement, predicted)
    body = spoken_stream(None, predicted)
    spoken = [ph for ph in truth.get("not_spoken", []) if _find(tokens(ph), body)]
    title = tokens(truth["title"])
    matched_pred = {h for h in hits if h is not None}
    return BookScore(
        slug=truth["slug"], split=split, format=truth.get("format", ""),
        truth_chapters=len(truth["chapters"]), predicted_chapters=len(predicted),
        matched=len(matched_pred), front_matter_spoken=spoken,
        front_matter_total=len(truth.get("not_spoken", [])),
        title_repeats=len(_find(title, stream[:TITLE_WINDOW_TOKENS])),
        unmatched_truth=[t["title"] for t, h in zip(truth["chapters"], hits) if h is None],
        unmatched_predicted=[p.title or "(untitled)" for j, p in enumerate(predicted) if j not in matched_pred])


def load_predicted(book_file: Path) -> tuple[str | None, list[Predicted]]:
    """Load a set book as ``plan`` does; a ``.txt.gz`` is unpacked to a temporary ``.txt`` first."""
    from jobs.ingest import load_book

    with tempfile.TemporaryDirectory(prefix="structure-") as tmp:
        path = book_file
        if book_file.name.endswith(".gz"):
            path = Path(tmp) / book_file.name[:-3]
            path.write_bytes(gzip.decompress(book_file.read_bytes()))
        book = load_book(path)
    predicted = []
    for ch in book.chapters:
        kinds = getattr(ch, "kinds", None) or ["text"] * len(ch.paragraphs)
        opening = sum(1 for k in kinds[:getattr(ch, "opening", 0)] if k != "break")
        predicted.append(Predicted(ch.title, [p for p, k in zip(ch.paragraphs, kinds) if k != "break"], opening))
    return book.announcement(), predicted


def load_set(set_dir: Path = SET_DIR) -> dict[str, str]:
    """slug -> its set ("tune", "heldout", ..., "heldout12", "heldout13", "heldout14"), from ``sets.json``."""
    try:
        sets = json.loads((set_dir / "sets.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{set_dir / 'sets.json'}: cannot read it ({e}); restore it from git") from None
    return {slug: name for name in SETS for slug in sets.get(name, [])}


def score_book(slug: str, split: str, set_dir: Path = SET_DIR) -> BookScore:
    """Load and score one book of the set; a book the product refuses scores 0 with its error line."""
    tfile = set_dir / "truth" / f"{slug}.json"
    try:
        truth = json.loads(tfile.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{tfile}: cannot read the truth ({e}); check the file") from None
    t0 = time.perf_counter()
    try:
        announcement, predicted = load_predicted(set_dir / truth["file"])
    except TTSError as e:
        s = score(truth, None, [], split)
        s.error = str(e)
    else:
        s = score(truth, announcement, predicted, split)
    s.seconds = time.perf_counter() - t0
    return s


def totals(scores: list[BookScore]) -> dict:
    """Micro P/R/F1 over all chapters, mean per-book F1, and the books with front matter or repeats."""
    t = sum(s.truth_chapters for s in scores)
    p = sum(s.predicted_chapters for s in scores)
    m = sum(s.matched for s in scores)
    prec, rec = (m / p if p else 0.0), (m / t if t else 0.0)
    return {"books": len(scores), "truth_chapters": t, "predicted_chapters": p, "matched": m,
            "precision": round(prec, 4), "recall": round(rec, 4), "f1": round(_f1(prec, rec), 4),
            "mean_book_f1": round(sum(s.f1 for s in scores) / len(scores), 4) if scores else 0.0,
            "books_with_front_matter_spoken": sum(1 for s in scores if s.front_matter_spoken),
            "front_matter_phrases_spoken": sum(len(s.front_matter_spoken) for s in scores),
            "books_title_not_once": sum(1 for s in scores if s.title_repeats != 1),
            "errors": sum(1 for s in scores if s.error)}


def _table(scores: list[BookScore], details: bool) -> str:
    head = f"{'book':28} {'set':8} {'fmt':4} {'truth':>5} {'pred':>5} {'match':>5} {'P':>5} {'R':>5} {'F1':>5} " \
           f"{'front':>5} {'title':>5} {'s':>5}"
    lines = [head, "-" * len(head)]
    for s in scores:
        lines.append(f"{s.slug:28} {s.split:8} {s.format:4} {s.truth_chapters:5d} {s.predicted_chapters:5d} "
                     f"{s.matched:5d} {s.precision:5.2f} {s.recall:5.2f} {s.f1:5.2f} "
                     f"{len(s.front_matter_spoken):2d}/{s.front_matter_total:<2d} {s.title_repeats:5d} {s.seconds:5.1f}")
        if s.error:
            lines.append(f"    error: {s.error}")
        if details:
            for ph in s.front_matter_spoken:
                lines.append(f"    spoken front matter: {ph}")
            for t in s.unmatched_truth:
                lines.append(f"    missed chapter: {t}")
            for t in s.unmatched_predicted:
                lines.append(f"    extra chapter: {t[:70]}")
    for name in (*SETS, "all"):
        group = [s for s in scores if name == "all" or s.split == name]
        if not group:
            continue
        tt = totals(group)
        lines.append(f"{name:8} {tt['books']:2d} books: chapters P {tt['precision']:.3f} R {tt['recall']:.3f} "
                     f"F1 {tt['f1']:.3f} (mean per book {tt['mean_book_f1']:.3f}); front matter spoken in "
                     f"{tt['books_with_front_matter_spoken']} books ({tt['front_matter_phrases_spoken']} phrases); "
                     f"title not spoken exactly once in {tt['books_title_not_once']}; errors {tt['errors']}")
    return "\n".join(lines)


def run(argv: list[str] | None = None, set_dir: Path = SET_DIR) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=(*SETS, "all"), default="all", help="which books (default all)")
    ap.add_argument("--book", action="append", default=[], metavar="SLUG", help="only this book (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--details", action="store_true", help="also list missed/extra chapters and spoken phrases")
    args = ap.parse_args(argv)
    split_of = load_set(set_dir)
    for slug in args.book:
        if slug not in split_of:
            raise InputError(f"--book {slug}: no such book in {set_dir / 'sets.json'}; "
                             f"choose one of {', '.join(sorted(split_of))}")
    slugs = args.book or [s for s, name in split_of.items() if args.set in ("all", name)]
    scores = [score_book(s, split_of[s], set_dir) for s in slugs]
    result = {"books": [s.to_dict() for s in scores],
              "totals": {name: totals([s for s in scores if name == "all" or s.split == name])
                         for name in (*SETS, "all")}}
    print(json.dumps(result, indent=1, ensure_ascii=False) if args.json else _table(scores, args.details))
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        run(argv)
    except TTSError as e:
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
