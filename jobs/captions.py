"""Caption files (SRT, WebVTT) from the manifest's utterance offsets: one cue per spoken utterance.

A cue starts at the utterance's ``start_s`` and ends after its ``duration_s`` (its pause is not
part of it); utterances with nothing speakable get no cue. Text is wrapped at
:data:`LINE_CHARS` characters. Word-level cues are not written yet (see the README).
"""

from __future__ import annotations

import textwrap
from pathlib import Path


LINE_CHARS = 42


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def cues(rows: list[dict], offset_s: float = 0.0) -> list[tuple[float, float, str]]:
    """(start, end, text) per spoken row, in order; ``offset_s`` is added (a chapter's place in an M4B)."""
    out = []
    for r in rows:
        if r["duration_s"] <= 0 or not (r["text"] or "").strip():
            continue
        start = offset_s + r["start_s"]
        out.append((start, start + r["duration_s"], " ".join(r["text"].split())))
    return out


def _lines(text: str) -> str:
    # "-->" would end a WebVTT cue's timing line early if a line began with it; blank lines end a cue
    return "\n".join(textwrap.wrap(text.replace("-->", "->"), LINE_CHARS)) or "..."


def srt(cue_list: list[tuple[float, float, str]]) -> str:
    return "".join(f"{i}\n{_stamp(a, ',')} --> {_stamp(b, ',')}\n{_lines(t)}\n\n"
                   for i, (a, b, t) in enumerate(cue_list, 1))


def vtt(cue_list: list[tuple[float, float, str]]) -> str:
    return "WEBVTT\n\n" + "".join(f"{i}\n{_stamp(a, '.')} --> {_stamp(b, '.')}\n{_lines(t)}\n\n"
                                  for i, (a, b, t) in enumerate(cue_list, 1))


def write(audio_path: Path, spec: str | None, cue_list: list[tuple[float, float, str]]) -> list[Path]:
    """Write the caption files of ``spec`` beside ``audio_path`` (same name, .srt/.vtt), atomically."""
    from jobs import files

    written = []
    for fmt in (spec or "").split(","):
        if not fmt:
            continue
        path = Path(audio_path).with_suffix(f".{fmt}")
        with files.atomic_path(path) as tmp:
            tmp.write_text(srt(cue_list) if fmt == "srt" else vtt(cue_list), encoding="utf-8")
        written.append(path)
    return written
