"""A dictionary's section letters ("A" ... "Z") are said as letters, not as a heading's roman numerals."""

from pathlib import Path

import pytest

from jobs.ingest import _mark_letter_titles, load_book
from jobs.ingest.book import Chapter
from jobs.lexicon import make_speak
from jobs.phonemize import Phonemizer
from jobs.segment import Segmenter
from jobs.segment_pool import _pieces

DICTIONARY = Path(__file__).resolve().parent.parent / "data" / "structure" / "devils-dictionary-excerpt.txt"


@pytest.fixture(scope="module")
def phonemizer():
    from core.voice import resolve_voice

    return Phonemizer(resolve_voice())


def _title_said(phonemizer, chapter: Chapter) -> str:
    utt = Segmenter(phonemizer, 400, speak=make_speak(None, True)).chapter_utterances(0, chapter)[0]
    assert utt.paragraph_index == -1
    return utt.spoken_text or utt.text


def test_the_section_letters_of_a_dictionary_are_said_as_letters(phonemizer):
    """The Devil's Dictionary (PG 972): its sections are headed "A" ... "Z"; "C", "D", "I", "L", "M", "V" and
    "X" among them were said as roman numerals ("one hundred", "five hundred", "one") before."""
    book = load_book(DICTIONARY)
    letters = {c.title: c for c in book.chapters if len(c.title) == 1}
    assert len(letters) >= 5 and all(c.title_is_letter for c in letters.values())
    assert not next(c for c in book.chapters if len(c.title) > 1).title_is_letter  # the preface
    for title, chapter in letters.items():
        said = _title_said(phonemizer, chapter)
        assert not any(ch.isdigit() for ch in said) and "hundred" not in said and said not in ("one", "five", "ten")
    if "C" in letters:
        assert _title_said(phonemizer, letters["C"]) == "C"


def test_roman_numerals_stay_numbers(tmp_path, phonemizer):
    """Bare numerals "I" ... "VI" set apart become "Chapter V." and are still said "Chapter five."; single
    letters that do not run through the alphabet (roman numerals "I", "V", "X", "L", "C" as titles) are not
    marked; five that do ("A" ... "E") are."""
    body = "\n\n\n".join(f"{r}\n\n{'It was a quiet day in the village, and nothing much happened. ' * 6}"
                         for r in ("I", "II", "III", "IV", "V", "VI"))
    p = tmp_path / "story.txt"
    p.write_text("THE QUIET VILLAGE\n\nby A. Writer\n\n\n" + body + "\n", encoding="utf-8")
    book = load_book(p)
    assert not any(c.title_is_letter for c in book.chapters)
    five = next(c for c in book.chapters if c.title == "Chapter V.")
    assert _title_said(phonemizer, five) == "Chapter five."

    def marked(titles):
        chapters = [Chapter(i + 1, t, ["Text."]) for i, t in enumerate(titles)]
        _mark_letter_titles(chapters)
        return [c.title_is_letter for c in chapters]

    assert not any(marked(["I", "V", "X", "L", "C"]))
    assert not any(marked(["A", "B", "C", "D"]))  # four: too few to be a run
    assert marked(["Preface", "A", "B", "C", "D", "E"]) == [False] + [True] * 5
    assert not any(marked(["A", "C", "B", "D", "E"]))  # out of order


def test_the_mark_survives_the_job_record_and_long_chapter_pieces():
    ch = Chapter(3, "C", ["CAABA, n. A large stone. " * 40, "CABBAGE, n. A familiar vegetable. " * 40],
                 title_is_letter=True)
    assert Chapter.from_dict(ch.to_dict()).title_is_letter
    assert "title_is_letter" not in Chapter(1, "I", ["Text."]).to_dict()  # unchanged records for other books
    pieces = _pieces(ch, 600)
    assert len(pieces) > 1 and pieces[0][0].title_is_letter and not pieces[1][0].title_is_letter
