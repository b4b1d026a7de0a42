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
    ("Wake at 7 a.m.", "Wake at seven Eigh M."),  # "Eigh": the letter, not the article
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
    ("the list [1] of", "the list of"),  # spaced, as Project Gutenberg prints them
    ("“Looking for lodgings.” [3] I answered.", "“Looking for lodgings.” I answered."),
    ("a second individual--[8] presumably", "a second individual, presumably"),
    ("the Army Medical Department.) [2]", "the Army Medical Department.)"),
    ("[3] I answered.", "I answered."),  # the sentence after a spaced marker starts with it
    ("[1] It is probable that", "It is probable that"),  # a note's label in the text: not said either
    ("in [1872] and [[ h ]]", "in [eighteen seventy-two] and [[ h ]]"),  # a year in brackets is read
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
                  "g": ("example",), "a": ("a", "eigh"), "m": ("m",), "u": ("u",), "n": ("n",), "www": ("w",)}
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


# --- Issue 28: reading by class (letters, units, "No.", degrees, fractions, ranges, markup) ---------

@pytest.mark.parametrize("text, want", [
    # letters and initialisms by their names; "Eigh" is the letter A (a lone capital A is the article)
    ("Meet at 10:30 a.m. today.", "Meet at ten thirty Eigh M today."),
    ("at 9 A.M. sharp", "at nine Eigh M sharp"),
    ("The U.S.A. is big.", "The U S Eigh is big."),
    ("Route A–B was shut.", "Route Eigh to B was shut."),
    ("an A-B test", "an Eigh B test"),
    ("from A–Z", "from Eigh to Z"),
    ("Plan A failed.", "Plan Eigh failed."),
    ("Take vitamin A daily.", "Take vitamin Eigh daily."),
    ("She got an A.", "She got an Eigh."),
    ("Plan B failed.", "Plan B failed."),
    ("Take vitamin C daily.", "Take vitamin C daily."),
    # the article and the pronoun stay words
    ("A cat sat. I saw a dog.", "A cat sat. I saw a dog."),
    ("A SCANDAL IN BOHEMIA", "A SCANDAL IN BOHEMIA"),
    # units after a number
    ("It is 5 km away.", "It is five kilometers away."),
    ("He weighs 80 kg.", "He weighs eighty kilograms."),
    ("1 lb of flour and 3 lbs of sugar", "one pound of flour and three pounds of sugar"),
    ("add 250 g and 10 mg", "add two hundred and fifty grams and ten milligrams"),
    ("a 100 m sprint at 30 mph, 120 km/h", "a one hundred meters sprint at thirty miles per hour, one hundred and twenty kilometers per hour"),
    ("6 ft 2 in tall", "six feet two inches tall"),
    ("a board 12 in long", "a board twelve inches long"),
    ("3 in. of rain fell", "three inches of rain fell"),
    ("It fell 3 in.", "It fell three inches."),
    ("1500 m", "one thousand five hundred meters"),
    ("it was 30 °C and 86 °F", "it was thirty degrees Celsius and eighty-six degrees Fahrenheit"),
    ("prices rose 10%", "prices rose ten percent"),
    # "in" stays a preposition where it is one
    ("He came at 5 in the morning.", "He came at five in the morning."),
    ("born in 1990 in Paris", "born in nineteen ninety in Paris"),
    ("5 in 10 people", "five in ten people"),
    # "No." before a number
    ("No. 5 is here.", "Number five is here."),
    ("the house at no. 221 was", "the house at number two hundred and twenty-one was"),
    ("Nos. 3 and 4", "Numbers three and four"),
    ("room #12", "room number twelve"),
    ("Say no. It is", "Say no. It is"),
    # a keyword's abbreviation before its number
    ("CHAP. II. OF ANGLING", "Chapter two. OF ANGLING"),
    ("see vol. 3, fig. 4", "see volume three, figure four"),
    ("Sect. 12 of the act", "Section twelve of the act"),
    ("a good chap. He said", "a good chap. He said"),
    # degrees and titles
    ("She has a Ph.D. in math.", "She has a P H D in math."),
    ("He got his PhD.", "He got his P H D."),
    ("an M.A. and a B.A.", "an M Eigh and a B Eigh."),
    ("John Watson, M.D.", "John Watson, M D."),
    ("a B.Sc. in physics", "a B S C in physics"),
    # unicode fractions, spaced from the words around them
    ("Add½ cup.", "Add one half cup."),
    ("½", "one half"),
    ("2½ cups", "two and a half cups"),
    ("3¾ miles", "three and three quarters miles"),
    ("⅓ of it", "one third of it"),
    ("½cup", "one half cup"),
    # ranges
    ("1914–1918", "nineteen fourteen to nineteen eighteen"),
    ("the war of 1914-1918", "the war of nineteen fourteen to nineteen eighteen"),
    ("in 1914-18", "in nineteen fourteen to eighteen"),
    ("pages 5-10", "pages five to ten"),
    ("see pp. 12-14.", "see pp. twelve to fourteen."),
    ("3-4 October, close to midnight.", "the third to the fourth of October, close to midnight."),
    ("from 12–14 March", "from the twelfth to the fourteenth of March"),
    ("on October 3-4, 1888", "on October third to fourth, eighteen eighty-eight"),
    # markup: asterisks are not read
    ("a stray * star", "a stray star"),
    ("*emphasis* here", "emphasis here"),
    ("footnote*", "footnote"),
])
def test_reading_classes(text, want):
    assert normalize(text) == want


@pytest.mark.parametrize("text", ["call 555-1234", "they won 3-2", "in 1918-1914"])
def test_a_hyphen_that_is_no_range_is_not_read_to(text):
    assert " to " not in normalize(text)


@pytest.mark.parametrize("text, brk", [
    ("* * *", True), ("***", True), ("*", True), ("⁂", True), ("~ ~ ~", True), ("— — —", True), ("#", True),
    ("* * * * *", True), ("-", False), ("", False), ("A * B", False), ("...", False), ("Hello.", False),
])
def test_scene_break_lines(text, brk):
    from jobs.normalize import is_scene_break

    assert is_scene_break(text) is brk


@pytest.fixture(scope="module")
def phonemes():
    from core.voice import resolve_voice
    from jobs.phonemize import Phonemizer

    ph = Phonemizer(resolve_voice(None))
    return lambda text: "".join(ph.symbols(normalize(text))).replace("ˈ", "").replace("ˌ", "")


@pytest.mark.parametrize("text, letters", [
    ("Meet at 10:30 a.m. today.", "eɪ ɛm"),
    ("at 7 a.m.", "eɪ ɛm"),
    ("The U.S.A. is big.", "juː ɛs eɪ"),
    ("Route A–B was shut.", "eɪ tə biː"),
    ("Plan A failed.", "plæn eɪ"),
    ("an M.A. in Latin", "ɛm eɪ"),
    ("She has a Ph.D. in math.", "piːʲ eɪtʃ diː"),
])
def test_letters_are_said_by_their_names_by_the_voice(phonemes, text, letters):
    """Through the voice's espeak-ng: the letter A is "ay" (eɪ), never the article's "uh" (ɐ)."""
    assert letters in phonemes(text)


@pytest.mark.parametrize("text", ["A cat sat on the mat.", "I said a word."])
def test_the_article_stays_the_article_by_the_voice(phonemes, text):
    assert "ɐ" in phonemes(text) and "eɪ" not in phonemes(text)


def test_nothing_is_said_for_a_stray_asterisk_by_the_voice(phonemes):
    assert "æstɚ" not in phonemes("He paused * then went on.")
    assert phonemes("* * *") == ""
