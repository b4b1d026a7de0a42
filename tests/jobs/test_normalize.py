"""Text normalisation (jobs.normalize): each case of issue 16's list, and that no word is lost."""

import re

import pytest

from jobs.normalize import normalize, roman_to_int, split_phoneme_blocks
from jobs.segment import split_sentences


@pytest.mark.parametrize("text, want", [
    # currency
    ("It cost $5.", "It cost five dollars."),
    ("It cost $1.", "It cost one dollar."),
    ("a £20 note", "a twenty pounds note"),
    ("$5.25 each", "five dollars and twenty-five cents each"),
    ("£3.50", "three pounds and fifty pence"),
    ("€1,200", "one thousand two hundred euros"),
    ("$1.5 million", "one point five million dollars"),
    # dates
    ("On 12/25/2023 we ate.", "On December twenty-fifth, twenty twenty-three we ate."),
    ("On 25/12/2023 we ate.", "On December twenty-fifth, twenty twenty-three we ate."),
    ("2023-12-25", "December twenty-fifth, twenty twenty-three"),
    ("December 25, 2023", "December twenty-fifth, twenty twenty-three"),
    ("on 4 July 1776", "on the fourth of July seventeen seventy-six"),
    ("Jan. 3rd", "January third"),
    # times
    ("at 3:30 p.m. sharp", "at three thirty P M sharp"),
    ("at 10:05", "at ten oh five"),
    ("at 6:00", "at six o'clock"),
    ("Wake at 7 a.m.", "Wake at seven A M."),
    # years, in one style whatever the century
    ("In 1999 and 1887.", "In nineteen ninety-nine and eighteen eighty-seven."),
    ("in 1905", "in nineteen oh-five"),
    ("in 2023", "in twenty twenty-three"),
    ("the 1990s", "the nineteen nineties"),
    ("page 1234", "page one thousand two hundred and thirty-four"),
    # numbers and ordinals
    ("the 21st century", "the twenty-first century"),
    ("his 2nd and 3rd tries", "his second and third tries"),
    ("1,234 people", "one thousand two hundred and thirty-four people"),
    ("pi is 3.14", "pi is three point one four"),
    ("50% off", "fifty percent off"),
    ("pages 10–20", "pages ten to twenty"),
    ("agent 007", "agent zero zero seven"),
    # roman numerals in context
    ("Louis XIV was king.", "Louis the fourteenth was king."),
    ("Henry VIII and Elizabeth II", "Henry the eighth and Elizabeth the second"),
    ("read Chapter II and Part IV", "read Chapter two and Part four"),
    ("World War II", "World War two"),
    ("I think I can.", "I think I can."),
    ("Malcolm X spoke.", "Malcolm X spoke."),
    # abbreviations by context
    ("St. Paul's church", "Saint Paul's church"),
    ("on Baker St. near the park", "on Baker Street near the park"),
    ("Dr. Watson came.", "Doctor Watson came."),
    ("on Mulholland Dr. at night", "on Mulholland Drive at night"),
    ("Mt. Everest", "Mount Everest"),
    ("Mr. and Mrs. Smith", "Mister and Missus Smith"),
    ("fruit, e.g. apples", "fruit, for example apples"),
    ("one thing, i.e. this", "one thing, that is this"),
    ("cats, dogs, etc.", "cats, dogs, et cetera."),
    ("The U.N. met.", "The U N met."),
    # URLs and e-mail
    ("See https://www.example.com/books/ now", "See W W W dot example dot com slash books now"),
    ("Write to jane.doe@example.org.", "Write to jane dot doe at example dot org."),
    # footnote markers dropped
    ("as he said.[1] Then", "as he said. Then"),
    ("a word¹ here", "a word here"),
    ("the list [1] of", "the list [one] of"),  # a bracketed number after a space is no marker: read
    # dashes and ellipses: a comma-like pause, no word lost
    ("it was—so to speak—fine", "it was, so to speak, fine"),
    ("wait -- here", "wait, here"),
    ("well … maybe", "well, maybe"),
    ("And then...", "And then."),
    ("well-known", "well-known"),
    ("Tom & Jerry", "Tom and Jerry"),
    # fractions and degrees
    ("add 1/2 cup and 3/4 of it", "add one half cup and three quarters of it"),
    ("2½ miles", "two and a half miles"),
    ("it was 20°C", "it was twenty degrees Celsius"),
    ("the 9/11 report", "the nine/eleven report"),
])
def test_spoken_form(text, want):
    assert normalize(text) == want


@pytest.mark.parametrize("title, want", [
    ("CHAPTER I. Down the Rabbit-Hole", "CHAPTER one. Down the Rabbit-Hole"),
    ("Chapter XIV", "Chapter fourteen"),
    ("XIV.", "fourteen."),
    ("IV: The Storm", "four: The Storm"),
    ("I Am Legend", "I Am Legend"),
    ("MIX TAPE", "MIX TAPE"),
])
def test_headings(title, want):
    assert normalize(title, heading=True) == want


def test_roman_numeral_values():
    assert [roman_to_int(r) for r in ("I", "IV", "XIV", "MCMXCIX", "LIV")] == [1, 4, 14, 1999, 54]
    assert roman_to_int("IIII") is None and roman_to_int("VX") is None and roman_to_int("") is None


def test_phoneme_blocks_pass_through_untouched():
    text = "Say [[ həˈloʊ 12 ]] to Dr. [[ x ]] at 5."
    out = normalize(text)
    assert "[[ həˈloʊ 12 ]]" in out and "[[ x ]]" in out
    assert out == "Say [[ həˈloʊ 12 ]] to Doctor [[ x ]] at five."
    assert split_phoneme_blocks("a [[b]] c") == [(False, "a "), (True, "[[b]]"), (False, " c")]


def test_plain_prose_is_unchanged():
    prose = ("Alice was beginning to get very tired of sitting by her sister on the bank, and of having "
             "nothing to do: once or twice she had peeped into the book her sister was reading.")
    assert normalize(prose) == prose


@pytest.mark.parametrize("text", [
    "It cost $5 and £20 on 12/25/2023 at 10 a.m. when the U.N. met.",
    "In 1999 and 1887 St. Paul walked on Baker St. to see Dr. Watson, e.g. at Mt. Hood.",
    "Louis XIV and Chapter II were fine—really… Visit www.example.com today.",
])
def test_no_word_of_the_source_is_dropped(text):
    """Every alphabetic word of the source is still there (or expanded from its abbreviation)."""
    out = normalize(text).lower()
    expansions = {"st": ("saint", "street"), "dr": ("doctor", "drive"), "mt": ("mount",), "e": ("for",),
                  "g": ("example",), "a": ("a",), "m": ("m",), "u": ("u",), "n": ("n",), "www": ("w",)}
    for w in re.findall(r"[A-Za-z]+", text):
        if re.fullmatch(r"[IVXLCDM]+", w):
            continue  # numerals become number words
        alts = expansions.get(w.lower(), (w.lower(),))
        assert any(re.search(rf"\b{re.escape(a)}\b", out) for a in alts), (w, out)


@pytest.mark.parametrize("text, n", [
    ("We met at 10 a.m. in the hall. Then we left.", 2),
    ("The U.N. Security Council met. It voted.", 2),
    ("Fruit, e.g. apples, is good. So is i.e. this.", 2),
    ("Dr. Watson and Mr. Holmes arrived. They sat.", 2),
    ("He has a Ph.D. from Yale. Really.", 2),
])
def test_sentences_do_not_break_after_abbreviations(text, n):
    assert len(split_sentences(text)) == n
