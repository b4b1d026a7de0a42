"""Prometheus metrics of a worker (``cli.py worker --metrics-port PORT``; 0 = off).

Mode: prometheus_client's **multiprocess mode**. Batches run in prefork pool children,
so each child's counters live in that child. The ``worker`` command points
``PROMETHEUS_MULTIPROC_DIR`` at an empty directory before any metric exists; every
process (the children, and the parent with ``--pool solo``) writes its values to
memory-mapped files there, and the worker's main process serves the sum of all files
on one port (``MultiProcessCollector``). The alternative, one HTTP server per child,
would need one port per child (unknown in advance with ``--autoscale``) and would lose
the counts of a child that was replaced. With ``--gpus`` the supervisor owns the
directory and the port, and its per-GPU workers write into the same directory.

Counters of a dead child stay in the directory and keep counting in the sums, which is
what counters need. Only counters and histograms are used (no live gauges), so no
``mark_process_dead`` bookkeeping is needed.

Metrics (labels ``engine``, ``precision``, ``device``, ``queue``; ``device`` is the
physical GPU, e.g. ``cuda:1``, when a ``--gpus`` supervisor started the worker):

=======================================  =========  ==================================================
``booktts_batches_total``                counter    batches synthesized by this worker
``booktts_utterances_total``             counter    utterances synthesized
``booktts_audio_seconds_total``          counter    seconds of audio synthesized
``booktts_engine_seconds_total``         counter    engine (inference) time spent on them
``booktts_batch_duration_seconds``       histogram  wall time of a batch task (lease to record written)
``booktts_batch_fill_ratio``             histogram  items in the batch / the engine's max batch
``booktts_batch_failures_total``         counter    batches that failed for good (+ label ``error``)
``booktts_batch_retries_total``          counter    retries scheduled after a transient error
``booktts_engine_load_seconds``          histogram  engine build + warm-up time (no ``queue`` label)
=======================================  =========  ==================================================
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from celery import signals

from core import settings
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE

log = logging.getLogger("booktts.metrics")

LABELS = ("engine", "precision", "device", "queue")
ENV_DIR = settings.setting("PROMETHEUS_MULTIPROC_DIR").name
#: Set by the ``--gpus`` supervisor: the physical device this worker's ``cuda:0`` is.
ENV_DEVICE = settings.setting("BOOKTTS_METRICS_DEVICE").name

_lock = threading.Lock()
_metrics: dict | None = None
_metrics_pid: int | None = None
_created_dir: str | None = None


def _build() -> dict:
    from prometheus_client import Counter, Histogram

    return {
        "batches": Counter("booktts_batches", "Planned batches synthesized.", LABELS),
        "engine_calls": Counter("booktts_engine_batches", "Engine calls (a call may combine planned batches).",
                                LABELS),
        "utterances": Counter("booktts_utterances", "Utterances synthesized.", LABELS),
        "audio": Counter("booktts_audio_seconds", "Seconds of audio synthesized.", LABELS),
        "engine": Counter("booktts_engine_seconds", "Engine (inference) seconds spent on synthesized batches.", LABELS),
        "duration": Histogram("booktts_batch_duration_seconds", "Wall time of a batch task.", LABELS,
                              buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)),
        "fill": Histogram("booktts_batch_fill_ratio", "Items in a batch divided by the engine's max batch.", LABELS,
                          buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)),
        "failures": Counter("booktts_batch_failures", "Batches that failed for good.", LABELS + ("error",)),
        "retries": Counter("booktts_batch_retries", "Retries scheduled after a transient error.", LABELS),
        "load": Histogram("booktts_engine_load_seconds", "Engine build and warm-up time.", LABELS[:3],
                          buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)),
    }


def _m() -> dict:
    """The metric objects of this process (created on first use, so after the worker set the
    multiprocess directory, and in the pool child that uses them)."""
    global _metrics, _metrics_pid
    with _lock:
        if _metrics is None:
            _metrics = _build()
            _metrics_pid = os.getpid()
        return _metrics


def _device(device: str) -> str:
    return settings.get(ENV_DEVICE) or device


def _labels(engine: str, precision: str, device: str, queue: str | None) -> dict:
    return {"engine": engine, "precision": precision, "device": _device(device), "queue": queue or ""}


def _safe(fn):
    """Metrics never break a batch: errors are logged once and dropped."""

    def wrapper(*args, **kwargs):
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # pragma: no cover - defensive
            if not getattr(wrapper, "_warned", False):
                wrapper._warned = True
                log.warning("metrics: %s: %s (further errors not shown)", type(exc).__name__, exc)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_safe
def engine_call(info, queue: str | None, synth, wall_s: float) -> None:
    """One engine call of this process with the engine of ``info`` (:class:`engines.base.EngineInfo`):
    ``synth`` (:class:`jobs.synthesize.SynthesizedUnits`) is what it made, of one or more units (planned
    batches: several when the worker gathered them); ``wall_s`` its seconds around the engine."""
    items, planned, engine_s = synth.size, len(synth.units), synth.infer_ms / 1000.0
    audio_s = sum(len(a) for it in synth.items for a in it) / info.sample_rate
    m = _m()
    lab = _labels(info.name, info.precision, info.device, queue)
    m["batches"].labels(**lab).inc(planned)
    m["engine_calls"].labels(**lab).inc()
    m["utterances"].labels(**lab).inc(items)
    m["audio"].labels(**lab).inc(max(audio_s, 0.0))
    m["engine"].labels(**lab).inc(max(engine_s, 0.0))
    m["duration"].labels(**lab).observe(max(wall_s, 0.0))
    if info.max_batch:
        m["fill"].labels(**lab).observe(min(items / info.max_batch, 1.0))


@_safe
def engine_loaded(info, seconds: float) -> None:
    _m()["load"].labels(engine=info.name, precision=info.precision, device=_device(info.device)).observe(seconds)


def _spec_labels(task) -> dict:
    from workers import runtime

    spec = runtime.settings().engine
    info = getattr(task.request, "delivery_info", None) or {}
    return _labels(spec.name, spec.precision, spec.device, info.get("routing_key"))


_BATCH_TASKS = (TASK_SYNTHESIZE, TASK_FINALIZE)


@signals.task_failure.connect
@_safe
def _on_failure(sender=None, exception=None, **_) -> None:
    if getattr(sender, "name", None) not in _BATCH_TASKS:
        return
    _m()["failures"].labels(**_spec_labels(sender), error=type(exception).__name__).inc()


@signals.task_retry.connect
@_safe
def _on_retry(sender=None, request=None, **_) -> None:
    if getattr(sender, "name", None) not in _BATCH_TASKS:
        return
    _m()["retries"].labels(**_spec_labels(sender)).inc()


# ------------------------------------------------------------------ serving


def prepare_dir(path: str | None = None) -> str:
    """Make ``PROMETHEUS_MULTIPROC_DIR`` an empty directory (``path``, the variable's value, or a new
    temporary one) and make this process write metric values there. Call before any metric exists."""
    global _created_dir
    path = path or settings.get(ENV_DIR)
    if not path:
        path = _created_dir = tempfile.mkdtemp(prefix="booktts-metrics-")
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    for f in p.glob("*.db"):  # values of a previous run would be summed in
        f.unlink(missing_ok=True)
    settings.hand_to_children({ENV_DIR: str(p)})  # (this process's prometheus_client reads it too)
    # prometheus_client picks its value class when ``prometheus_client.values`` is imported;
    # if something imported it before the directory was set, pick again.
    from prometheus_client import values

    values.ValueClass = values.get_value_class()
    return str(p)


def serve(port: int, addr: str = "0.0.0.0"):
    """Serve the sum of every process's values in ``PROMETHEUS_MULTIPROC_DIR`` on ``addr:port``
    (a daemon thread). Returns the server."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=settings.get(ENV_DIR))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    log.info("metrics on http://%s:%d/metrics (multiprocess dir %s)", addr, port, settings.get(ENV_DIR))
    return server


def cleanup() -> None:
    """Remove the directory :func:`prepare_dir` created (never one the environment named)."""
    global _created_dir
    if _created_dir:
        shutil.rmtree(_created_dir, ignore_errors=True)
        _created_dir = None
