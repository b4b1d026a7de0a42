"""The book model: :class:`Book` and :class:`Chapter`, what every loader produces.

Knows only the shape of a loaded book (title, author, chapters of paragraphs) and how it turns
into / back from the plain dict stored in ``job.json``, plus the spoken announcement. Knows
nothing of file formats, decoding or parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

KINDS = ("text", "heading", "break")
"""What a paragraph of a chapter can be (see :attr:`Chapter.kinds`)."""


@dataclass
class Chapter:
    """One chapter: its spoken title and its paragraphs, in reading order."""

    index: int
    """1-based position in the book."""
    title: str
    """Title as it should be spoken ("CHAPTER I. Down the Rabbit-Hole"); may be ""."""
    paragraphs: list[str] = field(default_factory=list)
    """Paragraph texts, whitespace-normalised."""
    kinds: list[str] | None = None
    """One entry per paragraph: "text", "heading" (a section heading inside the chapter, spoken and
    followed by the section pause) or "break" (a scene break: nothing is spoken, it becomes the
    pause). None means every paragraph is "text"."""

    part: str | None = None
    """The part (or book) of the outline this chapter belongs to, for ``plan``'s tree; not spoken by
    itself (the first chapter of a part carries the part's heading in its title)."""

    title_is_letter: bool = False
    """The title is a letter of the alphabet that heads a section of a book in alphabetical order (a
    dictionary's "C"): said as the letter, never read as a roman numeral ("one hundred")."""

    opening: int = 0
    """How many of the first paragraphs are the book's opening matter (a dedication, an epigraph, a short
    note printed before the first heading: ``jobs.ingest.opening``), spoken before this chapter's title;
    0: the title is spoken first."""

    def kind(self, i: int) -> str:
        """The kind of paragraph ``i`` ("text" when ``kinds`` is None)."""
        return "text" if self.kinds is None else self.kinds[i]

    def to_dict(self) -> dict:
        d = {"index": self.index, "title": self.title, "paragraphs": list(self.paragraphs)}
        if self.kinds is not None:
            d["kinds"] = list(self.kinds)
        if self.part is not None:
            d["part"] = self.part
        if self.title_is_letter:
            d["title_is_letter"] = True
        if self.opening:
            d["opening"] = self.opening
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Chapter:
        kinds = d.get("kinds")
        paragraphs = [str(p) for p in d["paragraphs"]]
        if kinds is not None:
            kinds = [str(k) for k in kinds]
            if len(kinds) != len(paragraphs) or any(k not in KINDS for k in kinds):
                raise ValueError(f"chapter {d.get('index')}: 'kinds' must hold one of {KINDS} per paragraph")
        part = d.get("part")
        opening = d.get("opening", 0)  # absent in a dict written before openings were kept
        if not isinstance(opening, int) or isinstance(opening, bool) or not 0 <= opening < max(1, len(paragraphs)):
            raise ValueError(f"chapter {d.get('index')}: 'opening' must be a count of paragraphs before the last")
        return cls(index=int(d["index"]), title=str(d.get("title", "")), paragraphs=paragraphs, kinds=kinds,
                   part=None if part is None else str(part),
                   title_is_letter=d.get("title_is_letter") is True, opening=opening)


def renumbered(chapters: list[Chapter]) -> list[Chapter]:
    """The chapters with each ``index`` set to its position again (1-based), after some were merged or split."""
    return [c if c.index == n + 1 else replace(c, index=n + 1) for n, c in enumerate(chapters)]


@dataclass
class Book:
    """A loaded book."""

    title: str
    source: Path
    format: str
    """"txt", "md" or "epub"."""
    chapters: list[Chapter] = field(default_factory=list)
    author: str | None = None
    """The author, where the book names one (Gutenberg ``Author:``, a "by ..." line, ``dc:creator``)."""
    title_known: bool = True
    """False when ``title`` is only the file name (then it is never spoken)."""

    def to_dict(self) -> dict:
        return {"title": self.title, "source": str(self.source), "format": self.format,
                "chapters": [c.to_dict() for c in self.chapters], "author": self.author,
                "title_known": self.title_known}

    @classmethod
    def from_dict(cls, d: dict) -> Book:
        return cls(title=str(d["title"]), source=Path(d["source"]), format=str(d["format"]),
                   chapters=[Chapter.from_dict(c) for c in d["chapters"]], author=d.get("author"),
                   title_known=bool(d.get("title_known", True)))

    def announcement(self) -> str | None:
        """"Title, by Author." to speak at the start of the book; None when the title is not known."""
        if not self.title_known or not self.title.strip():
            return None
        title = self.title.rstrip(" .,;:")
        return f"{title}, by {self.author}." if self.author else f"{title}."
