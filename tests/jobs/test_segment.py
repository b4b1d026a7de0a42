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
