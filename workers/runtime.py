"""Per-process state of a worker: its settings, its engine, the jobs it has seen.

A worker *process* (a prefork pool child, or the main process with ``--pool solo``)
owns its device: the engine is built there, once per voice, at process start
(``worker_process_init``) or on the first batch, and kept for the life of the
process. The parent of a prefork pool never builds an engine, so CUDA is only
ever initialised in the process that runs batches.

Settings travel from the ``worker`` command to its pool processes (and from ``worker --gpus`` to
its per-GPU workers) as one record, :class:`WorkerSettings` as JSON in ``BOOKTTS_WORKER_SETTINGS``
(:meth:`WorkerSettings.child_values`, written by :func:`core.settings.hand_to_children`). Without
it (``celery -A workers.celery_app worker`` started directly, a container's environment) each
setting has a variable of its own, declared in :mod:`core.settings`' ``worker`` group.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from engines import EngineSpec, load_engine, registry
from engines.shape_profile import SHAPES_KEPT  # shapes kept per stage in the node's profiles
from core import settings as env_settings
from core.errors import JobError

log = logging.getLogger("booktts.worker")

_declared = env_settings.setting
#: The one record of a worker's settings handed to child processes.
RECORD_ENV = _declared("BOOKTTS_WORKER_SETTINGS").name
#: The variables of single settings (also the ``worker`` flags' variables); names and defaults are
#: declared in :mod:`core.settings`.
ENGINE_ENV = _declared("BOOKTTS_WORKER_ENGINE").name
VOICE_ENV = _declared("BOOKTTS_WORKER_VOICE").name
LEASE_SECONDS_ENV = _declared("BOOKTTS_LEASE_SECONDS").name
MAX_DELIVERIES_ENV = _declared("BOOKTTS_MAX_DELIVERIES").name
GATHER_ENV = _declared("BOOKTTS_GATHER").name
MAX_BATCH_PHONEMES_ENV = _declared("BOOKTTS_MAX_BATCH_PHONEMES").name
ALLOWED_ROOTS_ENV = _declared("BOOKTTS_ALLOWED_ROOTS").name
STATE_DIR_ENV = _declared("BOOKTTS_STATE_DIR").name
PREPARE_SHAPES_ENV = _declared("BOOKTTS_PREPARE_SHAPES_S").name
EARLY_CHAPTERS_ENV = _declared("BOOKTTS_EARLY_CHAPTERS").name
UNIT_WRITERS_ENV = _declared("BOOKTTS_UNIT_WRITERS").name
DEFAULT_LEASE_SECONDS = _declared(LEASE_SECONDS_ENV).default
DEFAULT_MAX_DELIVERIES = _declared(MAX_DELIVERIES_ENV).default
#: Default seconds a new engine may spend preparing the shapes earlier workers of the node met.
DEFAULT_PREPARE_SHAPES_S = _declared(PREPARE_SHAPES_ENV).default
#: Default threads of an engine process that write an engine call's units (:class:`workers.batcher.Offloader`).
DEFAULT_UNIT_WRITERS = _declared(UNIT_WRITERS_ENV).default
#: Default threads of a worker process's chapter process (:mod:`workers.chapter_writer`).
DEFAULT_EARLY_CHAPTERS = _declared(EARLY_CHAPTERS_ENV).default
#: The node's shape profile is rewritten at most this often (seconds) while a worker runs.
SHAPES_SAVE_EVERY_S = 2.0


def default_state_dir() -> str:
    """``$XDG_STATE_HOME/booktts``, else ``~/.local/state/booktts``."""
    base = env_settings.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "booktts")


@dataclass(frozen=True)
class WorkerSettings:
    engine: EngineSpec
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    voice: str | None = None
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    gather: bool | None = None
    """Combine queued planned batches (of any job of the same synthesis class) up to the engine's budget;
    None: on for an engine that runs on a GPU."""
    max_batch_phonemes: int | None = None
    """Padded phoneme ids in one engine batch; None: the default for the engine's device."""
    allowed_roots: tuple[str, ...] = ()
    """Real paths of the directories job directories must be in; empty: anywhere."""
    state_dir: str = ""
    """This node's state directory (the jobs its workers have seen, :func:`remember_job`, and the shapes
    its engines met, :func:`shapes_to_record`); empty: the default, :func:`default_state_dir`."""
    prepare_shapes_s: float = DEFAULT_PREPARE_SHAPES_S
    """Seconds a new engine may spend at start preparing the shapes earlier engines of the node met
    (the torch engine's CUDA graphs: :class:`engines.base.PreparesShapes`); 0: neither prepared nor
    recorded."""
    early_chapters: int = DEFAULT_EARLY_CHAPTERS
    """Threads of this worker process's chapter process, which writes each chapter of a job as soon
    as all its batches are done (:mod:`workers.chapter_writer`); 0: the job's finalize writes them all."""
    unit_writers: int = DEFAULT_UNIT_WRITERS
    """Threads of each engine process that write an engine call's units (peak normalisation, the WAV
    file and its fsync, the record and its fsync: mostly time outside the interpreter lock, waiting on
    the disk). The engine's next call waits while a call's units are being written, so storage with
    slow fsyncs (a network filesystem) wants more."""
    status_file: str = ""
    """Where a pool process that cannot build its engine writes why (set by the ``worker`` command, which
    reports it and stops); empty: nowhere."""

    def __post_init__(self) -> None:
        from jobs.config import batch_defaults, runs_on_gpu

        if self.max_batch_phonemes is None:
            object.__setattr__(self, "max_batch_phonemes", batch_defaults(self.engine)[1])
        if self.gather is None:
            object.__setattr__(self, "gather", runs_on_gpu(self.engine))
        if not self.state_dir:
            object.__setattr__(self, "state_dir", default_state_dir())

    @property
    def heartbeat_s(self) -> float:
        return max(self.lease_seconds / 3.0, 0.2)

    def to_record(self) -> dict:
        """Every setting, as JSON values (:meth:`from_record` reads it back)."""
        return {"engine": self.engine.to_dict(), "lease_seconds": float(self.lease_seconds), "voice": self.voice,
                "max_deliveries": int(self.max_deliveries), "gather": bool(self.gather),
                "max_batch_phonemes": int(self.max_batch_phonemes), "allowed_roots": list(self.allowed_roots),
                "state_dir": self.state_dir, "prepare_shapes_s": float(self.prepare_shapes_s),
                "early_chapters": int(self.early_chapters), "unit_writers": int(self.unit_writers),
                "status_file": self.status_file}

    @classmethod
    def from_record(cls, record: dict) -> "WorkerSettings":
        """The settings :meth:`to_record` wrote; :class:`core.settings.SettingError` (one line) for a
        record that is not one."""
        try:
            return cls(engine=EngineSpec.from_dict(record["engine"]), lease_seconds=float(record["lease_seconds"]),
                       voice=record.get("voice") or None, max_deliveries=int(record["max_deliveries"]),
                       gather=bool(record["gather"]), max_batch_phonemes=int(record["max_batch_phonemes"]),
                       allowed_roots=real_roots(record.get("allowed_roots") or ()),
                       state_dir=str(record.get("state_dir") or ""),
                       prepare_shapes_s=float(record["prepare_shapes_s"]),
                       early_chapters=int(record["early_chapters"]), unit_writers=int(record["unit_writers"]),
                       status_file=str(record.get("status_file") or ""))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise env_settings.SettingError(f"environment variable {RECORD_ENV}: not a worker's settings record "
                                            f"({type(exc).__name__}: {exc}); unset it") from None

    def child_values(self) -> dict:
        """What a child process needs to run with these settings, for
        :func:`core.settings.hand_to_children`: the one record."""
        return {RECORD_ENV: self.to_record()}

    def to_env(self) -> dict[str, str]:
        """The variables a child process is given (:meth:`child_values`, encoded)."""
        return dict(env_settings.hand_to_children(self.child_values(), {}))

    @classmethod
    def from_env(cls, env=None) -> "WorkerSettings":
        """The record in ``env`` (default: this process's environment) where there is one, else the
        single variables (a ``celery`` worker started directly, a container)."""
        get = env_settings.get
        record = get(RECORD_ENV, env)
        if record is not None:
            return cls.from_record(record)
        spec = get(ENGINE_ENV, env)
        return cls(
            engine=EngineSpec.from_dict(spec) if spec else EngineSpec(),
            lease_seconds=get(LEASE_SECONDS_ENV, env),
            voice=get(VOICE_ENV, env),
            max_deliveries=get(MAX_DELIVERIES_ENV, env),
            gather=get(GATHER_ENV, env),
            max_batch_phonemes=get(MAX_BATCH_PHONEMES_ENV, env),
            allowed_roots=real_roots(get(ALLOWED_ROOTS_ENV, env)),
            state_dir=get(STATE_DIR_ENV, env) or "",
            prepare_shapes_s=get(PREPARE_SHAPES_ENV, env),
            early_chapters=get(EARLY_CHAPTERS_ENV, env),
            unit_writers=get(UNIT_WRITERS_ENV, env),
        )


# ------------------------------------------------------------------ allowed roots


class OutsideAllowedRoots(JobError):
    """A task named a job directory outside the worker's allowed roots: refused, nothing written."""


def real_roots(roots) -> tuple[str, ...]:
    """The real paths (symlinks and ``..`` resolved) of ``roots``, empty entries dropped, in order, once each."""
    out: list[str] = []
    for r in roots:
        if r is None or not str(r).strip():
            continue
        real = os.path.realpath(str(r))
        if real not in out:
            out.append(real)
    return tuple(out)


def check_job_dir(job_dir: str, roots: tuple[str, ...] | None = None) -> str:
    """The real path of ``job_dir`` from a task message, if it lies in one of ``roots`` (default: this
    worker's); raises :class:`OutsideAllowedRoots` otherwise. Without roots every directory is accepted.

    The path is resolved with ``os.path.realpath`` first, so neither a symlink nor ``..`` leads out of a
    root, and the caller goes on with the resolved path (not the message's), so a symlink swapped after
    the check changes nothing.
    """
    real = os.path.realpath(job_dir)
    roots = settings().allowed_roots if roots is None else roots
    if not roots:
        return real
    for root in roots:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    shown = f" (from the message: {job_dir})" if real != job_dir else ""
    raise OutsideAllowedRoots(f"job directory {real}{shown} is outside the allowed roots of this worker "
                              f"({', '.join(roots)}); nothing was written there")


_settings: WorkerSettings | None = None


def settings() -> WorkerSettings:
    """This process's settings (read from the environment once)."""
    global _settings
    if _settings is None:
        _settings = WorkerSettings.from_env()
    return _settings


def reset_for_tests() -> None:
    global _settings
    _settings = None
    _ENGINES.clear()
    _SHAPES_SAVED.clear()


# ------------------------------------------------------------------ engines

_ENGINES: dict[str, object] = {}
_ENGINE_LOCK = threading.Lock()


def _warm_up(engine, voice) -> None:
    """One tiny batch so the first real batch does not pay for lazy initialisation."""
    from engines.base import SynthesisBatch

    ids = [i for v in list(voice.phoneme_id_map.values())[:8] for i in v][:8] or [1, 2, 3]
    engine.synthesize(SynthesisBatch.from_sequences([ids], _scales(voice)))


def _scales(voice):
    from engines.base import Scales

    return Scales(voice.noise_scale, voice.length_scale, voice.noise_w)


def get_engine(voice, spec: EngineSpec | None = None, on_built=None):
    """The engine of this process for ``voice``, built (and warmed up) on first use.

    One voice at a time is kept: a job with another voice replaces the engine, so device
    memory holds one model. ``on_built(info, seconds)`` is called once an engine is built (the
    worker's metrics).
    """
    spec = spec or settings().engine
    key = f"{voice.model_path}|{json.dumps(spec.to_dict(), sort_keys=True)}"
    with _ENGINE_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            _ENGINES.clear()
            t0 = time.perf_counter()
            from jobs.calibration import CalibrationCorpus

            # (the fake engine's test hooks come from the environment there)
            engine = load_engine(spec, voice, calibration=CalibrationCorpus())
            if getattr(registry.find(spec.name), "warm_up", True):
                _warm_up(engine, voice)
            prepared = prepare_shapes(engine, spec, voice)
            _ENGINES[key] = engine
            info = engine.info
            if on_built is not None:
                on_built(info, time.perf_counter() - t0)
            log.info("engine ready: %s %s on %s (voice %s, %d Hz, max batch %d) in %.1f s, pid %d; %s",
                     info.name, info.precision, info.device, voice.name, info.sample_rate, info.max_batch,
                     time.perf_counter() - t0, os.getpid(),
                     startup_report(info, time.perf_counter() - t0, prepared))
        return engine


# ------------------------------------------------------------------ shapes met on this node
#
# An engine that runs the shapes it was prepared for faster (engines.base.PreparesShapes: the torch
# engine's CUDA graphs, which it otherwise runs eagerly the first two times it meets a shape) keeps
# count of the shapes it meets. The worker writes them to the node's state directory,
# ``<state_dir>/shapes/<settings>.json``, and the next engine of the same settings on the node
# prepares the most frequent ones before its first batch, within ``--prepare-shapes-s``.

# When each engine's shapes were last handed out for saving. Keyed by the engine object itself (weakly),
# not by id(): an id is reused once an engine is freed, and a new engine must not inherit a freed one's time.
_SHAPES_SAVED: "weakref.WeakKeyDictionary[object, float]" = weakref.WeakKeyDictionary()


def shapes_path(spec: EngineSpec, voice) -> Path:
    """The node's shape profile for engines of ``spec`` (any device index) and ``voice``'s model."""
    from engines import shape_profile

    return Path(settings().state_dir) / "shapes" / shape_profile.file_name(spec, voice)


def prepare_shapes(engine, spec: EngineSpec, voice) -> dict | None:
    """Have a new ``engine`` prepare the shapes the node's earlier engines of its settings met (see
    above); what it reported, or None (no such engine, no profile, or switched off)."""
    from engines import shape_profile

    return shape_profile.prepare(engine, shapes_path(spec, voice), settings().prepare_shapes_s)


def shapes_to_record(engine, spec: EngineSpec, voice, force: bool = False):
    """A function that merges the shapes ``engine`` met so far into the node's profile (to run on any
    thread: the engine's counts are read now), or None when there is nothing to do yet: at most every
    :data:`SHAPES_SAVE_EVERY_S` seconds unless ``force``."""
    from engines.base import PreparesShapes

    if settings().prepare_shapes_s <= 0 or not isinstance(engine, PreparesShapes):
        return None
    now = time.monotonic()
    last = _SHAPES_SAVED.get(engine)
    if not force and last is not None and now - last < SHAPES_SAVE_EVERY_S:
        return None
    _SHAPES_SAVED[engine] = now
    from engines import shape_profile

    path, mine = shapes_path(spec, voice), engine.shape_profile()
    return lambda: shape_profile.merge(path, mine, SHAPES_KEPT)


_PROCESS_T0 = time.monotonic()


def startup_report(info, engine_s: float, prepared: dict | None = None) -> str:
    """Why start-up took what it took: the process's age, the engine's own start-up steps
    (``info.extra``: Triton precompile, warm-up), where compiled kernels are cached, and the shapes
    prepared from the node's profile (``prepared``: :func:`prepare_shapes`)."""
    x = info.extra or {}
    parts = [f"process up {time.monotonic() - _PROCESS_T0:.1f} s"]
    if x.get("precompile"):
        compiled, kernels = x.get("precompile_compiled"), x.get("precompile_kernels")
        parts.append(f"Triton kernels {kernels}: {compiled} compiled, {(kernels or 0) - (compiled or 0)} from the "
                     f"cache in {x.get('precompile_s', 0):.1f} s")
        cache = env_settings.get("TRITON_CACHE_DIR")
        parts.append(f"kernel cache {cache or '~/.triton/cache'}"
                     + ("" if cache else
                        " (set TRITON_CACHE_DIR to a volume kept per node, or every new worker compiles again)"))
        if x.get("precompile_error"):
            parts.append(f"precompile failed: {x['precompile_error']}")
    if x.get("warmup"):
        parts.append(f"warm-up {x['warmup']}")
    if prepared is not None:
        parts.append(f"{prepared.get('captured', 0)} recorded shapes prepared in {prepared.get('seconds', 0):.1f} s "
                     f"({prepared.get('skipped', 0)} skipped)")
    parts.append(f"engine build and warm-up {engine_s:.1f} s")
    return "; ".join(parts)


def preload(on_built=None) -> None:
    """Build the engine at process start when the worker was given ``--voice``."""
    s = settings()
    if not s.voice:
        log.info("engine %s %s on %s: built on the first batch (no --voice to preload)",
                 s.engine.name, s.engine.precision, s.engine.device)
        return
    from core.voice import resolve_voice

    get_engine(resolve_voice(s.voice), s.engine, on_built)


# ------------------------------------------------------------------ jobs seen on this node
#
# A job lives in its directory and in Redis. If Redis loses its data (restarted without persistence)
# its queued messages are gone too, so some process must know the directory to rebuild the job from
# it: the reaper of any worker that has seen the job (:func:`workers.recovery.rebuild_lost_jobs`). This
# process's memory is not enough when every worker that took part died before Redis came back, so each
# job seen is also written to the node's state directory, ``<state_dir>/jobs/<job id>.json`` (the job
# directory, its queue and the Redis it belongs to), where a worker started later on the node finds it.

_KNOWN: dict[str, tuple[str, str]] = {}
_BAD_RECORDS: set[str] = set()
_KNOWN_LOCK = threading.Lock()


def _broker_key(broker: str) -> str:
    from workers.celery_app import redact_url

    return redact_url(broker)


def _jobs_dir() -> Path:
    return Path(settings().state_dir) / "jobs"


def remember_job(job_id: str, job_dir: str, queue: str, broker: str) -> None:
    """Remember a job this process works on, in memory and in the node's state directory, so that a
    reaper on this node can rebuild it if Redis (``broker``) loses it. A state directory that cannot be
    written costs only that: a warning, once per job."""
    with _KNOWN_LOCK:
        if _KNOWN.get(job_id) == (job_dir, queue):
            return
        _KNOWN[job_id] = (job_dir, queue)
    from core.files import write_json

    try:
        write_json(_jobs_dir() / f"{job_id}.json", {"job_id": job_id, "job_dir": job_dir, "queue": queue,
                                                   "broker": _broker_key(broker)})
    except OSError as exc:
        log.warning("job %s: not recorded in the node's state directory %s (%s: %s); if Redis loses its data "
                    "and no worker that saw the job is alive, `resume %s` rebuilds it", job_id,
                    settings().state_dir, type(exc).__name__, exc, job_dir)


def forget_job(job_id: str) -> None:
    with _KNOWN_LOCK:
        _KNOWN.pop(job_id, None)
    try:
        (_jobs_dir() / f"{job_id}.json").unlink(missing_ok=True)
    except OSError:
        pass


def known_jobs(broker: str) -> dict[str, tuple[str, str]]:
    """The jobs of ``broker`` that this process or another worker of the node has seen:
    ``{job id: (job directory, queue)}``."""
    key = _broker_key(broker)
    found: dict[str, tuple[str, str]] = {}
    try:
        entries = sorted(_jobs_dir().glob("*.json"))
    except OSError:
        entries = []
    from workers.node_state import read_record

    for path in entries:
        try:
            rec = read_record(path)  # never blocks (a FIFO), never follows a link
            if rec.get("broker") == key and rec.get("job_id") == path.stem:
                found[path.stem] = (str(rec["job_dir"]), str(rec["queue"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, JobError) as exc:
            if not isinstance(exc, FileNotFoundError) and str(path) not in _BAD_RECORDS:
                _BAD_RECORDS.add(str(path))  # one line per entry, not one per sweep
                log.warning("state directory entry ignored: %s", exc)
            continue  # half-gone or foreign: not ours to read
    with _KNOWN_LOCK:
        found.update(_KNOWN)
    return found
