"""Pronunciation lexicon (jobs.lexicon), [[ phonemes ]] through the phonemizer, and --lexicon on the CLI."""

import json

import pytest
from click.testing import CliRunner

from cli import main
from jobs.config import JobConfig
from core.errors import InputError
from jobs.lexicon import load_lexicon, make_speak
from jobs.phonemize import Phonemizer
from jobs.prepare import prepare_job


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_case_rules_and_whole_words(tmp_path):
    lx = load_lexicon(write(tmp_path / "l.tsv", "# names\nnasa\tnassa\nReading\tRedding\n\nSt. Kitts\tSaint Kitts\n"))
    assert len(lx.entries) == 3
    # lower-case entry: any case; capitalised entry: that spelling only; whole words only
    assert lx.apply("NASA, Nasa and nasa; nasal") == "nassa, nassa and nassa; nasal"
    assert lx.apply("Reading is near reading rooms in Readings") == "Redding is near reading rooms in Readings"
    assert lx.apply("to St. Kitts.") == "to Saint Kitts."
    assert lx.matches("NASA in Reading, nasa") == {"nasa": 2, "Reading": 1}


def test_longest_entry_wins(tmp_path):
    lx = load_lexicon(write(tmp_path / "l.tsv", "new\tnoo\nnew york\tnoo york city\n"))
    assert lx.apply("New York is new") == "noo york city is noo"


def test_json_object_and_list_forms(tmp_path):
    a = load_lexicon(write(tmp_path / "a.json", json.dumps({"Cthulhu": "[[ kəˈθuːluː ]]", "gif": "jif"})))
    assert a.apply("Cthulhu likes a GIF") == "[[ kəˈθuːluː ]] likes a jif"
    b = load_lexicon(write(tmp_path / "b.json", json.dumps([
        {"word": "Cthulhu", "phonemes": "kəˈθuːluː"},
        {"word": "Polish", "say": "Pole ish", "match_case": True},
        {"word": "SQL", "say": "sequel", "match_case": False},
    ])))
    assert b.apply("Cthulhu polish Polish sql") == "[[ kəˈθuːluː ]] polish Pole ish sequel"


def test_phoneme_blocks_in_the_text_are_not_rewritten(tmp_path):
    lx = load_lexicon(write(tmp_path / "l.tsv", "a\tay\n"))
    assert lx.apply("a [[ a b ]] a") == "ay [[ a b ]] ay"


@pytest.mark.parametrize("content, line, needle", [
    ("good\tfine\nno tab here\n", 2, "no tab"),
    ("good\tfine\n\tempty word\n", 2, "word is empty"),
    ("good\t\n", 1, "no replacement"),
    ("a\tb\tc\n", 1, "more than two"),
    ("x\t[[ unclosed\n", 1, "[[ like this ]]"),
    ("x\t[[  ]]\n", 1, "empty"),
    ("one\tuno\none\tun\n", 2, "already defined on line 1"),
    ('{"a": "b",\n "c": }', 2, "not valid JSON"),
    ('{"a": "b",\n "c": 5}', 2, "no replacement"),
])
def test_malformed_lexicon_is_one_line_naming_file_and_line(tmp_path, content, line, needle):
    p = write(tmp_path / ("l.json" if content.startswith("{") else "l.tsv"), content)
    with pytest.raises(InputError) as e:
        load_lexicon(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and f"line {line}" in msg and needle in msg


def test_missing_lexicon_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_lexicon(tmp_path / "nope.tsv")


def test_inline_phonemes_reach_the_id_map_without_espeak(voice):
    ph = Phonemizer(voice)
    raw = ph("[[ həˈloʊ ]]")
    # exactly the given symbols, mapped through the voice's phoneme_id_map (BOS, PAD after each, EOS)
    assert raw.symbols == list("həˈloʊ")
    m = voice.phoneme_id_map
    want = m["^"] + m["_"] + [i for s in "həˈloʊ" for i in m[s] + m["_"]] + m["$"]
    assert raw.ids == want and raw.missing == 0
    mixed = ph("Say [[ həˈloʊ ]] now.")
    assert "".join(mixed.symbols).count("həˈloʊ") == 1
    # the words around the block are spelled by espeak as they would be alone
    assert "".join(ph("Say").symbols) in "".join(mixed.symbols)
    # without the brackets, espeak spells the letters: something else
    assert ph("həˈloʊ").symbols != raw.symbols


def test_speak_applies_lexicon_then_normalisation(tmp_path):
    lx = load_lexicon(write(tmp_path / "l.tsv", "Watson\tWhat son\n"))
    speak = make_speak(lx, True)
    assert speak("Dr. Watson at 5.", False) == "Doctor What son at five."
    assert make_speak(lx, False)("Dr. Watson at 5.", False) == "Dr. What son at 5."
    assert make_speak(None, False) is None


def test_plan_reports_matches_and_the_lexicon_is_part_of_the_job(tmp_path, short_book):
    lex = write(tmp_path / "l.tsv", "the\tthee\n")
    job = prepare_job([short_book], tmp_path / "a", JobConfig(lexicon=str(lex)))
    said = sum(r.utt.text.lower().split().count("the") for r in job.rows)
    assert said > 0 and job.meta["lexicon"]["matches"] == {"the": said}
    assert any("thee" in (r.utt.spoken_text or "") for r in job.rows)
    # the same file path with other content is another job
    write(lex, "the\tthuh\n")
    job2 = prepare_job([short_book], tmp_path / "b", JobConfig(lexicon=str(lex)))
    assert job2.job_id != job.job_id
    res = CliRunner().invoke(main, ["plan", str(short_book), "--lexicon", str(lex)])
    assert res.exit_code == 0, res.output
    assert f"lexicon: {lex} (1 entries, 1 matched: the x{said})" in res.output


def test_cli_malformed_lexicon_is_one_error_line(tmp_path, short_book):
    lex = write(tmp_path / "bad.tsv", "ok\tfine\nbroken line\n")
    res = CliRunner().invoke(main, ["plan", str(short_book), "--lexicon", str(lex)])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and f"{lex}, line 2" in lines[0]
