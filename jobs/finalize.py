"""Finalize: a job's chapter files and manifest, assembled from its batch records.

:func:`finalize` writes every selected chapter not written yet (:func:`write_chapter`, in threads or
in processes: :mod:`jobs.chapter_pool`), then the book-level files (:mod:`jobs.deliver`) and
``manifest.parquet`` last, so a directory with a manifest is complete. A chapter's file is its
utterances' audio cut out of the batch files, with the pauses between them; its manifest rows come
from the batch records alone. Before it, the sweeps remove what killed writers left.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf

from core import settings
from core.errors import BatchesNotDone, JobError
from core.files import atomic_path, inside, read_json, sweep_temp_files, write_json
from jobs import chapter_pool, chapter_records, deliver, encoding, loudness_stats
from jobs import claim as claims
from jobs.config import JobConfig
from jobs.job import (FINALIZED_FILE, MANIFEST_FILE, WORK_DIR, BatchRecord, Job, audio_write_errors,
                      check_write_directories, job_directories, load_checked, now_iso)
from jobs.plan import PlannedUtterance
from jobs.segment import PauseKind

#: Most chapter files encoded at once by :func:`finalize` (also bounded by the cores, and by the
#: host's load: :func:`jobs.encoding.choose`).
FINALIZE_THREADS = encoding.MAX_THREADS
#: Test knob: seconds ``finalize`` waits in each chapter file (its temporary file open), so that
#: tests can kill a worker in the middle of a finalize.
FINALIZE_DELAY_ENV = settings.setting("BOOKTTS_TEST_FINALIZE_DELAY_S").name

log = logging.getLogger("booktts.finalize")


@dataclass
class FinalizeSummary:
    chapter_files: list[str]
    utterances: int
    skipped: int
    audio_s: float
    manifest: str
    encoding: dict | None = None
    """What this finalize chose, or its caller for it (:class:`jobs.encoding.Encoding`: the FLAC level for
    ``--flac-level auto``, chapters at once, why; a local run: the chapters written after its last batch);
    None where none was chosen (no chapter left to write). Chapters written earlier may have another level:
    each one's is in loudness.json."""



def sweep_stale_temp_files(job: Job) -> list[Path]:
    """Remove temporary files that killed writers left in ``job``'s directories (never those of a
    live writer: see :func:`core.files.sweep_temp_files`). Called when a local run starts and when
    a finalize starts (both runners)."""
    removed = sweep_temp_files(job_directories(job))
    if removed:
        log.warning("job %s: removed %d temporary files left by an interrupted writer (%s%s)", job.job_id,
                    len(removed), ", ".join(p.name for p in removed[:3]), ", ..." if len(removed) > 3 else "")
    return removed


def remove_unreferenced_batch_audio(job: Job) -> list[Path]:
    """Remove this job's batch audio files that no batch record refers to: what a delivery that lost
    the race for a batch's record, or a writer killed between its audio and its record, left. Called
    by finalize, once every batch has its record (a record, once there, is not replaced)."""
    batches = Path(job.out_dir) / WORK_DIR / "batches"
    keep = {rec.audio_file for rec in (job.batch_record(b) for b in range(len(job.batches))) if rec is not None}
    removed = []
    for p in batches.glob(f"b*-{job.job_id}-*.wav"):
        if p.name not in keep:
            p.unlink(missing_ok=True)
            removed.append(p)
    if removed:
        log.info("job %s: removed %d batch audio files no record refers to (%s)", job.job_id, len(removed),
                 ", ".join(p.name for p in sorted(removed)[:3]))
    return removed


MANIFEST_COLUMNS = [
    "book_index", "book_title", "chapter_index", "chapter_title", "utterance_index", "paragraph_index",
    "sentence_index", "text", "spoken_text", "phoneme_count", "missing_phonemes", "status", "batch_id", "batch_size",
    "chapter_path", "start_s", "duration_s", "pause_after_s", "engine", "precision", "device", "infer_ms",
    "started_at", "finished_at", "worker", "queued_at", "attempt", "phoneme_durations_s",
]
#: ``phoneme_durations_s``: seconds each phoneme id of the utterance lasts (the duration predictor's,
#: summing to ``duration_s``), for engines that expose them (torch, fake); null otherwise.


class _BatchAudio:
    """Reads utterance audio out of batch files, keeping a few open."""

    def __init__(self, job: Job, keep_open: int = 32, records: dict[int, BatchRecord] | None = None,
                 memory: dict[int, list[np.ndarray]] | None = None) -> None:
        self.job = job
        self.keep_open = keep_open
        #: batch records, read once; may be shared between readers (threads) of the same job
        self.records: dict[int, BatchRecord] = {} if records is None else records
        #: per batch, its items' audio in batch order, as written (read from here instead of the file)
        self.memory: dict[int, list[np.ndarray]] = {} if memory is None else memory
        self.files: dict[int, sf.SoundFile] = {}

    def record(self, batch_id: int) -> BatchRecord:
        if batch_id not in self.records:
            rec = self.job.batch_record(batch_id)
            if rec is None:
                raise JobError(f"job {self.job.job_id}: batch {batch_id} has no output; run or resume the job first")
            self.records[batch_id] = rec
        return self.records[batch_id]

    def read(self, batch_id: int, pos: int) -> np.ndarray:
        rec = self.record(batch_id)
        item = rec.items[pos]
        held = self.memory.get(batch_id)
        if held is not None and len(held[pos]) == item["samples"]:
            return held[pos]
        f = self.files.get(batch_id)
        if f is None:
            if len(self.files) >= self.keep_open:
                old = next(iter(self.files))
                self.files.pop(old).close()
            f = self.files[batch_id] = sf.SoundFile(str(self.job.record_path(batch_id).parent / rec.audio_file))
        f.seek(item["offset"])
        data = f.read(item["samples"], dtype="int16")
        if len(data) != item["samples"]:
            raise JobError(f"batch {batch_id} audio is truncated; delete {self.job.record_path(batch_id)} and resume")
        return data

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()


def _pause_seconds(config: JobConfig, pause: PauseKind) -> float:
    return {
        PauseKind.TITLE: config.title_pause_s,
        PauseKind.SECTION: config.section_pause_s,
        PauseKind.PARAGRAPH: config.paragraph_pause_s,
        PauseKind.SENTENCE: config.sentence_pause_s,
        PauseKind.CLAUSE: config.clause_pause_s,
    }[pause]


#: One chapter to assemble: (book index, book meta, chapter meta, its planned rows in reading order).
ChapterWork = tuple[int, dict, dict, list[PlannedUtterance]]
#: What writing one chapter gives: its manifest columns, its samples, its skipped rows.
ChapterPart = tuple[dict[str, list], int, int]


def chapter_key(work: ChapterWork) -> tuple[int, int]:
    """(book index, chapter index) of a chapter to assemble."""
    return work[0], work[2]["index"]


def selected_chapters(job: Job) -> list[ChapterWork]:
    """The chapters ``finalize`` writes, in book order, each with its rows in reading order."""
    by_chapter: dict[tuple[int, int], list[PlannedUtterance]] = {}
    for r in job.rows:
        by_chapter.setdefault((r.utt.book_index, r.utt.chapter_index), []).append(r)
    return [(b_i, book, ch, sorted(by_chapter.get((b_i, ch["index"]), []), key=lambda r: r.utt.utterance_index))
            for b_i, book in enumerate(job.meta["books"]) for ch in book["chapters"] if ch["selected"]]


def write_chapter(job: Job, work: ChapterWork, records: dict[int, BatchRecord] | None = None,
                  memory: dict[int, list[np.ndarray]] | None = None,
                  chosen: encoding.Encoding | None = None) -> ChapterPart:
    """Write one chapter file (atomically) as ``finalize`` does, then its record
    (:mod:`jobs.chapter_records`, which lets a later finalize keep the file); its batches must be done.

    ``records``: batch records already read (shared between threads, filled as read);
    ``memory``: per batch id, the items' audio as written, read instead of the batch file;
    ``chosen``: the FLAC level for a job whose level is ``auto`` (:mod:`jobs.encoding`; None: libFLAC's default).
    """
    records = {} if records is None else records
    check_write_directories(job.out_dir, job)
    part = _write_chapter(job, *work, records, memory, chosen)
    chapter_records.save(job, chapter_key(work), work[2]["file"], work[3], part[1], part[2], records)
    return part


def finalize(job: Job, written: dict[tuple[int, int], ChapterPart] | None = None,
             memory: dict[int, list[np.ndarray]] | None = None,
             records: dict[int, BatchRecord] | None = None, processes: int | None = None,
             chosen: encoding.Encoding | None = None) -> FinalizeSummary:
    """Assemble chapter files and ``manifest.parquet`` from the batch records. Idempotent.

    Raises JobError while any batch is missing. The manifest is written last, so a job
    directory with a manifest is complete. Temporary files of an earlier, killed finalize (or
    batch writer) are removed first.

    ``written``: chapters this process wrote already with :func:`write_chapter` since their
    batches were done, by :func:`chapter_key`; they are not written again and their manifest
    rows are used as they are. Chapters written before by any process (early, by a worker's chapter
    writer, or by an earlier finalize) whose records still match are kept the same way
    (:func:`jobs.chapter_records.valid`). ``memory`` and ``records``: see :func:`write_chapter`. ``processes``:
    at most this many processes write chapters (:mod:`jobs.chapter_pool`; 0: threads only; None:
    as the host's cores allow). ``chosen``: the FLAC level (for ``--flac-level auto``) and chapters at
    once that the caller chose (:func:`jobs.encoding.choose`); None: chosen here, from the host's load
    over a moment, as a node with no engine waiting.
    """
    claims.check_claim(job.out_dir, job.job_id)  # chapter files and manifest have fixed names
    check_write_directories(job.out_dir, job)
    missing = job.pending_batches()
    if missing:
        raise BatchesNotDone(job.job_id, missing, len(job.batches))
    # Early chapter writes in flight end first (their files are then kept by their records), and none
    # starts until the manifest is written.
    with chapter_records.finishing(job):
        sweep_stale_temp_files(job)
        files, total_samples, skipped, chosen = _assemble(job, written, memory, records, processes, chosen)
    remove_unreferenced_batch_audio(job)
    summary = FinalizeSummary(files, len(job.rows), skipped, total_samples / job.sample_rate, MANIFEST_FILE,
                              chosen.to_dict() if chosen is not None else None)
    write_json(job.out_dir / WORK_DIR / FINALIZED_FILE, {**asdict(summary), "finalized_at": now_iso()})
    claims.clear_submitted(job.out_dir, job.job_id)  # the workers' job is over: a local run may run it again
    return summary


def choose_here(engines_waiting: bool = False) -> encoding.Encoding:
    """:func:`jobs.encoding.choose` for a finalize whose caller chose nothing: the host's busy share over
    a moment (this process's own CPU time left out), the cores this process may run on."""
    from core.host_load import busy_now
    from jobs.segment_pool import host_cores

    busy = None if encoding.pinned_level() is not None else busy_now(others=True)  # (the test suite's level)
    return encoding.choose(busy, engines_waiting, host_cores())


def _assemble(job: Job, written, memory, records, processes, chosen: encoding.Encoding | None = None):
    """finalize's work under its lock: the chapters not written yet, the book-level files, the
    manifest. Returns (delivered files, samples, skipped rows, the :class:`jobs.encoding.Encoding` its
    chapters were written with: ``chosen``, or chosen here where it is None and chapters were left to
    write; None if neither)."""
    import pyarrow as pa

    chapters = selected_chapters(job)
    records = {} if records is None else records  # read once, shared by the chapters' readers
    written = dict(written or {})
    for work in chapter_records.valid(job, [c for c in chapters if chapter_key(c) not in written], records):
        written[chapter_key(work)] = chapter_part(job, work, records)  # its file stays; its rows from the records
    todo = [c for c in chapters if chapter_key(c) not in written]
    # Chapters are written in parallel: many hours of audio in processes (jobs.chapter_pool), else on
    # threads (libsndfile and most of NumPy run without the GIL); the manifest keeps book order.
    if todo and chosen is None:
        chosen = choose_here()
    processes = chapter_pool.processes_for(job, todo, limit=processes)
    if todo:
        log.info("job %s: writing %d chapters: %s%s", job.job_id, len(todo),
                 encoding.describe(job.config.flac_level, chosen, job.config.audio_format),
                 f", in {processes} processes" if processes else "")
    if processes:
        new = write_chapters_in_processes(job, todo, processes, chosen=chosen)
    else:
        threads = max(1, min(len(todo), os.cpu_count() or 1, FINALIZE_THREADS, chosen.threads if chosen else FINALIZE_THREADS))
        with ThreadPoolExecutor(threads, thread_name_prefix="finalize") as pool:
            new = dict(zip(map(chapter_key, todo),
                           pool.map(lambda c: write_chapter(job, c, records, memory, chosen), todo)))
    parts = [written[chapter_key(c)] if chapter_key(c) in written else new[chapter_key(c)] for c in chapters]
    cols: dict[str, list] = {c: [] for c in MANIFEST_COLUMNS}
    for part, _, _ in parts:
        for k in cols:
            cols[k].extend(part[k])
    files = deliver.finish(job, cols)  # M4Bs, captions, loudness.json (rewrites cols' paths for M4B)
    table = pa.table(cols)
    with atomic_path(job.out_dir / MANIFEST_FILE) as tmp:
        pq.write_table(table, tmp)
    return files, sum(n for _, n, _ in parts), sum(k for _, _, k in parts), chosen


def write_chapters_in_processes(job: Job, works: list[ChapterWork], processes: int,
                                kept: "chapter_pool.KeptPool | None" = None,
                                chosen: encoding.Encoding | None = None) -> dict[tuple[int, int], ChapterPart]:
    """:func:`write_chapter` of each of ``works`` in up to ``processes`` processes (:mod:`jobs.chapter_pool`;
    ``kept``: those of a long-lived caller, started once), by :func:`chapter_key`."""
    import functools

    write_one = functools.partial(write_chapter_of, chosen=chosen.to_dict() if chosen is not None else None)
    return chapter_pool.write_chapters(job, works, processes, write_one, chapter_key, kept=kept)


def write_chapter_of(job_dir: str, job_id: str, key: tuple[int, int], chosen: dict | None = None) -> ChapterPart:
    """In a chapter process: open job ``job_id`` from ``job_dir`` and write its chapter ``key``
    (``chosen``: :meth:`jobs.encoding.Encoding.to_dict`)."""
    job = load_checked(job_dir, job_id)
    for work in selected_chapters(job):
        if chapter_key(work) == key:
            return write_chapter(job, work, chosen=encoding.Encoding.from_dict(chosen) if chosen else None)
    raise JobError(f"job {job_id} has no chapter {key}")


def _chapter_columns(job: Job, b_i: int, book: dict, ch: dict, rows: list, audio: "_BatchAudio"):
    """A chapter's manifest columns from its batch records alone (a record holds each item's samples);
    also its samples, skipped rows and what to put where: (batch id or -1, position, pause samples)."""
    cfg, sr = job.config, job.sample_rate
    cols: dict[str, list] = {c: [] for c in MANIFEST_COLUMNS}
    plan: list[tuple[int, int, int]] = []
    pos = skipped = 0
    recs = [audio.record(r.batch_id) if r.batch_id >= 0 else None for r in rows]
    sizes = [rec.items[r.batch_pos]["samples"] if rec else 0 for r, rec in zip(rows, recs)]
    # the chapter pause ends every chapter file but the book's last, after its last spoken utterance
    last_spoken = max((i for i, n in enumerate(sizes) if n), default=-1) if not _last_of_book(book, ch) else -1
    for i, (r, rec, n) in enumerate(zip(rows, recs, sizes)):
        u = r.utt
        seconds = cfg.chapter_pause_s if i == last_spoken else _pause_seconds(cfg, u.pause)
        pause = int(round(seconds * sr)) if n else 0
        plan.append((r.batch_id if rec else -1, r.batch_pos, pause))
        skipped += rec is None
        row = {
            "book_index": b_i, "book_title": book["title"], "chapter_index": u.chapter_index,
            "chapter_title": ch["title"], "utterance_index": u.utterance_index,
            "paragraph_index": u.paragraph_index, "sentence_index": u.sentence_index,
            "text": u.text, "spoken_text": u.spoken_text if u.spoken_text is not None else u.text,
            "phoneme_count": len(u.phoneme_ids),
            "missing_phonemes": u.missing_phonemes,
            "status": "synthesized" if rec else "skipped: nothing speakable",
            "batch_id": r.batch_id,
            "batch_size": (rec.engine_batch_size or len(rec.items)) if rec else 0,
            "chapter_path": ch["file"], "start_s": pos / sr, "duration_s": n / sr,
            "pause_after_s": pause / sr,
            "engine": rec.engine if rec else None, "precision": rec.precision if rec else None,
            "device": rec.device if rec else None, "infer_ms": rec.infer_ms if rec else None,
            "started_at": rec.started_at if rec else None,
            "finished_at": rec.finished_at if rec else None,
            "worker": rec.worker if rec else None, "queued_at": rec.queued_at if rec else None,
            "attempt": rec.attempt if rec else None,
            "phoneme_durations_s": _durations_s(rec, r.batch_pos, n, sr) if rec else None,
        }
        for k, v in row.items():
            cols[k].append(v)
        pos += n + pause
    return cols, pos, skipped, plan


def _last_of_book(book: dict, ch: dict) -> bool:
    """``ch`` is the last chapter of ``book`` that the job delivers."""
    selected = [c["index"] for c in book["chapters"] if c["selected"]]
    return bool(selected) and selected[-1] == ch["index"]


def chapter_part(job: Job, work: ChapterWork, records: dict[int, BatchRecord] | None = None) -> ChapterPart:
    """The manifest columns, samples and skipped rows of a chapter already written (from its batch
    records; no audio is read)."""
    cols, pos, skipped, _ = _chapter_columns(job, *work, _BatchAudio(job, records=records))
    return cols, pos, skipped


def _write_chapter(job: Job, b_i: int, book: dict, ch: dict, rows: list, records: dict[int, BatchRecord],
                   memory: dict[int, list[np.ndarray]] | None = None,
                   chosen: encoding.Encoding | None = None) -> ChapterPart:
    """Write one chapter file (atomically) from the batch audio, streamed: each utterance is read from
    its batch as the encoder needs it (never the chapter whole); its manifest columns, samples, skipped rows.
    Its loudness gain comes from the utterances' statistics in their batch records (measured from the
    stream, one more pass, where a record lacks them: jobs written by an older version)."""
    path = inside(job.out_dir, ch["file"])
    audio = _BatchAudio(job, records=records, memory=memory)  # one per chapter: open files are not shared between threads
    delay_s = settings.get(FINALIZE_DELAY_ENV)
    try:
        cols, pos, skipped, plan = _chapter_columns(job, b_i, book, ch, rows, audio)
        stats = None
        if job.config.loudness != "none":
            entries, at = [], 0
            for batch_id, batch_pos, pause in plan:
                if batch_id >= 0:
                    item = audio.record(batch_id).items[batch_pos]
                    entries.append((at, item))
                    at += int(item["samples"])
                at += pause
            stats = loudness_stats.chapter_from_records(entries, pos, job.sample_rate)
        silence = np.zeros(max((p for _, _, p in plan), default=0), np.int16)

        def pieces():
            for batch_id, batch_pos, pause in plan:
                if batch_id >= 0:
                    yield audio.read(batch_id, batch_pos)
                if pause:
                    yield silence[:pause]

        with atomic_path(path) as tmp:
            if delay_s:
                time.sleep(delay_s)
            deliver.write_chapter_stream(job, b_i, book, ch, pieces, stats, tmp, path, audio_write_errors,
                                         flac_level=encoding.flac_level(job.config.flac_level, chosen))
    finally:
        audio.close()
    return cols, pos, skipped


def _durations_s(rec: BatchRecord, pos: int, samples: int, sr: int) -> list[float] | None:
    d = rec.items[pos].get("phoneme_samples")
    if not d or sum(d) != samples:
        return None
    return [n / sr for n in d]


def finalized_summary(job: Job) -> FinalizeSummary:
    """The summary that ``finalize`` recorded for a finished job."""
    d = read_json(job.out_dir / WORK_DIR / FINALIZED_FILE)
    return FinalizeSummary(d["chapter_files"], d["utterances"], d["skipped"], d["audio_s"], d["manifest"],
                           d.get("encoding"))
