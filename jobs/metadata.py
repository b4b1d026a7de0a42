"""The book's metadata as the user gives it: ``--title --author --narrator --cover --year``.

:func:`override_book` puts a given title and author on a loaded book before it is planned (so the
announcement, the book's directory name and ``plan`` use them); :func:`cover_entry` checks a given
cover file when the job is planned and records what it was (path, SHA-256, type), and
:func:`read_cover_file` reads it again at finalize, refusing a file that changed since;
:func:`book_tags` gives the tag values of a book, the user's over the book's.

This module does not encode or tag files (that is :mod:`jobs.formats`) and does not decide what
enters the job id (that is :meth:`jobs.config.JobConfig.identity`).
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import InputError, JobError
from core.files import sha256_file

#: Magic numbers of the cover images taken (the same as an EPUB's cover: :mod:`jobs.formats`).
IMAGE_MAGIC = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"))
#: Largest cover image taken, from ``--cover`` or from the book (an EPUB's).
MAX_COVER_BYTES = 10 * 1024 * 1024


def check_books(count: int, config) -> None:
    """``--title`` names one book: refuse it for a job of several."""
    if config.title is not None and count > 1:
        raise InputError(f"--title names one book, and {count} books were given; plan each book as its own job "
                         f"to give it a title, or leave --title out")


def override_book(book, config) -> None:
    """Put ``config``'s title and author (where given) on ``book`` (a :class:`jobs.ingest.book.Book`)."""
    if config.title is not None:
        book.title = config.title
        book.title_known = True
    if config.author is not None:
        book.author = config.author


def image_type(data: bytes) -> str | None:
    """``image/jpeg`` or ``image/png`` by the first bytes, else None."""
    return next((mime for magic, mime in IMAGE_MAGIC if data.startswith(magic)), None)


def cover_entry(path: str | None) -> dict | None:
    """The record of a ``--cover`` file (path, sha256, mime, bytes), after checking it is a regular
    JPEG or PNG file of at most :data:`MAX_COVER_BYTES`; one-line :class:`InputError`
    otherwise. None without a cover."""

    if path is None:
        return None
    p = Path(path)
    if not p.exists():
        raise InputError(f"--cover {path}: no such file; give a JPEG or PNG image")
    if not p.is_file():
        raise InputError(f"--cover {path}: not a regular file; give a JPEG or PNG image")
    size = p.stat().st_size
    if size > MAX_COVER_BYTES:
        raise InputError(f"--cover {path}: {size} bytes, more than the {MAX_COVER_BYTES} allowed; "
                         f"give a smaller JPEG or PNG image")
    with open(p, "rb") as f:
        head = f.read(16)
    mime = image_type(head)
    if mime is None:
        raise InputError(f"--cover {path}: not a JPEG or PNG image (by its first bytes); give a JPEG or PNG file")
    # absolute: a worker, or a deliver run from another directory, reads it at finalize
    return {"path": os.path.abspath(p), "sha256": sha256_file(p), "mime": mime, "bytes": size}


def read_cover_file(entry: dict) -> tuple[bytes, str]:
    """The bytes and type of a ``--cover`` recorded by :func:`cover_entry`; :class:`JobError` if the
    file is gone or is not the one the job recorded."""
    p = Path(entry["path"])
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise JobError(f"--cover {p}: cannot be read ({exc.strerror or exc}); restore it, or give another "
                       f"with `cli.py deliver -o OUT --cover FILE`") from None
    import hashlib

    if hashlib.sha256(data).hexdigest() != entry["sha256"] or image_type(data) != entry["mime"]:
        raise JobError(f"--cover {p} changed since the job was planned (its SHA-256 differs); restore it, or take "
                       f"the new one with `cli.py deliver -o OUT --cover {p}`")
    return data, entry["mime"]


def book_tags(config, meta: dict, book: dict) -> dict:
    """Tag values of ``book`` (a job.json book entry) in a job of ``config``: title, author, year,
    narrator (the user's where given, else the book's; the narrator defaults to the voice's name)."""
    return {"title": config.title or book["title"], "author": config.author or book.get("author"),
            "year": config.year or book.get("year"), "narrator": config.narrator or meta["voice"]["name"]}
