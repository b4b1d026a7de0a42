"""Front and back matter (copyright pages, contents, indexes, ISBNs, About the Author), footnote
modes, the book's title and author and their announcement, and --speaker on a single-speaker voice."""

import dataclasses

import pytest
from click.testing import CliRunner

from cli import main
from jobs.config import JobConfig
from core.errors import InputError
from jobs.ingest import load_book
from jobs.prepare import prepare_job
from core.voice import resolve_speaker
from tests.jobs.test_ingest import PROSE, make_epub

STORY = "The story begins here and the hero walks into the wood. " + PROSE
ENDING = "The story ends there and the hero walks out of the wood. " + PROSE


STRUCTURE_DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "structure"


def all_text(book):
    return " ".join(c.title + " " + " ".join(c.paragraphs) for c in book.chapters)


def semantic_epub(path):
    docs = [
        ("copy.xhtml", '<section epub:type="copyright-page"><p>Copyright © 2021 A. Writer. All rights reserved.</p>'
                       '<p>ISBN 978-3-16-148410-0</p><p>No part of this publication may be reproduced in any form '
                       'without the written permission of the publisher, except for short quotations.</p></section>'),
        ("c1.xhtml", f"<h1>Chapter 1</h1><p>{STORY}</p>"),
        ("c2.xhtml", f"<h1>Chapter 2</h1><p>{ENDING}</p>"),
        ("index.xhtml", '<section epub:type="index"><h1>Index</h1><p>hero, 1, 2</p><p>wood, 1, 2</p>'
                        '<p>story, 1, 2, 3</p></section>'),
        ("about.xhtml", "<h1>About the Author</h1><p>A. Writer lives by the sea with two cats and writes books "
                        "about heroes who walk into woods.</p>"),
    ]
    nav = [("Copyright", "copy.xhtml"), ("Chapter 1", "c1.xhtml"), ("Chapter 2", "c2.xhtml"),
           ("Index", "index.xhtml"), ("About the Author", "about.xhtml")]
    return make_epub(path, docs, nav=nav, title="The Hero")


def test_epub_front_and_back_matter_are_skipped_by_semantics_and_titles(tmp_path):
    book = load_book(semantic_epub(tmp_path / "b.epub"))
    assert [c.title for c in book.chapters] == ["Chapter 1", "Chapter 2"]
    text = all_text(book)
    assert "Copyright" not in text and "ISBN" not in text and "cats" not in text and "hero, 1, 2" not in text
    assert STORY in text and ENDING in text


def test_include_front_matter_keeps_them(tmp_path):
    book = load_book(semantic_epub(tmp_path / "b.epub"), front_matter=True)
    text = all_text(book)
    for needle in ("All rights reserved", "ISBN 978-3-16-148410-0", "two cats", "hero, 1, 2", STORY, ENDING):
        assert needle in text


@pytest.mark.parametrize("how", ["guide", "landmarks"])
def test_epub_guide_and_landmarks_mark_a_copyright_page(tmp_path, how):
    docs = [("legal.xhtml", "<p>Published by Small Press, printed on paper made of trees that were once in a "
                            "wood, with love and care for every reader.</p>"),
            ("c1.xhtml", f"<h1>Chapter 1</h1><p>{STORY}</p>")]
    path = make_epub(tmp_path / "b.epub", docs, nav=[("Legal", "legal.xhtml"), ("Chapter 1", "c1.xhtml")])
    import zipfile

    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    if how == "guide":
        files["OEBPS/content.opf"] = files["OEBPS/content.opf"].replace(
            b"</package>", b'<guide><reference type="copyright-page" href="legal.xhtml" title="Legal"/></guide></package>')
    else:
        files["OEBPS/nav.xhtml"] = files["OEBPS/nav.xhtml"].replace(
            b'<a href="c1.xhtml">Begin</a>', b'<a epub:type="copyright-page" href="legal.xhtml">Legal</a>')
    with zipfile.ZipFile(path, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    assert [c.title for c in load_book(path).chapters] == ["Chapter 1"]
    assert [c.title for c in load_book(path, front_matter=True).chapters] == ["Legal", "Chapter 1"]


def footnote_epub(path):
    body = (f'<h1>Chapter 1</h1><p>The hero sat down.<a epub:type="noteref" href="#n1">1</a> {PROSE}</p>'
            '<aside epub:type="footnote" id="n1"><p>Heroes often sit down in old books.</p></aside>'
            f"<p>Then he stood up again. {PROSE}</p>")
    return make_epub(path, [("c1.xhtml", body)], nav=[("Chapter 1", "c1.xhtml")])


@pytest.mark.parametrize("mode, want", [
    ("skip", None),
    ("inline", 1),  # where the note sits: after the paragraph that refers to it
    ("end", 2),  # after the chapter's text
])
def test_footnote_modes(tmp_path, mode, want):
    ch = load_book(footnote_epub(tmp_path / "b.epub"), footnotes=mode).chapters[0]
    note = "Heroes often sit down in old books."
    assert all("sat down.1" not in p and not p.endswith(" 1") for p in ch.paragraphs)  # the marker never
    if want is None:
        assert note not in " ".join(ch.paragraphs) and len(ch.paragraphs) == 2
    else:
        assert ch.paragraphs[want] == note and len(ch.paragraphs) == 3


def test_bad_footnote_mode_is_refused():
    with pytest.raises(InputError, match="--footnotes"):
        JobConfig(footnotes="sideways")


TRICKY_TXT = (
    "The Tricky Book\n\nby Jane Doe\n\n"
    "Copyright © 2020 Jane Doe. All rights reserved.\n\nISBN 978-3-16-148410-0\n\n"
    f"CHAPTER I.\n\n{STORY}\n\n"
    f"CHAPTER II.\n\n{ENDING}\n\n"
    "About the Author\n\nJane Doe lives in a small house with a large dog.\n"
)


def test_txt_title_author_and_back_matter(tmp_path):
    p = tmp_path / "tricky-file-name.txt"
    p.write_text(TRICKY_TXT, encoding="utf-8")
    book = load_book(p)
    assert (book.title, book.author, book.title_known) == ("The Tricky Book", "Jane Doe", True)
    assert book.announcement() == "The Tricky Book, by Jane Doe."
    text = all_text(book)
    assert "large dog" not in text and "About the Author" not in text and "ISBN" not in text
    assert [c.title for c in book.chapters] == ["CHAPTER I.", "CHAPTER II."]
    kept = all_text(load_book(p, front_matter=True))
    assert "About the Author" in kept and "large dog" in kept


def test_gutenberg_author_line(tmp_path):
    p = tmp_path / "pg.txt"
    p.write_text("Title: A Long Walk\nAuthor: Sam Strider\n\n*** START OF THE PROJECT GUTENBERG EBOOK A LONG WALK ***\n\n"
                 f"CHAPTER I.\n\n{STORY}\n\n*** END OF THE PROJECT GUTENBERG EBOOK A LONG WALK ***\n", encoding="utf-8")
    book = load_book(p)
    assert (book.title, book.author) == ("A Long Walk", "Sam Strider")


def test_a_chapter_that_mentions_copyright_is_kept(tmp_path):
    p = tmp_path / "c.txt"
    long = ("The lawyer said that copyright was a strange thing, and that all rights reserved meant nothing to "
            "the birds. " + PROSE + " ") * 4
    p.write_text(f"CHAPTER I.\n\n{long}\n\nCHAPTER II.\n\n{STORY}\n", encoding="utf-8")
    assert len(load_book(p).chapters) == 2


def test_announcement_is_the_first_utterance_and_can_be_turned_off(tmp_path):
    p = tmp_path / "tricky.txt"
    p.write_text(TRICKY_TXT, encoding="utf-8")
    job = prepare_job([p], tmp_path / "a", JobConfig())
    first = job.rows[0].utt
    assert (first.chapter_index, first.paragraph_index, first.text) == (1, -2, "The Tricky Book, by Jane Doe.")
    assert job.meta["books"][0]["author"] == "Jane Doe" and job.meta["books"][0]["dir"].endswith("the-tricky-book")
    off = prepare_job([p], tmp_path / "b", JobConfig(announce=False))
    assert off.job_id != job.job_id and all(r.utt.paragraph_index != -2 for r in off.rows)
    assert len(off.rows) == len(job.rows) - 1
    # chapter 2 alone: no announcement (it opens the book only)
    two = prepare_job([p], tmp_path / "c", JobConfig(chapters="2"))
    assert all(r.utt.paragraph_index != -2 for r in two.rows)


def test_no_announcement_when_the_title_is_only_the_file_name(tmp_path, short_book):
    book = load_book(short_book)
    assert not book.title_known and book.announcement() is None
    job = prepare_job([short_book], tmp_path / "a", JobConfig())
    assert all(r.utt.paragraph_index != -2 for r in job.rows)


def test_plan_shows_text_settings_and_announcement(tmp_path):
    p = tmp_path / "tricky.txt"
    p.write_text(TRICKY_TXT, encoding="utf-8")
    res = CliRunner().invoke(main, ["plan", str(p), "--footnotes", "end", "--no-normalize-text"])
    assert res.exit_code == 0, res.output
    assert "text: normalisation off, footnotes end, front matter skipped, announce on" in res.output
    assert "announce: The Tricky Book, by Jane Doe." in res.output


def test_speaker_is_refused_by_a_single_speaker_voice(short_book, voice):
    res = CliRunner().invoke(main, ["plan", str(short_book), "--speaker", "1"])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --speaker 1:") and "single speaker" in lines[0]
    assert resolve_speaker(voice, None) is None


def test_speaker_names_and_ids_of_a_multi_speaker_config(voice):
    multi = dataclasses.replace(voice, num_speakers=3, speaker_id_map={"amy": 0, "bob": 1, "cat": 2})
    assert [resolve_speaker(multi, s) for s in ("bob", "2", "0")] == [1, 2, 0]
    for bad in ("dan", "3"):
        with pytest.raises(InputError, match="no such speaker"):
            resolve_speaker(multi, bad)


def test_speaker_id_reaches_the_engine_batch(tmp_path, short_book, voice, fake_engine, monkeypatch):
    """A multi-speaker job passes its speaker id with every item (the engine protocol's speaker_ids);
    an engine that cannot choose a speaker refuses the job instead of using another voice."""
    import jobs.synthesize as synthesize
    from engines.base import SynthesisBatch

    multi = dataclasses.replace(voice, num_speakers=4, speaker_id_map={"amy": 0, "bob": 3})
    job = prepare_job([short_book], tmp_path / "o", JobConfig(speaker="bob"), voice=multi)
    assert job.meta["voice"]["speaker_id"] == 3
    seen = []
    real = fake_engine.synthesize
    monkeypatch.setattr(fake_engine, "synthesize", lambda b: seen.append(b) or real(b))
    synthesize.run_batch(job, 0, fake_engine)
    assert seen and all(list(b.speaker_ids) == [3] * len(b) for b in seen)
    assert list(SynthesisBatch.from_sequences([[1, 2], [3]], job.scales, speaker_ids=[3, 3]).slice(1, 2).speaker_ids) == [3]
    monkeypatch.setattr(fake_engine, "info", dataclasses.replace(fake_engine.info, name="torch"))
    with pytest.raises(Exception, match="cannot choose a speaker"):
        synthesize._synthesize_rows(fake_engine, job.batch_rows(0), job.scales, 1, 3)


def test_which_engines_take_a_speaker_is_the_registrys(tmp_path, short_book, voice, fake_engine, monkeypatch):
    import jobs.synthesize as synthesize
    from engines import registry

    multi = dataclasses.replace(voice, num_speakers=4, speaker_id_map={"amy": 0, "bob": 3})
    job = prepare_job([short_book], tmp_path / "o", JobConfig(speaker="bob"), voice=multi)
    monkeypatch.setattr(fake_engine, "info", dataclasses.replace(fake_engine.info, name="tones"))
    with pytest.raises(Exception, match=r"engine tones cannot choose a speaker \(--speaker\); use --engine onnx"):
        synthesize._synthesize_rows(fake_engine, job.batch_rows(0), job.scales, 1, 3)
    monkeypatch.setitem(registry.ENGINES, "tones", registry.EngineEntry("tones", "engines.fake:build", registry.BY_DEVICE,
                                                                        ("fp32",), speakers=True))
    audio = synthesize._synthesize_rows(fake_engine, job.batch_rows(0), job.scales, 1, 3)
    assert len(audio[0]) == len(job.batch_rows(0))


def test_a_2002_etext_header_without_asterisks_and_its_closing_notes_are_not_read():
    """Three Dialogues between Hylas and Philonous (PG 4724, posted 2002), cut to each dialogue's first
    paragraphs: its header ("The Project Gutenberg Etext of ...", "Please do not remove this.", the "Plain
    Vanilla Electronic Texts" lines, "Prepared by ...") has no START marker and no line of asterisks; it ends
    with the paragraph sending the reader to the "legal small print" at the end of the file. After the text the
    etext's first line comes again, then the release notes and the small print. None of that is read; the
    header gives the title and author."""
    from pathlib import Path

    book = load_book(Path(__file__).resolve().parents[1] / "data" / "structure" / "berkeley-dialogues-excerpt.txt")
    assert book.title == "Three Dialogues between Hylas and Philonous, in Opposition to Sceptics and Atheists"
    assert book.author == "George Berkeley"
    assert [c.title for c in book.chapters] == ["The First Dialogue", "The Second Dialogue", "The Third Dialogue"]
    said = all_text(book)
    for phrase in ("Plain Vanilla", "Please do not remove", "Prepared by", "small print", "Etext", "donation",
                   "by George Berkeley (1685-1753)"):
        assert phrase not in said, phrase
    assert book.chapters[-1].paragraphs[-1].startswith("HYLAS. Truly my opinion is")


def test_a_1994_etext_first_line_names_the_book_and_its_title_page_is_not_read():
    """The Autobiography of Benjamin Franklin (PG 148, posted 1994), cut short: the first line is "*The
    Autobiography of Benjamin Franklin:  Gutenberg Etext #148*", there is no "Title:" line, and the small print
    comes before the text. That line gives the title; the title page under it ("WITH INTRODUCTION AND NOTES /
    EDITED BY CHARLES W ELIOT LLD / P F COLLIER & SON COMPANY, NEW YORK (1909)") is not read, and its headings in
    capitals are still the chapters (the title line counts for their pattern without being one of them)."""
    from pathlib import Path

    book = load_book(Path(__file__).resolve().parents[1] / "data" / "structure" /
                     "franklin-autobiography-excerpt.txt")
    assert book.title == "The Autobiography of Benjamin Franklin"
    assert [c.title for c in book.chapters] == ["Introductory Note", "Chief Events in Franklin's Life"]
    said = all_text(book)
    assert "ELIOT" not in said and "COLLIER" not in said and "Small Print" not in said


def test_lecture_headlines_indented_in_the_contents_are_sections_and_the_advertisements_are_not_read():
    """Gov. Bob. Taylor's Tales (PG 20171, ISO-8859-1, CRLF), cut short: three lectures titled in capitals in
    quotes, each broken by headlines in capitals that the contents list prints indented under its lecture
    ("  "THE FIDDLE AND THE BOW."  9" / "    Cherish the Little Ones  19"). The lectures are the chapters and
    the headlines their sections. The title page lists the lectures in quotes over the publisher's line; the
    preface is signed flush right ("DELONG RICE."); after the last lecture come tradesmen's advertisements
    between rows of asterisks (a fig syrup, a dental school, a hotel, pianos): none of these is read or
    made a chapter."""
    from pathlib import Path

    book = load_book(Path(__file__).resolve().parents[1] / "data" / "structure" /
                     "gov-bob-taylors-tales-excerpt.txt")
    assert [c.title for c in book.chapters] == ["Preface.", '"The Fiddle and the Bow."', '"The Paradise of Fools."',
                                                '"Visions and Dreams."']
    first = book.chapters[1]
    heads = [p for p, k in zip(first.paragraphs, first.kinds) if k == "heading"]
    assert heads[:2] == ["Cherish the Little Ones.", "Fat Men and Bald-Headed Men."]
    last = book.chapters[-1]
    assert [p for p, k in zip(last.paragraphs, last.kinds) if k == "heading"][-1] == "The Dream of God."
    assert last.paragraphs[-1].endswith("the universe is a flaunting lie!")
    said = all_text(book)
    for phrase in ("Syrup of Figs", "DENTISTRY", "PIANO", "NEW SOUTHERN HOTEL", "DeLONG RICE & COMPANY",
                   "UNIVERSITY PRESS", "ILLUSTRATED."):
        assert phrase not in said, phrase


def test_a_dated_title_in_capitals_and_letters_named_by_their_writers_head_chapters():
    """The Autobiography of Benjamin Franklin (PG 148, ASCII, CRLF), cut short: its first part is headed by a
    title in capitals over three lines with its years ("BENJAMIN FRANKLIN" / "HIS AUTOBIOGRAPHY" /
    "1706-1757"), and the two letters printed after it by indented lines naming their writers ("Letter from Mr.
    Abel James, with Notes of my Life" over "(received in Paris).", "Letter from Mr. Benjamin Vaughan." over its
    dateline). Each heads a chapter; the line under a letter's heading is the letter's, not its title."""
    from pathlib import Path

    book = load_book(Path(__file__).resolve().parents[1] / "data" / "structure" /
                     "franklin-autobiography-letters-excerpt.txt")
    assert [c.title for c in book.chapters] == [
        "Introductory Note", "Benjamin Franklin His Autobiography 1706-1757",
        "Letter from Mr. Abel James, with Notes of my Life", "Letter from Mr. Benjamin Vaughan.",
        "Chief Events in Franklin's Life"]
    assert book.chapters[1].paragraphs[0].startswith("TWYFORD, at the Bishop of St. Asaph's")
    assert book.chapters[2].paragraphs[:2] == ["(received in Paris).",
                                               book.chapters[2].paragraphs[1]]
    assert book.chapters[2].paragraphs[1].startswith('"MY DEAR AND HONORED FRIEND:')
    assert book.chapters[3].paragraphs[0] == '"PARIS, January 31, 1783.'


@pytest.mark.parametrize("block, heading", [
    (["Letter from Mr. Abel James, with Notes of my Life", "(received in Paris)."], True),
    (["Letter to Sir Walter Scott"], True),
    (["Letter from Mr. Smith arrived. We read it at once", "and wept."], False),
    (["Letter from the front came at last, and with it news", "of the regiment's losses."], False),
])
def test_letter_heading_lines(block, heading):
    from jobs.ingest.text import _letter_heading

    assert _letter_heading(block) is heading


def _bench_book(name, tmp_path):
    """A book of the structure test set (bench/structure/books), unpacked when gzipped."""
    import gzip
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "bench" / "structure" / "books" / name
    if src.suffix != ".gz":
        return src
    dest = tmp_path / src.name[:-3]
    dest.write_bytes(gzip.decompress(src.read_bytes()))
    return dest


def test_contents_in_short_paged_groups_under_a_column_header_and_italic_pieces_it_names():
    """Darkwater (PG 15210), cut short: "Contents", a "CHAPTER    PAGE" column header, then the list in groups of
    two ("I.    THE SHADOW OF YEARS    3" / "_A Litany at Atlanta_    14"), pages also in small roman numerals
    ("POSTSCRIPT    ix"); the essays are headed "I" / "THE SHADOW OF YEARS", the pieces between them by their
    titles alone ("_Credo_", "The Call", "Almighty Death[1]"). The list and the "Originally published ..." line are
    not read; each piece the list names is a chapter, and the essays stay chapters."""
    book = load_book(STRUCTURE_DATA / "darkwater-excerpt.txt")
    assert [c.title for c in book.chapters] == ["Postscript", "Credo", "Chapter I. The Shadow of Years",
                                                "Chapter II. The Souls of White Folk", "The Call", "Almighty Death"]
    said = all_text(book)
    for phrase in ("PAGE", "Originally published", "Harcourt", "THE SHADOW OF YEARS 3", "Litany at Atlanta 14"):
        assert phrase not in said, phrase


def test_a_transcribers_page_the_title_page_under_it_and_the_index_are_not_read(tmp_path):
    """MacDowell's Critical and Historical Essays (PG 35993, ISO-8859-1): a page of transcriber's notes on how
    italics, notes and music are written (22 paragraphs with examples), the title page with its London and Boston
    imprints, a contents list under a "CHAP.    PAGE" header, and after the last lecture an INDEX of entries with
    page numbers ("Accents, 92."): none of it is read; the lectures are the chapters."""
    book = load_book(_bench_book("macdowell-critical-and-historical-essays.txt.gz", tmp_path))
    said = all_text(book)
    for phrase in ("Italic text is represented", "Pitches:", "ARTHUR P. SCHMIDT", "ELKIN", "CHAP.", "Accents, 92",
                   "Aeolian mode, 83"):
        assert phrase not in said, phrase
    assert book.chapters[0].title == "Preface" and len(book.chapters) == 22
    assert book.chapters[-1].paragraphs[-1].endswith("in the musical acceptance of the word.")


def test_an_analysis_of_contents_is_a_contents_list(tmp_path):
    """The Poetics (PG 1974): its "Analysis of Contents" (a summary line for each of the 26 sections) is a
    contents list under its label: not read, and the sections headed "I" ... "XXVI" are the chapters."""
    book = load_book(_bench_book("poetics-of-aristotle.txt", tmp_path))
    assert [c.title for c in book.chapters][:2] == ["Chapter I.", "Chapter II."] and len(book.chapters) == 26
    assert "common principle of the Arts of Poetry" not in all_text(book)


def test_a_plays_programme_page_before_its_first_act_is_said_as_its_title(tmp_path):
    """Glaspell's Plays (EPUB 3): "The Verge" and "Inheritors" each have a page of their own (first performance,
    persons of the play) before "Act I". The page is the programme, not a chapter: its title is said with the first
    act ("The Verge. Act I"). One-act plays keep their page as their opening."""
    book = load_book(_bench_book("glaspell-plays-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "The Verge. Act I" in titles and "Inheritors. Act I" in titles
    assert "The Verge" not in titles and "Inheritors" not in titles
    assert titles[:2] == ["Trifles", "The Outside"]


def test_glossary_entries_headed_by_its_name_and_a_bracketed_note_on_the_text(tmp_path):
    """Castle Rackrent (heldout19): the glossary's 29 entries "GLOSSARY 1. MONDAY MORNING--" ... are entries
    of the glossary, not chapters; the introduction's bare numerals "I" ... "V" right under "INTRODUCTION" are
    its parts; the transcriber's "[Note: The body of this novel ... square brackets ...]" over four paragraphs
    is not read."""
    book = load_book(_bench_book("castle-rackrent.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles == ["Introduction", "Notes on \u2018Castle Rackrent\u2019", "Author\u2019s Preface", "Castle Rackrent",
                      "Continuation of the Memoirs of the Rackrent Family. History of Sir Conolly Rackrent"]
    intro = book.chapters[0]
    assert [p for i, p in enumerate(intro.paragraphs) if intro.kind(i) == "heading"] == [
        "Part I.", "Part II.", "Part III.", "Part IV.", "Part V."]
    spoken = " ".join(p for c in book.chapters for p in c.paragraphs)
    assert "square brackets near to the point" not in spoken and "replaced by capitals" not in spoken
    last = book.chapters[-1].paragraphs
    assert "GLOSSARY 1. MONDAY MORNING--" in last and "GLOSSARY 29. KILT." in last  # read in the glossary, in order
    assert last.index("GLOSSARY 1. MONDAY MORNING--") < last.index("GLOSSARY 29. KILT.")


def test_numbered_recipes_are_chapters_and_the_advertisements_round_them_are_not_read(tmp_path):
    """A Plain Cookery Book (heldout19): 241 recipes headed "No. 1. BOILED BEEF." ... (No. 241's title over two
    lines) are the chapters after the introduction; the tradesmen's advertisements before the title page, the
    title page's lines and the index after the last recipe are not read."""
    book = load_book(_bench_book("plain-cookery-book.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Introduction." and len(titles) == 242
    assert titles[1].startswith("No. 1. ") and titles[-1].startswith("No. 241. ")
    assert titles[-1].endswith("Distribution to the Poor.")
    assert [int(t.split()[1].rstrip(".")) for t in titles[1:]] == list(range(1, 242))
    spoken = " ".join(p for c in book.chapters for p in c.paragraphs)
    for phrase in ("TEA MERCHANTS", "Epps's Homoeopathic Cocoa", "ROUTLEDGE, WARNE", "Anchovy Sauce, 64"):
        assert phrase not in spoken, phrase
    assert not any(p in ("FOR THE", "WORKING CLASSES.") for c in book.chapters for p in c.paragraphs)


def test_a_plays_cast_list_under_its_title_entry_and_an_appendixs_numbered_sections(tmp_path):
    """"Everyman," with Other Interludes (EPUB 3, heldout19): each play's nav entry holds "CHARACTERS" (its cast
    list) and the play's short title again; the play is one chapter under its own title, the cast list not read.
    The appendices' sections "II.--THE WAKEFIELD (OR WOODKIRK) PLAYS" ... that number on from "I.--" in the
    appendix's title are read inside it."""
    book = load_book(_bench_book("everyman-and-other-interludes-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "The Chester Pageant of the Water-Leaders and Drawers of the Dee Concerning Noah's Deluge" in titles
    assert "The Chester Pageant of the Deluge" not in titles and "The Crucifixion" not in titles
    deluge = book.chapters[titles.index(
        "The Chester Pageant of the Water-Leaders and Drawers of the Dee Concerning Noah's Deluge")]
    assert deluge.paragraphs[0].startswith("God. I, God, that all the world have wrought")
    assert not any(p == "Noah's Wife" for c in book.chapters for p in c.paragraphs)  # the cast list
    town = next(c for c in book.chapters if c.title.startswith("Appendix C."))
    heads = [p for i, p in enumerate(town.paragraphs) if town.kind(i) == "heading"]
    assert heads[:2] == ["II.--The Wakefield (or Woodkirk) Plays", "III.--The Chester Plays"], heads
    assert [t.split(".")[0] for t in titles if t.lower().startswith("appendix")] == [
        "Appendix A", "Appendix B", "Appendix C", "APPENDIX D"]  # "Appendix A", not the article "a"


def test_a_contents_whose_numerals_are_set_flush_right_under_chapter_one_lists_chapters(tmp_path):
    """Jack Sheppard (heldout20): the contents prints "CHAPTER I. The Widow and her Child  1" and under it
    "       II. The Old Mint  13", the numerals set flush right; the entries are chapters like the first, not
    headlines hung under it (as a lecture's are), so "CHAPTER II." / "The Old Mint." is a chapter."""
    book = load_book(_bench_book("jack-sheppard.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    for t in ("The Old Mint.", "Old London Bridge.", "Thames Darrell.", "The Mohocks."):
        assert t in titles, t
    assert len(titles) >= 55


def test_contents_titles_that_start_with_a_number_word_name_their_headings(tmp_path):
    """Fantastic Fables (heldout20): the contents lists "Two Kings", "Six and One" among the fables' titles; the
    number word is the title's first word, not an entry's number, so the fables so headed are chapters."""
    book = load_book(_bench_book("fantastic-fables.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    for t in ("Two Kings", "Six and One", "Two Dogs", "The Crimson Candle"):
        assert t in titles, t


def test_a_railway_booklets_title_page_under_its_volume_line_is_not_read(tmp_path):
    """Legend Land, Vol. 1 (heldout20): the title page prints "LEGEND LAND" (the title without its "Vol. 1"), the
    subtitle "Being a collection of some of the _OLD TALES_ told ...", "VOLUME ONE" (the volume the title names),
    "_Published in 1922 by_" the railway, its general manager and station; after the contents, a note "This is a
    reprint in book form of ..." and the printer's line. None of it is a chapter or read; the book starts with
    its FOREWORD."""
    book = load_book(_bench_book("legend-land-vol-1.txt.gz", tmp_path))
    assert book.chapters[0].title.upper().startswith("FOREWORD"), [c.title for c in book.chapters[:3]]
    spoken = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    for phrase in ("Being a collection", "GREAT WESTERN RAILWAY", "GENERAL MANAGER", "This is a reprint",
                   "VOLUME ONE", "Printed by"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "Legend Land" not in [c.title for c in book.chapters]


def test_a_ballad_operas_title_page_plates_cast_and_prefatory_pieces(tmp_path):
    """The Beggar's Opera (heldout21): "ACT\u00a0I. SCENE I." (a no-break space after ACT) is the first act; the
    memoir "CLAUD LOVAT FRASER" and the "NOTE ON THE SCENE AND COSTUMES ..." before the acts, each with pages of
    prose, are chapters; the half-title, the title page ("The" / "BEGGAR'S" / "OPERA.", "To which is Prefixed the
    MUSICK to each SONG.", "LONDON: William Heinemann 1921"), the note on the text, the printing history, "LIST OF
    THE PLATES" with its entries and the cast's "MEN." / "WOMEN." are neither chapters nor read."""
    book = load_book(_bench_book("beggars-opera.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[:3] == ["Claud Lovat Fraser", "Note on the Scene and Costumes at the Lyric Theatre, Hammersmith",
                          "Introduction. Beggar, Player."], titles
    assert [t.split(".")[0].upper() for t in titles[3:]] == ["ACT I", "ACT II", "ACT III"], titles
    assert book.chapters[3].paragraphs[0].startswith("_SCENE, Peachum's House._") \
        or book.chapters[3].paragraphs[0].startswith("SCENE, Peachum's House"), book.chapters[3].paragraphs[0]
    spoken = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    for phrase in ("Prefixed the MUSICK", "William Heinemann", "taken from the edition of 1765", "First published",
                   "New Impression", "LIST OF THE PLATES", "Frontispiece", "To face page"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "Men." not in titles and "Women." not in titles


def test_a_series_volume_line_over_the_title_and_the_series_advertisements_are_not_read(tmp_path):
    """Modern Icelandic Plays (heldout21): the series page "SCANDINAVIAN CLASSICS" / "VOLUME VI" / "MODERN
    ICELANDIC" / "PLAYS" is a title page, not a part; the printer "D. B. Updike · The Merrymount Press · Boston"
    and "This series of SCANDINAVIAN CLASSICS is published by ..." are not read; nor are the Foundation's
    publications at the end (titles, prices and press notices of up to 80 words) and the errata after them."""
    book = load_book(_bench_book("modern-icelandic-plays.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Introduction" and "VOLUME VI" not in titles and len(titles) == 8, titles
    assert all(c.part is None for c in book.chapters)
    spoken = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    for phrase in ("Merrymount Press", "This series of SCANDINAVIAN CLASSICS", "Price $1.50",
                   "HENRY GODDARD LEACH", "There has always been a peculiar fascination", "Errata noted"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "I have smiled my teeth all white and shining" in spoken  # the songs after the last act are read


def test_a_list_of_illustrations_with_long_captions_and_a_transcribers_corrections_are_not_read(tmp_path):
    """American Adventures (heldout22): "LIST OF ILLUSTRATIONS" / "FACING PAGE" over captions of up to three lines,
    each ending with its page ("... according to the best traditions   _Frontispiece_", "... patience   8"), is
    dropped whole, not read as a chapter named by the next heading ("FARTHEST SOUTH"); the transcriber's notes at
    the end ("Page 83: changed "her serious, eyes" to ...") are not read."""
    book = load_book(_bench_book("american-adventures.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "Farthest South" not in titles and len(titles) == 61, titles[:3]
    spoken = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    for phrase in ("LIST OF ILLUSTRATIONS", "FACING PAGE", "best traditions Frontispiece", "patience 8",
                   "Page 83: changed", "Page 590", "Added missing word"):
        assert phrase.lower() not in spoken.lower(), phrase


def test_a_list_of_illustrations_with_artists_names_is_not_read(tmp_path):
    """The Log School-House on the Columbia (heldout22): "LIST OF ILLUSTRATIONS." over captions with their artists
    ("The mountain lion      D. Carter Beard", two-line captions, "Redrawn by Walter C. Greenough"), up to
    "CHAPTER I.": none of it is read, and the preface before it still is."""
    book = load_book(_bench_book("log-school-house-on-the-columbia.txt.gz", tmp_path))
    spoken = " ".join(p for c in book.chapters for p in [c.title, *c.paragraphs])
    for phrase in ("LIST OF ILLUSTRATIONS", "D. Carter Beard", "Redrawn by Walter C. Greenough",
                   "stoical and silent. E. J. Austen"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert book.chapters[0].title.startswith("Preface") and len(book.chapters[0].paragraphs) >= 3


def test_an_epub_title_page_after_an_epigraph_is_not_read(tmp_path):
    """Perpetual Peace (EPUB 3, heldout21): the first document holds Tennyson's lines, then the title page
    ("PERPETUAL PEACE A PHILOSOPHICAL ESSAY", "BY IMMANUEL KANT", "1795", "TRANSLATED WITH INTRODUCTION AND NOTES
    BY ...", "WITH A PREFACE BY PROFESSOR LATTA", the publishers, the impressions), then the preface: the epigraph
    and the preface are read, the title page is not."""
    book = load_book(_bench_book("perpetual-peace-epub.epub", tmp_path))
    first = book.chapters[0]
    spoken = " ".join(first.paragraphs)
    assert "Parliament of man" in spoken and "This translation of Kant" in spoken
    for phrase in ("BY IMMANUEL KANT", "TRANSLATED WITH INTRODUCTION", "WITH A PREFACE BY", "GEORGE ALLEN",
                   "MACMILLAN", "Second Impression"):
        assert phrase.lower() not in spoken.lower(), phrase


def test_a_contents_of_numbered_summaries_is_not_read(tmp_path):
    """The Vicar of Wakefield (heldout23): "CONTENTS" run into its first entry, then 32 numbered summaries over two
    or three lines ("2. Family misfortunes. The loss of fortune only serves to / increase the pride of the
    worthy"), two of them run together ("... constitution 5. A new and great acquaintance introduced."): the list
    is not read; each chapter still opens with its own summary under "CHAPTER 1"."""
    book = load_book(_bench_book("vicar-of-wakefield.txt.gz", tmp_path))
    assert len(book.chapters) == 33
    opening = " ".join(book.chapters[0].paragraphs)
    assert "CONTENTS" not in opening and "Family misfortunes" not in opening and "constitution 5." not in opening
    assert book.chapters[1].paragraphs[0].startswith("The description of the family of Wakefield")


def test_a_posters_note_is_the_e_texts_not_the_books(tmp_path):
    """The Chemical History of a Candle (heldout23): "Poster's note: "combustion that makes!" was corrected from a
    misprint ..." at the end is the e-text maker's note, like a transcriber's: not read."""
    book = load_book(_bench_book("chemical-history-of-a-candle.txt.gz", tmp_path))
    spoken = " ".join(p for c in book.chapters for p in c.paragraphs)
    assert "Poster's note" not in spoken and "corrected from a misprint" not in spoken
    assert "Royal George" in spoken or len(book.chapters) >= 7  # the lectures and their notes are still read
