"""bench/structure_score.py: the structure scorer on hand-made books (not the product's rules).

The scoring functions get hand-made chapter lists, so the expected figures follow from the
definitions alone; one end-to-end run loads a tiny gzip-compressed book through ``load_book``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("structure_score", ROOT / "bench" / "structure_score.py")
ss = importlib.util.module_from_spec(_spec)
sys.modules["structure_score"] = ss  # dataclasses look their module up while the class is made
_spec.loader.exec_module(ss)

TRUTH = {
    "slug": "tiny", "title": "The Tiny Book", "author": "A. Writer", "format": "txt",
    "chapters": [
        {"title": "CHAPTER I.", "first_words": "It was a dark and stormy"},
        {"title": "CHAPTER II.", "first_words": "The next morning the rain had"},
        {"title": "CHAPTER III.", "first_words": "“Nobody,” said the cook, “ever"},
    ],
    "not_spoken": ["Chapter I. The Storm Chapter II. The Morning", "Produced by Somebody Else"],
}


def P(title, *paras):
    return ss.Predicted(title, list(paras))


def test_tokens_fold_case_accents_and_punctuation():
    assert ss.tokens("“Nobody,” said the Cook—PERSONÆ café’s") == ["nobody", "said", "the", "cook", "personae",
                                                                   "cafe", "s"]


def test_perfect_book_scores_one():
    pred = [P("CHAPTER I.", "It was a dark and stormy night."), P("CHAPTER II.", "The next morning the rain had gone."),
            P("CHAPTER III.", "\"Nobody\", said the cook, \"ever comes.\"")]
    s = ss.score(TRUTH, "The Tiny Book, by A. Writer.", pred)
    assert (s.truth_chapters, s.predicted_chapters, s.matched) == (3, 3, 3)
    assert s.f1 == 1.0 and s.front_matter_spoken == [] and s.title_repeats == 1


def test_title_page_contents_and_a_merged_chapter_cost_precision_recall_and_are_reported():
    # a title-page chapter that speaks the title again and the contents list; chapters II and III merged
    pred = [P("The Tiny Book", "The Tiny Book", "by A. Writer", "Chapter I. The Storm", "Chapter II. The Morning"),
            P("CHAPTER I.", "It was a dark and stormy night."),
            P("CHAPTER II.", "The next morning the rain had gone.", "“Nobody,” said the cook, “ever comes.”")]
    s = ss.score(TRUTH, "The Tiny Book, by A. Writer.", pred)
    assert (s.matched, s.precision, s.recall) == (2, 2 / 3, 2 / 3)
    assert s.f1 == pytest.approx(2 / 3)
    assert s.unmatched_truth == ["CHAPTER III."] and s.unmatched_predicted == ["The Tiny Book"]
    assert s.front_matter_spoken == ["Chapter I. The Storm Chapter II. The Morning"]
    assert s.title_repeats == 3  # the announcement, the chapter title, the title-page line


def test_a_byline_is_front_matter_in_the_book_but_not_in_the_announcement():
    # the truth lists the title page's byline; the announcement says the same words by design
    truth = {**TRUTH, "not_spoken": ["by A. Writer"]}
    pred = [P("CHAPTER I.", "It was a dark and stormy night."), P("CHAPTER II.", "The next morning the rain had gone."),
            P("CHAPTER III.", "\"Nobody\", said the cook, \"ever comes.\"")]
    assert ss.score(truth, "The Tiny Book, by A. Writer.", pred).front_matter_spoken == []
    pred[0] = P("CHAPTER I.", "by A. Writer", "It was a dark and stormy night.")
    assert ss.score(truth, "The Tiny Book, by A. Writer.", pred).front_matter_spoken == ["by A. Writer"]


def test_first_words_must_open_the_chapter_and_matching_keeps_reading_order():
    # chapter I's words come late in a long chapter (past the window): no match; chapter III comes before
    # II in the predicted order: II takes the chapter after it, and III has nothing left after II
    filler = " ".join(["word"] * ss.WINDOW_TOKENS)
    pred = [P("", filler + " It was a dark and stormy night."), P("x", "“Nobody,” said the cook, “ever comes.”"),
            P("y", "The next morning the rain had gone.")]
    s = ss.score(TRUTH, None, pred)
    assert s.matched == 1 and s.unmatched_truth == ["CHAPTER I.", "CHAPTER III."]
    assert s.title_repeats == 0


def test_break_paragraphs_are_not_spoken(tmp_path):
    book = tmp_path / "b.txt"
    book.write_text("x", encoding="utf-8")
    from jobs.ingest import Book, Chapter
    chapter = Chapter(1, "CHAPTER I.", ["Produced by Somebody Else", "It was a dark and stormy night."])
    chapter.kinds = ["break", "text"]
    fake = Book(title="The Tiny Book", source=book, format="txt", chapters=[chapter], author="A. Writer")
    import jobs.ingest
    orig = jobs.ingest.load_book
    jobs.ingest.load_book = lambda p: fake
    try:
        announcement, pred = ss.load_predicted(book)
    finally:
        jobs.ingest.load_book = orig
    assert pred[0].paragraphs == ["It was a dark and stormy night."]
    assert announcement == "The Tiny Book, by A. Writer."


def _tiny_set(tmp_path: Path) -> Path:
    text = ("The Tiny Book\n\nby A. Writer\n\n\n"
            "CHAPTER I.\n\nIt was a dark and stormy night, and the wind howled round the house.\n\n"
            "CHAPTER II.\n\nThe next morning the rain had gone, and the garden shone.\n\n"
            "CHAPTER III.\n\n“Nobody,” said the cook, “ever comes here before noon.”\n")
    (tmp_path / "books").mkdir()
    (tmp_path / "truth").mkdir()
    (tmp_path / "books" / "tiny.txt.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    (tmp_path / "truth" / "tiny.json").write_text(json.dumps({**TRUTH, "file": "books/tiny.txt.gz"}), encoding="utf-8")
    (tmp_path / "sets.json").write_text(json.dumps({"tune": ["tiny"], "heldout": []}), encoding="utf-8")
    return tmp_path


def test_end_to_end_on_a_tiny_gzip_book(tmp_path, capsys):
    result = ss.run(["--json", "--book", "tiny"], set_dir=_tiny_set(tmp_path))
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(result))
    book = out["books"][0]
    assert (book["truth_chapters"], book["predicted_chapters"], book["matched"], book["f1"]) == (3, 3, 3, 1.0)
    assert book["set"] == "tune" and book["error"] is None and book["title_repeats"] == 1
    assert out["totals"]["tune"]["f1"] == 1.0 and out["totals"]["heldout"]["books"] == 0


def test_a_heldout3_book_is_scored_in_its_own_set(tmp_path, capsys):
    d = _tiny_set(tmp_path)
    (d / "sets.json").write_text(json.dumps({"tune": [], "heldout": [], "heldout3": ["tiny"]}), encoding="utf-8")
    assert ss.load_set(d) == {"tiny": "heldout3"}
    out = ss.run(["--json", "--set", "heldout3"], set_dir=d)
    capsys.readouterr()
    assert [b["set"] for b in out["books"]] == ["heldout3"]
    assert out["totals"]["heldout3"]["books"] == 1 and out["totals"]["heldout"]["books"] == 0


def test_the_table_has_a_row_per_book_and_totals(tmp_path, capsys):
    ss.run(["--set", "tune"], set_dir=_tiny_set(tmp_path))
    out = capsys.readouterr().out
    assert any(line.startswith("tiny ") for line in out.splitlines())
    assert "tune      1 books: chapters P 1.000 R 1.000 F1 1.000" in out


def test_a_book_the_product_refuses_scores_zero_with_its_error(tmp_path, capsys):
    d = _tiny_set(tmp_path)
    (d / "books" / "tiny.txt.gz").write_bytes(gzip.compress(b"\x00\x01binary\x00" * 100))
    book = ss.run(["--json"], set_dir=d)["books"][0]
    assert book["f1"] == 0.0 and book["error"] and "\n" not in book["error"]


def test_unknown_book_is_one_error_line_and_exit_2():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "structure_score.py"), "--book", "no-such-book"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stdout == "" and r.stderr.startswith("error: --book no-such-book: no such book in ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_every_truth_file_is_well_formed_and_in_one_set():
    d = ROOT / "bench" / "structure"
    split_of = ss.load_set(d)
    truths = sorted(p.stem for p in (d / "truth").glob("*.json"))
    assert sorted(split_of) == truths and len(truths) >= 24
    for slug in truths:
        t = json.loads((d / "truth" / f"{slug}.json").read_text(encoding="utf-8"))
        assert t["slug"] == slug and (d / t["file"]).is_file()
        assert t["source"]["repo"] and len(t["source"]["commit"]) == 40
        assert t["chapters"] and all(len(ss.tokens(c["first_words"])) >= ss.KEY_TOKENS for c in t["chapters"]), slug
