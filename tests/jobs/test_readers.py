"""jobs.ingest.readers: one reader per input format, chosen by suffix; jobs.formats asks the reader for a
book's metadata and cover instead of reaching into the EPUB module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.errors import InputError
from jobs.ingest import Book, Chapter, load_book, readers

ROOT = Path(__file__).resolve().parents[2]


def test_the_reader_is_chosen_by_suffix_and_text_is_the_default():
    assert readers.reader_for("a/b.EPUB") is readers.EPUB
    assert readers.reader_for("b.markdown") is readers.MARKDOWN and readers.reader_for("b.md") is readers.MARKDOWN
    for name in ("b.txt", "b.text", "README", "notes.rst"):
        assert readers.reader_for(name) is readers.TEXT
    assert readers.accepted() == ".txt, .md or .epub"
    claimed = [s for r in readers.READERS for s in r.suffixes]
    assert len(claimed) == len(set(claimed)), "a suffix claimed by two readers"


def test_a_new_reader_is_one_entry(tmp_path, monkeypatch):
    def load(p, where, size, opts):
        lines = p.read_text(encoding="utf-8").split("\n===\n")
        return Book(p.stem, p, "demo", [Chapter(i + 1, f"Part {i + 1}", [s.strip()]) for i, s in enumerate(lines)])

    demo = readers.Reader("demo", (".demo",), 1000, "a demo file", "make it smaller", load)
    monkeypatch.setattr(readers, "READERS", readers.READERS + (demo,))
    book_file = tmp_path / "x.demo"
    book_file.write_text("It was a long walk home that night.\n===\nThe morning was bright and cold.\n")
    book = load_book(book_file)
    assert book.format == "demo" and [c.paragraphs for c in book.chapters] == [
        ["It was a long walk home that night."], ["The morning was bright and cold."]]
    assert readers.accepted() == ".txt, .md, .epub or .demo"
    book_file.write_text("x" * 1001)
    with pytest.raises(InputError, match=r"larger than the 0 MB a demo file may be; make it smaller"):
        readers.check_input_size(book_file)


def test_size_limits_and_refusals_keep_their_lines(tmp_path):
    empty = tmp_path / "e.txt"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"is empty; nothing to read"):
        load_book(empty)
    with pytest.raises(InputError, match=r"is a directory, not a book file; pass a \.txt, \.md or \.epub file"):
        load_book(tmp_path)
    big = tmp_path / "big.epub"
    with open(big, "wb") as f:
        f.truncate(readers.MAX_EPUB_BYTES + 1)
    with pytest.raises(InputError, match=r"MB an EPUB may be; re-export it without the extras"):
        readers.check_input_size(big)


def test_a_text_book_has_no_details_or_cover(tmp_path):
    from jobs import formats

    p = tmp_path / "b.txt"
    p.write_text("Chapter 1\n\nSome words here.\n")
    assert formats.book_details(p) == {}
    assert readers.TEXT.cover(p, "cover.png") is None


def _private_ingest_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jobs.ingest"):
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


def test_nothing_outside_ingest_imports_its_private_names():
    bad = {}
    for pkg in ("jobs", "workers", "commands", "engines", "core"):
        for path in (ROOT / pkg).rglob("*.py"):
            if "ingest" in path.relative_to(ROOT).parts:
                continue
            found = _private_ingest_imports(path)
            if found:
                bad[str(path.relative_to(ROOT))] = found
    assert not bad


def test_the_checker_finds_a_private_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from jobs.ingest import _Epub, load_book\n")
    assert _private_ingest_imports(f) == ["jobs.ingest._Epub"]


def test_text_chars_by_reader(tmp_path):
    p = tmp_path / "b.txt"
    p.write_text("x" * 150)
    assert readers.reader_for(p).text_chars(p) == 150.0
    alice = ROOT / "tests" / "data" / "alice-pg11.epub"
    assert 50_000 < readers.reader_for(alice).text_chars(alice) < alice.stat().st_size * 5
    bad = tmp_path / "bad.epub"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError):
        readers.EPUB.text_chars(bad)
