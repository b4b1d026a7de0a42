"""Opening matter (``jobs.ingest.opening``): a dedication, an epigraph or a short note printed before a book's
first heading is spoken before the first chapter's title, not as an untitled chapter of its own; longer prose
and a piece under its own title stay chapters. The excerpts are copied from the books named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from jobs.ingest import Chapter, load_book
from jobs.segment import PauseKind, Segmenter
from jobs.segment_pool import _pieces, segment_chapters

STRUCTURE = Path(__file__).resolve().parent.parent / "data" / "structure"
SILAS = STRUCTURE / "silas-marner-excerpt.txt"  # Silas Marner (PG 550): a Wordsworth epigraph and its source
# line between the title page and PART ONE / CHAPTER I
THIRTY_NINE = STRUCTURE / "thirty-nine-steps-excerpt.txt"  # The Thirty-Nine Steps (PG 558): "TO" / "THOMAS
# ARTHUR NELSON" / "(LOTHIAN AND BORDER HORSE)" / "My Dear Tommy," / a letter signed "J.B.", then CONTENTS
FOUR_MILLION = STRUCTURE / "four-million-excerpt.txt"  # The Four Million (PG 2776): an unheaded foreword of one
# paragraph (55 words) before the contents list and the first story
NORTH_OF_BOSTON = STRUCTURE / "north-of-boston-excerpt.txt"  # North of Boston (PG 3026): a dedication, then the
# prefatory poem THE PASTURE under its title in capitals, before the contents list
MORNING_BELLS = STRUCTURE / "morning-bells-excerpt.txt"  # Morning Bells: a dedication, the contents, then the
# introduction (124 words of prose) under the book's own title
MIDDLEMARCH = STRUCTURE / "middlemarch-excerpt.txt"  # Middlemarch (PG 145): a one-line dedication, then PRELUDE


def _opening(ch: Chapter) -> list[str]:
    return ch.paragraphs[:ch.opening]


def test_a_dedication_is_spoken_before_the_first_chapters_title():
    book = load_book(MIDDLEMARCH)
    first = book.chapters[0]
    assert first.title == "Prelude" and first.index == 1
    assert _opening(first) == ["To my dear Husband, George Henry Lewes, in this nineteenth year of our blessed union."]
    assert first.paragraphs[1].startswith("Who that cares much to know the history of man")


def test_an_epigraph_with_its_source_line_opens_the_first_chapter():
    book = load_book(SILAS)
    assert [c.title for c in book.chapters] == ["PART ONE. CHAPTER I", "CHAPTER II"]
    first = book.chapters[0]
    assert _opening(first) == ['"A child, more than all other gifts That earth can offer to declining man, Brings hope '
                               'with it, and forward-looking thoughts." --WORDSWORTH.']
    assert first.paragraphs[first.opening].startswith("In the days when the spinning-wheels hummed busily")


def test_a_dedicatory_letter_under_an_address_in_lines_opens_the_first_chapter():
    book = load_book(THIRTY_NINE)
    assert [c.title for c in book.chapters] == ["CHAPTER ONE. The Man Who Died",
                                                "CHAPTER TWO. The Milkman Sets Out on his Travels"]
    first = book.chapters[0]
    assert _opening(first)[:4] == ["TO", "THOMAS ARTHUR NELSON", "(LOTHIAN AND BORDER HORSE)", "My Dear Tommy,"]
    assert _opening(first)[-1] == "J.B."
    assert first.paragraphs[first.opening].startswith("I returned from the City about three o'clock")


def test_a_short_unheaded_foreword_opens_the_first_story():
    book = load_book(FOUR_MILLION)
    assert [c.title for c in book.chapters] == ["Tobin's Palm", "The Gift of the Magi"]
    first = book.chapters[0]
    assert first.opening == 1 and first.paragraphs[0].startswith("Not very long ago some one invented the assertion")
    assert first.paragraphs[1].startswith("Tobin and me, the two of us")


def test_a_prefatory_poem_under_its_own_title_is_a_chapter_titled_by_that_line():
    book = load_book(NORTH_OF_BOSTON)
    assert [(c.title, c.opening) for c in book.chapters] == [
        ("The Pasture", 1), ("Mending Wall", 0), ("The Death of the Hired Man", 0)]
    first = book.chapters[0]  # the dedication is spoken before the poem's title, the title line not again
    assert first.paragraphs[0] == "TO E. M. F. THIS BOOK OF PEOPLE"
    assert first.paragraphs[1].startswith("I'M going out to clean the pasture spring")


def test_an_introduction_of_more_than_a_hundred_words_of_prose_stays_a_chapter():
    book = load_book(MORNING_BELLS)
    first = book.chapters[0]
    assert first.title == "" and first.opening == 0 and book.chapters[1].opening == 0
    assert first.paragraphs[1].startswith("Most of the readers of this little book")


def test_the_opening_is_spoken_between_the_announcement_and_the_title(voice):
    from jobs.phonemize import Phonemizer

    book = load_book(SILAS)
    utts = Segmenter(Phonemizer(voice), 150).chapter_utterances(0, book.chapters[0], announce=book.announcement())
    order = [u.paragraph_index for u in utts]
    assert order[0] == -2 and utts[0].text.startswith("Silas Marner")
    title_at = order.index(-1)
    assert set(order[1:title_at]) == {0} and " ".join(u.text for u in utts[1:title_at]).startswith('"A child')
    assert utts[title_at - 1].pause == PauseKind.SECTION  # the section pause before the chapter's heading
    assert " ".join(u.text for u in utts if u.paragraph_index == -1) == "PART ONE. CHAPTER I"
    assert utts[title_at + 1].paragraph_index == 1 and utts[title_at + 1].text.startswith("In the days")
    assert [u.utterance_index for u in utts] == list(range(len(utts)))


def test_pieces_put_the_title_where_the_opening_ends():
    ch = Chapter(1, "CHAPTER I.", ["a" * 50, "b" * 50, "c" * 50, "d" * 10, "e" * 200], opening=2)
    pieces = _pieces(ch, 60)
    assert [(p.title, p.opening, start) for p, start in pieces] == [
        ("", 0, 0), ("CHAPTER I.", 1, 1), ("", 0, 3), ("", 0, 4)]  # never cut between the opening and the title
    assert [para for p, _ in pieces for para in p.paragraphs] == ch.paragraphs


def test_parallel_segmentation_of_an_opening_equals_serial(voice):
    book = load_book(THIRTY_NINE)
    chapters = [(0, ch, book.announcement() if i == 0 else None) for i, ch in enumerate(book.chapters)]
    serial = segment_chapters(voice, 400, chapters, workers=1)
    parallel = segment_chapters(voice, 400, chapters, workers=2, min_chars=0, piece_chars=300)
    assert len(_pieces(book.chapters[0], 300)) > 2, "the opening was cut into pieces"
    assert parallel == serial
    order = [u.paragraph_index for u in serial[0]]
    assert order[0] == -2 and order.index(-1) > 1 and order[order.index(-1) + 1] == book.chapters[0].opening


def test_opening_is_kept_in_the_job_dict_and_an_old_dict_loads():
    ch = Chapter(1, "Prelude", ["To my dear Husband.", "Who that cares much."], opening=1)
    assert Chapter.from_dict(ch.to_dict()) == ch
    old = {"index": 1, "title": "Prelude", "paragraphs": ["Who that cares much."]}
    assert Chapter.from_dict(old).opening == 0 and "opening" not in Chapter.from_dict(old).to_dict()
    for bad in (2, -1, "1", True):
        with pytest.raises(ValueError, match="opening"):
            Chapter.from_dict({**ch.to_dict(), "opening": bad})


def test_plan_shows_the_opening_before_the_title():
    from commands.outline_view import outline_json, outline_lines
    from jobs.ingest.outline import outline_entry

    book = load_book(SILAS)
    chapters = [{"index": c.index, "title": c.title, "file": f"{c.index:02d}.flac", "selected": True, **outline_entry(c)}
                for c in book.chapters]
    assert chapters[0]["first_words"].startswith("In the days when the spinning-wheels")
    assert chapters[0]["opening"] == {"paragraphs": 1, "first_words": '"A child, more than all other gifts That earth can'}
    job = SimpleNamespace(rows=[], scales=SimpleNamespace(length_scale=1.0), meta={"books": [
        {"title": book.title, "author": book.author, "path": "silas.txt", "format": "txt", "chapters": chapters}]})
    lines = outline_lines(job)
    assert lines[2].lstrip(" -").startswith("1  PART ONE. CHAPTER I")
    assert lines[3].strip() == 'before the title: ""A child, more than all other gifts That earth can..."'
    assert outline_json(job)["books"][0]["outline"][0]["chapters"][1]["opening"] is None


def test_the_scorer_matches_a_chapter_from_its_title_and_speaks_its_opening_first():
    from bench.structure_score import Predicted, score

    truth = {"slug": "x", "title": "Silas Marner", "not_spoken": ["forward-looking thoughts"],
             "chapters": [{"title": "CHAPTER I", "first_words": "In the days when the"},
                          {"title": "CHAPTER II", "first_words": "Even people whose lives have"}]}
    pred = [Predicted("PART ONE. CHAPTER I", ["A child brings forward-looking thoughts.", "In the days when the wheels."], 1),
            Predicted("CHAPTER II", ["Even people whose lives have been made various."])]
    s = score(truth, "Silas Marner, by George Eliot.", pred)
    assert (s.matched, s.predicted_chapters) == (2, 2)
    assert s.front_matter_spoken == ["forward-looking thoughts"]  # the opening is spoken
    # a truth chapter that starts at the opening matter is not found there: chapters start at their titles
    s = score({**truth, "chapters": [{"title": "", "first_words": "A child brings forward looking"}]},
              None, pred)
    assert s.matched == 0


def test_a_planned_job_speaks_the_opening_before_the_first_heading_and_resumes(tmp_path):
    import dataclasses
    import json

    from jobs.config import JobConfig
    from jobs.job import load_job
    from jobs.prepare import prepare_job

    job = prepare_job([SILAS], tmp_path / "job", JobConfig())
    first = [r.utt for r in job.rows if r.utt.chapter_index == 1]
    order = [u.paragraph_index for u in sorted(first, key=lambda u: u.utterance_index)]
    assert order[0] == -2 and order[1] == 0 and order.index(-1) > 1  # announcement, epigraph, then the heading
    meta = json.loads((tmp_path / "job" / "job.json").read_text())["books"][0]["chapters"]
    assert [(c["title"], c.get("opening", {}).get("paragraphs")) for c in meta] == [
        ("PART ONE. CHAPTER I", 1), ("CHAPTER II", None)]
    resumed = load_job(tmp_path / "job")  # resume reads job.json and the plan as they are
    assert resumed.job_id == job.job_id and len(resumed.rows) == len(job.rows)
    assert prepare_job([SILAS], tmp_path / "job", JobConfig()).job_id == job.job_id
    # --chapters counts the chapters a listener sees: 2 is CHAPTER II, and nothing of the opening is planned there
    second = prepare_job([SILAS], tmp_path / "two", dataclasses.replace(JobConfig(), chapters="2"))
    assert {r.utt.chapter_index for r in second.rows} == {2}
    assert not any("forward-looking" in r.utt.text for r in second.rows)


TREASURE_ISLAND = [  # Treasure Island (its first paragraphs as loaded): a dedication, then a titled address in verse
    "To S.L.O., an American gentleman in accordance with whose classic taste the following narrative has been "
    "designed, it is now, in return for numerous delightful hours, and with the kindest wishes, dedicated by his "
    "affectionate friend, the author.",
    "TO THE HESITATING PURCHASER",
    "If sailor tales to sailor tunes, Storm and adventure, heat and cold, If schooners, islands, and maroons, And "
    "buccaneers, and buried gold, And all the old romance, retold Exactly in the ancient way, Can please, as me they "
    "pleased of old, The wiser youngsters of today:",
    "\u2014So be it, and fall on! If not, If studious youth no longer crave, His ancient appetites forgot, Kingston, or "
    "Ballantyne the brave, Or Cooper of the wood and wave: So be it, also! And may I And all my pirates share the grave "
    "Where these and their creations lie!"]
GREENMANTLE = [  # Greenmantle: a dedicatory letter under an address set in lines, unsigned (268 words of prose)
    "To", "Caroline Grosvenor",
    "During the past year, in the intervals of an active life, I have amused myself with constructing this tale. It "
    "has been scribbled in every kind of odd place and moment--in England and abroad, during long journeys, in "
    "half-hours between graver tasks; and it bears, I fear, the mark of its gipsy begetting. But it has amused me to "
    "write, and I shall be well repaid if it amuses you--and a few others--to read.",
    "Let no man or woman call its events improbable. The war has driven that word from our vocabulary, and melodrama "
    "has become the prosiest realism. Things unimagined before happen daily to our friends by sea and land. The one "
    "chance in a thousand is habitually taken, and as often as not succeeds. Coincidence, like some new Briareus, "
    "stretches a hundred long arms hourly across the earth. Some day, when the full history is written--sober history "
    "with ample documents--the poor romancer will give up business and fall to reading Miss Austen in a hermitage.",
    "The characters of the tale, if you think hard, you will recall. Sandy you know well. That great spirit was last "
    "heard of at Basra, where he occupies the post that once was Harry Bullivant's. Richard Hannay is where he longed "
    "to be, commanding his battalion on the ugliest bit of front in the West. Mr John S. Blenkiron, full of honour and "
    "wholly cured of dyspepsia, has returned to the States, after vainly endeavouring to take Peter with him. As for "
    "Peter, he has attained the height of his ambition. He has shaved his beard and joined the Flying Corps."]


def test_verse_and_an_address_in_lines_are_opening_matter_and_plain_prose_past_a_hundred_words_is_not():
    from jobs.ingest.opening import _letter, _verse, opening_matter

    assert [_verse(p) for p in TREASURE_ISLAND] == [False, False, True, True]
    assert opening_matter(TREASURE_ISLAND)  # a dedication and verse: no plain prose
    assert _letter(GREENMANTLE) and opening_matter(GREENMANTLE)  # its prose is the letter under "To"
    assert not opening_matter(GREENMANTLE[2:])  # the same prose with no address: an unheaded opening, a chapter


HUCK = STRUCTURE / "huckleberry-finn-excerpt.txt"  # Adventures of Huckleberry Finn (PG 76): the title lines,
# "NOTICE" over three sentences signed "BY ORDER OF THE AUTHOR, ...", "EXPLANATORY" over a note signed "THE
# AUTHOR.", the half-title with its scene line, then CHAPTER I


def test_an_authors_notice_and_explanatory_note_under_their_labels_are_chapters_of_their_own():
    book = load_book(HUCK)
    titles = [c.title for c in book.chapters]
    assert titles[:3] == ["Notice", "Explanatory", "CHAPTER I."]
    notice = book.chapters[0]
    assert notice.opening == 0 and notice.paragraphs == [
        "PERSONS attempting to find a motive in this narrative will be prosecuted; persons attempting to find a "
        "moral in it will be banished; persons attempting to find a plot in it will be shot.",
        "BY ORDER OF THE AUTHOR, Per G.G., Chief of Ordnance."]
    assert book.chapters[1].paragraphs[0].startswith("IN this book a number of dialects are used")
    assert [c.index for c in book.chapters] == list(range(1, len(book.chapters) + 1))


def test_a_half_title_with_its_scene_line_before_the_first_chapter_is_not_spoken():
    """The header's title is "Adventures of Huckleberry Finn, Complete"; the half-title prints it without
    ", Complete", with a line of scene and time under it, over CHAPTER I."""
    book = load_book(HUCK)
    explanatory = book.chapters[1]
    assert explanatory.paragraphs[-1] == "THE AUTHOR."
    said = " ".join(p for c in book.chapters for p in c.paragraphs)
    assert "ADVENTURES OF HUCKLEBERRY FINN" not in said and "Mississippi Valley" not in said


def test_epub_a_first_chapter_headed_by_a_dedications_address_opens_the_next_chapter(tmp_path):
    """She Stoops to Conquer (PG 383, EPUB 3): the dedicatory letter under its own heading "To Samuel Johnson,
    LL.D." (listed in the nav) is no chapter: the heading and the letter are spoken as the opening of the
    PROLOGUE, the first chapter; a first chapter headed "To the Reader" (a preface) stays a chapter."""
    from tests.jobs.test_ingest import make_epub

    letter = ('<h4 id="d">To Samuel Johnson, LL.D.</h4>'
              '<p>Dear Sir,\u2014By inscribing this slight performance to you, I do not mean so much to compliment you '
              'as myself. It may do me some honour to inform the public, that I have lived many years in intimacy '
              'with you. It may serve the interests of mankind also to inform them, that the greatest wit may be '
              'found in a character, without impairing the most unaffected piety.</p>'
              '<p>I have, particularly, reason to thank you for your partiality to this performance. The undertaking '
              'a comedy not merely sentimental was very dangerous; and Mr. Colman, who saw this piece in its various '
              'stages, always thought it so. However, I ventured to trust it to the public; and, though it was '
              'necessarily delayed till late in the season, I have every reason to be grateful.</p>'
              '<p>I am, dear Sir, your most sincere friend and admirer,</p><p>OLIVER GOLDSMITH.</p>')
    rest = ('<h2 id="p">PROLOGUE,</h2><p>Enter MR. WOODWARD, dressed in black, and holding a handkerchief to his '
            'eyes.</p><p>Excuse me, sirs, I pray\u2014I can\u2019t yet speak\u2014 I\u2019m crying now\u2014and have '
            'been all the week.</p>'
            '<h2 id="a1">ACT THE FIRST.</h2><p>SCENE\u2014A Chamber in an old-fashioned House.</p>'
            '<p>Enter MRS. HARDCASTLE and MR. HARDCASTLE.</p>'
            '<p>MRS. HARDCASTLE. I vow, Mr. Hardcastle, you\u2019re very particular. Is there a creature in the whole '
            'country but ourselves, that does not take a trip to town now and then, to rub off the rust a little?</p>')
    nav = [("To Samuel Johnson, LL.D.", "c.xhtml#d"), ("PROLOGUE,", "c.xhtml#p"), ("ACT THE FIRST.", "c.xhtml#a1")]
    book = load_book(make_epub(tmp_path / "stoops.epub", [("c.xhtml", letter + rest)], nav=nav,
                               title="She Stoops to Conquer"))
    assert [c.title for c in book.chapters] == ["Prologue,", "Act the First."]
    first = book.chapters[0]
    assert _opening(first)[0] == "To Samuel Johnson, LL.D."
    assert _opening(first)[1].startswith("Dear Sir,\u2014By inscribing") and _opening(first)[-1] == "OLIVER GOLDSMITH."
    assert first.paragraphs[first.opening].startswith("Enter MR. WOODWARD")

    preface = letter.replace("To Samuel Johnson, LL.D.", "To the Reader")
    nav[0] = ("To the Reader", "c.xhtml#d")
    book = load_book(make_epub(tmp_path / "reader.epub", [("c.xhtml", preface + rest)], nav=nav,
                               title="She Stoops to Conquer"))
    assert [c.title for c in book.chapters] == ["To the Reader", "Prologue,", "Act the First."]
