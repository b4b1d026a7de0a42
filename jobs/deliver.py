"""The tail of ``finalize``: from a chapter's PCM to the delivered files.

:func:`write_chapter` (called by ``jobs.finalize._write_chapter`` inside its atomic write) applies
the job's loudness to one chapter, encodes and tags it, and records the chapter's loudness in
``.work/loudness/``. :func:`finish` (called at the end of ``finalize``, before the manifest) builds
each book's M4B from its chapters, rewrites the manifest's paths and offsets for it, writes the
caption files and ``loudness.json``. Both only read the job and the PCM they are given, so they
do not depend on when chapters are written.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import numpy as np

from core import files
from jobs import captions, formats, loudness, loudness_stream, metadata
from core.errors import JobError, TTSError

LOUDNESS_FILE = "loudness.json"
LOUDNESS_DIR = ".work/loudness"

log = logging.getLogger("booktts.deliver")


def check_available(config) -> None:
    """Refuse, with one line naming the package, a job whose output this host cannot write."""
    formats.check_available(config.audio_format)
    loudness.check_available(config.loudness)


@functools.lru_cache(maxsize=8)
def _cover(path: str, sha256: str, member: str | None):
    return formats.read_cover({"path": path, "sha256": sha256, "cover": member})


@functools.lru_cache(maxsize=8)
def _kept_cover(job_dir: str, file: str, sha256: str):
    return formats.read_kept_cover(job_dir, {"file": file, "sha256": sha256})


@functools.lru_cache(maxsize=8)
def _cover_file(path: str, sha256: str, mime: str):
    return metadata.read_cover_file({"path": path, "sha256": sha256, "mime": mime})


def tags_for(job, book: dict, ch: dict | None) -> formats.Tags:
    """Tags of one chapter file (``ch``), or of a book's M4B (``ch`` None): the user's metadata
    (``--title --author --narrator --cover --year``) over the book's."""
    given = job.meta.get("cover")
    if given and job.config.cover is not None:
        cover = _cover_file(given["path"], given["sha256"], given["mime"])
    else:
        kept = book.get("cover_copy")  # copied into the job directory when planned (the book file may be gone)
        cover = _kept_cover(str(getattr(job, "source", None) or job.out_dir), kept["file"], kept["sha256"]) \
            if isinstance(kept, dict) and kept.get("file") else None
        if cover is None and book.get("cover"):
            cover = _cover(book["path"], book["sha256"], book.get("cover"))
    total = len(book["chapters"])
    meta = metadata.book_tags(job.config, job.meta, book)
    if ch is None:
        title, track = meta["title"], None
    else:
        title, track = ch["title"] or f"Chapter {ch['index']}", (ch["index"], total)
    return formats.Tags(title=title, album=meta["title"], narrator=meta["narrator"],
                        artist=meta["author"], year=meta["year"], track=track,
                        cover=cover[0] if cover else None, cover_mime=cover[1] if cover else None)


def _stats_path(job, book_index: int, chapter_index: int) -> Path:
    return files.inside(job.out_dir, f"{LOUDNESS_DIR}/b{book_index:02d}-c{chapter_index:04d}.json")


def write_chapter(job, book_index: int, book: dict, ch: dict, pcm: np.ndarray, tmp: Path, final: Path,
                  writer_errors=contextlib.nullcontext) -> loudness.ChapterLoudness:
    """:func:`write_chapter_stream` of a chapter whose int16 ``pcm`` is in memory (measured here)."""
    return write_chapter_stream(job, book_index, book, ch, lambda: (pcm,), None, tmp, final, writer_errors)


def write_chapter_stream(job, book_index: int, book: dict, ch: dict, pieces, stats, tmp: Path, final: Path,
                         writer_errors=contextlib.nullcontext, flac_level: int | None = None) -> loudness.ChapterLoudness:
    """Loudness, encode and tag chapter ``ch`` into ``tmp`` (the caller renames it to ``final``) as it
    streams, and record its loudness. ``pieces()``: a fresh iterator of the chapter's int16 pieces at
    the voice's rate (utterances and pauses in order; called once per pass); ``stats``: its
    :class:`jobs.loudness_stats.ChapterStats` combined from the utterances' records (None: measured
    from the pieces, one more pass). For M4B jobs this writes the chapter's WAV that :func:`finish`
    assembles. ``flac_level``: the level a FLAC file is written at (None: the job's, or libFLAC's
    default where the job's is ``auto``: :func:`jobs.encoding.flac_level`)."""
    cfg = job.config
    if flac_level is None:
        from jobs.encoding import flac_level as level_of

        flac_level = level_of(cfg.flac_level, None)
    tags = None if formats.per_book(cfg.audio_format) else tags_for(job, book, ch)

    def write(blocks, rate: int) -> None:
        formats.write_chapter_audio(tmp, final, cfg.audio_format, blocks, rate, tags, writer_errors, flac_level)

    report, samples_out = loudness_stream.process(pieces, job.sample_rate, cfg.loudness, stats, write)
    files.write_json(_stats_path(job, book_index, ch["index"]),
                     {"book_index": book_index, "chapter_index": ch["index"], "title": ch["title"],
                      "file": ch["file"], "samples_out": int(samples_out),
                      "statistics": "measured" if stats is None else "utterances",
                      **({"flac_level": int(flac_level)} if cfg.audio_format == "flac" else {}), **report.to_dict()})
    return report


def _selected(job):
    for b_i, book in enumerate(job.meta["books"]):
        yield b_i, book, [ch for ch in book["chapters"] if ch["selected"]]


def finish(job, cols: dict[str, list]) -> list[str]:
    """Build M4Bs (rewriting ``cols``' chapter_path and start_s to the M4B's), captions and
    loudness.json. Returns the delivered audio files (relative paths), in book order."""
    cfg = job.config
    delivered: list[str] = []
    n = len(cols["chapter_path"])
    rows_of: dict[tuple[int, int], list[int]] = {}
    for i in range(n):
        rows_of.setdefault((cols["book_index"][i], cols["chapter_index"][i]), []).append(i)
    report = []
    words = _word_timer(job, cols) if cfg.captions else None  # word times also place the cuts of SRT cues
    for b_i, book, chapters in _selected(job):
        stats = []
        for ch in chapters:
            try:
                stats.append(files.read_json(_stats_path(job, b_i, ch["index"])))
            except FileNotFoundError:
                raise JobError(f"job {job.job_id}: chapter {ch['index']} of {book['title']!r} has no loudness "
                               f"record; run finalize again (resume the job)") from None
        report.extend(stats)
        if formats.per_book(cfg.audio_format):
            rel = formats.book_relpath(book["dir"], cfg.audio_format)
            final = files.inside(job.out_dir, rel)
            wavs = [(files.inside(job.out_dir, ch["file"]), ch["title"] or f"Chapter {ch['index']}")
                    for ch in chapters]
            with files.atomic_path(final) as tmp:
                starts = formats.WRITERS[cfg.audio_format].book(tmp, wavs, tags_for(job, book, None))
            for ch, start in zip(chapters, starts):
                for i in rows_of.get((b_i, ch["index"]), []):
                    cols["chapter_path"][i] = rel
                    cols["start_s"][i] = start + cols["start_s"][i]
            delivered.append(rel)
            book_rows = [i for ch in chapters for i in rows_of.get((b_i, ch["index"]), [])]
            if cfg.captions:
                captions.write(final, cfg.captions, captions.cues([_row(cols, i, words) for i in book_rows]))
        else:
            for ch in chapters:
                delivered.append(ch["file"])
                if cfg.captions:
                    captions.write(files.inside(job.out_dir, ch["file"]), cfg.captions,
                                   captions.cues([_row(cols, i, words) for i in rows_of.get((b_i, ch["index"]), [])]))
    files.write_json(job.out_dir / LOUDNESS_FILE, {"mode": cfg.loudness,
                                                   "target": loudness.describe(cfg.loudness, job.sample_rate),
                                                   "chapters": report})
    return delivered


def _row(cols: dict[str, list], i: int, words=None) -> dict:
    row = {"text": cols["text"][i], "start_s": cols["start_s"][i], "duration_s": cols["duration_s"][i]}
    timed = words(i) if words is not None else None
    if timed is not None:  # exact word starts give WebVTT word tags too; estimated ones only place cuts
        row["word_starts_s" if timed[1] else "word_times_s"] = timed[0]
    return row


def _word_timer(job, cols: dict[str, list]):
    """i -> (word start times, exact) of manifest row i (chapter-relative, like its start_s), or None
    (:func:`jobs.captions.word_times`). Rows without phoneme durations (engines that do not pass them
    on) share their time out by phoneme count: estimated times, which place caption cuts only."""
    try:
        ids_map = job.voice.phoneme_id_map
    except TTSError as exc:  # the voice is not installed on this host: cues cut by characters
        log.warning("job %s: no word timestamps in captions (%s)", job.job_id, exc)
        return None
    space = set(ids_map.get(" ", []))
    silent = {i for k in ("^", "$", "_") for i in ids_map.get(k, [])}
    marks = {i for k in ",.;:!?—…" for i in ids_map.get(k, [])}  # punctuation: pauses, not speech
    ids = {r.key: r.utt.phoneme_ids for r in job.rows}

    def words(i: int):
        key = (cols["book_index"][i], cols["chapter_index"][i], cols["utterance_index"][i])
        pids, durations = ids.get(key, []), cols["phoneme_durations_s"][i]
        if not durations and pids:  # no durations: each phoneme an equal share of the utterance
            timed = captions.word_times(cols["text"][i], cols["start_s"][i], pids,
                                        [cols["duration_s"][i] / len(pids)] * len(pids), space, silent)
            return (timed[0], False) if timed else None
        return captions.word_times(cols["text"][i], cols["start_s"][i], pids, durations, space, silent, marks)
    return words
