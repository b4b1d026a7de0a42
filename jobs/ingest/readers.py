"""Input readers: one :class:`Reader` per book format, chosen by the file's suffix (:func:`reader_for`).

Adding an input format is one :class:`Reader` in :data:`READERS` plus the module that reads it
(docs/DESIGN.md, "Add an input format"). :func:`jobs.ingest.load_book` checks the path, calls the
reader, and applies what every format shares (names cleaned, front and back matter dropped);
:mod:`jobs.formats` asks the reader for the book's own metadata and cover (:attr:`Reader.details`,
:attr:`Reader.cover`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.errors import InputError
from jobs.ingest.book import Book
from jobs.ingest.chapters import _load_text
from jobs.ingest.common import _show
from jobs.ingest.epub import _load_epub, epub_cover, epub_details, epub_text_chars
from jobs.ingest.notes import text_notes
from jobs.ingest.outline import Structure
from jobs.ingest.text import _decode_text

MAX_TEXT_BYTES = 200 * 1024 * 1024
"""Largest text or Markdown file accepted."""
MAX_EPUB_BYTES = 512 * 1024 * 1024
"""Largest EPUB file accepted (its text is further capped at ``MAX_UNCOMPRESSED_BYTES`` unpacked)."""


@dataclass(frozen=True)
class ReadOptions:
    """What the command line says about reading a book (:func:`jobs.ingest.load_book`'s arguments)."""

    encoding: str | None = None
    """Text encoding of TXT/MD files (None: UTF-8, BOM allowed); formats that declare theirs ignore it."""
    footnotes: str = "skip"
    """Footnote bodies (EPUB notes; in text, :mod:`jobs.ingest.notes`): ``skip``, ``inline`` or ``end``."""
    front_matter: bool = False
    """Keep front and back matter."""
    structure: Structure | None = None
    """The outline overrides of TXT/Markdown books."""


def _no_details(path: Path) -> dict:
    return {}


def _no_cover(path: Path, member: str) -> bytes | None:
    return None


def _file_size(path: Path) -> float:
    return float(path.stat().st_size)


@dataclass(frozen=True)
class Reader:
    """One book format."""

    name: str
    """For messages: ``EPUB``, ``Markdown``, ``text``."""
    suffixes: tuple[str, ...]
    """Lower-case file suffixes it reads; the first is the one messages name."""
    max_bytes: int
    """Largest file accepted (:func:`check_input_size`)."""
    what: str
    """The file as a size message names it: ``an EPUB``."""
    too_big: str
    """What to do with a file over :attr:`max_bytes`."""
    load: Callable[[Path, str, int, ReadOptions], Book]
    """``(path, where, size, options) -> Book``; ``where``: the path as messages show it, ``size``:
    its size in bytes. Raises one-line :class:`InputError` for anything unusable."""
    details: Callable[[Path], dict] = _no_details
    """The book's own author, year and cover (a member name for :attr:`cover`), as far as the file
    says them: ``{}`` when it says none or cannot be read. Logs, never raises."""
    cover: Callable[[Path, str], bytes | None] = _no_cover
    """The bytes of the cover :attr:`details` named (None: gone or too large); may raise
    :class:`InputError` or :class:`OSError`."""
    text_chars: Callable[[Path], float] = _file_size
    """A rough count of the characters of text in the file, without reading it as a book (the
    engine's start-up estimate of a job's length); may raise :class:`OSError` or :class:`ValueError`."""


def _load_plain(fmt: str):
    """The loader of a text format (``txt`` or ``md``): size checks, decoding, then the outline."""

    def load(p: Path, where: str, size: int, opts: ReadOptions) -> Book:
        if size == 0:
            raise InputError(f"{where} is empty; nothing to read (pass a file with the book's text)")
        if size > MAX_TEXT_BYTES:
            raise InputError(f"{where} is larger than {MAX_TEXT_BYTES // (1024 * 1024)} MB; split it into smaller files")
        try:
            data = p.read_bytes()
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror or e}); check its permissions") from None
        book = _load_text(p, where, _decode_text(where, data, opts.encoding), fmt, opts.structure)
        book.chapters = text_notes(book.chapters, opts.footnotes)
        return book

    return load


def _load_epub_file(p: Path, where: str, size: int, opts: ReadOptions) -> Book:
    check_input_size(p)
    return _load_epub(p, opts.footnotes, opts.front_matter)


_TEXT_TOO_BIG = "split it into smaller files"
TEXT = Reader("text", (".txt", ".text"), MAX_TEXT_BYTES, "a text or Markdown file", _TEXT_TOO_BIG, _load_plain("txt"))
MARKDOWN = Reader("Markdown", (".md", ".markdown"), MAX_TEXT_BYTES, "a text or Markdown file", _TEXT_TOO_BIG,
                  _load_plain("md"))
EPUB = Reader("EPUB", (".epub",), MAX_EPUB_BYTES, "an EPUB",
              "re-export it without the extras (audio, video, large images)", _load_epub_file,
              details=epub_details, cover=epub_cover, text_chars=epub_text_chars)

#: Every format; a suffix no reader claims is read as :data:`TEXT`.
READERS: tuple[Reader, ...] = (TEXT, MARKDOWN, EPUB)
#: The reader of a file whose suffix no reader claims (no suffix, ``.rst``, ...).
DEFAULT = TEXT


def reader_for(path: str | Path) -> Reader:
    """The reader of ``path``, by its suffix (case-insensitive)."""
    suffix = Path(path).suffix.lower()
    return next((r for r in READERS if suffix in r.suffixes), DEFAULT)


def accepted() -> str:
    """The formats a user may pass, as messages name them: ``.txt, .md or .epub``."""
    names = [r.suffixes[0] for r in READERS]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def check_input_size(path: str | Path) -> int:
    """The size of the book file ``path``, from ``fstat`` of the opened file, before anything hashes
    or reads it: a file over its reader's limit (:attr:`Reader.max_bytes`; a sparse 2 GB file, say) or
    one that is not a regular file is a one-line :class:`InputError`. Does not read a byte of it."""
    p = Path(path)
    where = _show(p)
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise InputError(f"{where}: cannot open it ({getattr(e, 'strerror', None) or e}); "
                         f"check the path and its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where} is not a regular file; pass a {accepted()} file")
    reader = reader_for(p)
    if st.st_size > reader.max_bytes:
        raise InputError(f"{where} is {st.st_size / (1 << 20):.0f} MB, larger than the {reader.max_bytes >> 20} MB "
                         f"{reader.what} may be; {reader.too_big}")
    return st.st_size
