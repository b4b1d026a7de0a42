"""Segmentation: sentences, clause and word splits, and nothing lost or duplicated."""

import pytest

from jobs.phonemize import Phonemizer
from jobs.segment import PauseKind, Segmenter, split_sentences


@pytest.fixture(scope="module")
def phonemizer():
    from core.voice import resolve_voice

    return Phonemizer(resolve_voice())


def words(texts):
    return " ".join(texts).split()


@pytest.mark.parametrize("text,expected", [
    ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
    # abbreviations and initials are not sentence ends
    ("Mr. Smith met Dr. Who. J. R. R. Tolkien wrote.", ["Mr. Smith met Dr. Who.", "J. R. R. Tolkien wrote."]),
    # closing quotes stay with their sentence
    ('"Oh dear!" said Alice. \u201cI shall be late!\u201d', ['"Oh dear!"', "said Alice.", "\u201cI shall be late!\u201d"]),
    ("no punctuation at all", ["no punctuation at all"]),
], ids=["basic", "abbreviations", "quotes", "no-punctuation"])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_long_sentence_splits_at_clauses_first(phonemizer):
    text = ", ".join(f"clause number {i} of a long sentence" for i in range(40)) + "."
    pieces = Segmenter(phonemizer, 100).split_long(text)
    assert len(pieces) > 1
    assert all(len(ph.symbols) <= 100 for _, ph in pieces)
    # each piece but the last ends at a clause boundary (a comma), not mid-clause
    assert all(t.endswith(",") for t, _ in pieces[:-1])
    assert words(t for t, _ in pieces) == text.split()


def test_long_line_without_punctuation_splits_between_words(phonemizer):
    # stands in for the "single 5 MB line" case at test scale (the CLI test runs a bigger one)
    text = " ".join(f"word{i % 50}" for i in range(3000))
    pieces = Segmenter(phonemizer, 120).split_long(text)
    assert all(len(ph.symbols) <= 120 for _, ph in pieces)
    assert words(t for t, _ in pieces) == text.split()


def test_one_giant_word_is_cut_by_characters(phonemizer):
    text = "a" * 5000
    pieces = Segmenter(phonemizer, 100).split_long(text)
    assert "".join(t for t, _ in pieces) == text
    assert all(len(ph.symbols) <= 100 for _, ph in pieces)


def test_chapter_utterances_keep_every_word_in_order(phonemizer):
    from types import SimpleNamespace

    paragraphs = [
        "Alice was beginning to get very tired. So she was considering, in her own mind, what to do.",
        "It was all very well to say \u201cDrink me,\u201d but the wise little Alice was not going to do that in a hurry; "
        "\u201cno, I\u2019ll look first,\u201d she said, \u201cand see whether it\u2019s marked \u2018poison\u2019 or not\u201d "
        + "and so on " * 80 + ".",
    ]
    ch = SimpleNamespace(index=3, title="Chapter III. A Caucus-Race", paragraphs=paragraphs)
    utts = Segmenter(phonemizer, 150).chapter_utterances(0, ch)
    assert [u.utterance_index for u in utts] == list(range(len(utts)))
    assert words(u.text for u in utts) == ch.title.split() + words(paragraphs)
    assert utts[0].pause is PauseKind.TITLE and utts[0].paragraph_index == -1
    # pauses: last utterance of each paragraph gets the paragraph pause
    last_of_par = {}
    for u in utts:
        last_of_par[u.paragraph_index] = u
    assert last_of_par[0].pause is PauseKind.PARAGRAPH and last_of_par[1].pause is PauseKind.PARAGRAPH
    assert any(u.pause is PauseKind.CLAUSE for u in utts if u.paragraph_index == 1)
    assert all(len(u.phoneme_ids) <= 2 * 150 + 3 for u in utts)


def test_unspeakable_text_is_marked_not_dropped(phonemizer):
    ph = phonemizer("...")
    assert not ph.speakable
    assert phonemizer("Hello").speakable


def test_clause_split_never_cuts_inside_a_token(phonemizer):
    # "$1,234.56" read as "one, two hundred..." would change the meaning; dashes inside words stay too
    text = "The sum of $1,234,567.89 was well—known to all, " * 12 + "and that was that."
    pieces = Segmenter(phonemizer, 150).split_long(text)
    assert len(pieces) > 1
    assert words(t for t, _ in pieces) == text.split()


# --- Issue 28: section headings and scene breaks (Chapter.kinds) ----------------------------------

def _chapter(paragraphs, kinds=None, title="III. The Red-Headed League"):
    from jobs.ingest.book import Chapter

    return Chapter(3, title, paragraphs, kinds=kinds)


def test_a_scene_break_is_not_spoken_and_becomes_the_section_pause(phonemizer):
    ch = _chapter(["He left. The door shut.", "* * *", "Morning came."], kinds=["text", "break", "text"])
    utts = Segmenter(phonemizer, 150).chapter_utterances(0, ch)
    assert [u.text for u in utts] == ["III. The Red-Headed League", "He left.", "The door shut.", "Morning came."]
    assert [u.pause for u in utts] == [PauseKind.TITLE, PauseKind.SENTENCE, PauseKind.SECTION, PauseKind.PARAGRAPH]
    assert [u.paragraph_index for u in utts] == [-1, 0, 0, 2]


@pytest.mark.parametrize("marker", ["* * *", "***", "*", "⁂", "~ ~ ~"])
def test_a_marker_paragraph_is_a_break_without_kinds(phonemizer, marker):
    """A chapter whose kinds are None (older job.json files, loaders that set none) is all text,
    except a paragraph that is only a scene-break marker."""
    ch = _chapter(["It rained.", marker, "It stopped."])
    utts = Segmenter(phonemizer, 150).chapter_utterances(0, ch)
    assert [u.text for u in utts] == [ch.title, "It rained.", "It stopped."]
    assert utts[1].pause is PauseKind.SECTION and utts[2].pause is PauseKind.PARAGRAPH


def test_a_section_heading_is_spoken_as_a_heading_between_section_pauses(phonemizer):
    spoken = []

    def speak(text, heading):
        spoken.append((text, heading))
        from jobs.normalize import normalize
        return normalize(text, heading)

    ch = _chapter(["I.", "To Sherlock Holmes she is always the woman.", "II.", "At three o'clock I was there."],
                  kinds=["heading", "text", "heading", "text"], title="A Scandal in Bohemia")
    utts = Segmenter(phonemizer, 150, speak=speak).chapter_utterances(0, ch)
    assert [u.text for u in utts] == [ch.title] + ch.paragraphs
    assert [u.pause for u in utts] == [PauseKind.TITLE, PauseKind.SECTION, PauseKind.SECTION,
                                       PauseKind.SECTION, PauseKind.PARAGRAPH]
    assert ("I.", True) in spoken and ("II.", True) in spoken  # read as headings ("one.", "two.")
    assert utts[1].spoken_text == "one." and utts[3].spoken_text == "two."


def test_a_break_first_in_a_chapter_keeps_the_title_pause_and_none_is_lost(phonemizer):
    ch = _chapter(["", "* * *", "Text."], kinds=["break", "break", "text"])
    utts = Segmenter(phonemizer, 150).chapter_utterances(0, ch)
    assert [(u.text, u.pause) for u in utts] == [(ch.title, PauseKind.TITLE), ("Text.", PauseKind.PARAGRAPH)]
    untitled = _chapter(["* * *", "Text."], kinds=["break", "text"], title="")
    assert [u.text for u in Segmenter(phonemizer, 150).chapter_utterances(0, untitled)] == ["Text."]


def test_planning_pieces_carry_kinds_and_never_start_at_a_break_or_heading(phonemizer):
    """The planning pool cuts big chapters into pieces: a break or heading stays with the utterance
    before it, so the parallel plan has the serial plan's pauses."""
    from dataclasses import replace

    from jobs.segment_pool import _join, _pieces

    paragraphs, kinds = [], []
    for i in range(12):
        paragraphs += [f"Paragraph {i} has some words in it.", "* * *", f"Part {i}."]
        kinds += ["text", "break", "heading"]
    ch = _chapter(paragraphs, kinds=kinds)
    pieces = _pieces(ch, 60)
    assert len(pieces) > 3
    assert all(piece.kinds == kinds[start:start + len(piece.paragraphs)] for piece, start in pieces)
    assert all(piece.kinds[0] == "text" for piece, start in pieces if start > 0)
    seg = Segmenter(phonemizer, 150)
    serial = seg.chapter_utterances(0, ch)
    joined = _join([(seg.chapter_utterances(0, piece), start) for piece, start in pieces])
    assert [replace(u) for u in joined] == serial


@pytest.mark.parametrize("text, expected", [
    ("Say no. It is late.", ["Say no.", "It is late."]),  # "no." ends a sentence unless a number follows
    ("He lives at No. 5 Baker Street. Yes.", ["He lives at No. 5 Baker Street.", "Yes."]),
    ("See nos. 3 and 4. Then go.", ["See nos. 3 and 4.", "Then go."]),
    ("3 in. of rain fell. It was wet.", ["3 in. of rain fell.", "It was wet."]),  # a unit's full stop
    ("It fell 3 in. Then it stopped.", ["It fell 3 in.", "Then it stopped."]),
    ("A board 2 ft. wide and 6 lbs. in weight. Fine.", ["A board 2 ft. wide and 6 lbs. in weight.", "Fine."]),
    ("He came in. She left.", ["He came in.", "She left."]),
])
def test_sentence_ends_around_numbers_and_units(text, expected):
    assert split_sentences(text) == expected
