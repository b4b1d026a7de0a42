"""Plain-text note bodies and ``--footnotes`` (jobs.ingest.notes): skipped by default, read inline or at the end."""

from pathlib import Path

import pytest

from jobs.ingest import load_book
from jobs.ingest.book import Chapter
from jobs.ingest.notes import text_notes

STRUCTURE = Path(__file__).resolve().parents[1] / "data" / "structure"


def _chapter(paras, kinds=None):
    return Chapter(1, "One", list(paras), kinds)


def test_a_marked_note_after_its_mark_is_skipped_by_default_and_read_where_asked():
    """The Autobiography of Benjamin Franklin (PG 148), cut short: "TWYFORD, at the Bishop of St. Asaph's,<0>
    1771." carries a mark, and the paragraph "<0> The country-seat of Bishop Shipley ..." under it is its note."""
    path = STRUCTURE / "franklin-autobiography-letters-excerpt.txt"
    note = "<0> The country-seat of Bishop Shipley"
    skip = load_book(path).chapters[1]
    assert not any(p.startswith(note) for p in skip.paragraphs)
    assert skip.paragraphs[0].startswith("TWYFORD") and skip.paragraphs[1].startswith("DEAR SON")
    inline = load_book(path, footnotes="inline").chapters[1]
    assert inline.paragraphs[1].startswith(note)
    end = load_book(path, footnotes="end").chapters[1]
    at = [i for i, p in enumerate(end.paragraphs) if p.startswith("<")]  # the chapter's notes, after its text
    assert end.paragraphs[at[0]].startswith(note) and at == list(range(len(end.paragraphs) - len(at), len(end.paragraphs)))
    assert end.paragraphs[1].startswith("DEAR SON") and len(end.paragraphs) == len(inline.paragraphs)


def test_labelled_notes_run_to_their_closing_bracket_and_their_label_goes_with_them():
    ch = _chapter(["The Duchess enters.", "[Footnote 1: Malfi. The presence-chamber.]",
                   "[Footnote 2: A note that goes on", "into a second paragraph,", "and ends here.]",
                   "The Cardinal speaks.", "FOOTNOTES:", "[Footnote 3: Prevent.]"])
    [out] = text_notes([ch])
    assert out.paragraphs == ["The Duchess enters.", "The Cardinal speaks."]
    [end] = text_notes([ch], "end")
    assert end.paragraphs == ["The Duchess enters.", "The Cardinal speaks.", *ch.paragraphs[1:5], "FOOTNOTES:",
                              "[Footnote 3: Prevent.]"]


@pytest.mark.parametrize("paras", [
    ["What is power? We answer in three ways.", "(1) What is power?", "(2) What force produces it?"],
    ["The rules are these.", "[1] First, keep the line.", "[2] Second, hold the fire."],  # no mark before them
    ["He wrote a note.", "[Note: When I say sitting, I do not mean a change of attitude.]"],  # the author's aside
])
def test_numbered_text_without_a_mark_before_it_is_read(paras):
    [out] = text_notes([_chapter(paras)])
    assert out.paragraphs == paras


def test_a_chapter_of_notes_only_is_dropped_and_the_rest_renumbered():
    chapters = [Chapter(1, "One", ["It was so.[1]"]), Chapter(2, "Footnotes", ["[1] Or rather were."]),
                Chapter(3, "Two", ["And then."])]
    out = text_notes(chapters)
    assert [(c.index, c.title) for c in out] == [(1, "One"), (2, "Two")]
    assert [c.title for c in text_notes(chapters, "inline")] == ["One", "Footnotes", "Two"]
