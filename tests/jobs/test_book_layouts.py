"""Book layouts met in the twenty-fourth and later rounds (docs/STRUCTURE.md), on the books
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
    assert heads[:3] == ["CHAPTER I.", "CHAP. II.", "CHAP. III."] and len(heads) == 16
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


def test_a_contents_run_on_under_its_part_lines_and_titles_over_several_lines(tmp_path):
    """Relativity (heldout25): the contents' entries run on in paragraphs under its part lines ("Part II: The
    General Theory of Relativity" / "18. Special and General Principle of Relativity 19. ..."), the archive's name
    over the title line, section titles in capitals over two or three lines ("THE APPARENT INCOMPATIBILITY OF THE"
    / "LAW OF PROPAGATION OF LIGHT WITH THE" / "PRINCIPLE OF RELATIVITY")."""
    book = load_book(_bench_book("relativity.txt", tmp_path), encoding="cp1252")
    titles = [c.title for c in book.chapters]
    assert titles[0] == "PREFACE. (December, 1916)", titles[:3]
    assert "The Apparent Incompatibility of the Law of Propagation of Light with the Principle of Relativity" in titles
    spoken = _spoken(book)
    for phrase in ("Albert Einstein Reference Archive", "18. Special and General Principle", "Appendices:",
                   "The fifth Appendix was added"):
        assert phrase.lower() not in spoken.lower(), phrase


def test_a_list_of_titles_in_one_paragraph_and_titles_wrapped_at_a_long_line(tmp_path):
    """The Institutes of Justinian (heldout25): under "BOOK I." a paragraph "TITLES I. Of Justice and Law II. Of the
    law of nature ..." lists the book's titles: not read, and "BOOK I." heads no chapter of its own; titles in
    capitals wrapped at a long line ("TITLE XX. OF ATILIAN GUARDIANS, AND THOSE APPOINTED UNDER THE LEX IULIA" /
    "ET TITIA") are headings; "Translated into English by J. B. Moyle" is the title page's."""
    book = load_book(_bench_book("institutes-of-justinian.txt", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 99 and "BOOK I." not in titles, titles[:3]
    assert "Title XX. Of Atilian Guardians, and Those Appointed Under the Lex Iulia Et Titia" in titles
    spoken = _spoken(book)
    for phrase in ("TITLES I. Of Justice and Law", "Translated into English by", "Barrister-at-Law"):
        assert phrase.lower() not in spoken.lower(), phrase


def test_an_epub_publishers_imprint_among_the_opening_lines_is_not_read(tmp_path):
    """The Angel in the House (EPUB 3, heldout25): "CASSELL & COMPANY, Limited: LONDON, PARIS & MELBOURNE. 1891."
    among the first document's epigraph and dedication is not read; they are."""
    book = load_book(_bench_book("angel-in-the-house-epub.epub", tmp_path))
    first = " ".join(book.chapters[0].paragraphs)
    assert "CASSELL" not in first and "Rousier des Dames" in first and "INSCRIBED TO THE MEMORY" in first


def test_a_transcribers_note_in_brackets_over_paragraphs_is_not_read(tmp_path):
    """McGuffey's First Eclectic Reader (heldout25): "[Transcriber's Notes:" over five paragraphs about the reissue,
    closed by "Don Kostuch ]": none of it is read; the preface still is."""
    book = load_book(_bench_book("mcguffeys-first-reader.txt", tmp_path), encoding="cp1252")
    spoken = _spoken(book)
    for phrase in ("Welcome to the schoolroom of 1900", "Counting in Roman numerals is included", "Don Kostuch"):
        assert phrase.lower() not in spoken.lower(), phrase
    assert "In presenting McGuffey" in spoken


def test_an_old_etexts_small_print_before_or_after_the_book(tmp_path):
    """Mark Twain's Speeches (2001): the header and "The Legal Small Print" stand before the book, closed by
    "*END THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.12.12.00*END*": none of it is read, the book is
    announced from the header's Title and Author; a speech titled "COPYRIGHT" is a chapter like the others.
    Berkeley's Three Dialogues prints the same small print after the book: the book is still read."""
    book = load_book(_bench_book("mark-twains-speeches.txt.gz", tmp_path))
    assert book.announcement() == "Mark Twain's Speeches, by Mark Twain."
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Introduction" and "Copyright" in titles and len(titles) == 105
    speech = book.chapters[titles.index("Copyright")]
    assert speech.paragraphs[0].startswith("With Mr. Howells, Edward Everett Hale")
    spoken = _spoken(book)
    for phrase in ("Plain Vanilla Electronic Texts", "Please do not remove this", "Legal Small Print"):
        assert phrase.lower() not in spoken.lower(), phrase
    after = load_book(_bench_book("berkeley-three-dialogues.txt.gz", tmp_path))
    assert len(after.chapters) >= 3 and "small print" not in _spoken(after).lower()


def test_an_epubs_navigation_links_are_not_read(tmp_path):
    """"[To Contents]" under each heading of The Ladies' Book of Etiquette, and the "back" link of the page that
    holds The Angel in the House's title picture, only move the reader about: not read; the printer's line is
    then the last page's foot and is not read either."""
    ladies = load_book(_bench_book("ladies-book-of-etiquette-epub.epub", tmp_path))
    assert not any("To Contents" in p for c in ladies.chapters for p in c.paragraphs)
    assert ladies.chapters[0].paragraphs[0].startswith("In preparing a book of etiquette for ladies")
    angel = load_book(_bench_book("angel-in-the-house-epub.epub", tmp_path))
    last = angel.chapters[-1].paragraphs
    assert last[-1].startswith("Her own and manhood") and "Printed by Cassell" not in _spoken(angel)


def test_sermons_under_their_numbers_after_a_contents_that_repeats_them(tmp_path):
    """Twenty-Five Village Sermons: "SERMON I." over its title, then the text and verse; the contents prints every
    heading, title, text and verse again with page numbers, run together: 25 sermons, no contents read, nor the
    printer's line of the title page ("LONDON: Printed by G. BARCLAY, ...")."""
    book = load_book(_bench_book("twenty-five-village-sermons.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 25 and titles[0] == "SERMON I. God\u2019s World." and titles[-1].startswith("SERMON XXV.")
    spoken = _spoken(book)
    assert "BARCLAY" not in spoken and "find you out 72" not in spoken
    assert book.chapters[0].paragraphs[0] == "PSALM civ. 24."


def test_letters_after_a_contents_of_their_summaries_and_signed_with_initials(tmp_path):
    """A Lady's Life in the Rocky Mountains: "LETTER I" over each letter's summary in the contents, then "Letter
    I" over the same summary in the text; letters signed "I. L. B." (initials, not a numbered title): 17 letters,
    the contents (and the introduction it lists, missing from the file) not read, the dedication kept."""
    book = load_book(_bench_book("ladys-life-in-the-rocky-mountains.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 17 and titles[0] == "Letter I" and titles[-1] == "Letter XVII"
    assert book.chapters[0].paragraphs[book.chapters[0].opening].startswith("Lake Tahoe--Morning in San Francisco")
    spoken = _spoken(book)
    assert "Introduction, by Ann Ronald" not in spoken and "To My Sister" in spoken
    assert spoken.count("A lady's \"get-up\"--Grizzly bears") == 1


def test_lectures_numbered_and_named_after_their_contents(tmp_path):
    """The Chemical History of a Candle: "LECTURE I." ... "LECTURE VI." (two over a long title line in capitals)
    and "LECTURE ON PLATINUM.", after a contents list that prints them all: eight chapters after the preface, the
    contents not read; "LECTURE I--SESAME.  OF KING'S TREASURIES" (Sesame and Lilies) is said in title case."""
    book = load_book(_bench_book("chemical-history-of-a-candle.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Preface" and titles[1].startswith("LECTURE I. A Candle") and len(titles) == 8
    assert titles[-1] == "Lecture on Platinum."
    assert "BURNING OP A CANDLE" not in _spoken(book)  # the contents' misprint
    sesame = load_book(_bench_book("sesame-and-lilies.txt.gz", tmp_path))
    assert sesame.chapters[0].title == "LECTURE I--Sesame. Of King's Treasuries"


def test_the_etext_makers_bracketed_notes_after_the_last_page_are_not_read(tmp_path):
    """The Life of Nelson ends with "[The book ends with two lines of ancient Greek ...]" and "[In this text, to keep
    the character set to the minimum 'vanilla ASCII': italics have been converted to capitals ...]": the e-text
    maker's notes, not read; the book's last paragraph is."""
    book = load_book(_bench_book("life-of-nelson.txt.gz", tmp_path))
    last = book.chapters[-1].paragraphs
    assert last[-1].startswith("There was reason to suppose, from the appearances upon opening the body")
    assert "vanilla ASCII" not in _spoken(book) and "ancient Greek" not in _spoken(book)


def test_notes_headed_by_each_storys_title_are_one_notes_chapter(tmp_path):
    """Celtic Fairy Tales: after the 26 tales, "NOTES AND REFERENCES", its survey, then "I. CONNLA AND THE FAIRY
    MAIDEN." ... "XXVI. LAD WITH THE GOAT SKIN.", each naming its tale again: one chapter, the notes its sections."""
    book = load_book(_bench_book("celtic-fairy-tales.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[-1] == "Notes and References" and len(titles) == 27, titles[-3:]
    notes = book.chapters[-1]
    assert notes.paragraphs[0].startswith("It may be as well to give the reader some account")
    heads = [p for p, k in zip(notes.paragraphs, notes.kinds) if k == "heading"]
    assert len(heads) == 26 and heads[1] == "Guleesh."


def test_an_epigraphs_source_and_a_pieces_postscript_are_no_chapters(tmp_path):
    """The Sketch Book: "MOTHER BOMBIE." under the quotation that opens "THE BOAR'S HEAD TAVERN, EASTCHEAP." is
    the quotation's source; "POSTSCRIPT." after "Rip Van Winkle" is the tale's: neither is a chapter."""
    book = load_book(_bench_book("sketch-book-of-geoffrey-crayon.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "Mother Bombie." not in titles and "Garrick." not in titles and "Postscript." not in titles
    rip = book.chapters[titles.index("Rip Van Winkle.")]
    assert "Postscript." in [p for p, k in zip(rip.paragraphs, rip.kinds) if k == "heading"]
    tavern = book.chapters[titles.index("The Boar's Head Tavern, Eastcheap.")]
    assert "MOTHER BOMBIE." in tavern.paragraphs[:4]


def test_a_contents_in_groups_of_two_lines_beside_its_list_and_an_online_editions_note(tmp_path):
    """Idylls of the King: the contents prints "Dedication" / "The Coming of Arthur", then "THE ROUND TABLE" over
    ten idylls, then "The Passing of Arthur" / "To the Queen": the two-line groups are entries too, and every title
    heads its idyll (13). The Voyage of the Beagle: "About the online edition." and its note on degrees and italics
    are the e-text maker's, not read."""
    book = load_book(_bench_book("idylls-of-the-king.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "The Coming of Arthur" and titles[-2:] == ["The Passing of Arthur", "To the Queen"]
    assert len(titles) == 13
    beagle = load_book(_bench_book("voyage-of-the-beagle.txt.gz", tmp_path))
    assert "online edition" not in _spoken(beagle) and "degree symbol is represented" not in _spoken(beagle)
    assert beagle.chapters[0].paragraphs[0].startswith("I have stated in the preface to the first Edition")


def test_an_epubs_chapters_marked_only_by_paragraphs_naming_them(tmp_path):
    """The First Book of Adam and Eve (EPUB 3): one document holds the prologue and 79 chapters, each opening with
    a plain paragraph "Chapter I - The crystal sea, ..." that no heading markup or contents entry marks: the
    paragraphs, numbered on by one, split it into the prologue and 79 chapters."""
    book = load_book(_bench_book("first-book-of-adam-and-eve-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Prologue" and len(titles) == 80
    assert titles[1].startswith("Chapter I - The crystal sea") and titles[-1].startswith("Chapter LXXIX - ")
    assert book.chapters[1].paragraphs[0].startswith("1 On the third day, God planted the garden")


def test_margin_notes_and_a_contents_of_summaries_whose_label_is_gone(tmp_path):
    """How to Listen to Music: 565 "[Sidenote: ...]" margin notes (page furniture, not read), and a contents of
    chapter titles over long summaries of phrases joined by dashes, a list of plates and "INDEX Page 351" before the
    first chapter: not read."""
    book = load_book(_bench_book("how-to-listen-to-music.txt.gz", tmp_path))
    spoken = _spoken(book)
    assert "Sidenote" not in spoken and "INDEX Page 351" not in spoken
    assert "Purpose and scope of this book--Not written for professional musicians" not in spoken
    first = next(c for c in book.chapters if c.title.endswith("Introduction"))
    assert first.paragraphs[0].startswith("This book has a purpose, which is as simple as it is plain")


def test_an_unlabelled_contents_whose_titles_come_again_after_chapter_numbers(tmp_path):
    """October Vagabonds: a contents with no label ("I The Epitaph of Summer", "II At Evening I Came to the Wood",
    ...) names titles the book prints as "CHAPTER I. THE EPITAPH OF SUMMER": it is a contents list, not read."""
    book = load_book(_bench_book("october-vagabonds.txt", tmp_path))
    spoken = _spoken(book)
    assert "I The Epitaph of Summer II At Evening" not in spoken
    assert book.chapters[0].title.startswith("CHAPTER I.")
    assert book.chapters[0].paragraphs[0].startswith("As I started out from the farm with a basket of potatoes")


def test_an_epub_title_page_under_the_books_title_or_its_subtitle_is_not_read(tmp_path):
    """Title pages in EPUBs: The Song Celestial's entry titled as the book holds its subtitle, a credit "Translated
    from the Sanskrit Text by ..." and the imprint "New York Truslove, Hanson & Comba, Ltd. ..." over the
    dedication (kept), and a contents of roman-numbered titles run on under its label; the Letters of Abelard and
    Heloise print their title, the subtitle run on with its credits, and "Printed for W. OSBORNE ..." over the
    preface; The Ladies' Book of Etiquette's first entry is only its subtitle, credit, imprint "BOSTON: G. W.
    COTTRELL, PUBLISHER, ..." and copyright entry: none of it read, and no chapter of its own."""
    song = load_book(_bench_book("song-celestial-epub.epub", tmp_path))
    spoken = _spoken(song)
    assert "Translated from the Sanskrit" not in spoken and "Truslove" not in spoken
    assert "THE DISTRESS OF ARJUNA II. THE BOOK OF DOCTRINES" not in spoken
    assert song.chapters[0].title == "Preface" and song.chapters[0].paragraphs[:2] == ["Dedication", "TO INDIA"]
    letters = load_book(_bench_book("abelard-and-heloise-epub.epub", tmp_path))
    assert "prefix'd A PARTICULAR ACCOUNT" not in _spoken(letters) and "OSBORNE" not in _spoken(letters)
    assert letters.chapters[0].paragraphs[0].startswith("It is very surprising that the Letters of Abelard")
    ladies = load_book(_bench_book("ladies-book-of-etiquette-epub.epub", tmp_path))
    assert "COTTRELL" not in _spoken(ladies) and "Entered according" not in _spoken(ladies)
    assert ladies.chapters[0].title == "Introduction."


def test_the_authors_other_books_advertised_by_press_notices_are_not_read(tmp_path):
    """Shakespearean Tragedy (EPUB 3): after the 32 notes two chapters headed by Bradley's other books hold only
    press notices ('ATHEN\u00c6UM.\u2014"A remarkable achievement ...'): advertisements, no chapters; the title page's
    publishers ("THE MACMILLAN CO. OF CANADA, Ltd.") and printing history are not read either."""
    book = load_book(_bench_book("shakespearean-tragedy-epub.epub", tmp_path))
    spoken = _spoken(book)
    assert "A remarkable achievement" not in spoken and "MACMILLAN" not in spoken
    assert book.chapters[0].title == "Preface" and book.chapters[-1].title.startswith("Note Ff.")


def test_a_plays_synopsis_under_act_headings_and_its_cast_with_first_players(tmp_path):
    """The Rescue of the Princess Winsome: a "PUBLISHERS' NOTE", a cast list under "CHARACTERS   ORIGINAL CAST" and
    a synopsis headed "ACT I." ... "ACT III." (a line or two of scenes each) before the play's own ACT I ... ACT III:
    the note, the cast and the synopsis are not read; the three acts are the chapters."""
    book = load_book(_bench_book("princess-winsome.txt.gz", tmp_path))
    assert [c.title for c in book.chapters] == ["ACT I.", "ACT II.", "ACT III."]
    spoken = _spoken(book)
    assert "ORIGINAL CAST" not in spoken and "Frog-eye Fearsome drags the captive" not in spoken
    assert "the publishers are glad" not in spoken
    assert book.chapters[0].paragraphs[0].startswith("SCENE I. _Witch bends over fire")


def test_a_copyright_notice_run_into_the_first_pages_is_not_read(tmp_path):
    """The copyright entry of My Bondage and My Freedom (EPUB 3: "Entered according to Act of Congress in 1855 by
    Frederick Douglass ...") stands between the epigraph and the dedication, and McGuffey's First Reader prints its
    "Copyright, 1879, by Van Antwerp, Bragg & Co. ..." after the suggestions to teachers: neither is read; the
    epigraph, the dedication and the suggestions are."""
    bondage = load_book(_bench_book("my-bondage-and-my-freedom-epub.epub", tmp_path))
    spoken = _spoken(bondage)
    assert "Entered according to Act of Congress" not in spoken
    assert "By a principle essential to Christianity" in spoken and "TO HONORABLE GERRIT SMITH" in spoken
    reader = load_book(_bench_book("mcguffeys-first-reader.txt", tmp_path))
    spoken = _spoken(reader)
    assert "Van Antwerp" not in spoken and "This First Reader may be used in teaching reading" in spoken


def test_pieces_numbered_with_titles_in_mixed_case_and_mock_chapters_inside_them(tmp_path):
    """Further Foolishness: seventeen sketches headed "I. Stories Shorter Still" ... "XVII. Humour as I See It" in
    mixed case, set apart by blank lines (five headings over two lines), after a contents that lists them in groups;
    a parody inside the third has its own "CHAPTER I" ... "CHAPTER IV": the preface and the sketches are the
    chapters, the parody's chapters its sections, and the contents is not read."""
    book = load_book(_bench_book("further-foolishness.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 18 and titles[0] == "Preface" and titles[1] == "Stories Shorter Still", titles
    assert titles[-1] == "Humour as I See It"
    assert "Twice-told Tales; or, Every Man his Own Hero" in titles[9]
    assert "FOLLIES IN FICTION" not in _spoken(book)
    third = book.chapters[3]
    assert [p for p, k in zip(third.paragraphs, third.kinds) if k == "heading"][:4] == [
        "CHAPTER I", "CHAPTER II", "CHAPTER III", "CHAPTER IV"]


def test_aphorisms_numbered_under_their_divisions_are_sections(tmp_path):
    """Human, All Too Human (EPUB 3): a preface and three divisions whose nav entries hold 152 entries titled by a
    number alone ("1" ... "144", some hundreds of words each, the numbers running on from one division to the next):
    the preface and the divisions are the chapters, each aphorism said under its number inside them."""
    book = load_book(_bench_book("human-all-too-human-epub.epub", tmp_path))
    assert [c.title for c in book.chapters] == ["Preface.", "Of the First and Last Things.",
                                                 "History of the Moral Feelings.", "The Religious Life."]
    moral = book.chapters[2]
    assert moral.paragraphs[0] == "35." and moral.kinds[0] == "heading"


def test_a_plays_acts_headed_in_latin_in_italics_and_the_editors_notes_after_them(tmp_path):
    """Philaster: five acts headed only "Actus primus. Scena prima." and "_Actus Secundus.  Scena Prima_." (in
    italics) ... "_Actus Quintus. Scena Prima_.", then the editor's apparatus in two parts headed in capitals after
    the last act ("PHILASTER.", "PHILASTER. VERSE AND PROSE VARIATIONS."), with the first quarto's cast list under
    "THE ACTORS NAMES." inside it: seven chapters, the cast list no chapter."""
    book = load_book(_bench_book("philaster.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[:5] == ["Actus primus. Scena prima.", "Actus Secundus. Scena Prima.", "Actus Tertius. Scena Prima.",
                          "Actus Quartus. Scena Prima.", "Actus Quintus. Scena Prima."], titles
    assert titles[5:] == ["Philaster.", "Philaster. Verse and Prose Variations."], titles
    assert book.chapters[1].paragraphs[0].startswith("Enter Philaster and Bellario")


def test_sermons_titled_in_capitals_one_title_twice_with_its_part_lines(tmp_path):
    """Sermons on Evil-Speaking: an introduction and five sermons titled in capitals with no numbers, the last title
    twice, each time over a "Part 1." / "Part 2." line, after a contents of one entry a paragraph: six chapters
    (the part line joins its title), and the contents is not read."""
    book = load_book(_bench_book("sermons-on-evil-speaking.txt.gz", tmp_path))
    assert [c.title for c in book.chapters] == [
        "Introduction.", "Against Foolish Talking and Jesting.", "Against Rash and Vain Swearing.",
        "Of Evil-Speaking in General.", "The Folly of Slander. Part 1.", "The Folly of Slander. Part 2."]
    assert "Introduction by Professor Henry Morley" not in _spoken(book)


def test_letters_numbered_with_their_addressee_after_a_long_introduction(tmp_path):
    """The Best Letters of Charles Lamb: an introduction, then 107 letters headed by a bare numeral over the
    addressee in capitals, some ending in a comma ("IV." / "TO COLERIDGE,"); quotations praising the letters,
    signed "A.C. SWINBURNE", open the book: 108 chapters, letter I the second, and no chapter titled by a
    signature."""
    book = load_book(_bench_book("best-letters-of-charles-lamb.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 108 and titles[0] == "Introduction.", titles[:3]
    assert titles[1] == "Chapter I. To Samuel Taylor Coleridge." and titles[4] == "Chapter IV. To Coleridge,", titles[:6]
    assert titles[22] == "Chapter XXII. To Coleridge,"


def test_an_act_scheme_quoted_in_a_manual_of_chapters_and_its_contents_in_groups(tmp_path):
    """Play-Making: BOOKs over "_CHAPTER I_" headings in italics, a contents in groups whose last group holds two
    entries, and act-schemes quoted in capitals inside chapters ("ACT I.--THE INCURABLE OPTIMIST.--Dr. Stockmann
    announces his"): 23 chapters, each book said with its first chapter, the quoted acts read as text, the contents
    not read."""
    book = load_book(_bench_book("play-making.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 24 and titles[0] == "", titles
    assert titles[1] == "BOOK I. Prologue. CHAPTER I. Introductory"
    assert titles[22] == "BOOK V. Epilogue. CHAPTER XXII. Character and Psychology"
    spoken = _spoken(book)
    assert "ACT I.--THE INCURABLE OPTIMIST" in spoken and "CHARACTER AND PSYCHOLOGY CHAPTER XXIII" not in spoken


def test_a_title_page_in_lines_with_its_alternative_title_after_or(tmp_path):
    """The Spirit of the Age: its title page is "THE" / "SPIRIT OF THE AGE:" / "OR" / "CONTEMPORARY PORTRAITS.",
    each line set apart, then an epigraph and a half-title over the essays headed by their subjects' names: no
    chapter of the title page's lines, and the first essay is Jeremy Bentham."""
    book = load_book(_bench_book("spirit-of-the-age.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 18 and titles[0] == "Jeremy Bentham.", titles[:3]
    assert "CONTEMPORARY PORTRAITS" not in _spoken(book)


def test_a_title_page_set_as_nav_entries_a_subscribers_list_and_the_imprint(tmp_path):
    """The Interesting Narrative of Olaudah Equiano (EPUB 3): the title page is set as headings that the nav lists
    one by one ("THE LIFE", "OF", "OLAUDAH EQUIANO,", "OR", "GUSTAVUS VASSA,", "THE AFRICAN."), then an epigraph,
    the imprint ("LONDON: Printed for and sold by the Author ...") and a dedicatory letter, a "LIST of SUBSCRIBERS."
    and chapters "CHAPTER I." and "CHAP. II." ... "CHAP. XII.", Chapter X holding "MISCELLANEOUS VERSES, or": twelve
    chapters; the imprint and the subscribers are not read, the epigraph and the letter are."""
    book = load_book(_bench_book("interesting-narrative-of-olaudah-equiano-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 12 and titles[0] == "Chapter I." and titles[-1] == "Chap. XII.", titles
    spoken = _spoken(book)
    assert "Printed for and sold by the Author" not in spoken and "Prince of Wales" not in spoken
    assert "Behold, God is my salvation" in spoken and "My Lords and Gentlemen" in spoken
    assert "MISCELLANEOUS VERSES" in " ".join(book.chapters[9].paragraphs)


def test_the_publishers_catalogue_chapters_at_the_end_are_not_read(tmp_path):
    """How to Listen to Music ends with "Some Musical Books" (titles with their prices: "12mo, $1.50.") and Arbor
    Day Leaves with "Long's New Language Exercises." and "Recent Publications." (prices in cents and dollars): the
    publisher's catalogue, no chapters, not read."""
    music = load_book(_bench_book("how-to-listen-to-music.txt.gz", tmp_path))
    assert music.chapters[-1].title == "Chapter IX. Musician, Critic, and Public"
    assert "THE LETTERS OF FRANZ LISZT" not in _spoken(music)
    arbor = load_book(_bench_book("arbor-day-leaves.txt.gz", tmp_path))
    assert arbor.chapters[-1].title == "III.--Exercises at the Tree-Planting."
    assert "WARD'S GRAMMAR BLANKS" not in _spoken(arbor) and "APGAR'S Trees" not in _spoken(arbor)


def test_a_plays_front_advertisements_its_title_in_lines_and_a_stammer(tmp_path):
    """The 'Mind the Paint' Girl: the front pages list Pinero's plays, with "This Play can be had in library form,
    4to, cloth, with a portrait, 5s." and a birthday book at "price 2s 6d.", then the title over three lines
    ("THE" / '"MIND THE PAINT"' / "GIRL", one of them named by the list); in the last act Lily stammers "I-- I
    suppose so.": four acts, no chapter titled "Girl" or by the stammer, and the advertisements are not read."""
    book = load_book(_bench_book("mind-the-paint-girl.txt.gz", tmp_path), encoding="latin-1")
    assert [c.title for c in book.chapters] == ["THE FIRST ACT", "THE SECOND ACT", "THE THIRD ACT", "THE FOURTH ACT"]
    spoken = _spoken(book)
    assert "library form" not in spoken and "BIRTHDAY BOOK" not in spoken
    assert "I-- I suppose so." in spoken


def test_chap_abbreviated_in_a_contents_of_chapters_with_their_sections(tmp_path):
    """A Catechism of the Steam Engine: the contents lists "CHAP. I.--GENERAL DESCRIPTION OF THE STEAM ENGINE." ...
    "CHAP. XII.--..." each over its sections' names ("The Boiler."), and the chapters are headed "CHAPTER I." over
    their titles: "CHAP." is a chapter's keyword, so the listed entries are the contents' and CHAPTER I to XII are
    chapters (fifteen chapters with the prefaces and the opening part)."""
    book = load_book(_bench_book("steam-engine-catechism.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 15 and titles[3] == "CHAPTER I. General Description of the Steam Engine.", titles
    assert titles[-1].startswith("CHAPTER XII.")
    assert not any(t.startswith("CHAP. V.") for t in titles)


def test_plays_titled_in_capitals_over_their_first_scene_after_a_list_of_illustrations(tmp_path):
    """Children's Classics in Dramatic Form: seventeen plays titled only in capitals, eleven of them with "SCENE I"
    right under the title; a list of illustrations ends three blank lines or more before the first play's title;
    the contents (each title over its source, "Suggested by Aesop's Fable ...") follows the foreword: eighteen
    chapters, the scenes their sections, and the contents not read."""
    book = load_book(_bench_book("childrens-classics-in-dramatic-form.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 18 and titles[1] == "The Travellers and the Hatchet", titles
    assert "The Girl Who Trod on the Loaf" in titles and titles[-1] == "Christopher Columbus"
    assert "Suggested by Aesop's Fable, The Crow and the Fox" not in _spoken(book)


def test_letters_under_roman_numerals_with_one_misprinted_or_missing(tmp_path):
    """A Hilltop on the Marne: letters headed "II", "Ill" (III misprinted), "IV", a date alone (V missing), "VI" ...
    "XVI": II and IV are headings too, though the numbers after each are not the next ones."""
    book = load_book(_bench_book("a-hilltop-on-the-marne.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "Chapter II." in titles and "Chapter IV." in titles and "Chapter VI." in titles, titles


def test_a_title_page_over_its_byline_and_a_dedication_set_in_lines(tmp_path):
    """Lays of the Scottish Cavaliers: the title page "LAYS OF THE SCOTTISH CAVALIERS" / "BY" / "W.E. AYTOUN." and a
    dedication in lines ("TO" / "THE RIGHT HONOURABLE" / ... / "THE AUTHOR."), then the first part's heading with the
    same words as the title: the title page is not read, the dedication is, and the first lay opens the part."""
    book = load_book(_bench_book("lays-of-the-scottish-cavaliers.txt.gz", tmp_path))
    first = book.chapters[0]
    assert first.title == "Lays of the Scottish Cavaliers. Edinburgh After Flodden"
    assert first.paragraphs[:2] == ["TO", "THE RIGHT HONOURABLE"] and first.opening >= 2
    assert "W.E. AYTOUN" not in _spoken(book)


def test_a_plays_act_entries_at_their_scenes_level_in_the_nav(tmp_path):
    """Life Is a Dream (EPUB 3): the nav lists "ACT I" (no text of its own) and then, at the same level, "SCENE
    I\u2014A pass of rocks, ..." (its heading over two lines) and "SCENE II.\u2014The Palace at Warsaw": each act is
    a chapter said with its first scene, and Act I's second scene is a section of it."""
    book = load_book(_bench_book("life-is-a-dream-epub.epub", tmp_path))
    acts = [c for c in book.chapters if c.title.startswith("ACT ")]
    assert [c.title.split(" SCENE")[0] for c in acts] == ["ACT I.", "ACT II.", "ACT III.", "ACT IV."]
    assert not any(c.title.startswith("SCENE") for c in book.chapters)
    assert any(p.startswith("SCENE II") for p in acts[0].paragraphs)


def test_a_prologue_and_a_part_that_hold_only_a_summary_of_the_tales_after_them(tmp_path):
    """The Merry Adventures of Robin Hood: "PROLOGUE" and "PART FIRST" each stand over one summary paragraph
    ("Giving an account of Robin Hood ...", "Telling how the Sheriff of Nottingham swore ...") before the tales
    titled in mixed case: the summaries are said with the tale after them, no chapters of their own."""
    book = load_book(_bench_book("the-merry-adventures-of-robin-hood.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[1] == "Prologue. How Robin Hood Came to Be an Outlaw", titles[:4]
    assert titles[2] == "PART FIRST. Robin Hood and the Tinker"
    assert book.chapters[2].paragraphs[0].startswith("Telling how the Sheriff of Nottingham")


def test_stories_numbered_no_with_their_titles_after_a_dash(tmp_path):
    """Carnacki, the Ghost Finder: six stories headed "No. 1--THE GATEWAY OF THE MONSTER" ... "No. 6--THE THING
    INVISIBLE", each set apart: six chapters."""
    book = load_book(_bench_book("carnacki-the-ghost-finder.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 6 and titles[0].startswith("No. 1--") and titles[-1].startswith("No. 6--"), titles


def test_page_numbers_in_square_brackets_at_the_starts_of_lines(tmp_path):
    """A History of Freedom of Thought keeps its printed page numbers in square brackets at the starts of lines
    ("[V] CONTENTS", "[7] A HISTORY OF FREEDOM OF THOUGHT", "[8] impossible for him"): they are taken out, so the
    contents is found and not read, no chapter is titled by its "CHAP." column label, and Chapter II is found."""
    book = load_book(_bench_book("history-of-freedom-of-thought.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0].startswith("CHAPTER I.") and titles[1].startswith("CHAPTER II."), titles
    spoken = _spoken(book)
    assert "Reason in Prison (The Middle Ages)" not in spoken and "[8]" not in spoken


def test_an_analytical_contents_set_as_paged_nav_entries(tmp_path):
    """The Will to Believe (EPUB 3): after "CONTENTS." and "PAGE" the nav lists "THE WILL TO BELIEVE 1", "IS LIFE
    WORTH LIVING 32" ... each over the essay's summary in the contents: not chapters and not read; the preface and
    the ten essays are the chapters."""
    book = load_book(_bench_book("will-to-believe-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 11 and titles[0] == "Preface.", titles
    assert not any(t.endswith((" 1", " 32")) for t in titles)


def test_a_title_pages_credit_over_its_epigraphs_and_imprint(tmp_path):
    """Incidents in the Life of a Slave Girl (EPUB 3): the title's entry holds "WRITTEN BY HERSELF.", two epigraphs,
    "EDITED BY L. MARIA CHILD" and "BOSTON: PUBLISHED FOR THE AUTHOR 1861.": no chapter is titled by the credit,
    the epigraphs are read, the editor's credit and the imprint are not."""
    book = load_book(_bench_book("incidents-in-the-life-of-a-slave-girl-epub.epub", tmp_path))
    assert book.chapters[0].title == "Preface by the Author" and len(book.chapters) == 44
    spoken = _spoken(book)
    assert "Northerners know nothing at all about Slavery" in spoken
    assert "MARIA CHILD" not in spoken.split("Introduction by the Editor")[0] and "PUBLISHED FOR THE AUTHOR" not in spoken


def test_the_publishers_note_on_the_illustrations_is_no_chapter(tmp_path):
    """The Land of Little Rain: after the preface the publishers' "NOTE ON THE ILLUSTRATIONS" ("The Publishers feel
    that they have been peculiarly fortunate ..."): edition matter, like a list of illustrations, no chapter."""
    book = load_book(_bench_book("land-of-little-rain.txt.gz", tmp_path))
    assert len(book.chapters) == 15 and book.chapters[0].title == "Preface"
    assert not any("Illustrations" in c.title for c in book.chapters)
    assert "peculiarly fortunate" not in _spoken(book)


def test_a_detailed_contents_under_a_misspelt_label_is_not_read(tmp_path):
    """On the Origin of Species (EPUB 3): one nav entry, "DETEAILED CONTENTS." (so spelt), holds "CHAPTER I.
    VARIATION UNDER DOMESTICATION." ... "CHAPTER 14. ..." each over its summary, and every such line names a chapter
    that follows as an entry of its own: a contents, not fourteen chapters, and not read. The title page's lines
    ("OR THE PRESERVATION OF FAVOURED RACES ...", the credentials and the imprint) title nothing, and the table of
    Project Gutenberg's other editions is not read; the epigraphs open the Introduction."""
    book = load_book(_bench_book("origin-of-species-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 15 and titles[0] == "Introduction." and titles[1] == "Chapter I. Variation Under Domestication."
    intro = book.chapters[0]
    assert intro.opening == 5 and intro.paragraphs[1] == "W. WHEWELL: Bridgewater Treatise."
    spoken = _spoken(book)
    assert "First Edition" not in spoken and "ALBEMARLE STREET" not in spoken and "Contents" not in spoken
    assert spoken.count("Causes of Variability. Effects of Habit.") == 1


def test_a_novels_bare_numbered_chapters_beside_tales_in_numbered_parts(tmp_path):
    """The Awakening and Selected Short Stories (EPUB 3): "THE AWAKENING" over 39 entries "I" ... "XXXIX" (about
    48,000 words), then tales, two of them over "I" ... "IV" and "I", "II": the novel's numbered entries are its
    chapters, the tales' are sections of the tale."""
    book = load_book(_bench_book("the-awakening-epub.epub", tmp_path))
    assert len(book.chapters) == 47
    assert book.chapters[1].title == "II" and book.chapters[38].title == "XXXIX"
    pelagie = next(c for c in book.chapters if c.title.startswith("Ma"))
    assert [p for p, k in zip(pelagie.paragraphs, pelagie.kinds) if k == "heading"][:2] == ["Part I.", "Part II."]


def test_chapters_numbered_in_words_are_not_notes_on_earlier_ones(tmp_path):
    """We (EPUB 3): "RECORD TWENTY-NINE" ... "RECORD FORTY" share a number word with "RECORD TWENTY" ... but name
    no earlier chapter: they are chapters, not notes read inside "RECORD TWENTY-EIGHT". Likewise "The Fourteenth
    Remove" ... "The Twentieth Remove" in Mary Rowlandson's narrative."""
    book = load_book(_bench_book("we-epub.epub", tmp_path))
    assert len(book.chapters) == 41 and book.chapters[-1].title.upper() == "RECORD FORTY"
    rowlandson = load_book(_bench_book("mary-rowlandson-epub.epub", tmp_path))
    assert rowlandson.chapters[-1].title == "The Twentieth Remove" and len(rowlandson.chapters) == 21


def test_markdown_story_chapters_slipped_up_to_the_storys_level(tmp_path):
    """Wandering Ghosts (Markdown): "## THE DEAD SMILE" / "### CHAPTER I" / "## CHAPTER II" ... "## CHAPTER IV":
    the later CHAPTERs, at the story title's own level, go on with its numbered sections and are said inside
    the story; "## THE SCREAMING SKULL" is the next chapter."""
    book = load_book(_bench_book("wandering-ghosts-md.md.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[:2] == ["The Dead Smile", "The Screaming Skull"] and "By the Waters of Paradise" in titles
    first = book.chapters[0]
    assert [p for p, k in zip(first.paragraphs, first.kinds) if k == "heading"] == \
        ["Chapter I", "Chapter II", "Chapter III", "Chapter IV"]


def test_a_tales_unheaded_first_part_and_short_titled_pieces_are_its_sections(tmp_path):
    """The King in Yellow (EPUB 3): tales over "I", "II" ... in the nav; "THE STREET OF THE FIRST SHELL" has text
    of its own (its first part, unheaded) over "II" ... "IV", and "THE PROPHETS' PARADISE" is over eight short
    titled pieces ("THE STUDIO", "THE PHANTOM" ...): each tale is one chapter, its parts and pieces said inside."""
    book = load_book(_bench_book("king-in-yellow-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 10 and "The Studio" not in titles and "II" not in titles
    paradise = next(c for c in book.chapters if c.title == "The Prophets' Paradise")
    assert [p for p, k in zip(paradise.paragraphs, paradise.kinds) if k == "heading"][:2] == ["The Studio", "The Phantom"]


def test_a_narratives_entry_over_its_tellers_line_heads_its_first_chapter(tmp_path):
    """The Moonstone (EPUB 3): "FIRST PERIOD ..." and "FIRST NARRATIVE." hold only a line or two ("Contributed by
    Miss Clack; ...") right over "CHAPTER I": no chapters of their own; they head that chapter and their lines are
    read at its start. The prologue's and the sixth narrative's numbered parts are their sections."""
    book = load_book(_bench_book("moonstone-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert titles[0] == "Prologue" and titles[1].startswith("First Period") and titles[1].endswith("Chapter I")
    assert not any(t in ("First Narrative.", "II", "III") for t in titles)
    clack = next(c for c in book.chapters if "First Narrative" in c.title)
    assert clack.paragraphs[1].startswith("Contributed by Miss Clack")


def test_markdown_chapter_headings_set_a_level_too_low_go_on_with_the_numbering(tmp_path):
    """Twenty Years at Hull-House (Markdown): "## CHAPTER I - EARLIEST IMPRESSIONS", then "### CHAPTER II - ..." and
    "### CHAPTER III - ..." before "## CHAPTER IV - ...": the h3 headings number on from the chapters' own run, so
    they are chapters, not sections of Chapter I."""
    book = load_book(_bench_book("twenty-years-at-hull-house-md.md.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 18 and titles[1].startswith("CHAPTER II") and titles[2].startswith("CHAPTER III")


def test_a_letters_place_line_over_its_date_is_no_chapter(tmp_path):
    """The Visits of Elizabeth: each place ("HEAVILAND MANOR", named by the contents) heads the letters written
    there, and each letter opens "Heaviland Manor," over "_Wednesday, August 3rd_.": a place line, no chapter."""
    book = load_book(_bench_book("visits-of-elizabeth.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 15 and not any(t.endswith(",") for t in titles)
    assert "Heaviland Manor," in _spoken(book)


def test_a_title_pages_other_book_and_etc_and_its_press_are_not_read(tmp_path):
    """Kazan: "Author of" / "The Danger Trail, Etc." and the year under the illustrators' credit; Kitty's Class Day:
    'Author of "Little Women," etc.'; Mike and Psmith: "MEREDITH PRESS / NEW YORK" in capitals over the copyright
    line: title-page lines, not read, and the press titles no chapter."""
    kazan = load_book(_bench_book("kazan.txt.gz", tmp_path))
    assert "Danger Trail" not in _spoken(kazan) and kazan.chapters[0].opening == 0
    kitty = load_book(_bench_book("kittys-class-day.txt.gz", tmp_path))
    assert "Little Women" not in _spoken(kitty)
    mike = load_book(_bench_book("mike-and-psmith.txt.gz", tmp_path))
    assert mike.chapters[0].title == "Preface" and "MEREDITH" not in _spoken(mike).upper()


def test_a_last_chapter_over_the_publishers_catalogue_is_kept_and_the_catalogue_is_not(tmp_path):
    """The Moorland Cottage: "CHAPTER XI." holds the story's end ("THERE'S ROSEMARY FOR REMEMBRANCE.") and then
    Harper & Brothers' long priced list under "%Valuable Works,%": the chapter is the book's and is read to the
    story's end; the list is not read."""
    book = load_book(_bench_book("moorland-cottage.txt.gz", tmp_path))
    assert len(book.chapters) == 11 and book.chapters[-1].title == "CHAPTER XI."
    last = book.chapters[-1].paragraphs
    assert last[0].startswith("Maggie sat on deck") and last[-1] == '"THERE\'S ROSEMARY FOR REMEMBRANCE."'
    assert "Harper" not in _spoken(book)


def test_a_title_pages_other_books_in_quotation_marks_are_not_read(tmp_path):
    """Bits About Home Matters: 'Author of "Verses" and "Bits of Travel."' under the author's name: two titles in
    quotation marks joined by "and", the author's other books, not read."""
    book = load_book(_bench_book("bits-about-home-matters.txt.gz", tmp_path))
    assert "Bits of Travel" not in _spoken(book) and len(book.chapters) == 40


def test_a_faded_page_first_page_and_a_copyright_page_over_lines_are_not_read_and_the_dedication_is(tmp_path):
    """The Sun Also Rises (EPUB): Faded Page's first page (its terms, "Title:" ... "Faded Page eBook #20150622"), the
    title page and a copyright page set line by line ("renewal copyright, 1954, ...", "All rights reserved. No part of
    this book" / "may be reproduced in any form without the" / "permission of Charles Scribner's Sons.") are not
    read; the dedication "This book is for Hadley" / "and for John Hadley Nicanor" is, before chapter 1."""
    book = load_book(_bench_book("sun-also-rises-epub.epub", tmp_path))
    spoken = _spoken(book)
    for phrase in ("Faded Page", "made available at no cost", "Date first posted", "renewal copyright",
                   "may be reproduced", "permission of Charles"):
        assert phrase not in spoken
    first = book.chapters[0]
    assert len(book.chapters) == 19 and first.title == "Chapter 1"
    assert first.paragraphs[:2] == ["This book is for Hadley", "and for John Hadley Nicanor"]


def test_imprint_lines_of_places_and_firms_stationers_hall_roman_years_and_printing_works_are_not_read(tmp_path):
    """Twelve Years a Slave (EPUB): "AUBURN: DERBY AND MILLER." / "BUFFALO: DERBY, ORTON AND MULLIGAN." and "Entered in
    London at Stationers' Hall."; Two Treatises of Government (EPUB): "LONDON PRINTED MDCLXXXVIII"; Arrian's Anabasis
    (EPUB): "Butler & Tanner, The Selwood Printing Works, Frome, and London." on the title page and again under the
    "Index of Proper Names." that closes the book: publishers' and printers' lines, not read, and the index is no
    chapter."""
    slave = _spoken(load_book(_bench_book("twelve-years-a-slave-epub.epub", tmp_path)))
    assert "DERBY" not in slave and "Stationers" not in slave and "HARRIET BEECHER STOWE" in slave
    locke = _spoken(load_book(_bench_book("second-treatise-of-government-epub.epub", tmp_path)))
    assert "MDCLXXXVIII" not in locke
    arrian = load_book(_bench_book("anabasis-of-alexander-epub.epub", tmp_path))
    assert "Selwood" not in _spoken(arrian) and len(arrian.chapters) == 208
    assert not any(c.title.startswith("Index") for c in arrian.chapters)


def test_a_contents_of_titles_one_to_a_block_opening_with_preface_finds_the_poems(tmp_path):
    """Cape Cod Ballads: "CONTENTS" over "PREFACE", "LIST OF DRAWINGS" and 78 poem titles in capitals, each between
    blank lines, every poem headed again by its title alone: "PREFACE" there is an entry of the list, not the
    preface's heading, so the poems are found (78 chapters with the preface); the contents, the list of drawings
    (captions under "LIST OF DRAWINGS") and the closing "INDEX TO FIRST LINES" are not read."""
    book = load_book(_bench_book("cape-cod-ballads.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 78 and titles[:3] == ["Preface", "The Cod-Fisher", "The Song of the Sea"]
    spoken = _spoken(book)
    assert "INDEX TO FIRST LINES" not in spoken and "LIST OF DRAWINGS" not in spoken.upper()
    assert spoken.count("A cloud of cinder-dotted smoke") == 1  # its poem's first line, not the index's entry too
    assert "He sets and says it's lovely" not in spoken
    last = [p for p in book.chapters[-1].paragraphs if p.strip()]  # (a scene break, silent, may close it)
    assert book.chapters[-1].title == "At Eventide" and last[-1].endswith('"Good-night."')


def test_a_numbered_contents_over_essays_headed_by_their_titles_alone_finds_them(tmp_path):
    """There's Pippins and Cheese to Come: "CONTENTS" over "I. There's Pippins and Cheese to Come" ... "XII. The
    Pursuit of Fire", one to a block, the essays headed by their titles alone in mixed case ("On Buying Old Books"):
    twelve chapters, the contents not read; nor the author's other books in quotation marks under "Other Books by
    the Same Author:", each with its printing ('"Journeys to Bagdad"' / "_Sixth printing_.")."""
    book = load_book(_bench_book("theres-pippins-and-cheese-to-come.txt.gz", tmp_path))
    assert len(book.chapters) == 12 and book.chapters[1].title == "On Buying Old Books"
    assert book.chapters[-1].title == "The Pursuit of Fire"
    spoken = _spoken(book)
    assert "Journeys to Bagdad" not in spoken and "Sixth printing" not in spoken
    assert "Asperities of the Early British Reviewers XII" not in spoken


def test_the_authors_other_books_after_the_last_chapter_are_not_read(tmp_path):
    """Carmilla (EPUB 3): "Other books by J. Sheridan LeFanu" and their titles close the last chapter's file: not
    read; the story ends with its last paragraph."""
    book = load_book(_bench_book("carmilla-epub.epub", tmp_path))
    assert len(book.chapters) == 17 and "Uncle Silas" not in _spoken(book)
    assert book.chapters[-1].paragraphs[-1].startswith("The following Spring my father took me")


def test_a_bulleted_contents_of_letters_is_not_read_and_the_original_preface_is_a_chapter(tmp_path):
    """Evelina: "CONTENTS" over a block of bulleted entries ("- LETTER I. Lady Howard to the Rev. Mr. Villars" ...),
    not read; "ORIGINAL PREFACE." set apart heads the author's preface, a chapter before "LETTER I"."""
    book = load_book(_bench_book("evelina.txt.gz", tmp_path))
    titles = [c.title for c in book.chapters]
    assert "Lady Howard to the Rev. Mr. Villars - LETTER II" not in _spoken(book)
    k = titles.index("LETTER I")
    assert titles[k - 1] == "Original Preface." and book.chapters[k - 1].paragraphs[0].startswith("IN the republic")
    assert len(titles) == 86 and titles[-1].startswith("LETTER LXXXIV.")


def test_a_contents_entry_of_chapter_lines_is_no_chapters_and_the_printers_line_ends_the_text(tmp_path):
    """American Notes (EPUB 3): the "CONTENTS" entry is a table of "CHAPTER I" / "Going Away" / "3" lines: not
    split into chapters of one line each; the book's chapters are its 18 chapters, two prefaces and the
    postscript. "PRINTED BY WILLIAM CLOWES AND SONS, ..." and the e-text's footnotes under it end the book, not
    read."""
    book = load_book(_bench_book("american-notes-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert len(titles) == 21 and titles[2] == "Chapter I Going Away" and titles[-1] == "Postscript"
    spoken = _spoken(book)
    assert "CLOWES" not in spoken and "eText contains just" not in spoken
    assert book.chapters[-1].paragraphs[-1] == "May, 1868."


def test_markdown_numbered_parts_over_topic_headings_and_titles_at_random_levels(tmp_path):
    """Why Is the Negro Lynched? (Markdown): "## I." ... "## VII.", each right over "### THE AFRO-AMERICAN PEOPLE
    ..." topics in capitals: the numerals head the seven chapters, the topics are sections. The Narrative of
    Sojourner Truth (Markdown): thirty titles in capitals at "#", "##" and "###" with text under each and none
    over another: every one heads a chapter."""
    lynched = load_book(_bench_book("why-is-the-negro-lynched-md.md.gz", tmp_path))
    assert len(lynched.chapters) == 7
    first = lynched.chapters[0]
    heads = [p for p, k in zip(first.paragraphs, first.kinds) if k == "heading"]
    assert len(heads) == 4 and heads[1] == "Epidemic of Mob-Law."
    truth = load_book(_bench_book("narrative-of-sojourner-truth-md.md.gz", tmp_path))
    titles = [c.title for c in truth.chapters]
    assert len(titles) == 30 and "Last Days of Bomefree." in titles and titles[-1] == "Her Last Interview with Her Master."


def test_chapters_headed_by_numerals_alone_that_the_nav_leaves_out_are_found(tmp_path):
    """Longinus on the Sublime (EPUB 3): the nav ends its "INTRODUCTION" entry at the appendix notes, but after
    Lang's introduction the treatise runs on in 44 chapters headed "I" ... "XLIV" alone (h5): each is a chapter;
    a numbered list inside a letter (Pamela's rules, a line or two each) stays paragraphs."""
    book = load_book(_bench_book("longinus-on-the-sublime-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    k = titles.index("I")
    assert titles[k - 1] == "Introduction" and titles[k:k + 3] == ["I", "II", "III"] and "XLIV" in titles
    assert book.chapters[k].paragraphs[0].startswith("1 The treatise of Caecilius") \
        or book.chapters[k].paragraphs[0].startswith("The treatise of Caecilius")
    pamela = load_book(_bench_book("pamela-epub.epub", tmp_path))
    assert not any(c.title in ("I.", "II.") for c in pamela.chapters)


def test_an_epub_contents_of_chapter_summaries_and_production_notes_are_no_chapters(tmp_path):
    """Baron Trump's Marvellous Underground Journey (EPUB 3): its "CONTENTS." entry lists "CHAPTER I." over each
    chapter's summary: no chapters of its own (33, with the biographical notice); its "ILLUSTRATIONS." entry is a
    list of pictures, not read. This Side of Paradise (EPUB 3): "Appendix: Production notes for eBook edition 11"
    after the last chapter is the e-book maker's, not read."""
    book = load_book(_bench_book("baron-trumps-marvellous-underground-journey-epub.epub", tmp_path))
    assert len(book.chapters) == 32 + 1 and not any(c.title.startswith("Illustrations") for c in book.chapters)
    assert sum(c.title.upper().startswith("CHAPTER I") for c in book.chapters) >= 1
    paradise = load_book(_bench_book("this-side-of-paradise-epub.epub", tmp_path))
    assert len(paradise.chapters) == 10 and "edition 11" not in _spoken(paradise)


def test_the_e_texts_list_of_corrected_typographical_errors_is_not_read(tmp_path):
    """Candide (EPUB 3): an entry titled "Typographical errors corrected in text:" after the last chapter, and The
    Jewish State (EPUB 3): the same label closing the last chapter over its list ("Page 14: Duhring replaced with
    Dühring"): the e-text maker's, neither a chapter nor read."""
    candide = load_book(_bench_book("candide-epub.epub", tmp_path))
    assert not any(c.title.startswith("Typographical") for c in candide.chapters)
    assert "Typographical errors" not in _spoken(candide)
    herzl = load_book(_bench_book("jewish-state-epub.epub", tmp_path))
    assert "Duhring replaced" not in _spoken(herzl) and "Typographical errors" not in _spoken(herzl)


def test_an_epub_tales_parts_numbered_from_two_under_their_entries_are_sections(tmp_path):
    """Best Russian Short Stories (EPUB 3): the stories' parts are h3 numerals under the h2 titles, and the
    contents lists them from "II" (every "I" unlisted, the story's own text before "II"); "THE BET" has a
    lone "II", and "HIDE AND SEEK"'s "V" and "THE SERVANT"'s "IV" are marked up a level too high: all are the
    stories' sections, said as "Part two.", not chapters (20 with the introduction, plus an inner heading)."""
    book = load_book(_bench_book("best-russian-short-stories-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert not any(t in ("II", "III", "IV", "V") for t in titles) and len(book.chapters) <= 21
    queen = next(c for c in book.chapters if c.title.startswith("The Queen of Spades"))
    assert [p for p, k in zip(queen.paragraphs, queen.kinds) if k == "heading"][:2] == ["Part II.", "Part III."]
    servant = next(c for c in book.chapters if c.title.startswith("The Servant"))
    assert "Part IV." in servant.paragraphs


def test_a_contents_of_chapter_numbers_over_dashed_summaries_is_not_read(tmp_path):
    """Maria Mitchell: Life, Letters, and Journals (TXT): "CONTENTS" over "CHAPTER I" ... "CHAPTER XIII", each
    over its summary of phrases joined by dashes, while the chapters are headed "CHAPTER I" / "1818-1846" with
    another title: the list is no chapters and is not read."""
    book = load_book(_bench_book("maria-mitchell-life-letters-journals.txt.gz", tmp_path))
    assert book.chapters[0].title.startswith("CHAPTER I.") and len(book.chapters) <= 15
    assert "Solar eclipse of 1831--Teaching" not in _spoken(book)


def test_an_envoi_closes_the_book_and_the_other_books_reviews_after_it_are_not_read(tmp_path):
    """A Versailles Christmas-Tide (TXT): "L'ENVOI" after "CHAPTER IX" is a closing chapter of its own, and after
    it "By the same Author" over another book's title page ("OUR STOLEN SUMMER" / "BY" / ...) and fifteen press
    notices ('THE WORLD.--"To be able to go round ...') is the publisher's, not read."""
    book = load_book(_bench_book("versailles-christmas-tide.txt.gz", tmp_path))
    assert book.chapters[-1].title.upper() == "L'ENVOI" and len(book.chapters) == 10
    spoken = _spoken(book)
    assert "OUR STOLEN SUMMER" not in spoken and "Extracts from Reviews" not in spoken and "CHATTO" not in spoken
    assert book.chapters[-1].paragraphs[-1].startswith("Dear nameless Sister!")


def test_a_private_press_colophon_closing_the_book_is_not_read(tmp_path):
    """Love, Life & Work (TXT): "So here ends LOVE, LIFE AND WORK, being a book of Essays ... done into print by _The
    Roycrofters_ at their Shop at East Aurora ... Completed in the month of July, MCMVI" under the last essay, over
    the press's mark: the printer's colophon, not read; the essay's last words are."""
    book = load_book(_bench_book("love-life-and-work.txt.gz", tmp_path))
    assert "So here ends" not in _spoken(book) and "Roycrofters" not in _spoken(book)
    assert book.chapters[-1].paragraphs[-1].startswith("THINK RIGHT, ACT RIGHT")


def test_a_bibliography_in_capitals_is_a_chapter_of_its_own(tmp_path):
    """Apocolocyntosis (TXT): the translator's INTRODUCTION, then "BIBLIOGRAPHY" over a short list of editions: a
    chapter of its own, as the books' contents lists name it (The History of Freedom of Thought: "BIBLIOGRAPHY" after
    the eighth chapter); "Bibliography" underlined among the introduction's sections (The Art of War) stays one of
    them."""
    book = load_book(_bench_book("apocolocyntosis.txt.gz", tmp_path))
    assert [c.title for c in book.chapters[:2]] == ["Introduction", "Bibliography"]
    assert book.chapters[1].paragraphs[0].startswith("Editio Princeps")
    freedom = load_book(_bench_book("history-of-freedom-of-thought.txt.gz", tmp_path))
    assert freedom.chapters[-1].title == "Bibliography" and len(freedom.chapters) == 9
    war = load_book(_bench_book("art-of-war.txt.gz", tmp_path))
    assert not any(c.title == "Bibliography" for c in war.chapters)


def test_the_e_books_colophon_and_its_parts_closing_an_epub_are_not_read(tmp_path):
    """The Philippines a Century Hence (EPUB 3): after the last piece, the e-book maker's "Colophon" over
    "Availability", "Encoding", "Revision History", "External References" and "Corrections" (a table of the changes
    made): no chapters, not read."""
    book = load_book(_bench_book("philippines-a-century-hence-epub.epub", tmp_path))
    titles = [c.title for c in book.chapters]
    assert not any(t.startswith(("Colophon", "Encoding", "Revision History", "Corrections")) for t in titles)
    spoken = _spoken(book)
    assert "pgdp.net" not in spoken and "These links may not work" not in spoken and len(book.chapters) == 10
