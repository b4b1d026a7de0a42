"""Pronunciation lexicon (``--lexicon FILE``): words -> respellings or phonemes, before phonemization.

Two file formats, chosen by content (a file whose first non-blank character is ``{`` or ``[`` is
JSON, anything else TSV):

TSV
    One entry a line: ``word<TAB>replacement``. Blank lines and lines starting with ``#`` are
    ignored. The replacement is a respelling ("Hermione<TAB>her my oh nee") or Piper phonemes in
    ``[[ ... ]]`` ("Cthulhu<TAB>[[ kəˈθuːluː ]]").
JSON
    An object ``{"word": "replacement", ...}``, or a list of objects
    ``{"word": ..., "say": ...}`` / ``{"word": ..., "phonemes": ...}`` with an optional
    ``"match_case": true|false``.

Case rules: an entry written all in lower case matches the word in any case ("nasa" matches
"NASA", "Nasa"); an entry with a capital letter matches exactly that spelling ("Reading" the
town, not "reading"), unless ``match_case`` says otherwise. Only whole words match (an entry
may hold several words or punctuation: "St. Kitts"). Where entries overlap, the longest wins.

A malformed file is an :class:`core.errors.InputError` naming the file and the line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from core.errors import InputError

log = logging.getLogger("booktts.lexicon")

MAX_LEXICON_BYTES = 16 * 1024 * 1024
MAX_ENTRY_CHARS = 200


@dataclass(frozen=True)
class Entry:
    word: str
    replacement: str
    """A respelling, or ``[[ phonemes ]]``."""
    match_case: bool
    line: int


@dataclass
class Lexicon:
    path: str
    sha256: str
    entries: list[Entry]
    _by_folded: dict[str, list[Entry]] = field(default_factory=dict, repr=False)
    _lengths: list[int] = field(default_factory=list, repr=False)
    _rx: re.Pattern | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for e in self.entries:
            self._by_folded.setdefault(e.word.casefold(), []).append(e)
        for group in self._by_folded.values():
            group.sort(key=lambda e: not e.match_case)  # an exact-case entry before a case-free one
        self._lengths = sorted({len(w) for w in self._by_folded}, reverse=True)
        words = sorted({e.word for e in self.entries}, key=len, reverse=True)
        if words:
            self._rx = re.compile("|".join(re.escape(w) for w in words), re.I)

    def _scan(self, text: str, on_match: Callable[[Entry, str], None] | None = None) -> str:
        if self._rx is None:
            return text
        from jobs.normalize import split_phoneme_blocks

        out = []
        for is_ph, part in split_phoneme_blocks(text):
            if is_ph:
                out.append(part)
                continue
            pos = 0
            while True:
                m = self._find(part, pos)
                if m is None:
                    out.append(part[pos:])
                    break
                start, end, e = m
                out.append(part[pos:start])
                out.append(e.replacement)
                if on_match:
                    on_match(e, part[start:end])
                pos = end
        return "".join(out)

    def _find(self, text: str, pos: int) -> tuple[int, int, Entry] | None:
        """The next whole-word match at or after ``pos`` that an entry's case rule accepts (longest first)."""
        while True:
            m = self._rx.search(text, pos)
            if m is None:
                return None
            s = m.start()
            for n in self._lengths:
                seg = text[s:s + n]
                if len(seg) < n or not _bounded(text, s, s + n):
                    continue
                for e in self._by_folded.get(seg.casefold(), ()):
                    if not e.match_case or seg == e.word:
                        return s, s + n, e
            pos = s + 1

    def apply(self, text: str) -> str:
        """``text`` with every matching word replaced."""
        return self._scan(text)

    def matches(self, text: str) -> Counter:
        """How often each entry (by its written word) matched in ``text``."""
        c: Counter = Counter()
        self._scan(text, lambda e, _found: c.update([e.word]))
        return c


def _bounded(text: str, a: int, b: int) -> bool:
    left_ok = a == 0 or not (text[a - 1].isalnum() and text[a].isalnum())
    right_ok = b >= len(text) or not (text[b - 1].isalnum() and text[b].isalnum())
    return left_ok and right_ok


def _check_entry(where: str, line: int, word, repl, match_case) -> Entry:
    if not isinstance(word, str) or not word.strip():
        raise InputError(f"{where}, line {line}: the word is empty; write word<TAB>replacement")
    if not isinstance(repl, str) or not repl.strip():
        raise InputError(f"{where}, line {line}: {word!r} has no replacement; write word<TAB>replacement")
    word, repl = word.strip(), " ".join(repl.split())
    if len(word) > MAX_ENTRY_CHARS or len(repl) > MAX_ENTRY_CHARS:
        raise InputError(f"{where}, line {line}: entry longer than {MAX_ENTRY_CHARS} characters")
    if repl.startswith("[[") != repl.endswith("]]") or repl.count("[[") > 1 and repl.startswith("[["):
        raise InputError(f"{where}, line {line}: {word!r}: phonemes must be written [[ like this ]]")
    if repl.startswith("[[") and not repl[2:-2].strip():
        raise InputError(f"{where}, line {line}: {word!r}: the [[ ]] phonemes are empty")
    if "[[" in word or "]]" in word:
        raise InputError(f"{where}, line {line}: {word!r}: a word cannot hold [[ ]]")
    if match_case is None:
        match_case = word != word.lower()
    if not isinstance(match_case, bool):
        raise InputError(f"{where}, line {line}: {word!r}: match_case must be true or false")
    return Entry(word, repl, match_case, line)


def _parse_tsv(where: str, text: str) -> list[Entry]:
    out = []
    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "\t" not in line:
            raise InputError(f"{where}, line {n}: no tab between the word and its replacement; "
                             f"write word<TAB>replacement")
        word, repl = line.split("\t", 1)
        if "\t" in repl.strip("\t"):
            raise InputError(f"{where}, line {n}: more than two tab-separated columns; write word<TAB>replacement")
        out.append(_check_entry(where, n, word, repl.strip("\t"), None))
    return out


def _json_line(text: str, needle: str) -> int:
    k = text.find(needle)
    return text.count("\n", 0, k) + 1 if k >= 0 else 1


def _parse_json(where: str, text: str) -> list[Entry]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}, line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:  # the decoder recurses per nesting level: "[[[[..." 100,000 deep
        raise InputError(f"{where}: its JSON is nested too deeply to be a lexicon; write an object "
                         f"{{word: replacement}} or a list of {{\"word\": ..., \"say\": ...}} entries") from None
    out = []
    if isinstance(data, dict):
        for word, repl in data.items():
            out.append(_check_entry(where, _json_line(text, json.dumps(word)[1:-1]), word, repl, None))
    elif isinstance(data, list):
        for k, item in enumerate(data):
            if not isinstance(item, dict) or "word" not in item or ("say" in item) == ("phonemes" in item):
                raise InputError(f"{where}, entry {k + 1}: write {{\"word\": ..., \"say\": ...}} or "
                                 f"{{\"word\": ..., \"phonemes\": ...}}")
            line = _json_line(text, json.dumps(item["word"])[1:-1]) if isinstance(item["word"], str) else 1
            repl = item.get("say")
            if "phonemes" in item:
                ph = item["phonemes"]
                repl = f"[[ {ph.strip().removeprefix('[[').removesuffix(']]').strip()} ]]" if isinstance(ph, str) else ph
            out.append(_check_entry(where, line, item["word"], repl, item.get("match_case")))
    else:
        raise InputError(f"{where}, line 1: a JSON lexicon is an object {{word: replacement}} or a list of entries")
    return out


def load_lexicon(path: str | Path) -> Lexicon:
    """Read and check a lexicon file (TSV or JSON)."""
    p = Path(path)
    where = str(p)
    try:
        if not p.is_file():
            raise InputError(f"--lexicon {where}: no such file; check the path")
        if p.stat().st_size > MAX_LEXICON_BYTES:
            raise InputError(f"--lexicon {where}: larger than {MAX_LEXICON_BYTES >> 20} MB")
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"--lexicon {where}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{where}, line {line}: not UTF-8 text; save the lexicon as UTF-8") from None
    entries = _parse_json(where, text) if text.lstrip()[:1] in ("{", "[") else _parse_tsv(where, text)
    seen: dict[tuple[str, bool], int] = {}
    for e in entries:
        key = (e.word if e.match_case else e.word.casefold(), e.match_case)
        if key in seen:
            raise InputError(f"{where}, line {e.line}: {e.word!r} is already defined on line {seen[key]}")
        seen[key] = e.line
    return Lexicon(where, hashlib.sha256(data).hexdigest(), entries)


def make_speak(lexicon: Lexicon | None, normalize_text: bool) -> Callable[[str, bool], str] | None:
    """The written -> spoken function of a job: lexicon first, then normalisation."""
    if lexicon is None and not normalize_text:
        return None
    from jobs.normalize import normalize

    def speak(text: str, heading: bool = False) -> str:
        if lexicon is not None:
            text = lexicon.apply(text)
        return normalize(text, heading=heading) if normalize_text else text

    return speak


def lexicon_report(lexicon: Lexicon | None, rows) -> dict | None:
    """For ``job.json`` and ``plan``: the lexicon file, its hash, and how often each entry matched
    in the planned utterances (``rows``: :class:`jobs.plan.PlannedUtterance`)."""
    if lexicon is None:
        return None
    counts: Counter = Counter()
    for r in rows:
        counts.update(lexicon.matches(r.utt.text))
    return {"path": lexicon.path, "sha256": lexicon.sha256, "entries": len(lexicon.entries),
            "matches": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))}


def _unknown_symbols(block: str, id_map: dict) -> list[str]:
    """The symbols of a ``[[ phonemes ]]`` block that ``id_map`` lacks, in order of first use (the
    block read as the phonemizer reads it: NFD, spaces as word breaks)."""
    import unicodedata

    syms = unicodedata.normalize("NFD", " ".join(block[2:-2].split()))
    return list(dict.fromkeys(s for s in syms if s != " " and s not in id_map))


def unknown_phonemes(lexicon: Lexicon | None, rows, voice, books) -> list[dict]:
    """The ``[[ phonemes ]]`` the voice cannot say: the lexicon's entries and the blocks written in
    the books (``rows``: :class:`jobs.plan.PlannedUtterance`; ``books``: the input paths, by book
    index) whose symbols are not all in the voice's ``phoneme_id_map``. The phonemizer drops such
    symbols, as Piper does, so a word made of them is silent: each is logged as one warning line
    (where, the word, the symbols) and returned for ``job.json`` and ``plan``. A voice that reads
    text (``phoneme_type`` text) has no phoneme blocks: nothing to check."""
    from jobs.normalize import split_phoneme_blocks

    if getattr(voice, "phoneme_type", "espeak") != "espeak":
        return []
    id_map = voice.phoneme_id_map
    out: list[dict] = []
    for e in lexicon.entries if lexicon is not None else ():
        bad = _unknown_symbols(e.replacement, id_map) if e.replacement.startswith("[[") else []
        if bad:
            out.append({"where": f"{lexicon.path}, line {e.line}", "word": e.word, "phonemes": e.replacement,
                        "unknown": bad, "count": 1})
    seen: dict[str, dict] = {}
    for r in rows:
        u = r.utt
        if "[[" not in u.text:
            continue
        for is_ph, block in split_phoneme_blocks(u.text):
            bad = _unknown_symbols(block, id_map) if is_ph else []
            if not bad:
                continue
            if block in seen:
                seen[block]["count"] += 1
                continue
            book = books[u.book_index] if u.book_index < len(books) else f"book {u.book_index + 1}"
            seen[block] = {"where": f"{book}, chapter {u.chapter_index}", "word": block, "phonemes": block,
                           "unknown": bad, "count": 1}
            out.append(seen[block])
    for w in out:
        times = f" ({w['count']} times)" if w["count"] > 1 else ""
        log.warning("%s: %r%s: the voice %s has no %s in its phonemes, which are dropped (the word may be "
                    "silent); write it with the voice's phonemes", w["where"], w["word"], times, voice.name,
                    " ".join(repr(s) for s in w["unknown"]))
    return out
