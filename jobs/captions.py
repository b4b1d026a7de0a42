"""Caption files (SRT, WebVTT) from the manifest's utterance offsets: cues a person can read.

Each spoken utterance is covered by one or more cues, from its ``start_s`` to the end of its
``duration_s`` (its pause is not part of them); utterances with nothing speakable get none. A cue
holds at most :data:`MAX_LINES` lines of :data:`LINE_CHARS` characters and lasts at most
:data:`MAX_CUE_S` seconds (a single longer word stands alone in its cue): a longer utterance is cut
between words, at a clause end ("," ";" ":" a dash) where one is near, else at the last word that
fits. The cut falls at the word's start time: from the engine's per-phoneme durations where the
manifest has them (``phoneme_durations_s``, see below: exact where the phonemes split into the
text's words, else estimated from where the word's characters fall among the utterance's spoken
phonemes), else shared out by the words' lengths in characters. The cues of an utterance follow each
other without gaps or overlap.

Word timings: where the manifest has ``phoneme_durations_s`` (engines that expose the duration
predictor's output) and the utterance's phoneme ids split into as many words (at the voice's
space phoneme) as its text has, each WebVTT cue carries a timestamp tag before every word after
the first (``<00:00:01.250>word``, WebVTT's karaoke-style cue timestamps). SRT has no such tags:
its cues carry no word times.

This module does not decide what is said or when (the manifest does), nor read audio.
"""

from __future__ import annotations

import textwrap
from pathlib import Path


LINE_CHARS = 42
MAX_LINES = 2
MAX_CUE_S = 7.0
#: Characters that end a clause: a cue is preferably cut after a word ending with one.
_CLAUSE_END = tuple(",;:.!?—–)\"”’")


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def cues(rows: list[dict], offset_s: float = 0.0) -> list[tuple]:
    """(start, end, text[, word starts]) per cue of the spoken rows, in order; ``offset_s`` is added
    (a chapter's place in an M4B). A row may carry ``word_starts_s`` (exact, see :func:`word_starts`):
    then its cues carry their words' start times and are cut at them; or ``word_times_s`` (estimated,
    :func:`word_times`): its cues are cut at them and carry none."""
    out = []
    for r in rows:
        if r["duration_s"] <= 0 or not (r["text"] or "").strip():
            continue
        start = offset_s + r["start_s"]
        words = r.get("word_starts_s") or r.get("word_times_s")
        out.extend(split_utterance(r["text"], start, start + r["duration_s"],
                                   [offset_s + w for w in words] if words else None,
                                   tags=bool(r.get("word_starts_s"))))
    return out


def _fits(words: list[str]) -> bool:
    return len(_wrap(" ".join(words))) <= MAX_LINES


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, LINE_CHARS, break_long_words=False, break_on_hyphens=False)


def split_utterance(text: str, start: float, end: float, word_starts_s: list[float] | None = None,
                    tags: bool = True) -> list[tuple]:
    """The cues of one utterance spoken from ``start`` to ``end``: (start, end, text[, word starts]).

    ``word_starts_s``: each word's start time (from the phoneme durations); without it (or with
    another number of words) the time is shared out by the words' lengths. ``tags``: the cues carry
    their words' start times (for WebVTT's word tags). Each cue fits :data:`MAX_LINES` x
    :data:`LINE_CHARS` and :data:`MAX_CUE_S` unless it is one word."""
    words = text.split()
    timed = word_starts_s is not None and len(word_starts_s) == len(words)
    if timed:
        starts = [min(max(t, start), end) for t in word_starts_s]
    else:
        weights = [len(w) + 1 for w in words]
        total, acc, starts = sum(weights), 0, []
        for w in weights:
            starts.append(start + (end - start) * acc / total)
            acc += w
    bounds = starts[1:] + [end]  # where each word ends (the next one starts)
    out, i = [], 0
    while i < len(words):
        j = i + 1  # the cue is words[i:j]
        while j < len(words) and _fits(words[i:j + 1]) and bounds[j] - starts[i] <= MAX_CUE_S:
            j += 1
        if j < len(words):  # cut: after the last clause end in the cue's second half, if there is one
            for k in range(j - 1, i, -1):
                if words[k - 1].endswith(_CLAUSE_END) and (k - i) * 2 >= j - i:
                    j = k
                    break
        a = start if i == 0 else starts[i]
        b = end if j == len(words) else starts[j]
        cue = (a, b, " ".join(words[i:j]))
        out.append(cue + (starts[i:j],) if timed and tags else cue)
        i = j
    return out


def word_starts(text: str, start_s: float, phoneme_ids: list[int], durations_s: list[float] | None,
                space_ids: set[int], silent_ids: set[int]) -> list[float] | None:
    """Start time of each word of ``text`` from per-phoneme durations, or None when they cannot be
    matched (no durations, or the phonemes have another number of words than the text)."""
    if not durations_s or len(durations_s) != len(phoneme_ids):
        return None
    starts, t, in_word = [], start_s, False
    for pid, d in zip(phoneme_ids, durations_s):
        if pid in space_ids:
            in_word = False
        elif pid not in silent_ids and not in_word:
            starts.append(t)
            in_word = True
        t += d
    return starts if len(starts) == len(text.split()) else None


def word_times(text: str, start_s: float, phoneme_ids: list[int], durations_s: list[float] | None,
               space_ids: set[int], silent_ids: set[int], pause_ids: set[int] = frozenset()
               ) -> tuple[list[float], bool] | None:
    """(start time of each word of ``text``, exact): exact from :func:`word_starts` where the phonemes
    split into the text's words; else estimated (espeak-ng joins "for the" into one word, splits
    "daisy-chain"...): a word starting at a fraction of the text's characters starts at that fraction
    of the utterance's spoken phonemes (not ``pause_ids``: punctuation), at that phoneme's time. None
    without durations."""
    exact = word_starts(text, start_s, phoneme_ids, durations_s, space_ids, silent_ids)
    if exact is not None:
        return exact, True
    words = text.split()
    if not words or not durations_s or len(durations_s) != len(phoneme_ids):
        return None
    spoken, t = [], start_s
    quiet = set(space_ids) | set(silent_ids) | set(pause_ids)
    for pid, d in zip(phoneme_ids, durations_s):
        if pid not in quiet:
            spoken.append(t)
        t += d
    if not spoken:
        return None
    total, before, out = sum(len(w) for w in words), 0, []
    for w in words:
        out.append(spoken[min(len(spoken) - 1, before * len(spoken) // total)])
        before += len(w)
    return out, False


def _lines(text: str) -> str:
    # "-->" would end a WebVTT cue's timing line early if a line began with it; blank lines end a cue
    return "\n".join(_wrap(text.replace("-->", "->"))) or "..."


def srt(cue_list: list[tuple]) -> str:
    return "".join(f"{i}\n{_stamp(c[0], ',')} --> {_stamp(c[1], ',')}\n{_lines(c[2])}\n\n"
                   for i, c in enumerate(cue_list, 1))


def _vtt_escape(text: str) -> str:
    return text.replace("-->", "->").replace("&", "&amp;").replace("<", "&lt;")


def _timed_words(text: str, starts: list[float]) -> str:
    words = _vtt_escape(text).split()
    out = [words[0]] + [f"<{_stamp(t, '.')}>{w}" for w, t in zip(words[1:], starts[1:])]
    lines, line, width = [], [], 0
    for w, shown in zip(words, out):  # wrap by the visible words, not the tags
        if line and width + 1 + len(w) > LINE_CHARS:
            lines.append(" ".join(line))
            line, width = [], 0
        width += len(w) + (1 if line else 0)
        line.append(shown)
    return "\n".join(lines + [" ".join(line)])


def vtt(cue_list: list[tuple]) -> str:
    parts = []
    for i, cue in enumerate(cue_list, 1):
        a, b, t = cue[:3]
        body = _timed_words(t, cue[3]) if len(cue) > 3 else _lines(_vtt_escape(t))
        parts.append(f"{i}\n{_stamp(a, '.')} --> {_stamp(b, '.')}\n{body}\n\n")
    return "WEBVTT\n\n" + "".join(parts)


def write(audio_path: Path, spec: str | None, cue_list: list[tuple]) -> list[Path]:
    """Write the caption files of ``spec`` beside ``audio_path`` (same name, .srt/.vtt), atomically."""
    from core import files

    written = []
    for fmt in (spec or "").split(","):
        if not fmt:
            continue
        path = Path(audio_path).with_suffix(f".{fmt}")
        with files.atomic_path(path) as tmp:
            tmp.write_text(srt(cue_list) if fmt == "srt" else vtt(cue_list), encoding="utf-8")
        written.append(path)
    return written
