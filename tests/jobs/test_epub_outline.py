"""EPUB outline rules on excerpts of real books (the nav as the book's own, the XHTML copied from its file)."""

from __future__ import annotations

from pathlib import Path

from jobs.ingest import load_book
from tests.jobs.test_ingest import make_epub

STRUCTURE = Path(__file__).resolve().parents[1] / "data" / "structure"


def _said(book) -> str:
    return " ".join([book.announcement()] + [c.title + " " + " ".join(c.paragraphs) for c in book.chapters])


def _headings(chapter) -> list[str]:
    return [p for i, p in enumerate(chapter.paragraphs) if chapter.kind(i) == "heading"]


WHAT_MEN = STRUCTURE / "what-men-live-by-excerpt.xhtml"
"""What Men Live By, and Other Tales (PG 6157, EPUB 3, the whole book in one XHTML file), each section cut to its
first paragraph: the title page with two of its six epigraphs and the linked CONTENTS, then four tales as <h2>
titles in capitals, two of them told in parts headed by bare numerals (I-XII, the "I" of the first tale after its
opening paragraphs; I-IX, straight after the title), an <h3> sentence of the text under IX, an <h3> subtitle, and
"Notes:" after the last tale."""

_ROMAN = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"]


def _what_men_nav() -> list:
    """The book's nav, flat as it is: each tale's part numerals are entries at the tale's own level."""
    href = "c.xhtml#pgepubid{:05d}".format
    first = [("WHAT MEN LIVE BY", href(1))] + [(r, href(n)) for n, r in enumerate(_ROMAN[:8], 2)] + [
        ("IX", href(10), [("The woman, having begun talking, told them the whole story.", href(11))])] + [
        (r, href(n)) for n, r in enumerate(_ROMAN[9:], 12)]
    middle = [("THREE QUESTIONS", href(15)),
              ("THE COFFEE-HOUSE OF SURAT", href(16), [("(After Bernardin de Saint-Pierre)", href(17))])]
    last = [("HOW MUCH LAND DOES A MAN NEED?", href(18))] + [(r, href(n)) for n, r in enumerate(_ROMAN[:9], 19)] + [
        ("Notes:", href(28))]
    return [("WHAT MEN LIVE BY AND OTHER TALES", href(0))] + first + middle + last


def test_epub_bare_numerals_counting_again_from_one_under_each_tale_are_its_parts(tmp_path):
    """The nav lists each tale's parts "I" ... "XII" and "I" ... "IX" as entries beside the tales' titles: the
    count starting again at I under another title makes them the tales' parts, said as "Part II." headings
    inside the tale, not chapters; the tale whose title has no text of its own before its "I" keeps its title,
    the sentence of the text under IX is a heading inside the part, and the notes stay with the last tale."""
    book = load_book(make_epub(tmp_path / "what-men.epub", [("c.xhtml", WHAT_MEN.read_text(encoding="utf-8"))],
                               nav=_what_men_nav(), title="What Men Live By, and Other Tales"))
    tales = [c for c in book.chapters if c.title]
    assert [c.title for c in tales] == ["What Men Live by", "Three Questions",
                                        "THE COFFEE-HOUSE OF SURAT. (After Bernardin de Saint-Pierre)",
                                        "How Much Land Does a Man Need?"]
    first, land = tales[0], tales[-1]
    # the scripture epigraphs before the first tale are its opening, said before its title
    assert tales == book.chapters and first.opening == 2 and first.paragraphs[0].startswith("“We know that we")
    body = first.paragraphs[first.opening:]
    assert body[0].startswith("A shoemaker named Simon, who had neither house nor land")
    assert first.kind(first.opening) == "text" and body[2] == "Part I."
    assert _headings(first) == [f"Part {r}." for r in _ROMAN[:9]] + [
        "The woman, having begun talking, told them the whole story."] + [f"Part {r}." for r in _ROMAN[9:]]
    assert land.paragraphs[0] == "Part I." and land.paragraphs[1].startswith("An elder sister came to visit")
    assert _headings(land) == [f"Part {r}." for r in _ROMAN[:9]] + ["Notes:"]
    said = _said(book)
    assert "CONTENTS" not in said  # the linked contents list is not spoken


def test_epub_one_run_of_bare_numerals_after_one_titled_entry_stays_chapters(tmp_path):
    """The Turn of the Screw (PG 209): an unnumbered prologue headed with the book's own title, then chapters
    "I", "II", "III": the count never starts again, so the numerals are chapters."""
    doc = ('<h2 id="p">THE TURN OF THE SCREW</h2><p>The story had held us, round the fire, sufficiently breathless, '
           'but except the obvious remark that it was gruesome, as, on Christmas Eve in an old house, a strange tale '
           'should essentially be, I remember no comment uttered till somebody happened to say that it was the only '
           'case he had met in which such a visitation had fallen on a child.</p>'
           '<h2 id="c1">I</h2><p>I remember the whole beginning as a succession of flights and drops, a little seesaw '
           'of the right throbs and the wrong.</p>'
           '<h2 id="c2">II</h2><p>This came home to me, two days later, as I drove out with Flora to meet, as Mrs. '
           'Grose said, the little gentleman.</p>'
           '<h2 id="c3">III</h2><p>Nothing was to touch me in these days, I seemed to myself, except the strange '
           'tale of the boy\'s return.</p>')
    nav = [("THE TURN OF THE SCREW", "c.xhtml#p"), ("I", "c.xhtml#c1"), ("II", "c.xhtml#c2"), ("III", "c.xhtml#c3")]
    book = load_book(make_epub(tmp_path / "screw.epub", [("c.xhtml", doc)], nav=nav, title="The Turn of the Screw"))
    assert [c.title for c in book.chapters][-3:] == ["I", "II", "III"]


LITTLE_PRINCESS = STRUCTURE / "little-princess-excerpt.xhtml"
"""A Little Princess (PG 146, EPUB 3): the title page ("A Little Princess" / "by" / "Frances Hodgson Burnett" /
"A LITTLE PRINCESS" and a catalogue "Summary:" paragraph), the CONTENTS, then the half-title "A Little Princess"
over chapters headed by their number and their title as two <h3> ("1" / "Sara"), chapter 1 with the school's
door-plate "MISS MINCHIN, Select Seminary for Young Ladies." set as an <h3>; chapters 1-3, each cut short."""


def _little_princess_nav() -> list:
    ids = "c.xhtml#pgepubid{:05d}".format
    return [("A Little Princess", ids(0), [("Frances Hodgson Burnett", ids(1), [("A LITTLE PRINCESS", ids(2))]),
                                           ("CONTENTS", ids(3))]),
            ("A Little Princess", ids(4), [("1 Sara", ids(5)),
                                           ("MISS MINCHIN, Select Seminary for Young Ladies.", ids(6)),
                                           ("2 A French Lesson", ids(7)), ("3 Ermengarde", ids(8))])]


def _little_princess(tmp_path):
    return load_book(make_epub(tmp_path / "princess.epub",
                               [("c.xhtml", LITTLE_PRINCESS.read_text(encoding="utf-8"))], nav=_little_princess_nav(),
                               title="A Little Princess / Being the whole story of Sara Crewe now told for the first "
                                     "time"))


def test_epub_a_heading_between_two_numbered_chapters_is_a_line_of_the_first(tmp_path):
    """The door-plate, listed in the nav between "1 Sara" and "2 A French Lesson" with no number of its own, is
    a heading inside chapter 1, not a chapter."""
    book = _little_princess(tmp_path)
    assert [c.title for c in book.chapters] == ["1 Sara", "2 A French Lesson", "3 Ermengarde"]
    sara = book.chapters[0]
    assert _headings(sara) == ["MISS MINCHIN, Select Seminary for Young Ladies."]
    assert sara.paragraphs[-1].startswith('"Here we are, Sara," said Captain Crewe')


def test_epub_title_page_summary_byline_and_half_title_are_not_spoken(tmp_path):
    """The title page's "by" over the author's name, the catalogue's "Summary:" and the half-title entry over the
    chapters say nothing: the title is said once, by the announcement, with its subtitle after a colon."""
    book = _little_princess(tmp_path)
    assert book.announcement().startswith("A Little Princess: Being the whole story of Sara Crewe now told")
    said = _said(book)
    assert "Summary" not in said and "left in poverty" not in said
    assert said.casefold().count("a little princess") == 1
    assert book.chapters[0].paragraphs[0].startswith("Once on a dark winter's day")


def test_epub_bare_numerals_under_part_headings_stay_chapters():
    """My Antonia's books ("BOOK I. The Shimerdas" over chapters "I" ... "XIX", "BOOK II. The Hired Girls" over
    "I" ... "XV") count their chapters from I again under each book: a part holds chapters, so in a flat nav the
    numerals stay chapters; only under titles that are no part heading are they a tale's parts."""
    from jobs.ingest.epub import _restarting_parts

    def flat(*groups):
        return [(None, 0)] + [(label, 1) for title, count in groups
                              for label in [title] + ["I", "II", "III", "IV", "V"][:count]]

    assert _restarting_parts(flat(("BOOK I. The Shimerdas", 3), ("BOOK II. The Hired Girls", 2))) == set()
    assert _restarting_parts(flat(("FIRST PART", 3), ("SECOND PART", 2))) == set()
    assert _restarting_parts(flat(("WHAT MEN LIVE BY", 3), ("THREE QUESTIONS", 0),
                                  ("HOW MUCH LAND DOES A MAN NEED?", 2))) == {2, 3, 4, 7, 8}


_MARINERE = ('<div class="chapter" id="p4"><h2><a id="poem1"/>THE RIME OF THE ANCYENT MARINERE,<br/> IN SEVEN PARTS.</h2>'
             '<h3 id="p5">ARGUMENT.</h3><p class="noindent">How a Ship having passed the Line was driven by Storms to '
             'the cold Country towards the South Pole; and how from thence she made her course to the tropical Latitude '
             'of the Great Pacific Ocean; and of the strange things that befell; and in what manner the Ancyent '
             'Marinere came back to his own Country.</p>'
             '<h3 id="p6">I.</h3><p class="noindent">It is an ancyent Marinere,<br/> And he stoppeth one of three:<br/> '
             '“By thy long grey beard and thy glittering eye<br/> “Now wherefore stoppest me?</p>'
             '<h3 id="p7">II.</h3><p class="noindent">The Sun came up upon the right,<br/> Out of the Sea came he;<br/> '
             'And broad as a weft upon the left<br/> Went down into the Sea.</p>'
             '<h3 id="p8">III.</h3><p class="noindent">I saw a something in the Sky<br/> No bigger than my fist;<br/> '
             'At first it seem’d a little speck<br/> And then it seem’d a mist.</p></div>')
_FOSTER = ('<div class="chapter" id="p13"><h2><a id="poem2"/>THE FOSTER-MOTHER’S TALE, A DRAMATIC FRAGMENT.</h2>'
           '<p class="noindent">FOSTER-MOTHER.<br/> I never saw the man whom you describe.<br/> <br/> MARIA.<br/> '
           '’Tis strange! he spake of you familiarly<br/> As mine and Albert’s common Foster-mother.</p></div>')
_THORN = ('<div class="chapter" id="p24"><h2><a id="poem12"/>THE THORN.</h2>'
          '<h3 id="p25">I.</h3><p class="noindent">There is a thorn; it looks so old,<br/> In truth you’d find it hard '
          'to say,<br/> How it could ever have been young,<br/> It looks so old and grey.</p>'
          '<h3 id="p26">II.</h3><p class="noindent">Like rock or stone, it is o’ergrown<br/> With lichens to the very '
          'top,<br/> And hung with heavy tufts of moss,<br/> A melancholy crop.</p>'
          '<h3 id="p27">III.</h3><p class="noindent">High on a mountain’s highest ridge,<br/> Where oft the stormy '
          'winter gale<br/> Cuts like a scythe, while through the clouds<br/> It sweeps from vale to vale.</p></div>')


def test_epub_numbered_parts_listed_under_each_poem_are_its_sections(tmp_path):
    """Lyrical Ballads (PG 9622, EPUB 3, a poem per file): the nav lists the numbered parts of two poems under
    the poem's entry ("THE RIME OF THE ANCYENT MARINERE" over "ARGUMENT.", "I." ... "VII."; "THE THORN." over
    "I." ... "XXII."). Two entries holding such runs make them the poems' parts: sections inside the poem
    (the titled "ARGUMENT." beside them too), not poems of their own."""
    nav = [("THE RIME OF THE ANCYENT MARINERE, IN SEVEN PARTS.", "m.xhtml#p4",
            [("ARGUMENT.", "m.xhtml#p5"), ("I.", "m.xhtml#p6"), ("II.", "m.xhtml#p7"), ("III.", "m.xhtml#p8")]),
           ("THE FOSTER-MOTHER’S TALE, A DRAMATIC FRAGMENT.", "f.xhtml#p13"),
           ("THE THORN.", "t.xhtml#p24", [("I.", "t.xhtml#p25"), ("II.", "t.xhtml#p26"), ("III.", "t.xhtml#p27")])]
    book = load_book(make_epub(tmp_path / "lyrical.epub", [("m.xhtml", _MARINERE), ("f.xhtml", _FOSTER),
                                                           ("t.xhtml", _THORN)], nav=nav, title="Lyrical Ballads"))
    assert [c.title for c in book.chapters] == ["The Rime of the Ancyent Marinere, in Seven Parts.",
                                                "The Foster-Mother’s Tale, a Dramatic Fragment.", "The Thorn."]
    marinere, _foster, thorn = book.chapters
    assert _headings(marinere) == ["Argument.", "Part I.", "Part II.", "Part III."]
    assert marinere.paragraphs[1].startswith("How a Ship having passed the Line")
    assert _headings(thorn) == ["Part I.", "Part II.", "Part III."]
    assert thorn.paragraphs[1].startswith("There is a thorn; it looks so old")



_DOUGLASS_TITLE = ('<h1 id="t0">Narrative<br/>of the<br/>Life<br/>of<br/>FREDERICK DOUGLASS</h1>'
                   '<h2 class="no-break" id="t1">AN<br/>AMERICAN SLAVE.<br/>WRITTEN BY HIMSELF.</h2>'
                   '<h4 id="t2">BOSTON<br/><br/> PUBLISHED AT THE ANTI-SLAVERY OFFICE,<br/> NO. 25 CORNHILL<br/> 1845<br/><br/></h4>'
                   '<h5>ENTERED, ACCORDING TO ACT OF CONGRESS,<br/> IN THE YEAR 1845<br/> BY FREDERICK DOUGLASS,<br/>'
                   ' IN THE CLERK’S OFFICE OF THE DISTRICT COURT<br/>OF MASSACHUSETTS.<br/></h5><hr/>'
                   '<p class="letter">Note from the original file: This electronic book is being released at this\n'
                   'time to honor the birthday of Martin Luther King Jr. [Born January 15, 1929]\n'
                   '[Officially celebrated January 20, 1992]</p><hr/>')
_DOUGLASS_PREFACE = ('<div class="chapter" id="p4"><h2><a id="link2H_PREF"/> PREFACE</h2><p>In the month of August, 1841, '
                     'I attended an anti-slavery convention in Nantucket, at which it was my happiness to become '
                     'acquainted with <i>Frederick Douglass</i>, the writer of the following Narrative.</p></div>')
_DOUGLASS_CH1 = ('<div class="chapter" id="p7"><h2><a id="link2HCH0001"/> CHAPTER I</h2><p>I was born in Tuckahoe, near '
                 'Hillsborough, and about twelve miles from Easton, in Talbot county, Maryland. I have no accurate '
                 'knowledge of my age, never having seen any authentic record containing it.</p></div>')


def test_epub_title_page_with_its_imprint_copyright_entry_and_file_note_is_not_spoken(tmp_path):
    """Narrative of the Life of Frederick Douglass (PG 23, EPUB 3): the nav lists the title page's lines (the
    title, "AN AMERICAN SLAVE. WRITTEN BY HIMSELF.", the Boston imprint); under the imprint stand the copyright
    entry ("ENTERED, ACCORDING TO ACT OF CONGRESS ...") and the e-text maker's "Note from the original file:
    ...". The entry is an imprint line and the note a producer's: no prose of the book is left there, so the
    title page is no chapter and none of it is spoken; the preface is the first chapter."""
    nav = [("Narrative of the Life of FREDERICK DOUGLASS", "t.xhtml#t0"),
           ("AN AMERICAN SLAVE. WRITTEN BY HIMSELF.", "t.xhtml#t1"),
           ("BOSTON PUBLISHED AT THE ANTI-SLAVERY OFFICE, NO. 25 CORNHILL 1845", "t.xhtml#t2"),
           ("PREFACE", "p.xhtml#p4"), ("CHAPTER I", "c.xhtml#p7")]
    book = load_book(make_epub(tmp_path / "douglass.epub", [("t.xhtml", _DOUGLASS_TITLE), ("p.xhtml", _DOUGLASS_PREFACE),
                                                            ("c.xhtml", _DOUGLASS_CH1)], nav=nav,
                               title="Narrative of the Life of Frederick Douglass, an American Slave"))
    assert [c.title for c in book.chapters] == ["Preface", "Chapter I"]
    said = _said(book).upper()
    for phrase in ("ANTI-SLAVERY OFFICE", "ACT OF CONGRESS", "NOTE FROM THE ORIGINAL FILE"):
        assert phrase not in said


RUR = STRUCTURE / "rur"
"""R.U.R. (PG 59112, EPUB 3 with nav and NCX, one file a section), the Samuel French acting edition: the title
page with its copyright, "ALL RIGHTS RESERVED" and royalty notice ("CAUTION: Professionals and amateurs ..."),
the publisher's STORY OF THE PLAY, the Theatre Guild cast page ("Staged by Philip Moeller", "Settings and
Costumes by Lee Simonson", the cast), the DESCRIPTION OF CHARACTERS, ACT ONE and the EPILOGUE cut to their first
paragraphs, then the PROPERTY LIST, LIGHT PLOT and LIGHT CUES; each file's body as in the book."""


def test_epub_acting_edition_copyright_caution_playbill_and_production_notes_are_not_chapters(tmp_path):
    """A play's copyright page with its royalty notice and the first production's programme page (its staging
    credits and cast) are front matter, its description of characters no chapter, and its property list, light
    plot and light cues after the play back matter: none is a chapter or spoken."""
    files = [("t.xhtml", "0-title"), ("s.xhtml", "1-story"), ("c.xhtml", "2-cast"), ("d.xhtml", "3-description"),
             ("a1.xhtml", "4-act-one"), ("e.xhtml", "7-epilogue"), ("p.xhtml", "8-property-list"),
             ("l.xhtml", "9-light-plot"), ("q.xhtml", "10-light-cues")]
    docs = [(name, (RUR / f"{stem}.xhtml").read_text(encoding="utf-8")) for name, stem in files]
    nav = [("R. U. R. (ROSSUM’S UNIVERSAL ROBOTS)", "t.xhtml"), ("R. U. R. STORY OF THE PLAY", "s.xhtml#pgepubid00004"),
           ("R. U. R. (ROSSUM’S UNIVERSAL ROBOTS)", "c.xhtml#pgepubid00007"),
           ("DESCRIPTION OF CHARACTERS", "d.xhtml#pgepubid00010"), ("ACT ONE", "a1.xhtml#pgepubid00013"),
           ("EPILOGUE", "e.xhtml#pgepubid00074"), ("R. U. R. PROPERTY LIST", "p.xhtml#pgepubid00080"),
           ("R. U. R. LIGHT PLOT", "l.xhtml#pgepubid00085"), ("R. U. R. LIGHT CUES", "q.xhtml#pgepubid00087")]
    book = load_book(make_epub(tmp_path / "rur.epub", docs, nav=nav, title="R.U.R. (Rossum's Universal Robots)"))
    assert [c.title for c in book.chapters] == ["R. U. R. Story of the Play", "Act One", "Epilogue"]
    said = _said(book)
    for phrase in ("Copyright ©, 1923", "ALL RIGHTS RESERVED", "CAUTION: Professionals", "Staged by Philip Moeller",
                   "Settings and Costumes by", "A handsome man of 35", "Dark grey carpet", "The foots consist"):
        assert phrase not in said


_PESSIMISM = (
    '<h2 id="pgepubid00006">ON SUICIDE.</h2>'
    '<p>As far as I know, none of the ancient philosophers regarded suicide as a crime.'
    '<a href="c.xhtml#linknote-12" id="linknoteref-12" class="pginternal">12</a> The Stoics, in fact, praised it.</p>'
    '<p><a id="linknote-12"> </a></p>'
    '<p class="foot">12 (<a href="c.xhtml#linknoteref-12" class="pginternal">return</a>)<br/>'
    ' [ Hist. Nat. Lib. xxviii., 1.]</p>'
    '<p>It will generally be found that, as soon as the terrors of life reach the point at which they outweigh'
    ' the terrors of death, a man will put an end to his life.</p>'
    '<h2 id="pgepubid00007">IMMORTALITY:<a href="c.xhtml#linknote-22" id="linknoteref-22" class="pginternal">22'
    '</a> A DIALOGUE.</h2>'
    '<p><a id="linknote-22"> </a></p>'
    '<p class="foot">22 (<a href="c.xhtml#linknoteref-22" class="pginternal">return</a>)<br/> [ <i>Translator\'s'
    ' Note</i>.\u2014The word immortality\u2014<i>Unsterblichkeit</i>\u2014does not occur in the original.]</p>'
    '<p><i>Thrasymachos</i>. Tell me now, in one word, what shall I be after my death?</p>')


def test_epub_notes_linking_back_to_their_marks_are_notes_and_a_headings_mark_is_not_said(tmp_path):
    """The Essays of Arthur Schopenhauer; Studies in Pessimism (PG 10732, EPUB 3), two essays cut short: each
    note stands in the text after the paragraph citing it, as '12 (return) [ ... ]' whose "return" links back
    to the mark, with no epub:type; the nav's label keeps the heading's mark ("IMMORTALITY:22 A DIALOGUE.").
    Such a paragraph is a note body: not read by default ("twelve return"), read with --footnotes inline; the
    chapter's title is the heading's, without the mark."""
    nav = [("ON SUICIDE.", "c.xhtml#pgepubid00006"), ("IMMORTALITY:22 A DIALOGUE.", "c.xhtml#pgepubid00007")]
    path = make_epub(tmp_path / "p.epub", [("c.xhtml", _PESSIMISM)], nav=nav, title="Studies in Pessimism")
    book = load_book(path)
    assert [c.title for c in book.chapters] == ["On Suicide.", "Immortality: A Dialogue."]
    said = _said(book)
    assert "return" not in said and "Hist. Nat." not in said and "Unsterblichkeit" not in said
    assert "22" not in said and "12" not in said
    assert book.chapters[1].paragraphs[0].startswith("Thrasymachos. Tell me now")
    assert book.chapters[0].paragraphs[1].startswith("It will generally be found")
    inline = _said(load_book(path, footnotes="inline"))
    assert "Hist. Nat. Lib." in inline and "Unsterblichkeit" in inline


_DOUGLASS_X = ('<div class="chapter" id="p16"><h2><a id="link2HCH0010"/> CHAPTER X</h2>'
               '<p>I had left Master Thomas\u2019s house, and went to live with Mr. Covey, on the 1st of January, 1833.</p>'
               '<p>I found Sandy Jenkins, a slave with whom I was somewhat acquainted, and told him my trouble.'
               '<a href="c.xhtml#fn-1" id="fnref-1" class="pginternal"><sup>[1]</sup></a> He told me, with great'
               ' solemnity, I must go back to Covey.</p>'
               '<p class="footnote"><a id="fn-1"/> <a href="c.xhtml#fnref-1" class="pginternal">[1]</a>\n'
               'This is the same man who gave me the roots to prevent my being whipped by Mr. Covey.</p></div>'
               '<div class="chapter" id="p17"><h2><a id="link2HCH0011"/> CHAPTER XI</h2>'
               '<p>I now come to that part of my life during which I planned my escape.</p></div>')
_NIGHTINGALE = ('<h2 id="n1">THE NIGHTINGALE; A CONVERSATIONAL POEM.</h2>'
                '<p>And hark! the Nightingale begins its song,<br/>\u201cMost musical, most melancholy\u201d '
                '<a id="footnote1tag"/><a href="n.xhtml#footnote1" class="pginternal"><sup>1</sup></a> Bird!</p>'
                '<p class="footnote"><a id="footnote1"/><b>Footnote 1</b> <a href="n.xhtml#footnote1tag" '
                'class="pginternal">(return)</a>: This passage in Milton possesses an excellence far superior.</p>'
                '<h2 id="n2">THE FEMALE VAGRANT.</h2><p>By Derwent\u2019s side my Father\u2019s cottage stood.</p>')


def test_epub_a_note_linking_back_is_one_paragraph_never_the_chapter_that_holds_it(tmp_path):
    """Two more shapes of the same notes. Narrative of the Life of Frederick Douglass (PG 23): each chapter is
    a <div> whose first link is a note mark, and the note's own link back is a "[1]" too; the chapter is not
    a note, its note is ("This is the same man who gave me the roots ..."). Lyrical Ballads (PG 9622): the
    mark's id is on an empty anchor before it, and the note opens with a label ("Footnote 1 (return): ...")."""
    nav = [("CHAPTER X", "c.xhtml#p16"), ("CHAPTER XI", "c.xhtml#p17")]
    book = load_book(make_epub(tmp_path / "d.epub", [("c.xhtml", _DOUGLASS_X)], nav=nav, title="Narrative"))
    assert [c.title for c in book.chapters] == ["Chapter X", "Chapter XI"]
    assert len(book.chapters[0].paragraphs) == 2 and "same man who gave me the roots" not in _said(book)
    nav = [("THE NIGHTINGALE; A CONVERSATIONAL POEM.", "n.xhtml#n1"), ("THE FEMALE VAGRANT.", "n.xhtml#n2")]
    book = load_book(make_epub(tmp_path / "l.epub", [("n.xhtml", _NIGHTINGALE)], nav=nav, title="Lyrical Ballads"))
    assert len(book.chapters) == 2 and "Footnote" not in _said(book) and "Milton" not in _said(book)
    assert "Milton" in _said(load_book(tmp_path / "l.epub", footnotes="inline"))


def test_epub_title_page_credit_in_capitals_printing_history_and_a_cast_list_chapter_are_not_spoken(tmp_path):
    """Oedipus, King of Thebes (PG 27673, EPUB 3, Gilbert Murray's translation), each section cut short: the nav
    lists the title page's lines (the title, "SOPHOCLES" over the translator's credit in capitals, "FOURTEENTH
    THOUSAND", the London imprint over a table of printings), then PREFACE, CHARACTERS IN THE PLAY, ARGUMENT and
    the play. The title page is no chapter and none of it is spoken (the long credit in capitals is no prose);
    the cast list under its label is the playbill, not a chapter."""
    body = (STRUCTURE / "oedipus" / "body.xhtml").read_text(encoding="utf-8")
    nav = [("OEDIPUS KING OF THEBES", "c.xhtml#pgepubid00000"), ("SOPHOCLES", "c.xhtml#pgepubid00001"),
           ("LONDON: GEORGE ALLEN & UNWIN LTD. RUSKIN HOUSE 40 MUSEUM STREET, W.C.1", "c.xhtml#pgepubid00002"),
           ("PREFACE", "c.xhtml#pgepubid00004"), ("CHARACTERS IN THE PLAY", "c.xhtml#pgepubid00012"),
           ("ARGUMENT", "c.xhtml#pgepubid00014"), ("OEDIPUS, KING OF THEBES", "c.xhtml#pgepubid00016")]
    book = load_book(make_epub(tmp_path / "o.epub", [("c.xhtml", body)], nav=nav, title="Oedipus King of Thebes"))
    assert [c.title for c in book.chapters] == ["Preface", "Argument", "Oedipus, King of Thebes"]
    said = _said(book).upper()
    for phrase in ("REGIUS PROFESSOR", "FOURTEENTH THOUSAND", "RUSKIN HOUSE", "FIRST PUBLISHED", "A SHEPHERD OF KING"):
        assert phrase not in said, phrase


_PRAGMATISM = (
    '<h1 id="t0">PRAGMATISM</h1><h3 id="t1">A New Name for Some Old Ways of Thinking</h3><h2>By William James</h2>'
    '<h4 id="t2">To the Memory of John Stuart Mill <br/> <br/> from whom I first learned the pragmatic openness of mind'
    ' <br/> and whom my fancy likes to picture as our leader were he alive to-day.</h4><hr/>'
    '<h2 id="pref">Preface</h2><p>The lectures that follow were delivered at the Lowell Institute in Boston in November'
    ' and December, 1906, and in January, 1907, at Columbia University, in New York.</p>'
    '<div class="middle"><p>CONTENTS</p>Lecture I <br/> The Present Dilemma in Philosophy <br/> Chesterton quoted.'
    ' Everyone has a philosophy. Temperament is a factor in <br/> all philosophizing. <br/> Lecture II <br/> What'
    ' Pragmatism Means <br/> The squirrel. Pragmatism as a method. History of the method. <br/> Lecture III <br/>'
    ' Some Metaphysical Problems Pragmatically Considered <br/> The problem of substance. The Eucharist.</div><hr/>'
    '<h1 id="half">PRAGMATISM</h1><hr/>'
    '<h2 id="l1">Lecture I. \u2014 The Present Dilemma in Philosophy</h2><p>In the preface to that admirable collection'
    ' of essays of his called \u2018Heretics,\u2019 Mr. Chesterton writes these words.</p>'
    '<h2 id="l2">Lecture II. \u2014 What Pragmatism Means</h2><p>Some years ago, being with a camping party in the'
    ' mountains, I returned from a solitary ramble to find everyone engaged in a ferocious metaphysical dispute.</p>'
    '<h2 id="l3">Lecture III. \u2014 Some Metaphysical Problems Pragmatically Considered</h2><p>I am now to make the'
    ' pragmatic method more familiar by giving you some illustrations of its application to particular problems.</p>')


def test_epub_a_dedication_heading_is_spoken_and_an_expanded_contents_and_half_title_are_not(tmp_path):
    """Pragmatism (PG 5116, EPUB 3), cut short: the nav lists the title ("PRAGMATISM"), its subtitle, the dedication
    (an <h4>, no text under it), the Preface (with an "EXPANDED CONTENTS" of the lectures' titles and summaries
    under a "CONTENTS" label inside it), a half-title "PRAGMATISM" and the lectures. The dedication is spoken before
    the preface's heading; the expanded contents is not spoken; no title is led by "PRAGMATISM"."""
    nav = [("PRAGMATISM", "c.xhtml#t0"), ("A New Name for Some Old Ways of Thinking", "c.xhtml#t1"),
           ("To the Memory of John Stuart Mill from whom I first learned the pragmatic openness of mind and whom my "
            "fancy likes to picture as our leader were he alive to-day.", "c.xhtml#t2"),
           ("Preface", "c.xhtml#pref"), ("PRAGMATISM", "c.xhtml#half"),
           ("Lecture I. \u2014 The Present Dilemma in Philosophy", "c.xhtml#l1"),
           ("Lecture II. \u2014 What Pragmatism Means", "c.xhtml#l2"),
           ("Lecture III. \u2014 Some Metaphysical Problems Pragmatically Considered", "c.xhtml#l3")]
    book = load_book(make_epub(tmp_path / "p.epub", [("c.xhtml", _PRAGMATISM)], nav=nav,
                               title="Pragmatism: A New Name for Some Old Ways of Thinking"))
    assert [c.title for c in book.chapters] == ["Preface", "Lecture I. \u2014 The Present Dilemma in Philosophy",
                                                "Lecture II. \u2014 What Pragmatism Means",
                                                "Lecture III. \u2014 Some Metaphysical Problems Pragmatically Considered"]
    preface = book.chapters[0]
    assert preface.opening == 1 and preface.paragraphs[0].startswith("To the Memory of John Stuart Mill")
    said = _said(book)
    assert "Chesterton quoted" not in said and "The squirrel" not in said and "CONTENTS" not in said


_THINKETH = (
    '<h1 id="a0">AS A MAN THINKETH</h1><h2 id="a1">JAMES ALLEN</h2><h4 id="a2">Author of "From Passion to Peace"</h4>'
    '<p class="poem"><i>Mind is the Master power that moulds and makes,<br/> And Man is Mind, and evermore he takes'
    '<br/> The tool of Thought, and, shaping what he wills,<br/> Brings forth a thousand joys, a thousand ills:\u2014'
    '</i></p><h4 id="a3">Authorized Edition<br/><br/>New York</h4><h2 id="a4">CONTENTS</h2>'
    '<h4 id="a5"><a href="c.xhtml#a8">THOUGHT AND CHARACTER</a><br/><a href="c.xhtml#a9">SERENITY</a></h4>'
    '<h3 id="a6">FOREWORD</h3><p>THIS little volume (the result of meditation and experience) is not intended as an'
    ' exhaustive treatise on the much-written-upon subject of the power of thought.</p>'
    '<h3 id="a8">THOUGHT AND CHARACTER</h3><p>THE aphorism, "As a man thinketh in his heart so is he," not only'
    ' embraces the whole of a man\'s being, but is so comprehensive as to reach out to every condition.</p>'
    '<h3 id="a9">SERENITY</h3><p>CALMNESS of mind is one of the beautiful jewels of wisdom. It is the result of long'
    ' and patient effort in self-control.</p>')


def test_epub_an_author_of_credit_and_a_contents_label_title_nothing_and_a_title_page_verse_is_spoken(tmp_path):
    """As a Man Thinketh (PG 4507, EPUB 3), cut short: the nav lists every title-page line, the title page's
    'Author of "From Passion to Peace"' (over a verse), the edition line, "CONTENTS" (whose entries are one
    heading of links), FOREWORD and the essays. The credit is no chapter and not spoken; the verse opens the
    foreword; "Contents" leads no title."""
    nav = [("AS A MAN THINKETH", "c.xhtml#a0"), ("JAMES ALLEN", "c.xhtml#a1"),
           ('Author of "From Passion to Peace"', "c.xhtml#a2"), ("Authorized Edition New York", "c.xhtml#a3"),
           ("CONTENTS", "c.xhtml#a4", [("THOUGHT AND CHARACTER SERENITY", "c.xhtml#a5"), ("FOREWORD", "c.xhtml#a6")]),
           ("THOUGHT AND CHARACTER", "c.xhtml#a8"), ("SERENITY", "c.xhtml#a9")]
    book = load_book(make_epub(tmp_path / "t.epub", [("c.xhtml", _THINKETH)], nav=nav, title="As a man thinketh"))
    assert [c.title for c in book.chapters] == ["Foreword", "Thought and Character", "Serenity"]
    said = _said(book)
    assert "Passion to Peace" not in said and "Contents" not in said
    assert book.chapters[0].paragraphs[0].startswith("Mind is the Master power")
