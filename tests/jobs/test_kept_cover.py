"""The copy of a book's cover a job keeps in its directory (``jobs.formats.keep_covers``): written
atomically within the cover size limit, and read back only as the same regular file."""

from __future__ import annotations

import os

from core.files import sha256_file
from jobs import formats
from tests.test_input_hardening import PNG, make_epub


def _book(tmp_path):
    epub = make_epub(tmp_path / "b.epub", cover=PNG)
    return {"path": str(epub), "sha256": sha256_file(epub), "dir": "01-b", **formats.book_details(epub)}


def test_the_kept_cover_is_read_back_only_unchanged_and_not_through_a_link(tmp_path):
    book = _book(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    [path] = list(formats.keep_covers(job, [book]))
    assert path == job / ".work" / "covers" / "01-b.png" and path.read_bytes() == PNG
    assert book["cover_copy"]["file"] == ".work/covers/01-b.png" and book["cover_copy"]["mime"] == "image/png"
    assert not [p for p in path.parent.iterdir() if p != path], "no temporary file left"
    assert formats.read_kept_cover(job, book["cover_copy"]) == (PNG, "image/png")
    assert list(formats.keep_covers(job, [book])) == [], "kept once"

    path.write_bytes(PNG + b"x")  # changed since planned
    assert formats.read_kept_cover(job, book["cover_copy"]) is None
    elsewhere = tmp_path / "other.png"
    elsewhere.write_bytes(PNG)
    path.unlink()
    os.symlink(elsewhere, path)  # a link to the same bytes is not followed
    assert formats.read_kept_cover(job, book["cover_copy"]) is None
    inner = job / ".work" / "inner.png"
    inner.write_bytes(PNG)
    path.unlink()
    os.symlink(inner, path)  # nor one inside the job directory
    assert formats.read_kept_cover(job, book["cover_copy"]) is None


def test_a_cover_over_the_size_limit_is_not_kept(tmp_path, monkeypatch):
    import jobs.metadata

    book = _book(tmp_path)
    monkeypatch.setattr(jobs.metadata, "MAX_COVER_BYTES", len(PNG) - 1)
    assert list(formats.keep_covers(tmp_path / "job", [book])) == [] and "cover_copy" not in book


def test_a_plan_that_fails_after_the_cover_was_kept_leaves_nothing(tmp_path, monkeypatch):
    import jobs.prepare
    from jobs.config import JobConfig

    epub = make_epub(tmp_path / "b.epub", cover=PNG)

    def fail(*a, **k):
        raise OSError("the plan could not be written")

    monkeypatch.setattr(jobs.prepare, "to_table", fail)
    out = tmp_path / "new" / "job"
    try:
        jobs.prepare.prepare_job([epub], out, JobConfig(max_batch=2))
    except OSError:
        pass
    else:
        raise AssertionError("planning did not fail")
    assert not (tmp_path / "new").exists(), sorted(p for p in (tmp_path / "new").rglob("*"))
