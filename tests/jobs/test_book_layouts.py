"""Book layouts of the twenty-fourth held-out set (docs/STRUCTURE.md, "Twenty-fourth round"), on the books
themselves (bench/structure/books): numbered passages under their books or sections, a songbook's titles in two
cases, a magazine issue's articles with serials inside them, school plays titled twice around their cast lists."""

from __future__ import annotations

from jobs.ingest import load_book
from tests.jobs.test_front_matter import _bench_book


def _spoken(book) -> str:
    return " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])


def test_numbered_sayings_under_their_books_are_sections_markdown(tmp_path):
    """The Analects (Markdown): 20 "## BOOK I.  HSIO R." headings over 499 "### CHAP. II." headings of a few
    sentences each: the books are the chapters, each saying is said under its number inside its book."""
    book = load_book(_bench_book("analects-md.md", tmp_path))
    assert len(book.chapters) == 20
    assert [c.title for c in book.chapters[:2]] == ["BOOK I. Hsio R.", "BOOK II. Wei Chang."]
    first = book.chapters[0]
    heads = [p for p, k in zip(first.paragraphs, first.kinds) if k == "heading"]
    assert heads[:3] == ["CHAPTER I.", "Chap. II.", "Chap. III."] and len(heads) == 16
    assert sum(k == "heading" for c in book.chapters for k in c.kinds or []) == 499


def test_numbered_fragments_under_their_sections_are_sections_epub(tmp_path):
    """Pascal's Pensees (EPUB 3): 923 fragments headed "1" ... "923", each a nav entry under its section's
    ("SECTION I" / "THOUGHTS ON MIND AND ON STYLE"): the fourteen sections and the introduction are the chapters,
    each fragment said under its number."""
    book = load_book(_bench_book("pascal-pensees-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[:3] == ["Introduction", "Section I. Thoughts on Mind and on Style",
                          "Section II. The Misery of Man Without God"] and len(titles) == 15, titles
    first = book.chapters[1]
    assert first.kinds[0] == "heading" and first.paragraphs[:1] == ["1."]
    assert first.paragraphs[1].startswith("The difference between the mathematical and the intuitive mind")
    assert [p for p, k in zip(first.paragraphs, first.kinds) if k == "heading"][-1] == "59."


def test_a_songbooks_titles_in_mixed_case_among_capitals_and_its_title_page(tmp_path):
    """The Liberty Minstrel: 118 songs titled in capitals or in mixed case ("The Slave Boy's Wish."), all after
    four blank lines; the title over two lines ("THE" / "LIBERTY MINSTREL."), the preface's signature "G.W.
    CLARK." and the title page's publishers, year and copyright entry are no chapters and are not read."""
    book = load_book(_bench_book("liberty-minstrel.txt", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 118 and titles[0] == "Preface." and "The Slave Boy's Wish." in titles
    assert "The" not in titles and not any("Clark" in t for t in titles)
    spoken = _spoken(book)
    for phrase in ("LEAVITT & ALDEN", "Clerk's office", "NEW-YORK:", "GEO. W. CLARK", "STEREOTYPERS"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "1844." not in book.chapters[0].paragraphs  # the year under the publishers (the preface's date is read)
    assert "All creation is musical" in spoken


def test_a_magazine_issues_articles_hold_their_serials_instalments(tmp_path):
    """The Girl's Own Paper No. 353: articles titled in capitals after four blank lines (one under its picture
    note), two serials' "CHAPTER I." and a series' "PART I." inside them, sub-headings after two blank lines
    ("VARIETIES." / "THE "WOMAN OF STENAY."", "ANSWERS TO CORRESPONDENTS." / "EDUCATIONAL."): the articles are the
    chapters, the rest their sections."""
    book = load_book(_bench_book("girls-own-paper-353.txt", tmp_path), encoding="latin-1")
    titles = [c.title for c in book.chapters]
    assert titles[:5] == ["Merle's Crusade.", "The Amateur Church Organist.", "Every Girl a Business Woman.",
                          "Varieties.", "The Shepherd's Fairy"] and len(titles) == 8, titles
    assert titles[-1] == "Autumn."
    heads = {c.title: [p for p, k in zip(c.paragraphs, c.kinds or []) if k == "heading"] for c in book.chapters}
    assert heads["Merle's Crusade."] == ["CHAPTER I. The Valley of Humiliation."]
    assert heads["Varieties."] == ['The "Woman of Stenay."', "Singing Servants."]


def test_school_plays_titled_twice_around_their_cast_lists(tmp_path):
    """Two Latin Plays: each play's title over its date line and "DRAMATIS PERSONAE" (vowels marked long), then
    again over the play: one chapter per play, its cast list not read; the title page (the author's post, the
    publishers, the Athenaeum Press), the transcriber's bracketed note over three paragraphs and the errata at the
    end are not read."""
    book = load_book(_bench_book("two-latin-plays.txt", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles.count("A Roman School") == 1 and titles.count("A Roman Wedding") == 1, titles
    assert titles[-4:] == ["A Roman School", "Costumes", "A Roman Wedding", "Costumes and Suggestions"]
    spoken = _spoken(book)
    for phrase in ("Magister Serv\u012b", "Instructor in Latin", "Ginn and Company", "Athen\u00e6um Press",
                   "This e-text includes", "If any of these characters do not display", "Variation between",
                   "lack of closing punctuation"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "When the curtain is drawn" in spoken


def test_an_epub_imprint_entry_titles_nothing(tmp_path):
    """Revelations of Divine Love (EPUB 3): the nav's title-page entries end with the publisher's imprint
    ("Methuen & Company 36 Essex Street Strand London 1901") over the title page's epigraphs: no chapter is
    titled by it and it is not read."""
    book = load_book(_bench_book("revelations-of-divine-love-epub.epub", tmp_path))
    assert not any("Methuen" in c.title for c in book.chapters)
    assert "methuen" not in _spoken(book).lower()
    assert book.chapters[0].title == "Notes on Manuscripts and Editions"
