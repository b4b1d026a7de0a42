"""A prepared job and what it owns: its records, directories and engine.

:class:`Job` is a job planned into an output directory (``job.json`` and ``plan.parquet``); reopen
one with :func:`load_job` (cached per process) or :func:`open_planned_job` (checked for a run).
:class:`BatchRecord` is what synthesizing one planned unit wrote (its JSON file marks the unit done).
The directory checks (:func:`check_write_directories`) and the engine identity of the job's audio
(:func:`claim_engine`, :func:`check_engine`) live here because every stage needs them.

Made by :mod:`jobs.prepare`, synthesized by :mod:`jobs.synthesize`, assembled by :mod:`jobs.finalize`.
See docs/DESIGN.md for the job directory.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import socket
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow.parquet as pq
import soundfile as sf

from core.errors import EngineMismatch, JobError
from core.files import create_json, inside, read_json, real_directory, storage_error
from core.voice import VoiceConfig, resolve_voice
from engines.spec import EngineSpec, describe_identity, engine_identity
from jobs import chapter_records, deliver
from jobs import claim as claims
from jobs.config import JobConfig
from jobs.plan import BatchInfo, PlannedUtterance, estimate_seconds, from_table

JOB_FILE = "job.json"
PLAN_FILE = "plan.parquet"
MANIFEST_FILE = "manifest.parquet"
WORK_DIR = ".work"
FINALIZED_FILE = "finalized.json"
#: The engine identity (:func:`engines.spec.engine_identity`) that synthesized the job's batches, in
#: ``.work``: written once, by the first synthesis (:func:`claim_engine`).
ENGINE_FILE = "engine.json"
#: Where batch audio and records go, below the job directory.
BATCHES_DIR = f"{WORK_DIR}/batches"
JOB_FORMAT_VERSION = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class BatchRecord:
    """What :func:`jobs.synthesize.write_unit` wrote for one batch; its JSON file marks the batch as done."""

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
    """The directories of ``job`` that this tool writes files into (chapter directories included): where
    :func:`jobs.finalize.sweep_stale_temp_files` looks for the temporary files of killed writers."""
    root = Path(job.out_dir)
    dirs = {root, root / WORK_DIR, root / BATCHES_DIR, root / deliver.LOUDNESS_DIR, root / chapter_records.CHAPTERS_DIR}
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
    ``engine``: as :func:`jobs.prepare.prepare_job`'s.
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
def audio_write_errors(final: Path):
    """libsndfile's write errors (it says only "System error.") as :class:`StorageError` /
    :class:`DiskFullError` naming ``final``, from the C ``errno`` of its failed call."""
    try:
        yield
    except sf.LibsndfileError as exc:
        code = getattr(getattr(sf, "_ffi", None), "errno", 0)  # thread-local, saved by cffi after each call
        raise storage_error(final, code, f"libsndfile: {exc.error_string or exc}") from exc

