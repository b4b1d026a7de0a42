"""Tests of the document outline (jobs/ingest/outline.py) and the paragraph kinds it gives chapters."""

from __future__ import annotations

import json

import pytest

from jobs.ingest.book import Book, Chapter


# ------------------------------------------------------------------------------------- Chapter.kinds


def test_chapter_kinds_round_trip_and_old_dicts_still_load():
    c = Chapter(index=1, title="I. A Scandal in Bohemia", paragraphs=["One", "Part two.", "", "Two"],
                kinds=["text", "heading", "break", "text"])
    d = json.loads(json.dumps(c.to_dict()))
    assert d["kinds"] == ["text", "heading", "break", "text"]
    assert Chapter.from_dict(d) == c
    plain = Chapter(index=2, title="", paragraphs=["x"])
    assert "kinds" not in plain.to_dict()  # omitted when None: old job.json files look the same
    old = {"index": 3, "title": "T", "paragraphs": ["a", "b"]}
    again = Chapter.from_dict(old)
    assert again.kinds is None and again.kind(1) == "text"
    assert c.kind(1) == "heading"


def test_chapter_kinds_must_match_paragraphs():
    with pytest.raises(ValueError):
        Chapter.from_dict({"index": 1, "title": "", "paragraphs": ["a"], "kinds": ["text", "text"]})
    with pytest.raises(ValueError):
        Chapter.from_dict({"index": 1, "title": "", "paragraphs": ["a"], "kinds": ["shout"]})


def test_book_with_kinds_round_trips():
    b = Book(title="T", source=__import__("pathlib").Path("x.txt"), format="txt",
             chapters=[Chapter(1, "One", ["h", "t"], ["heading", "text"])])
    assert Book.from_dict(json.loads(json.dumps(b.to_dict()))) == b
