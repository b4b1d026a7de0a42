"""Segmenting and phonemizing the chapters of a job on the host's cores.

Phonemization (espeak-ng through piper-tts, one call per sentence, under a process-wide lock)
is most of the planning time of a book. :func:`segment_chapters` gives the utterances of each
chapter exactly as :meth:`jobs.segment.Segmenter.chapter_utterances` does, computed in a
process pool when the text is big: chapters are cut into pieces of whole paragraphs, each piece
is segmented in a worker process (its own espeak-ng), and the pieces are joined back with their
paragraph and utterance numbers shifted to their places in the chapter. Small inputs, or a host
with one core, stay in this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

from core import slots

from jobs.ingest import Chapter
from jobs.lexicon import Lexicon, make_speak
from jobs.phonemize import Phonemizer
from jobs.segment import Segmenter, Utterance, paragraph_kind
from core.voice import VoiceConfig

#: Below this many characters of text the chapters are segmented in this process.
PARALLEL_MIN_CHARS = 60_000
#: Characters of whole paragraphs per piece handed to a worker process.
PIECE_CHARS = 20_000
#: Most worker processes.
MAX_WORKERS = 32
#: Below this share of the cores (the host's cores over the plannings running on it), a planning
#: that shares the host with others segments in its own process: no pool, no forkserver.
SHARED_MIN_CORES = 4

#: What this process's forkserver imports before it forks any child (the first pool to start the
#: server sets it, once): the modules of this pool's children and of :mod:`jobs.chapter_pool`'s, which
#: fork from the same server. ``cli.py run`` plans with this pool while its engine starts on a thread,
#: then writes the chapters of its tail with that one; with this module's list alone every chapter
#: process imported the pipeline, NumPy's audio stack and Parquet again at the tail.
FORKSERVER_PRELOAD = ["__main__", "jobs.segment_pool", "jobs.finalize", "jobs.chapter_pool",
                      "pyarrow.parquet", "scipy.signal", "scipy.ndimage", "pyloudnorm", "soundfile", "mutagen.flac"]

_worker_segmenter: Segmenter | None = None


def host_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def planning_slots_dir() -> Path:
    """Where the plannings running on this host hold their slots (:mod:`core.slots`): per user, in the
    temporary directory."""
    return Path(tempfile.gettempdir()) / f"booktts-{os.getuid()}" / "planning"


def _chars(ch: Chapter) -> int:
    return len(ch.title or "") + sum(len(p) for p in ch.paragraphs)


def _pieces(ch: Chapter, piece_chars: int) -> list[tuple[Chapter, int]]:
    """``ch`` as chapters of consecutive paragraphs (the title with the piece it is spoken in: the first,
    or the one holding the end of the chapter's opening matter and the paragraph after it), each with the
    index of its first paragraph in ``ch`` and its paragraphs' kinds. A piece starts only at a text
    paragraph that is not the first after the opening matter: a heading, a scene break or the title sets
    the pause of the utterance before it, which must be in the same piece."""
    out: list[tuple[Chapter, int]] = []
    opening = ch.opening if 0 < ch.opening < len(ch.paragraphs) else 0

    def piece(a: int, b: int | None) -> Chapter:
        kinds = ch.kinds[a:b] if ch.kinds is not None else None
        titled = a <= opening < (len(ch.paragraphs) if b is None else b) or not ch.paragraphs
        return Chapter(ch.index, ch.title if titled else "", ch.paragraphs[a:b], kinds=kinds,
                       title_is_letter=ch.title_is_letter and titled, opening=opening - a if titled else 0)

    start, size = 0, len(ch.title or "")
    for i, p in enumerate(ch.paragraphs):
        if i > start and size + len(p) > piece_chars and paragraph_kind(ch, i) == "text" \
                and not (opening and i == opening):
            out.append((piece(start, i), start))
            start, size = i, 0
        size += len(p)
    out.append((piece(start, None), start))
    return out


def _segmenter(voice: VoiceConfig, max_phonemes: int, lexicon: Lexicon | None, normalize_text: bool) -> Segmenter:
    return Segmenter(Phonemizer(voice), max_phonemes, speak=make_speak(lexicon, normalize_text))


def _init_worker(voice: VoiceConfig, max_phonemes: int, lexicon: Lexicon | None, normalize_text: bool) -> None:
    global _worker_segmenter
    _worker_segmenter = _segmenter(voice, max_phonemes, lexicon, normalize_text)


def _segment_piece(task: tuple[int, Chapter, str | None]) -> list[Utterance]:
    book_index, chapter, announce = task
    return _worker_segmenter.chapter_utterances(book_index, chapter, announce=announce)


def _join(parts: list[tuple[list[Utterance], int]]) -> list[Utterance]:
    """The utterances of a chapter's pieces, renumbered to their places in the chapter."""
    out: list[Utterance] = []
    for utts, p_start in parts:
        for u in utts:
            p_i = u.paragraph_index + p_start if u.paragraph_index >= 0 else u.paragraph_index
            out.append(replace(u, utterance_index=len(out), paragraph_index=p_i))
    return out


def pool_context(preload: list[str]):
    """``fork`` where it is safe (POSIX, no other thread that could hold a lock across the fork:
    the children start at once, without importing anything); else ``forkserver`` (children forked
    from a clean single-threaded server that has imported ``preload`` once, if it is the first to
    start it: ``cli.py run`` starts its engine on a thread while it plans); else ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(preload)  # each child then imports none of them again
        return ctx
    return multiprocessing.get_context("spawn")


def _context():
    return pool_context(FORKSERVER_PRELOAD)


def start_forkserver() -> bool:
    """Start this process's forkserver now, with :data:`FORKSERVER_PRELOAD` imported, rather than when
    its first pool needs it: a long-lived process (``cli.py serve``) pays for that start before its
    first planning instead of during it. False where the platform has no forkserver."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    forkserver.ensure_running()
    return True


def segment_chapters(voice: VoiceConfig, max_phonemes: int, chapters: list[tuple[int, Chapter, str | None]],
                     workers: int | None = None, progress: Callable[[int, Chapter], None] | None = None,
                     min_chars: int = PARALLEL_MIN_CHARS, piece_chars: int = PIECE_CHARS,
                     lexicon: Lexicon | None = None, normalize_text: bool = False) -> list[list[Utterance]]:
    """Utterances of each (book index, chapter, announcement or None) of ``chapters``, in order; the
    same as segmenting them one after the other in this process with the job's spoken-text function
    (``lexicon``, ``normalize_text``: :func:`jobs.lexicon.make_speak`). ``workers``: processes (default:
    the host's cores, shared with the other plannings running on the host: see :func:`_share`);
    ``progress(book_index, chapter)`` after each chapter, in order."""
    total = sum(_chars(ch) for _, ch, _ in chapters)
    with contextlib.ExitStack() as stack:
        if workers is None and total >= min_chars:
            workers = _share(stack)
        return _segment(voice, max_phonemes, chapters, min(MAX_WORKERS, workers or 1), progress, total, min_chars,
                        piece_chars, lexicon, normalize_text)


def _share(stack: contextlib.ExitStack) -> int:
    """Processes for a planning of its own choosing: every core of the host when it is the only one
    running, else its share (:data:`SHARED_MIN_CORES`; 1: in this process). The slot it counts with
    is held until ``stack`` closes. Many ``submit`` at once on one node (a bulk upload to a GPU node)
    each forking a process per core only cost CPU time: forks, forkservers and espeak-ng starts."""
    cores = host_cores()
    if cores <= 1:
        return 1
    running = stack.enter_context(slots.hold(planning_slots_dir(), "planning"))
    return cores if running <= 1 else max(1, slots.share(cores, running, SHARED_MIN_CORES))


def _segment(voice, max_phonemes, chapters, workers, progress, total, min_chars, piece_chars, lexicon,
             normalize_text) -> list[list[Utterance]]:
    tasks: list[tuple[int, Chapter, str | None]] = []
    owners: list[tuple[int, int]] = []  # per task: (chapter position, first paragraph)
    if workers > 1 and total >= min_chars:
        for pos, (b_i, ch, announce) in enumerate(chapters):
            for k, (piece, p_start) in enumerate(_pieces(ch, piece_chars)):
                tasks.append((b_i, piece, announce if k == 0 else None))  # spoken before the title
                owners.append((pos, p_start))
    if len(tasks) < 2:
        segmenter = _segmenter(voice, max_phonemes, lexicon, normalize_text)
        out = []
        for b_i, ch, announce in chapters:
            out.append(segmenter.chapter_utterances(b_i, ch, announce=announce))
            if progress:
                progress(b_i, ch)
        return out
    from concurrent.futures import ProcessPoolExecutor

    parts: list[list[tuple[list[Utterance], int]]] = [[] for _ in chapters]
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=_context(), initializer=_init_worker,
                             initargs=(voice, max_phonemes, lexicon, normalize_text)) as pool:
        # longest pieces first, so that one big piece does not finish last alone
        by_size = sorted(range(len(tasks)), key=lambda i: -_chars(tasks[i][1]))
        futures = {i: pool.submit(_segment_piece, tasks[i]) for i in by_size}
        done_upto = 0
        for i in range(len(tasks)):
            pos, p_start = owners[i]
            parts[pos].append((futures[i].result(), p_start))
            last_of_chapter = i + 1 == len(tasks) or owners[i + 1][0] != pos
            if last_of_chapter and progress:
                for b_i, ch, _ in chapters[done_upto:pos + 1]:
                    progress(b_i, ch)
                done_upto = pos + 1
    out = [_join(p) for p in parts]
    if progress:
        for b_i, ch, _ in chapters[done_upto:]:
            progress(b_i, ch)
    return out
