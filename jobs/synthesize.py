"""Synthesis: planned units of one or more jobs through one engine call, and their audio written.

A *unit* is one planned batch of one job (:class:`Unit`); :func:`synthesize_units` gives the rows of
several units (of jobs of one :func:`synthesis_class`) to the engine in one call, splitting the call
in two on out-of-memory and by scales for an engine that takes one set per call, and writes nothing;
:func:`write_unit` then writes each unit's audio file and record (:class:`jobs.job.BatchRecord`).
:func:`run_batch` does both for one unit (tests and bench; the runners gather units themselves).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields

import numpy as np
import soundfile as sf

from core.errors import DeterministicEngineError, EngineOutOfMemory, JobError
from core.files import atomic_path, create_json, real_directory, write_json
from engines.base import Engine, SynthesisBatch
from engines import registry
from engines.spec import engine_identity
from jobs.job import (BATCHES_DIR, BatchRecord, Job, audio_write_errors, claim_engine, default_worker_name,
                      now_iso)
from jobs import loudness_stats
from jobs.batching import group_by_scales, halve
from jobs.plan import PlannedUtterance

#: Most decoder frames an utterance may take per phoneme id at length scale 1 (times the length scale
#: above 1): about 0.58 s per id at 22.05 kHz, over ten times what speech takes. An engine that makes
#: more (a broken or hostile model, or runaway settings) fails the batch with one line: :func:`_check_lengths`.
MAX_FRAMES_PER_ID = 50


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
    """Audio per row, with the engine's milliseconds, splits, phoneme durations and loudness
    statistics per row (None where the engine made none: the writer measures them); on
    out-of-memory the rows are split in two and retried (recursively).
    ``item_scales``: each row's :class:`~engines.base.Scales` where the rows mix jobs of different
    scales (None: all ``scales``); an engine without ``per_item_scales`` gets one call per set."""
    if speaker is not None and not getattr(registry.find(engine.info.name), "speakers", False):
        # (the registry says which engines pass a speaker id to the voice; the others refuse the job)
        raise DeterministicEngineError(f"engine {engine.info.name} cannot choose a speaker (--speaker); "
                                       f"use --engine {' or '.join(registry.speaker_engines()[:1])}")
    if item_scales is not None and not engine.info.per_item_scales:
        return _synthesize_by_scales(engine, rows, item_scales, seed, speaker, hop_length)
    try:
        res = engine.synthesize(SynthesisBatch.from_sequences(
            [r.utt.phoneme_ids for r in rows], scales, seed, None if speaker is None else [speaker] * len(rows),
            item_scales))
    except EngineOutOfMemory:
        if len(rows) == 1:
            raise
        rows_a, rows_b = halve(rows)
        per_a, per_b = (None, None) if item_scales is None else halve(item_scales)
        a, ms_a, s_a, d_a, st_a = _synthesize_rows(engine, rows_a, scales, seed, speaker, per_a, hop_length)
        b, ms_b, s_b, d_b, st_b = _synthesize_rows(engine, rows_b, scales, seed, speaker, per_b, hop_length)
        return a + b, ms_a + ms_b, s_a + s_b + 1, d_a + d_b, st_a + st_b
    if len(res.sample_lengths) != len(rows):
        raise DeterministicEngineError(f"engine {engine.info.name} returned {len(res.sample_lengths)} items for {len(rows)}")
    _check_lengths(engine, rows, res.sample_lengths, scales, item_scales, hop_length)
    durations = [_phoneme_samples(res, i, len(r.utt.phoneme_ids)) for i, r in enumerate(rows)]
    stats = list(res.stats) if getattr(res, "stats", None) is not None else [None] * len(rows)
    return [res.item(i) for i in range(len(rows))], res.infer_ms, 0, durations, stats


def _synthesize_by_scales(engine: Engine, rows: list[PlannedUtterance], item_scales: list, seed: int | None,
                          speaker: int | None, hop_length: int = 256):
    """:func:`_synthesize_rows` as one call per distinct set of scales (in order of first
    appearance; the k-th call's seed is ``seed + k``), results back in the rows' order."""
    groups = group_by_scales(item_scales)
    audio: list = [None] * len(rows)
    durations: list = [None] * len(rows)
    stats: list = [None] * len(rows)
    infer_ms, splits = 0.0, 0
    for k, (sc, idx) in enumerate(groups.items()):
        a, ms, sp, d, st = _synthesize_rows(engine, [rows[i] for i in idx], sc,
                                            None if seed is None else (seed + k) & 0x7FFFFFFF, speaker,
                                            hop_length=hop_length)
        for j, i in enumerate(idx):
            audio[i], durations[i], stats[i] = a[j], d[j], st[j]
        infer_ms += ms
        splits += sp
    return audio, infer_ms, splits, durations, stats


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
    """A unit: one planned batch of one job, as a piece of an engine call (which may hold several)."""

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
    stats: list[list] | None = None
    """Per unit, per row: the loudness statistics the engine computed on its device
    (:class:`jobs.loudness_stats.UtteranceStats` of the engine's audio), or None: measured when written."""
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
    """Units of jobs with the same class can share one engine call: same voice weights, sample rate
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
                           f"they cannot share an engine call")
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
    # loudness statistics on the engine's device where it makes them (torch); else the writer measures
    loudness_stats.engine_hook(engine, first.sample_rate, loudness_stats.wanted(u.job for u in units))
    flat, infer_ms, splits, flat_durations, flat_stats = _synthesize_rows(
        engine, rows, first.scales, seed, first.meta["voice"].get("speaker_id"), item_scales, _hop_length(engine, first))
    items: list[list[np.ndarray]] = []
    durations: list[list] = []
    stats: list[list] = []
    k = 0
    for u, rs in zip(units, rows_per):
        part = flat[k:k + len(rs)]
        durations.append(flat_durations[k:k + len(rs)])
        stats.append(flat_stats[k:k + len(rs)])
        k += len(rs)
        items.append(part)  # normalised when written (write_unit), off the engine's thread on workers
    tag = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
    return SynthesizedUnits(units, items, engine.info, float(infer_ms), splits, started, now_iso(), tag,
                            durations, stats)


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
    with atomic_path(rec_path.parent / audio_name) as tmp, audio_write_errors(rec_path.parent / audio_name):
        audio, _ = synth.written_audio(index)
        sf.write(str(tmp), audio, info.sample_rate, subtype="PCM_16", format="WAV")
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in items])]).tolist()
    share = len(items) / max(synth.size, 1)  # this unit's share of the engine call's time
    durs = synth.durations[index] if synth.durations is not None else None
    # each item's loudness statistics (finalize combines them into its chapter's gain): the engine's,
    # or measured here from the samples as written; none for --loudness none (finalize sums its report)
    # and none for a GPU engine's units without the engine's own where finalize meters (measured_by_writer)
    louds = None
    engine_stats = synth.stats[index] if synth.stats is not None else None
    if loudness_stats.wanted([job]) and loudness_stats.measured_by_writer(info.device, engine_stats):
        louds = loudness_stats.unit_stats(synth.written_audio(index)[1], items,
                                          engine_stats, job.config.normalize, info.sample_rate)
    rec = BatchRecord(
        batch_id=batch_id, job_id=job.job_id, audio_file=audio_name,
        items=[{"book_index": r.utt.book_index, "chapter_index": r.utt.chapter_index,
                "utterance_index": r.utt.utterance_index, "offset": int(offsets[i]), "samples": int(len(items[i])),
                **({"phoneme_samples": durs[i]} if durs is not None and durs[i] is not None else {}),
                **({"loudness": louds[i]} if louds is not None else {})}
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
