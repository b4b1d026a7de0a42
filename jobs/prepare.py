"""Preparing a job: from book files to a planned job directory.

:func:`prepare_job` checks the inputs, ingests, segments, phonemizes and plans the books into units
(:func:`jobs.batching.pack_units`), then claims the output directory and writes ``job.json`` and ``plan.parquet``.
A job's identity (:func:`job_identity`) is the hash of its inputs, voice and settings: preparing the
same job again into its directory returns it as it is, which is how a run resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq

from core.errors import InputError, JobError
from core.files import atomic_path, inside, slug, write_json
from core.files import sha256_file as file_sha256
from core.voice import VoiceConfig, resolve_speaker, resolve_voice
from engines.spec import EngineSpec
from jobs import claim as claims
from jobs import deliver, metadata
from jobs.config import AUDIO_FORMATS, JobConfig, structure_of
from jobs.job import (JOB_FILE, JOB_FORMAT_VERSION, PLAN_FILE, WORK_DIR, Job, check_engine, check_write_directories,
                      load_job, now_iso)
from jobs.lexicon import lexicon_report, load_lexicon, make_speak, unknown_phonemes
from jobs.phonemize import Phonemizer
from jobs.batching import pack_units, padding_efficiency
from jobs.plan import PlannedUtterance, estimate_seconds, to_table
from jobs.segment import Segmenter


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



def estimate_workload_s(books: list[Path], config: JobConfig) -> float:
    """Seconds of speech ``books`` will roughly make, from their sizes alone (before planning; for the
    engine's start-up choices): about 15 characters of text a second at length scale 1, an EPUB's
    markup counted as half its uncompressed size (each format's reader says:
    :attr:`jobs.ingest.readers.Reader.text_chars`). 0 for what cannot be read (planning reports it)."""
    from jobs.ingest import reader_for

    chars = 0.0
    for b in books:
        try:
            p = Path(b)
            chars += reader_for(p).text_chars(p)
        except (OSError, ValueError, RuntimeError):
            continue
    return chars / 15.0 * (config.length_scale or 1.0)


def job_identity(inputs: list[dict], config: JobConfig, voice: VoiceConfig, lexicon_sha256: str | None = None) -> str:
    ident = {"v": JOB_FORMAT_VERSION, "inputs": [i["sha256"] for i in inputs], "config": config.identity(),
             "voice": voice.model_sha256()}
    if lexicon_sha256:  # a changed lexicon file is another job
        ident["lexicon"] = lexicon_sha256
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _check_inputs(books: list[Path]) -> list[dict]:
    from jobs.ingest.readers import accepted, check_input_size

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
            raise InputError(f"{p}: not a regular file (a device, FIFO or socket); pass a {accepted()} file")
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
    batches = pack_units(rows, config.max_batch, config.max_batch_phonemes, config.batch_order)
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
    captions): refuse with a line naming them (its batches and files were made for those). ``--flac-level
    auto`` (the default) resumes a job made with a level (before ``auto`` existed, say): the same samples."""
    mine = config.output_settings()
    if mine.get("flac_level") == "auto":
        mine["flac_level"] = existing.config.flac_level
    if existing.config.output_settings() == mine:
        return
    same = dataclasses.replace(config, **{**existing.config.output_settings(), **existing.meta.get("planned", {})})
    if job_identity(inputs, same, voice, lexicon_sha256) == existing.job_id:
        raise JobError(f"{out_dir} holds this job with {existing.config.output_flags()}; its output settings cannot "
                       f"change on resume: pass those options to resume, or choose another -o directory")


def _remove_empty_dir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:  # not there, or not empty
        pass


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
        from jobs.formats import COVERS_DIR, keep_covers

        if not (out_dir / COVERS_DIR).exists():
            undo.append(lambda: _remove_empty_dir(out_dir / COVERS_DIR))  # (after the files: undo runs reversed)
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
