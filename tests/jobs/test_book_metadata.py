"""The title and author a book is announced with, read from real headers: an old etext's first line, a
``Title:`` block naming the book another way, an EPUB package with several creators."""

from __future__ import annotations

from pathlib import Path

from jobs.ingest import load_book
from tests.jobs.test_ingest import make_epub

STRUCTURE = Path(__file__).resolve().parents[1] / "data" / "structure"


def test_an_old_etexts_first_line_names_the_book_and_its_author():
    """Lady Susan (PG 946, the 1997 header and small print, CRLF; its header, title page, first letter and
    last lines): no ``Title:`` or ``Author:`` lines, only "***The Project Gutenberg Etext of Lady Susan, by Jane
    Austen***" at the top and the END line "End of The Project Gutenberg Etext of ..." at the bottom."""
    book = load_book(STRUCTURE / "lady-susan-header-excerpt.txt")
    assert book.title_known and book.announcement() == "Lady Susan, by Jane Austen."
    said = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    assert "Gutenberg" not in said and "SMALL PRINT" not in said
    assert "MY DEAR BROTHER" in said


def test_a_title_line_that_gives_another_name_is_not_announced():
    """The Apology (PG 1656): "Title: Apology" over "       Also known as "The Death of Socrates"": the
    second line names the book another way, it does not go on with the title."""
    book = load_book(STRUCTURE / "apology-header-excerpt.txt")
    assert book.announcement() == "Apology, by Plato."


def _opf(creators: str) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>'
            '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            '<dc:identifier id="id">test</dc:identifier><dc:title>Lyrical Ballads</dc:title>'
            f'<dc:language>en</dc:language>{creators}</metadata>'
            '<manifest><item id="d0" href="a.xhtml" media-type="application/xhtml+xml"/></manifest>'
            '<spine><itemref idref="d0"/></spine></package>')


def test_an_epub_with_several_authors_names_them_all_and_no_translator(tmp_path):
    """Project Gutenberg's EPUB 3 of Lyrical Ballads gives two creators, each with a MARC role in a
    ``<meta refines>``; a translator's role (``trl``) is no author, in EPUB 3 or as EPUB 2's ``opf:role``."""
    creators = ('<dc:creator id="author_0">William Wordsworth</dc:creator>'
                '<meta property="role" refines="#author_0" scheme="marc:relators">aut</meta>'
                '<dc:creator id="trl_0">A. Translator</dc:creator>'
                '<meta property="role" refines="#trl_0" scheme="marc:relators">trl</meta>'
                '<dc:creator id="author_1">Samuel Taylor Coleridge</dc:creator>'
                '<meta property="role" refines="#author_1" scheme="marc:relators">aut</meta>')
    body = "<h1>ADVERTISEMENT.</h1><p>It is the honourable characteristic of Poetry.</p>"
    book = load_book(make_epub(tmp_path / "lb.epub", [("a.xhtml", body)], opf=_opf(creators)))
    assert book.author == "William Wordsworth and Samuel Taylor Coleridge"
    epub2 = ('<dc:creator xmlns:opf="http://www.idpf.org/2007/opf" opf:role="trl">A. Translator</dc:creator>'
             '<dc:creator>Charles Madison Curry</dc:creator><dc:creator>Erle Elsworth Clippinger</dc:creator>'
             '<dc:creator>Jane Third</dc:creator>')
    book = load_book(make_epub(tmp_path / "cl.epub", [("a.xhtml", body)], opf=_opf(epub2)))
    assert book.author == "Charles Madison Curry, Erle Elsworth Clippinger and Jane Third"
