"""The one pipeline both runners share: prepare a job, run its batches, finalize it.

``prepare_job`` ingests, segments, phonemizes and plans; ``run_batch`` turns one
planned batch into audio through any engine; ``finalize`` assembles chapter
files and the manifest. The local runner calls them in a loop; Celery workers
call them from thin tasks. See docs/DESIGN.md for the job directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import socket
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf

from engines.base import Engine, SynthesisBatch
from engines.spec import EngineSpec, describe_identity, engine_identity
from jobs import claim as claims
from jobs import chapter_pool, chapter_records, deliver, metadata
from jobs.config import AUDIO_FORMATS, JobConfig, structure_of
from core.errors import (BatchesNotDone, DeterministicEngineError, EngineMismatch, EngineOutOfMemory, InputError,
                         JobError)
from core.files import (atomic_path, create_json, inside, read_json, real_directory, slug, storage_error,
                        sweep_temp_files, write_json)
from jobs.phonemize import Phonemizer
from jobs.plan import (BatchInfo, PlannedUtterance, estimate_seconds, from_table, pack_batches,
                       padding_efficiency, to_table)
from jobs.segment import PauseKind, Segmenter
from jobs.lexicon import lexicon_report, load_lexicon, make_speak, unknown_phonemes
from core.voice import VoiceConfig, resolve_speaker, resolve_voice
from core.files import sha256_file as file_sha256

JOB_FILE = "job.json"
PLAN_FILE = "plan.parquet"
MANIFEST_FILE = "manifest.parquet"
#: Most chapter files encoded at once by :func:`finalize` (also bounded by the cores).
FINALIZE_THREADS = 8
#: Engines that pass a speaker id to the voice (``--speaker``); others refuse a multi-speaker job.
SPEAKER_ENGINES = ("onnx", "fake")
WORK_DIR = ".work"
#: Most decoder frames an utterance may take per phoneme id at length scale 1 (times the length scale
#: above 1): about 0.58 s per id at 22.05 kHz, over ten times what speech takes. An engine that makes
#: more (a broken or hostile model, or runaway settings) fails the batch with one line: :func:`_check_lengths`.
MAX_FRAMES_PER_ID = 50
FINALIZED_FILE = "finalized.json"
#: The engine identity (:func:`engines.spec.engine_identity`) that synthesized the job's batches, in
#: ``.work``: written once, by the first synthesis (:func:`claim_engine`).
ENGINE_FILE = "engine.json"
#: Where batch audio and records go, below the job directory.
BATCHES_DIR = f"{WORK_DIR}/batches"
JOB_FORMAT_VERSION = 1
#: Test knob: seconds ``finalize`` waits in each chapter file (its temporary file open), so that
#: tests can kill a worker in the middle of a finalize.
FINALIZE_DELAY_ENV = "BOOKTTS_TEST_FINALIZE_DELAY_S"

log = logging.getLogger("booktts.pipeline")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"




def parse_chapter_selection(spec: str | None, count: int, where: str) -> list[int]:
    """``"1,3-5"`` -> [1, 3, 4, 5] (1-based); None -> all. Out-of-range chapters are an InputError."""
    if not spec:
        return list(range(1, count + 1))
    chosen: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
            else:
                a = b = int(part)
        except ValueError:
            raise InputError(f"--chapters {spec!r}: {part!r} is not a number or range like 3-5") from None
        if a < 1 or b < a:
            raise InputError(f"--chapters {spec!r}: {part!r} is not a valid range (chapters start at 1)")
        if b > count:
            raise InputError(f"--chapters {spec!r}: {where} has only {count} chapters; run `cli.py plan` to list them")
        chosen.update(range(a, b + 1))
    return sorted(chosen)


@dataclass
class BatchRecord:
    """What ``run_batch`` wrote for one batch; its JSON file marks the batch as done."""

    batch_id: int
    job_id: str
    audio_file: str
    items: list[dict]
    """Per item in batch order: book_index, chapter_index, utterance_index, offset, samples."""
    engine: str
    precision: str
    device: str
    infer_ms: float
    started_at: str
    finished_at: str
    worker: str
    attempt: int
    queued_at: str | None
    sample_rate: int
    splits: int = 0
    """How many times the batch was split in two after the device ran out of memory."""
    engine_batch: str | None = None
    """Id of the engine call that synthesized this batch (a worker may run several planned
    batches, of several jobs, in one engine call); None in records of older versions."""
    engine_batch_size: int | None = None
    """Utterances in that engine call (None: the batch ran alone, ``len(items)``)."""
    engine_batch_units: int = 1
    """Planned batches in that engine call."""

    @property
    def audio_samples(self) -> int:
        return sum(i["samples"] for i in self.items)

    @classmethod
    def load(cls, path: Path) -> "BatchRecord":
        return cls(**read_json(path))


@dataclass
class FinalizeSummary:
    chapter_files: list[str]
    utterances: int
    skipped: int
    audio_s: float
    manifest: str


@dataclass
class Job:
    """A prepared job: its config, voice, plan and directory. Reopen with :func:`load_job`."""

    job_id: str
    out_dir: Path
    config: JobConfig
    meta: dict
    rows: list[PlannedUtterance] = field(repr=False)

    @cached_property
    def voice(self) -> VoiceConfig:
        return resolve_voice(self.config.voice)

    @cached_property
    def batches(self) -> list[BatchInfo]:
        return [BatchInfo(**b) for b in self.meta["batches"]]

    @cached_property
    def _by_batch(self) -> dict[int, list[PlannedUtterance]]:
        out: dict[int, list[PlannedUtterance]] = {}
        for r in self.rows:
            if r.batch_id >= 0:
                out.setdefault(r.batch_id, []).append(r)
        for v in out.values():
            v.sort(key=lambda r: r.batch_pos)
        return out

    @property
    def sample_rate(self) -> int:
        return int(self.meta["voice"]["sample_rate"])

    def batch_rows(self, batch_id: int) -> list[PlannedUtterance]:
        try:
            return self._by_batch[batch_id]
        except KeyError:
            raise JobError(f"job {self.job_id} has no batch {batch_id}") from None

    def record_path(self, batch_id: int) -> Path:
        """Where this job's record of a batch goes; the name carries the job id."""
        return self.out_dir / WORK_DIR / "batches" / f"b{batch_id:06d}-{self.job_id}.json"

    def batch_record(self, batch_id: int) -> BatchRecord | None:
        """This job's record of ``batch_id``, or None: the batch is not done.

        A record is accepted only if it names this job and this batch and lists exactly the
        batch's planned utterances, in order; anything else (another job's record, in the
        unnamed ``bNNNNNN.json`` of directories written before job ids were in the names) is
        not this batch's output, and the batch runs again.
        """
        legacy = self.out_dir / WORK_DIR / "batches" / f"b{batch_id:06d}.json"
        for p in (self.record_path(batch_id), legacy):
            try:
                rec = BatchRecord.load(p)
            except FileNotFoundError:
                continue
            if self._is_own_record(rec, batch_id):
                return rec
        return None

    def _is_own_record(self, rec: BatchRecord, batch_id: int) -> bool:
        if rec.job_id != self.job_id or rec.batch_id != batch_id:
            return False
        rows = self._by_batch.get(batch_id, [])
        return len(rec.items) == len(rows) and all(
            (i["book_index"], i["chapter_index"], i["utterance_index"])
            == (r.utt.book_index, r.utt.chapter_index, r.utt.utterance_index) for i, r in zip(rec.items, rows))

    def pending_batches(self) -> list[int]:
        """Batches without a record of this job (every record is read and checked)."""
        return [b.batch_id for b in self.batches if self.batch_record(b.batch_id) is None]

    def batch_estimated_seconds(self, batch_id: int) -> float:
        return estimate_seconds(self.batch_rows(batch_id), self.scales.length_scale)

    @cached_property
    def scales(self):
        from engines.base import Scales

        return Scales.from_dict(self.meta["scales"])

    @property
    def finalized(self) -> bool:
        return (self.out_dir / WORK_DIR / FINALIZED_FILE).exists() and (self.out_dir / MANIFEST_FILE).exists()


def job_directories(job: Job) -> list[Path]:
    """The directories of ``job`` that this tool writes files into (chapter directories included)."""
    root = Path(job.out_dir)
    dirs = {root, root / WORK_DIR, root / WORK_DIR / "batches"}
    for book in job.meta["books"]:
        for ch in book["chapters"]:
            dirs.add(inside(root, ch["file"]).parent)
    return sorted(dirs)


def check_write_directories(out_dir: Path, job: Job | None = None) -> None:
    """Refuse (:class:`~core.errors.UnsafePathError`, one line) to write into ``out_dir`` when a
    directory that runs and workers write into below it is a symbolic link or resolves outside it
    (:func:`core.files.real_directory`): ``.work``, ``.work/batches``, ``.work/loudness``,
    ``.work/chapters`` and, with ``job``, its chapter directories. A link planted there (say
    ``.work/batches`` -> a directory elsewhere) would otherwise take the job's files, and a worker's
    allowed roots only check the job directory itself. Checks only: creates nothing."""
    rels = [WORK_DIR, BATCHES_DIR, deliver.LOUDNESS_DIR, chapter_records.CHAPTERS_DIR]
    if job is not None:
        rels += sorted({str(Path(ch["file"]).parent) for book in job.meta["books"] for ch in book["chapters"]}
                       - {"."})
    for rel in rels:
        real_directory(out_dir, rel)


def recorded_engine(out_dir) -> dict | None:
    """The engine identity that synthesized the job in ``out_dir`` (its ``.work/engine.json``); None
    before its first batch. An unreadable file is a :class:`JobError` naming it."""
    path = Path(out_dir) / WORK_DIR / ENGINE_FILE
    try:
        d = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise JobError(f"{path} is unreadable ({type(exc).__name__}); it names the engine of the job's batches: "
                       f"restore it, or delete the job directory and run the job again") from exc
    if not (isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("precision"), str)):
        raise JobError(f"{path} does not name an engine and precision; restore it, or delete the job directory "
                       f"and run the job again")
    return engine_identity(d["name"], d["precision"])


def _engine_of_records(job: Job) -> dict | None:
    """The engine identity of the first batch record of ``job`` (for a directory written before
    ``engine.json`` existed); None if it has none."""
    for b in job.batches:
        rec = job.batch_record(b.batch_id)
        if rec is not None:
            return engine_identity(rec.engine, rec.precision)
    return None


def check_engine(out_dir, job_id: str, identity: dict, job: Job | None = None) -> None:
    """Refuse (:class:`EngineMismatch`, one line naming the job's engine) to go on with a job whose
    batches another engine identity synthesized: its chapters would mix the two (tones and speech,
    fp16 and fp32). A job with no batch yet takes any engine. With ``job``, a directory without
    ``engine.json`` (written before it existed) is judged by its first batch record."""
    have = recorded_engine(out_dir)
    if have is None and job is not None:
        have = _engine_of_records(job)
    if have is not None and have != engine_identity(identity["name"], identity["precision"]):
        raise EngineMismatch(f"{out_dir} holds job {job_id}, synthesized with {describe_identity(have)}; the engine "
                             f"of a job cannot change (its audio would mix two engines): resume with those options, "
                             f"or choose another -o directory")


def claim_engine(job: Job, identity: dict) -> None:
    """Record ``identity`` as the engine of ``job`` if no batch of it was synthesized yet (the first
    synthesis wins, atomically: :func:`core.files.create_json`), else :func:`check_engine`. Checked
    once per opened job and identity in a process."""
    identity = engine_identity(identity["name"], identity["precision"])
    key = (identity["name"], identity["precision"])
    if job.__dict__.get("_engine_claimed") == key:
        return
    real_directory(job.out_dir, WORK_DIR)
    if recorded_engine(job.out_dir) is None:
        check_engine(job.out_dir, job.job_id, identity, job)  # batches from before engine.json existed
    if not create_json(Path(job.out_dir) / WORK_DIR / ENGINE_FILE, identity):
        check_engine(job.out_dir, job.job_id, identity)
    job.__dict__["_engine_claimed"] = key


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


def estimate_workload_s(books: list[Path], config: JobConfig) -> float:
    """Seconds of speech ``books`` will roughly make, from their sizes alone (before planning; for the
    engine's start-up choices): about 15 characters of text a second at length scale 1, an EPUB's
    markup counted as half its uncompressed size. 0 for what cannot be read (planning reports it)."""
    import zipfile

    chars = 0.0
    for b in books:
        try:
            p = Path(b)
            if p.suffix.lower() == ".epub":
                with zipfile.ZipFile(p) as z:
                    chars += 0.5 * sum(i.file_size for i in z.infolist()
                                       if i.filename.lower().endswith((".xhtml", ".html", ".htm")))
            else:
                chars += p.stat().st_size
        except (OSError, ValueError, RuntimeError, zipfile.BadZipFile):
            continue
    return chars / 15.0 * (config.length_scale or 1.0)


def job_identity(inputs: list[dict], config: JobConfig, voice: VoiceConfig, lexicon_sha256: str | None = None) -> str:
    ident = {"v": JOB_FORMAT_VERSION, "inputs": [i["sha256"] for i in inputs], "config": config.identity(),
             "voice": voice.model_sha256()}
    if lexicon_sha256:  # a changed lexicon file is another job
        ident["lexicon"] = lexicon_sha256
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _check_inputs(books: list[Path]) -> list[dict]:
    from jobs.ingest import check_input_size

    if not books:
        raise InputError("no input files given; pass one or more TXT, Markdown or EPUB files")
    out = []
    for p in books:
        p = Path(p)
        if not p.exists():
            raise InputError(f"{p}: no such file; check the path")
        if p.is_dir():
            raise InputError(f"{p}: is a directory; pass the book files inside it")
        if not p.is_file():  # a device (/dev/zero), FIFO or socket: reading it could block or never end
            raise InputError(f"{p}: not a regular file (a device, FIFO or socket); pass a .txt, .md or .epub file")
        check_input_size(p)  # before hashing: a sparse 2 GB file is refused at once, not after reading it all
        out.append({"path": str(p), "sha256": file_sha256(p)})
    return out


def prepare_job(books: list[Path], out_dir: Path, config: JobConfig, voice: VoiceConfig | None = None,
                progress=None, before_write=None, engine: EngineSpec | None = None) -> Job:
    """Ingest, segment, phonemize and plan; claim ``out_dir``; write ``job.json`` and ``plan.parquet``.

    If ``out_dir`` already holds the same job (same inputs, voice and settings), it is
    returned as it is (this is how a re-run resumes). Another job there (its claim, or its
    job.json) is a JobError, at once or when the claim is taken (:mod:`jobs.claim`).

    Everything that can refuse runs before anything is written: planning in memory, then
    ``before_write(job_id)`` (the distributed runner claims the directory in Redis there; it may
    return an undo callable), then the claim file, then the plan and job.json. A refusal or error
    after that removes what this call created, and nothing else.

    ``engine``: the engine that will synthesize (``run``): resuming a job that another engine identity
    synthesized is refused (:func:`check_engine`). ``plan`` passes none.
    """
    from jobs.ingest import load_book
    from jobs.ingest.outline import outline_entry
    from jobs import formats
    from jobs.segment_pool import segment_chapters

    if config.audio_format not in AUDIO_FORMATS:
        raise InputError(f"--format {config.audio_format!r} is not supported; choose {', '.join(AUDIO_FORMATS)}")
    deliver.check_available(config)  # a missing encoder is refused before anything is planned or synthesized
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"-o {out_dir}: exists and is not a directory; choose a directory")
    inputs = _check_inputs(books)
    metadata.check_books(len(inputs), config)
    cover = metadata.cover_entry(config.cover)  # a bad --cover is refused before anything is planned
    voice = voice or resolve_voice(config.voice)
    speaker_id = resolve_speaker(voice, config.speaker)
    lexicon = load_lexicon(config.lexicon) if config.lexicon else None
    job_id = job_identity(inputs, config, voice, lexicon.sha256 if lexicon else None)
    check_write_directories(out_dir)  # before the claim file (in .work) is written
    existing = load_job(out_dir) if (out_dir / JOB_FILE).exists() else None
    if existing is not None:
        check_write_directories(out_dir, existing)
    if existing is not None:
        planned = existing.meta.get("planned")  # job-id settings a deliver changed (jobs/redeliver.py), as planned
        if planned and job_id != existing.job_id and job_identity(
                inputs, dataclasses.replace(config, **planned), voice, lexicon.sha256 if lexicon else None) == existing.job_id:
            job_id = existing.job_id
        # this job with other output settings: say which
        _refuse_other_output(out_dir, existing, inputs, config, voice, lexicon.sha256 if lexicon else None)
    claims.check_claim(out_dir, job_id)  # another job owns the directory: refuse before planning
    if existing is not None:
        if existing.job_id == job_id:
            if engine is not None:
                check_engine(out_dir, job_id, engine.identity(), existing)
            return _claim_and_write(out_dir, job_id, before_write, None)  # resume (claims a pre-claim directory)
        raise JobError(f"{out_dir} holds another job ({existing.job_id}: other inputs or settings); "
                       f"choose another -o directory or delete it")

    scales = config.scales_for(voice)
    # refuses a bad voice or limit before any book is read
    Segmenter(Phonemizer(voice), config.max_phonemes, speak=make_speak(lexicon, config.normalize_text))
    books_meta = []
    to_segment = []  # (book index, chapter) of the selected chapters, in book order
    for b_i, (path, inp) in enumerate(zip(books, inputs)):
        book = load_book(Path(path), encoding=config.encoding, front_matter=config.include_front_matter,
                         footnotes=config.footnotes, structure=structure_of(config))
        metadata.override_book(book, config)  # --title, --author
        announce = book.announcement() if config.announce else None
        selected = set(parse_chapter_selection(config.chapters, len(book.chapters), str(path)))
        book_dir = f"{b_i + 1:02d}-{slug(book.title, 'book')}"
        chapters_meta = []
        for ch in book.chapters:
            rel = formats.chapter_relpath(book_dir, ch.index, slug(ch.title, "chapter"), config.audio_format)
            inside(out_dir, rel)
            chapters_meta.append({"index": ch.index, "title": ch.title, "file": rel,
                                  "selected": ch.index in selected, **outline_entry(ch)})
            if ch.index in selected:
                first = ch.index == book.chapters[0].index
                to_segment.append((b_i, ch, announce if first else None))
        details = formats.book_details(path)  # EPUB: dc:creator, dc:date, the cover image's member name
        books_meta.append({**inp, "title": book.title, **details, "author": book.author or details.get("author"),
                           "format": book.format, "dir": book_dir, "chapters": chapters_meta})
    counts = [len(b["chapters"]) for b in books_meta]
    on_chapter = (lambda b_i, ch: progress(b_i, ch.index, counts[b_i])) if progress else None
    rows = [PlannedUtterance(u)
            for utts in segment_chapters(voice, config.max_phonemes, to_segment, progress=on_chapter,
                                         lexicon=lexicon, normalize_text=config.normalize_text)
            for u in utts]
    unknown = unknown_phonemes(lexicon, rows, voice, [str(b) for b in books])  # one warning line each
    if not any(r.utt.speakable for r in rows):
        raise InputError(f"{', '.join(str(b) for b in books)}: nothing speakable in the selected chapters")
    batches = pack_batches(rows, config.max_batch, config.max_batch_phonemes, config.batch_order)
    meta = {
        "format_version": JOB_FORMAT_VERSION,
        "job_id": job_id,
        "created_at": now_iso(),
        "config": config.to_dict(),
        "voice": {"name": voice.name, "model_sha256": voice.model_sha256(), "sample_rate": voice.sample_rate,
                  **({"speaker_id": speaker_id} if speaker_id is not None else {})},
        "lexicon": lexicon_report(lexicon, rows),
        **({"unknown_phonemes": unknown} if unknown else {}),
        **({"cover": cover} if cover else {}),
        "scales": scales.to_dict(),
        "books": books_meta,
        "batches": [asdict(b) for b in batches],
        "summary": {
            "utterances": len(rows),
            "unspeakable": sum(not r.utt.speakable for r in rows),
            "batches": len(batches),
            "padding_efficiency": padding_efficiency(batches),
            "estimated_audio_s": estimate_seconds(rows, scales.length_scale),
        },
    }
    return _claim_and_write(out_dir, job_id, before_write, Job(job_id, out_dir, config, meta, rows))


def _refuse_other_output(out_dir: Path, existing: Job, inputs: list[dict], config: JobConfig, voice,
                         lexicon_sha256: str | None = None) -> None:
    """``out_dir`` holds this same job but with other output settings (format, loudness,
    captions): refuse with a line naming them (its batches and files were made for those)."""
    if existing.config.output_settings() == config.output_settings():
        return
    same = dataclasses.replace(config, **{**existing.config.output_settings(), **existing.meta.get("planned", {})})
    if job_identity(inputs, same, voice, lexicon_sha256) == existing.job_id:
        raise JobError(f"{out_dir} holds this job with {existing.config.output_flags()}; its output settings cannot "
                       f"change on resume: pass those options to resume, or choose another -o directory")


def _claim_and_write(out_dir: Path, job_id: str, before_write, job: Job | None) -> Job:
    """Claim ``out_dir`` for ``job_id`` and write ``job`` (None: job.json is there already).
    On any failure, undo what this call created: the claim, files, folders it made."""
    undo = []
    made_dirs = [d for d in (out_dir / WORK_DIR, out_dir, *out_dir.parents) if not d.exists()]  # innermost first
    try:
        if before_write is not None:
            release = before_write(job_id)
            if release is not None:
                undo.append(release)
        out_dir.mkdir(parents=True, exist_ok=True)
        if claims.claim(out_dir, job_id):
            undo.append(lambda: claims.release_claim(out_dir, job_id))
        if job is None or (out_dir / JOB_FILE).exists():  # the same job, planned already (or just now)
            existing = load_job(out_dir)
            if existing.job_id != job_id:  # only a job.json older than claims can differ here
                raise JobError(f"{out_dir} holds another job ({existing.job_id}: other inputs or settings); "
                               f"choose another -o directory or delete it")
            return existing
        for name in (PLAN_FILE, JOB_FILE):
            if not (out_dir / name).exists():
                undo.append(lambda name=name: (out_dir / name).unlink(missing_ok=True))
        from jobs.formats import keep_covers

        for kept in keep_covers(out_dir, job.meta["books"]):  # the book file may be gone by finalize
            undo.append(lambda kept=kept: kept.unlink(missing_ok=True))
        with atomic_path(out_dir / PLAN_FILE) as tmp:
            pq.write_table(to_table(job.rows), tmp)
        write_json(out_dir / JOB_FILE, job.meta)  # written last: its presence means the job is prepared
        return job
    except BaseException:
        for step in reversed(undo):
            try:
                step()
            except Exception:  # undo is best effort; the original error is what matters
                pass
        for d in made_dirs:  # only those still empty
            try:
                d.rmdir()
            except OSError:
                pass
        raise


_JOB_CACHE: dict[tuple[str, float], Job] = {}
_JOB_CACHE_LOCK = threading.Lock()
#: Jobs a process keeps opened (the least recently used is dropped): long-lived processes (a server's
#: kept chapter processes, a worker's) meet a new job with every run, and a worker's engine process
#: opens every job whose batches it gathers (workers.batcher), all of them on a busy node: with fewer
#: than the node's active jobs, every engine call read their plans again (a job of 1,700 utterances
#: holds about 7 MB opened).
MAX_CACHED_JOBS = 32


def load_job(out_dir: Path) -> Job:
    """Reopen a prepared job (cached per process by directory and job.json mtime)."""
    out_dir = Path(out_dir)
    jf = out_dir / JOB_FILE
    if not jf.exists():
        raise JobError(f"{out_dir} holds no job (no {JOB_FILE}); run `cli.py run` or `cli.py submit` first")
    key = (str(out_dir.resolve()), jf.stat().st_mtime)
    with _JOB_CACHE_LOCK:
        job = _JOB_CACHE.pop(key, None)
        if job is not None:
            _JOB_CACHE[key] = job  # now the most recently used: last
            return job
    try:
        meta = read_json(jf)
    except (UnicodeDecodeError, ValueError) as exc:
        raise JobError(f"{jf} is not a readable job file ({type(exc).__name__}); restore it, or use a new "
                       f"output directory") from exc
    if not isinstance(meta, dict) or meta.get("format_version") != JOB_FORMAT_VERSION:
        raise JobError(f"{jf} was written by another version of this tool; use a new output directory")
    rows = from_table(pq.read_table(out_dir / PLAN_FILE))
    job = Job(meta["job_id"], out_dir, JobConfig.from_dict(meta["config"]), meta, rows)
    with _JOB_CACHE_LOCK:
        job = _JOB_CACHE.setdefault(key, job)  # another thread's, if it opened the job meanwhile
        while len(_JOB_CACHE) > MAX_CACHED_JOBS:
            _JOB_CACHE.pop(next(iter(_JOB_CACHE)))
    return job


def forget_jobs() -> None:
    """Empty this process's cache of opened jobs (:func:`load_job`): a long-lived process that has
    finished with them (a worker's finalize process between jobs)."""
    with _JOB_CACHE_LOCK:
        _JOB_CACHE.clear()


def load_checked(out_dir, job_id: str) -> Job:
    """The job in ``out_dir``, if it still is job ``job_id`` (:class:`JobError` if another job replaced it)."""
    job = load_job(Path(out_dir))
    if job.job_id != job_id:
        raise JobError(f"{out_dir} now holds job {job.job_id}, not {job_id}; the job was replaced")
    return job


def open_planned_job(out_dir: Path, voice_name: str | None = None, engine: EngineSpec | None = None) -> Job:
    """A job planned earlier in ``out_dir``, optionally with another copy of its voice.

    ``voice_name`` may differ from the job's (e.g. the voice's exported .safetensors on a GPU host);
    it must be the same voice: same source model hash where the file records it, same sample rate.
    ``engine``: as :func:`prepare_job`'s.
    """
    job = load_job(out_dir)
    if engine is not None:
        check_engine(out_dir, job.job_id, engine.identity(), job)
    check_write_directories(out_dir, job)
    deliver.check_available(job.config)  # its output needs packages this host may lack: say so before synthesizing
    claims.claim(out_dir, job.job_id)  # refuses another job's claim; claims a directory older than claims
    if voice_name and voice_name != job.config.voice:
        voice = resolve_voice(voice_name)
        want = job.meta["voice"]
        source = voice.source_sha256 or voice.model_sha256()
        if voice.sample_rate != want["sample_rate"] or source != want["model_sha256"]:
            raise JobError(f"voice {voice_name} is not the voice job {job.job_id} was planned with "
                           f"({want['name']}); pass that voice or its exported weights")
        job.voice = voice  # replaces the cached lookup of the job's own voice name
    return job


@contextlib.contextmanager
def _audio_write_errors(final: Path):
    """libsndfile's write errors (it says only "System error.") as :class:`StorageError` /
    :class:`DiskFullError` naming ``final``, from the C ``errno`` of its failed call."""
    try:
        yield
    except sf.LibsndfileError as exc:
        code = getattr(getattr(sf, "_ffi", None), "errno", 0)  # thread-local, saved by cffi after each call
        raise storage_error(final, code, f"libsndfile: {exc.error_string or exc}") from exc


def _normalize(item: np.ndarray) -> np.ndarray:
    """Piper's per-utterance peak normalisation, on int16."""
    peak = int(np.abs(item.astype(np.int32)).max(initial=0))
    if peak == 0:
        return item
    return np.clip(np.rint(item.astype(np.float32) * (32767.0 / peak)), -32767, 32767).astype(np.int16)


#: Above this many samples a unit's normalisation is spread over threads (numpy releases the GIL).
_PARALLEL_NORMALIZE_SAMPLES = 4_000_000
_normalize_pool: ThreadPoolExecutor | None = None
_normalize_pool_lock = threading.Lock()


def _normalize_into(out: np.ndarray, items: list[np.ndarray], start: int) -> None:
    k = start
    for a in items:
        n = len(a)
        peak = max(int(a.max()), -int(a.min())) if n else 0
        if peak == 0:
            out[k:k + n] = a
        else:
            x = a.astype(np.float32)
            x *= np.float32(32767.0 / peak)
            np.rint(x, out=x)
            np.clip(x, -32767, 32767, out=x)
            out[k:k + n] = x
        k += n


def _normalize_concat(items: list[np.ndarray]) -> np.ndarray:
    """The items concatenated, each peak-normalised as :func:`_normalize` does (the same samples),
    item by item (an utterance fits in the CPU's cache; one pass over a whole batch does not); a big
    unit's items are shared among a few threads, each writing its own part of the result."""
    global _normalize_pool
    if not items:
        return np.zeros(0, np.int16)
    lens = [len(a) for a in items]
    total = sum(lens)
    out = np.empty(total, dtype=np.int16)
    parts = min(8, os.cpu_count() or 1, len(items))
    if total < _PARALLEL_NORMALIZE_SAMPLES or parts < 2:
        _normalize_into(out, items, 0)
        return out
    with _normalize_pool_lock:
        if _normalize_pool is None:
            _normalize_pool = ThreadPoolExecutor(parts, thread_name_prefix="booktts-normalize")
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    cuts = np.linspace(0, len(items), parts + 1).astype(int)
    futures = [_normalize_pool.submit(_normalize_into, out, items[cuts[i]:cuts[i + 1]], int(starts[cuts[i]]))
               for i in range(parts) if cuts[i + 1] > cuts[i]]
    for f in futures:
        f.result()
    return out


def _synthesize_rows(engine: Engine, rows: list[PlannedUtterance], scales, seed: int | None,
                     speaker: int | None = None, item_scales: list | None = None, hop_length: int = 256):
    """Audio per row; on out-of-memory the rows are split in two and retried (recursively).
    ``item_scales``: each row's :class:`~engines.base.Scales` where the rows mix jobs of different
    scales (None: all ``scales``); an engine without ``per_item_scales`` gets one call per set."""
    if speaker is not None and engine.info.name not in SPEAKER_ENGINES:
        raise DeterministicEngineError(f"engine {engine.info.name} cannot choose a speaker (--speaker); "
                                       f"use --engine {' or '.join(SPEAKER_ENGINES[:1])}")
    if item_scales is not None and not engine.info.per_item_scales:
        return _synthesize_by_scales(engine, rows, item_scales, seed, speaker, hop_length)
    try:
        res = engine.synthesize(SynthesisBatch.from_sequences(
            [r.utt.phoneme_ids for r in rows], scales, seed, None if speaker is None else [speaker] * len(rows),
            item_scales))
    except EngineOutOfMemory:
        if len(rows) == 1:
            raise
        half = len(rows) // 2
        per_a, per_b = (None, None) if item_scales is None else (item_scales[:half], item_scales[half:])
        a, ms_a, s_a, d_a = _synthesize_rows(engine, rows[:half], scales, seed, speaker, per_a, hop_length)
        b, ms_b, s_b, d_b = _synthesize_rows(engine, rows[half:], scales, seed, speaker, per_b, hop_length)
        return a + b, ms_a + ms_b, s_a + s_b + 1, d_a + d_b
    if len(res.sample_lengths) != len(rows):
        raise DeterministicEngineError(f"engine {engine.info.name} returned {len(res.sample_lengths)} items for {len(rows)}")
    _check_lengths(engine, rows, res.sample_lengths, scales, item_scales, hop_length)
    durations = [_phoneme_samples(res, i, len(r.utt.phoneme_ids)) for i, r in enumerate(rows)]
    return [res.item(i) for i in range(len(rows))], res.infer_ms, 0, durations


def _synthesize_by_scales(engine: Engine, rows: list[PlannedUtterance], item_scales: list, seed: int | None,
                          speaker: int | None, hop_length: int = 256):
    """:func:`_synthesize_rows` as one call per distinct set of scales (in order of first
    appearance; the k-th call's seed is ``seed + k``), results back in the rows' order."""
    groups: dict = {}
    for i, sc in enumerate(item_scales):
        groups.setdefault(sc, []).append(i)
    audio: list = [None] * len(rows)
    durations: list = [None] * len(rows)
    infer_ms, splits = 0.0, 0
    for k, (sc, idx) in enumerate(groups.items()):
        a, ms, sp, d = _synthesize_rows(engine, [rows[i] for i in idx], sc,
                                        None if seed is None else (seed + k) & 0x7FFFFFFF, speaker,
                                        hop_length=hop_length)
        for j, i in enumerate(idx):
            audio[i], durations[i] = a[j], d[j]
        infer_ms += ms
        splits += sp
    return audio, infer_ms, splits, durations


def _check_lengths(engine: Engine, rows: list[PlannedUtterance], lengths, scales, item_scales,
                   hop_length: int) -> None:
    """Refuse the engine's output where an utterance is longer than :data:`MAX_FRAMES_PER_ID` frames
    per phoneme id allow (:class:`DeterministicEngineError`, one line naming the utterance), before
    any of it is normalised or written."""
    for i, r in enumerate(rows):
        length_scale = (item_scales[i] if item_scales is not None else scales).length_scale
        n_ids = max(len(r.utt.phoneme_ids), 1)
        cap = n_ids * MAX_FRAMES_PER_ID * max(1.0, float(length_scale)) * hop_length
        if int(lengths[i]) > cap:
            sr = engine.info.sample_rate
            u = r.utt
            raise DeterministicEngineError(
                f"engine {engine.info.name} made {int(lengths[i]) / sr:.1f} s of audio for utterance "
                f"{u.utterance_index} of book {u.book_index + 1} chapter {u.chapter_index} ({n_ids} phoneme ids), "
                f"over the cap of {MAX_FRAMES_PER_ID} frames per phoneme id at length scale {length_scale:g} "
                f"({cap / sr:.1f} s); check the voice model and its inference settings")


def _phoneme_samples(res, i: int, n_ids: int) -> list[int] | None:
    """Whole samples per phoneme id of item i, summing to its sample count (None: the engine gives
    no durations, or they do not add up to the audio it returned)."""
    d = res.item_durations(i, n_ids) if hasattr(res, "item_durations") else None
    if d is None or len(d) != n_ids:
        return None
    ends = np.rint(np.cumsum(d, dtype=np.float64)).astype(np.int64)
    total = int(res.sample_lengths[i])
    if n_ids == 0 or abs(int(ends[-1]) - total) > 1:  # the engine's minimum-length clamp, or no ids
        return None
    ends[-1] = total
    return np.diff(np.concatenate([[0], ends])).tolist()


def run_batch(job: Job, batch_id: int, engine: Engine, worker: str | None = None, attempt: int = 1,
              queued_at: str | None = None) -> BatchRecord:
    """Synthesize one batch and write its audio and record atomically.

    Idempotent: if the batch is already done its record is returned and nothing is written.
    Two concurrent deliveries each write their own audio file; the record created first wins (it
    is never replaced) and refers to its own audio, and the other delivery removes its audio.
    """
    existing = job.batch_record(batch_id)
    if existing is not None:
        return existing
    unit = Unit(job, batch_id, attempt=attempt, queued_at=queued_at)
    synth = synthesize_units([unit], engine)
    return write_unit(synth, 0, worker=worker)


@dataclass
class Unit:
    """One planned batch of one job, as a piece of a (possibly larger) engine batch."""

    job: Job
    batch_id: int
    attempt: int = 1
    queued_at: str | None = None


@dataclass
class SynthesizedUnits:
    """The audio of several units synthesized in one engine call, before it is written."""

    units: list[Unit]
    items: list[list[np.ndarray]]
    """Per unit, per row in batch order: the engine's int16 audio (peak normalisation, where the job asks
    for it, is applied by :func:`write_unit`)."""
    engine_info: object
    infer_ms: float
    splits: int
    started_at: str
    finished_at: str
    engine_batch: str
    """Identifies the engine call (shared by every unit synthesized in it)."""
    durations: list[list] | None = None
    """Per unit, per row: whole samples per phoneme id (None where the engine gives no durations)."""
    _written: dict = field(default_factory=dict, repr=False, compare=False)
    """:meth:`written_audio`'s results, by unit index."""

    @property
    def size(self) -> int:
        return sum(len(i) for i in self.items)

    def written_audio(self, index: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Unit ``index``'s audio as it is written: one int16 array (peak-normalised per item where
        its job asks for it) and each item's view into it. Computed once (the writer and the local
        runner's in-memory chapter source share it)."""
        cache = self._written
        if index not in cache:
            items = self.items[index]
            audio = (_normalize_concat(items) if self.units[index].job.config.normalize else
                     np.concatenate(items) if items else np.zeros(0, np.int16))
            bounds = np.concatenate([[0], np.cumsum([len(a) for a in items])]).astype(np.int64)
            cache[index] = (audio, [audio[bounds[i]:bounds[i + 1]] for i in range(len(items))])
        return cache[index]


def synthesis_class(job: Job) -> str:
    """Units of jobs with the same class can share one engine batch: same voice weights, sample rate
    and speaker. Their synthesis scales may differ: an engine with ``per_item_scales`` takes each
    item's own, and :func:`synthesize_units` splits the call by scales for the others."""
    ident = {"voice": job.meta["voice"]["model_sha256"], "sr": job.sample_rate}
    if job.meta["voice"].get("speaker_id") is not None:
        ident["speaker"] = job.meta["voice"]["speaker_id"]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _hop_length(engine: Engine, job: Job) -> int:
    """Samples per decoder frame of the engine's output (its own where it says, else the job's voice's)."""
    hop = getattr(engine, "hop_length", None)
    return int(hop) if isinstance(hop, int) and hop > 0 else int(job.voice.hop_length)


def synthesize_units(units: list[Unit], engine: Engine) -> SynthesizedUnits:
    """Synthesize the rows of ``units`` (planned batches, of one or several jobs of one
    :func:`synthesis_class`) in one engine call, split in two on out-of-memory, and by scales for an
    engine that takes one set per call. Writes nothing."""
    if not units:
        raise JobError("no units to synthesize")
    first = units[0].job
    for u in units:
        if engine.info.sample_rate != u.job.sample_rate:  # checked before any audio is written
            raise DeterministicEngineError(
                f"engine sample rate {engine.info.sample_rate} differs from the voice's {u.job.sample_rate}")
        if u.job.meta["voice"].get("speaker_id") != first.meta["voice"].get("speaker_id"):
            raise JobError(f"units of jobs {first.job_id} and {u.job.job_id} have different speakers; "
                           f"they cannot share an engine batch")
    identity = engine_identity(engine.info.name, engine.info.precision)
    for job in {id(u.job): u.job for u in units}.values():  # before any audio is made: one engine per job
        claim_engine(job, identity)
    rows_per = [u.job.batch_rows(u.batch_id) for u in units]
    rows = [r for rs in rows_per for r in rs]
    started = now_iso()
    seed = (int(first.job_id[:8], 16) + units[0].batch_id) & 0x7FFFFFFF
    item_scales = None
    if any(u.job.scales != first.scales for u in units):  # jobs of several speaking rates or noise settings
        item_scales = [u.job.scales for u, rs in zip(units, rows_per) for _ in rs]
    flat, infer_ms, splits, flat_durations = _synthesize_rows(engine, rows, first.scales, seed,
                                                              first.meta["voice"].get("speaker_id"), item_scales,
                                                              _hop_length(engine, first))
    items: list[list[np.ndarray]] = []
    durations: list[list] = []
    k = 0
    for u, rs in zip(units, rows_per):
        part = flat[k:k + len(rs)]
        durations.append(flat_durations[k:k + len(rs)])
        k += len(rs)
        items.append(part)  # normalised when written (write_unit), off the engine's thread on workers
    tag = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
    return SynthesizedUnits(units, items, engine.info, float(infer_ms), splits, started, now_iso(), tag,
                            durations)


def write_unit(synth: SynthesizedUnits, index: int, worker: str | None = None) -> BatchRecord:
    """Write unit ``index`` of ``synth``: its audio file, then its record (atomically, record last).

    Idempotent like :func:`run_batch`: a unit whose record appeared meanwhile keeps that record.
    """
    unit, items, info = synth.units[index], synth.items[index], synth.engine_info
    job, batch_id = unit.job, unit.batch_id
    rows = job.batch_rows(batch_id)
    rec_path = job.record_path(batch_id)
    existing = job.batch_record(batch_id)
    if existing is not None:
        return existing
    real_directory(job.out_dir, BATCHES_DIR)  # no link planted since the job was opened
    token = os.urandom(4).hex()
    audio_name = f"b{batch_id:06d}-{job.job_id}-{token}.wav"
    with atomic_path(rec_path.parent / audio_name) as tmp, _audio_write_errors(rec_path.parent / audio_name):
        audio, _ = synth.written_audio(index)
        sf.write(str(tmp), audio, info.sample_rate, subtype="PCM_16", format="WAV")
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in items])]).tolist()
    share = len(items) / max(synth.size, 1)  # this unit's share of the engine call's time
    durs = synth.durations[index] if synth.durations is not None else None
    rec = BatchRecord(
        batch_id=batch_id, job_id=job.job_id, audio_file=audio_name,
        items=[{"book_index": r.utt.book_index, "chapter_index": r.utt.chapter_index,
                "utterance_index": r.utt.utterance_index, "offset": int(offsets[i]), "samples": int(len(items[i])),
                **({"phoneme_samples": durs[i]} if durs is not None and durs[i] is not None else {})}
               for i, r in enumerate(rows)],
        engine=info.name, precision=info.precision, device=info.device,
        infer_ms=round(synth.infer_ms * share, 3), started_at=synth.started_at, finished_at=synth.finished_at,
        worker=worker or default_worker_name(), attempt=unit.attempt, queued_at=unit.queued_at,
        sample_rate=info.sample_rate, splits=synth.splits, engine_batch=synth.engine_batch,
        engine_batch_size=synth.size, engine_batch_units=len(synth.units),
    )
    first = job.batch_record(batch_id)
    # the record's fields as they are (its items are fresh plain dicts: asdict's deep copy of a thousand
    # of them, and an indented dump, cost more than the audio file's write)
    doc = {f.name: getattr(rec, f.name) for f in fields(rec)}
    if first is None and create_json(rec_path, doc, compact=True):
        return rec
    if first is None:  # a record appeared since the check (another delivery racing this one)
        try:
            first = BatchRecord.load(rec_path)
        except (OSError, ValueError, KeyError, TypeError):
            first = None
        if first is None or not job._is_own_record(first, batch_id):  # not this batch's output: replace it
            write_json(rec_path, doc)
            return rec
    # another delivery finished first: keep its record, drop our audio
    (rec_path.parent / audio_name).unlink(missing_ok=True)
    return first


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
                  memory: dict[int, list[np.ndarray]] | None = None) -> ChapterPart:
    """Write one chapter file (atomically) as ``finalize`` does, then its record
    (:mod:`jobs.chapter_records`, which lets a later finalize keep the file); its batches must be done.

    ``records``: batch records already read (shared between threads, filled as read);
    ``memory``: per batch id, the items' audio as written, read instead of the batch file.
    """
    records = {} if records is None else records
    check_write_directories(job.out_dir, job)
    part = _write_chapter(job, *work, records, memory)
    chapter_records.save(job, chapter_key(work), work[2]["file"], work[3], part[1], part[2], records)
    return part


def finalize(job: Job, written: dict[tuple[int, int], ChapterPart] | None = None,
             memory: dict[int, list[np.ndarray]] | None = None,
             records: dict[int, BatchRecord] | None = None, processes: int | None = None) -> FinalizeSummary:
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
    as the host's cores allow).
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
        files, total_samples, skipped = _assemble(job, written, memory, records, processes)
    remove_unreferenced_batch_audio(job)
    summary = FinalizeSummary(files, len(job.rows), skipped, total_samples / job.sample_rate, MANIFEST_FILE)
    write_json(job.out_dir / WORK_DIR / FINALIZED_FILE, {**asdict(summary), "finalized_at": now_iso()})
    claims.clear_submitted(job.out_dir, job.job_id)  # the workers' job is over: a local run may run it again
    return summary


def _assemble(job: Job, written, memory, records, processes) -> tuple[list[str], int, int]:
    """finalize's work under its lock: the chapters not written yet, the book-level files, the
    manifest. Returns (delivered files, samples, skipped rows)."""
    import pyarrow as pa

    chapters = selected_chapters(job)
    records = {} if records is None else records  # read once, shared by the chapters' readers
    written = dict(written or {})
    for work in chapter_records.valid(job, [c for c in chapters if chapter_key(c) not in written], records):
        written[chapter_key(work)] = chapter_part(job, work, records)  # its file stays; its rows from the records
    todo = [c for c in chapters if chapter_key(c) not in written]
    # Chapters are written in parallel: many hours of audio in processes (jobs.chapter_pool), else on
    # threads (libsndfile and most of NumPy run without the GIL); the manifest keeps book order.
    processes = chapter_pool.processes_for(job, todo, limit=processes)
    if processes:
        new = write_chapters_in_processes(job, todo, processes)
    else:
        threads = max(1, min(len(todo), os.cpu_count() or 1, FINALIZE_THREADS))
        with ThreadPoolExecutor(threads, thread_name_prefix="finalize") as pool:
            new = dict(zip(map(chapter_key, todo), pool.map(lambda c: write_chapter(job, c, records, memory), todo)))
    parts = [written[chapter_key(c)] if chapter_key(c) in written else new[chapter_key(c)] for c in chapters]
    cols: dict[str, list] = {c: [] for c in MANIFEST_COLUMNS}
    for part, _, _ in parts:
        for k in cols:
            cols[k].extend(part[k])
    files = deliver.finish(job, cols)  # M4Bs, captions, loudness.json (rewrites cols' paths for M4B)
    table = pa.table(cols)
    with atomic_path(job.out_dir / MANIFEST_FILE) as tmp:
        pq.write_table(table, tmp)
    return files, sum(n for _, n, _ in parts), sum(k for _, _, k in parts)


def write_chapters_in_processes(job: Job, works: list[ChapterWork], processes: int,
                                kept: "chapter_pool.KeptPool | None" = None) -> dict[tuple[int, int], ChapterPart]:
    """:func:`write_chapter` of each of ``works`` in up to ``processes`` processes (:mod:`jobs.chapter_pool`;
    ``kept``: those of a long-lived caller, started once), by :func:`chapter_key`."""
    return chapter_pool.write_chapters(job, works, processes, write_chapter_of, chapter_key, kept=kept)


def write_chapter_of(job_dir: str, job_id: str, key: tuple[int, int]) -> ChapterPart:
    """In a chapter process: open job ``job_id`` from ``job_dir`` and write its chapter ``key``."""
    job = load_checked(job_dir, job_id)
    for work in selected_chapters(job):
        if chapter_key(work) == key:
            return write_chapter(job, work)
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
                   memory: dict[int, list[np.ndarray]] | None = None) -> ChapterPart:
    """Write one chapter file (atomically) from the batch audio; its manifest columns, samples, skipped rows."""
    path = inside(job.out_dir, ch["file"])
    audio = _BatchAudio(job, records=records, memory=memory)  # one per chapter: open files are not shared between threads
    delay_s = float(os.environ.get(FINALIZE_DELAY_ENV) or 0)
    try:
        cols, pos, skipped, plan = _chapter_columns(job, b_i, book, ch, rows, audio)
        with atomic_path(path) as tmp:
            if delay_s:
                time.sleep(delay_s)
            pieces: list[np.ndarray] = []
            for batch_id, batch_pos, pause in plan:
                if batch_id >= 0:
                    pieces.append(audio.read(batch_id, batch_pos))
                if pause:
                    pieces.append(np.zeros(pause, np.int16))
            audio.close()
            pcm = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
            del pieces
            deliver.write_chapter(job, b_i, book, ch, pcm, tmp, path, _audio_write_errors)
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
    return FinalizeSummary(d["chapter_files"], d["utterances"], d["skipped"], d["audio_s"], d["manifest"])
