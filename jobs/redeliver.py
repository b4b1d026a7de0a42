"""Deliver a finished job again, with other output settings, from its kept synthesis.

:func:`redeliver` takes a job whose batches are all synthesized (their audio under
``.work/batches`` and their records) and writes its deliverables again with other settings:
format, loudness, captions, FLAC level, tags and cover (``--title``/``--author`` only where the
announcement does not speak them), and the pauses that finalize inserts (chapter and section
pauses, where the job has them). It synthesizes nothing and loads no engine.

Everything new is first written into a staging directory under ``.work`` by the same functions
finalize uses (:func:`jobs.finalize._assemble` on a staged copy of the job that reads the batch
audio from the job's own ``.work/batches``); any failure there removes the staging directory and
leaves the job's files as they were. Only then are the files moved into place: the manifest is
removed first and written last (a directory without it is not complete, as after a killed
finalize; deliver again), then ``job.json`` records the new settings, and files of the old settings
that the new ones do not have (chapter files of another format, caption files) are removed.

The job keeps its id (the batch records carry it). Settings in the job id that a deliver changed
are recorded under ``planned`` in job.json with their planned values, so that the same command
that planned the job, or one with the delivered settings, still finds it the same job
(:func:`jobs.prepare.prepare_job`).

This module does not parse options (that is :mod:`commands.deliver`) and does not encode audio
(that is :mod:`jobs.deliver` and :mod:`jobs.formats`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from core.errors import JobError
from core.files import inside, slug, write_json
from jobs import chapter_records, claim, deliver, formats, metadata
from jobs.config import SPOKEN_FIELDS, TAG_FIELDS
from jobs.finalize import FinalizeSummary, _assemble
from jobs.job import FINALIZED_FILE, JOB_FILE, MANIFEST_FILE, WORK_DIR, BatchRecord, Job, now_iso

#: Staging directories of deliveries, under the job's ``.work``.
STAGING_PREFIX = "deliver-"
#: Job settings a deliver may change besides :meth:`jobs.config.JobConfig.output_fields` (where the
#: job's config has them): silences finalize inserts, not synthesized audio.
PAUSE_FIELDS = ("chapter_pause_s", "section_pause_s")


@dataclass
class DeliverSummary:
    files: list[str]
    """The delivered audio files (relative), in book order."""
    removed: list[str]
    """Files of the old settings removed (relative)."""
    summary: FinalizeSummary
    seconds: float


@dataclass
class _StagedJob(Job):
    """The job as it will be delivered, writing under ``out_dir`` (the staging directory) and
    reading its batches from ``source``'s ``.work/batches``."""

    source: Path | None = None

    def record_path(self, batch_id: int) -> Path:
        return Path(self.source) / WORK_DIR / "batches" / f"b{batch_id:06d}-{self.job_id}.json"


def kept_synthesis(job: Job) -> dict[int, BatchRecord]:
    """Every batch record of ``job``, each with its audio file there and long enough; one-line
    :class:`JobError` otherwise (a deliver would have to synthesize again)."""
    records: dict[int, BatchRecord] = {}
    missing = []
    for b in job.batches:
        rec = job.batch_record(b.batch_id)
        if rec is None:
            missing.append(b.batch_id)
        else:
            records[b.batch_id] = rec
    if missing:
        raise JobError(f"{job.out_dir}: {len(missing)} of {len(job.batches)} batches of job {job.job_id} have no kept "
                       f"audio in {WORK_DIR}/batches (first: batch {missing[0]}); deliver only re-uses kept synthesis: "
                       f"run the job (`cli.py run -o {job.out_dir}`) to synthesize them again")
    for batch_id, rec in records.items():
        path = job.record_path(batch_id).parent / rec.audio_file
        try:
            frames = sf.info(str(path)).frames
        except (OSError, RuntimeError, sf.LibsndfileError):
            frames = -1
        if frames < rec.audio_samples:
            raise JobError(f"{job.out_dir}: the kept audio of batch {batch_id} ({WORK_DIR}/batches/{rec.audio_file}) is "
                           f"{'missing' if frames < 0 else 'truncated'}; deliver cannot write the job without it: "
                           f"delete that batch's record and run the job again (`cli.py run -o {job.out_dir}`)")
    return records


def _deliverables(job_meta: dict, config) -> set[str]:
    """The files (relative) a job's settings deliver: audio files and their captions."""
    out: set[str] = set()
    fmt = config.audio_format
    for book in job_meta["books"]:
        chapters = [ch for ch in book["chapters"] if ch["selected"]]
        audio = [formats.book_relpath(book["dir"], fmt)] if formats.per_book(fmt) else [ch["file"] for ch in chapters]
        if formats.per_book(fmt):
            out.update(ch["file"] for ch in chapters)  # the M4B's chapter WAVs under .work/chapters
        for a in audio:
            out.add(a)
            for ext in (config.captions or "").split(","):
                if ext:
                    out.add(str(Path(a).with_suffix(f".{ext}")))
    return out


def check_changes(job: Job, changes: dict) -> dict:
    """The changes a deliver may make (unset ones left out); one-line :class:`JobError` for one that
    would need synthesis again."""
    allowed = set(job.config.output_fields()) | {f for f in PAUSE_FIELDS if hasattr(job.config, f)}
    out = {}
    for name, value in changes.items():
        if value is None or value == getattr(job.config, name, None):
            if name == "cover" and value is not None:  # the same path again: the file may be new
                out[name] = value
            continue
        if name in SPOKEN_FIELDS and name not in allowed:
            raise JobError(f"--{name}: job {job.job_id} speaks the title and author in its announcement (it was "
                           f"planned with --announce), so a new {name} needs new synthesis; plan it as a new job "
                           f"(another -o directory)")
        if name not in allowed:
            raise JobError(f"--{name.replace('_s', '').replace('_', '-')}: job {job.job_id} has no such setting to "
                           f"deliver again")
        out[name] = value
    return out


def _new_meta(job: Job, config, changes: dict) -> dict:
    meta = copy.deepcopy(job.meta)
    meta["config"] = config.to_dict()
    for book in meta["books"]:
        for ch in book["chapters"]:  # chapter files are named by the format
            ch["file"] = formats.chapter_relpath(book["dir"], ch["index"], slug(ch["title"], "chapter"),
                                                 config.audio_format)
            inside(job.out_dir, ch["file"])
        if "title" in changes:
            book["title"] = config.title
        if "author" in changes:
            book["author"] = config.author
    if "cover" in changes:
        meta["cover"] = metadata.cover_entry(config.cover)
    ident = job.config.identity()
    planned = meta.setdefault("planned", {})
    for name in changes:  # a setting of the job id: the value the id was made with
        moved = dataclasses.replace(job.config, **{name: getattr(config, name)}).identity() != ident
        if moved and name not in planned:
            planned[name] = getattr(job.config, name)
    if not planned:
        meta.pop("planned")
    meta["delivered_at"] = now_iso()
    return meta


def redeliver(job: Job, changes: dict) -> DeliverSummary:
    """Write ``job``'s deliverables again with ``changes`` (JobConfig field -> value; None: keep) from
    its kept synthesis. Refuses (one line) while a run holds the directory, when batch audio is gone,
    and for changes that would need synthesis; a failure before the files are moved into place leaves
    the job's files as they were."""
    t0 = time.perf_counter()
    out = Path(job.out_dir)
    claim.check_claim(out, job.job_id)
    changes = check_changes(job, changes)
    config = dataclasses.replace(job.config, **changes)  # checked again (__post_init__)
    deliver.check_available(config)
    with claim.run_lock(out, job.job_id):
        for stale in (out / WORK_DIR).glob(f"{STAGING_PREFIX}*"):  # a killed deliver's (the lock keeps out live ones)
            shutil.rmtree(stale, ignore_errors=True)
        records = kept_synthesis(job)
        meta = _new_meta(job, config, changes)
        staging = out / WORK_DIR / f"{STAGING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        staging.mkdir(parents=True)
        try:
            staged = _StagedJob(job.job_id, staging, config, meta, job.rows, source=out)
            with chapter_records.finishing(job):  # no early chapter write or finalize meanwhile
                files, samples, skipped, chosen = _assemble(staged, None, None, records, 0)
                summary = FinalizeSummary(files, len(job.rows), skipped, samples / job.sample_rate, MANIFEST_FILE,
                                          chosen.to_dict() if chosen is not None else None)
                write_json(staging / WORK_DIR / FINALIZED_FILE, {**dataclasses.asdict(summary), "finalized_at": now_iso()})
                removed = _move_into_place(staging, out, meta, _deliverables(job.meta, job.config) -
                                           _deliverables(meta, config))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return DeliverSummary(files, removed, summary, time.perf_counter() - t0)


def _move_into_place(staging: Path, out: Path, meta: dict, obsolete: set[str]) -> list[str]:
    """Rename every staged file into ``out`` (the manifest removed first and renamed last, job.json
    just before it), then remove ``obsolete`` files of the old settings. Returns those removed."""
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    staged = sorted(p for p in staging.rglob("*") if p.is_file() and p.name not in (MANIFEST_FILE, ".lock"))
    for p in staged:
        target = inside(out, str(p.relative_to(staging)))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
    write_json(out / JOB_FILE, meta)
    removed = []
    for rel in sorted(obsolete):
        path = inside(out, rel)
        if path.is_file():
            path.unlink()
            removed.append(rel)
            if path.parent != out:
                try:  # a book's directory that only held chapter files of the old format
                    path.parent.rmdir()
                except OSError:
                    pass
    os.replace(staging / MANIFEST_FILE, out / MANIFEST_FILE)
    return removed

