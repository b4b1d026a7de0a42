"""Every environment variable the product reads, declared once: its name, type, default and one line
of doc. The only module that reads the process environment for them, and the only one that writes
them for child processes (:func:`hand_to_children`).

Reading: ``settings.get("BOOKTTS_LEASE_SECONDS")`` (or the attribute ``settings.BOOKTTS_LEASE_SECONDS``)
is the typed value from the environment, read at the call (a test's ``monkeypatch.setenv`` is seen),
else its default. A value that does not parse raises :class:`SettingError`, one line naming the
variable and what it accepts. ``env=`` reads another mapping instead (a child's environment, a test's).

Settings are flags first; a variable exists where a container or a child process needs one.
docs/operations.md, section 8, is :func:`markdown_table` (``python -m core.settings`` prints it;
``tests/test_settings.py`` fails when the two differ).

Groups: ``product`` (what operators set), ``worker`` (a worker's settings, as a ``celery`` worker
started directly reads them, several also ``worker`` flags' variables; ``BOOKTTS_WORKER_SETTINGS``
carries all of them to child processes as one record), ``internal`` (set by one booktts process for its children), ``other``
(names other software owns, read here too) and ``test`` (switches the test suite hands to the
processes it starts; nothing in production sets them).

``REDIS_URL`` may hold the Redis password: it is read from the environment only (never a record,
a file or a command line) and :func:`describe` never shows its value.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, MutableMapping

from core.errors import InputError


class SettingError(InputError):
    """An environment variable's value that does not parse: one line naming the variable and what it
    accepts."""


@dataclass(frozen=True)
class Kind:
    """How a variable's text becomes a value (``parse`` raises ValueError) and back (``encode``);
    ``accepts`` says what it takes, for error lines and the docs."""

    accepts: str
    parse: Callable[[str], Any]
    encode: Callable[[Any], str] = str


def _number(cast, lo, what: str) -> Kind:
    def parse(raw: str):
        value = cast(raw)
        if value != value or value in (float("inf"), float("-inf")) or (lo is not None and value < lo):
            raise ValueError(raw)
        return value

    return Kind(f"{what}" + (f" >= {lo:g}" if lo is not None else ""), parse,
                repr if cast is float else (lambda v: str(int(v))))


def integer(lo: int | None = 0) -> Kind:
    return _number(int, lo, "a whole number")


def seconds(lo: float | None = 0) -> Kind:
    return _number(float, lo, "seconds")


TEXT = Kind("any text", lambda raw: raw)

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(raw: str) -> bool:
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(raw)


FLAG = Kind("1 or 0 (true/false, yes/no, on/off)", _flag, lambda v: "1" if v else "0")


def _switch(raw: str) -> str:
    return {"1": "on", "0": "off"}[raw]  # (KeyError: not a switch value)


#: A torch engine switch: ``1`` on, ``0`` off, unset: auto (the engine decides for its device).
SWITCH = Kind("1 (on) or 0 (off); unset: auto", _switch, lambda v: {"on": "1", "off": "0"}[v])


def choice(*values: str) -> Kind:
    def parse(raw: str) -> str:
        if raw.lower() not in values:
            raise ValueError(raw)
        return raw.lower()

    return Kind(" or ".join(values), parse)


#: Directories separated by ``os.pathsep``; empty entries dropped.
PATHS = Kind(f"directories separated by {os.pathsep!r}",
             lambda raw: tuple(p for p in raw.split(os.pathsep) if p.strip()),
             lambda v: os.pathsep.join(v))


def _json_object(raw: str) -> dict:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(raw)
    return value


JSON_OBJECT = Kind("a JSON object", _json_object, lambda v: json.dumps(v, sort_keys=True))


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: Any
    doc: str
    group: str = "product"
    secret: bool = False
    """Never shown (its value may hold a password)."""

    def raw(self, env=None, blank_is_unset: bool = True) -> str | None:
        """The variable's text (surrounding blanks dropped), or None where it is unset (or blank, unless
        ``blank_is_unset`` is False: ``CUDA_VISIBLE_DEVICES=`` hides every GPU)."""
        text = (os.environ if env is None else env).get(self.name)
        if text is None or (blank_is_unset and not str(text).strip()):
            return None
        return str(text).strip()

    def is_set(self, env=None) -> bool:
        return self.raw(env) is not None

    def get(self, env=None) -> Any:
        """The typed value, else the default; :class:`SettingError` for a value that does not parse."""
        raw = self.raw(env)
        if raw is None:
            return self.default
        try:
            return self.kind.parse(raw)
        except (ValueError, KeyError, TypeError, RecursionError):
            shown = "(hidden)" if self.secret else repr(raw if len(raw) <= 60 else raw[:60] + "...")
            raise SettingError(f"environment variable {self.name}={shown}: give {self.kind.accepts} "
                               f"({self.doc}), or unset it") from None

    def encode(self, value) -> str:
        return self.kind.encode(value)


SETTINGS: dict[str, Setting] = {}


def _declare(name: str, kind: Kind, default, doc: str, group: str = "product", secret: bool = False) -> None:
    assert name not in SETTINGS, name
    SETTINGS[name] = Setting(name, kind, default, doc, group, secret)


# ------------------------------------------------------------------ product: what operators set
_declare("BOOKTTS_DEBUG", FLAG, False, "tracebacks instead of one-line errors")
_declare("BOOKTTS_CACHE", TEXT, None, "the per-voice cache of exported stages and INT8 models "
         "(default ~/.cache/booktts)")
_declare("BOOKTTS_TRT_DIR", TEXT, None, "where TensorRT plans are kept (default: the voice's cache, tensorrt/)")
_declare("BOOKTTS_SERVER", TEXT, None, "the engine server's socket: `serve --socket`, and `run --server` "
         "(set: every `run` uses the server)")
_declare("BOOKTTS_WATCH_CONFIG", TEXT, None, "`beat --config`")
_declare("BOOKTTS_METRICS_PORT", integer(0), 0, "`worker --metrics-port` (0: off)")
_declare("BOOKTTS_NVIDIA_SMI", TEXT, None, "the `nvidia-smi` to list GPUs with")
_declare("BOOKTTS_VISIBILITY_TIMEOUT", integer(1), 6 * 3600, "the broker's visibility timeout (seconds)")
_declare("BOOKTTS_PROC_ALIVE_TIMEOUT", seconds(0), 600.0,
         "how long Celery waits for a pool process to start (engine build included)")
_declare("BOOKTTS_DONE_JOB_TTL_S", integer(1), 30 * 24 * 3600,
         "how long a finished job stays in Redis (seconds)")
_declare("BOOKTTS_FINALIZE_STALE_S", seconds(0), 600.0,
         "a job finalizing this long with no finalize running gets it queued again")
_declare("BOOKTTS_SHUTDOWN_DRAIN_S", seconds(0), 600.0, "how long a stopping worker waits for batches it gathered")
for _name, _doc in (("COMPILE", "torch.compile of stage B (`--torch-compile`)"),
                    ("FUSED", "the decoder's fused Triton kernels (`--kernels`)"),
                    ("FUSED_FLOW", "the flow's fused Triton kernel (`--kernels`)"),
                    ("STAGE_A_GEMM", "stage A's Triton GEMM (`--kernels`)"),
                    ("GRAPHS", "CUDA graphs (`--cuda-graphs`)"),
                    ("AUTOTUNE", "cuDNN autotuning of stage B (`--autotune`)"),
                    ("PRECOMPILE", "parallel compile of the fused kernels at start (`--precompile`)")):
    _declare(f"BOOKTTS_TORCH_{_name}", SWITCH, "auto", f"torch engine: {_doc}; the flag wins")
_declare("BOOKTTS_TORCH_WARMUP", choice("full", "lazy"), "auto",
         "torch engine: warm-up of stage B's shapes at start (`--torch-warmup`); the flag wins")
_declare("BOOKTTS_GPU_LOUDNESS_STATS", choice("device", "finalize", "writer"), "device",
         "where the loudness statistics of a GPU engine's units are measured: on the engine's device (24 ms per "
         "hour of speech on an H200), in finalize from the chapter's stream (its own processes), or by the unit "
         "writers in the engine's process (slowest in bulk); CPU engines' units are always measured by the writers")

# ------------------------------------------------------------------ worker: one worker's settings
_declare("BOOKTTS_WORKER_SETTINGS", JSON_OBJECT, None, "all of a worker's settings as one record "
         "(workers.runtime.WorkerSettings), set by `worker` for its pool and per-GPU processes; wins over "
         "the variables below", group="worker")
_declare("BOOKTTS_WORKER_ENGINE", JSON_OBJECT, None, "the engine (JSON EngineSpec; default onnx fp32 cpu)",
         group="worker")
_declare("BOOKTTS_WORKER_VOICE", TEXT, None, "voice to load at process start (default: on the first batch)",
         group="worker")
_declare("BOOKTTS_LEASE_SECONDS", seconds(0.1), 180.0, "batch lease TTL; heartbeat every third of it",
         group="worker")
_declare("BOOKTTS_MAX_DELIVERIES", integer(1), 6, "deliveries of one batch before it is declared failed",
         group="worker")
_declare("BOOKTTS_GATHER", FLAG, None, "`worker --gather/--no-gather` (default: on for a GPU engine)",
         group="worker")
_declare("BOOKTTS_MAX_BATCH_PHONEMES", integer(1), None, "`worker --max-batch-phonemes` (default: per device)",
         group="worker")
_declare("BOOKTTS_ALLOWED_ROOTS", PATHS, (), "`worker --allowed-root`: job directories only under these "
         "(default: anywhere)", group="worker")
_declare("BOOKTTS_STATE_DIR", TEXT, None, "`worker --state-dir` (default $XDG_STATE_HOME/booktts)",
         group="worker")
_declare("BOOKTTS_PREPARE_SHAPES_S", seconds(0), 60.0, "`worker --prepare-shapes-s` (0: off)", group="worker")
_declare("BOOKTTS_EARLY_CHAPTERS", integer(0), 2, "`worker --early-chapters` (0: finalize writes them all)",
         group="worker")
_declare("BOOKTTS_UNIT_WRITERS", integer(1), 4, "`worker --unit-writers`", group="worker")

# ------------------------------------------------------------------ internal: set by booktts for its children
_declare("BOOKTTS_METRICS_DEVICE", TEXT, None, "the physical GPU a per-GPU worker reports (set by the "
         "supervisor)", group="internal")

# ------------------------------------------------------------------ other: names other software owns
_declare("REDIS_URL", TEXT, None, "the Redis URL (`--redis-url`), password included: environment only",
         group="other", secret=True)
_declare("CUDA_VISIBLE_DEVICES", TEXT, None, "the GPUs `worker --gpus all` may use (else `nvidia-smi -L`)",
         group="other")
_declare("PROMETHEUS_MULTIPROC_DIR", TEXT, None, "the metrics' multiprocess directory (set by `worker "
         "--metrics-port`)", group="other")
_declare("TRITON_CACHE_DIR", TEXT, None, "Triton's kernel cache (reported at engine start)", group="other")
_declare("TRITON_INTERPRET", TEXT, None, "`1`: Triton's interpreter (kernels on the CPU, as the tests run them)",
         group="other")
_declare("XDG_STATE_HOME", TEXT, None, "the default state directory's parent", group="other")
_declare("XDG_RUNTIME_DIR", TEXT, None, "the engine server's default socket's parent", group="other")

# ------------------------------------------------------------------ test only: set by the test suite
_declare("BOOKTTS_TEST_ENGINES", FLAG, False, "tests only: the command line also offers `--engine fake` "
         "(test tones)", group="test")
_declare("BOOKTTS_FAKE_FAIL_ID", integer(None), None, "tests only: the fake engine fails a batch with this "
         "phoneme id", group="test")
_declare("BOOKTTS_FAKE_OOM_OVER", integer(0), None, "tests only: the fake engine runs out of memory over "
         "this many items", group="test")
_declare("BOOKTTS_FAKE_TRANSIENT_FIRST", integer(0), 0, "tests only: the fake engine's first N calls fail "
         "transiently", group="test")
_declare("BOOKTTS_FAKE_DELAY_S", seconds(0), 0.0, "tests only: the fake engine sleeps this long per call",
         group="test")
_declare("BOOKTTS_TEST_FINALIZE_DELAY_S", seconds(0), 0.0, "tests only: finalize pauses this long (to kill "
         "it midway)", group="test")
_declare("BOOKTTS_TEST_FLAC_LEVEL", integer(0), None, "tests only: `--flac-level auto` writes this level "
         "instead of the one chosen from the host's load (files compare byte for byte between runs)", group="test")
_declare("BOOKTTS_QUEUE_ORDER", choice("priority", "round_robin", "sorted"), "priority",
         "tests only: kombu's queue order strategy (to show what strict priority changes)", group="test")

GROUPS = ("product", "worker", "internal", "other", "test")


# ------------------------------------------------------------------ reading


def setting(name: str) -> Setting:
    """The declaration of ``name``; KeyError for a name that is not declared here."""
    return SETTINGS[name]


def get(name: str, env=None) -> Any:
    """``name``'s typed value in ``env`` (default: this process's environment), else its default."""
    return SETTINGS[name].get(env)


def is_set(name: str, env=None) -> bool:
    return SETTINGS[name].is_set(env)


def __getattr__(name: str) -> Any:  # settings.BOOKTTS_DEBUG: the value now
    if name in SETTINGS:
        return SETTINGS[name].get()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(SETTINGS))


# ------------------------------------------------------------------ writing, for child processes


def hand_to_children(values: dict, env: MutableMapping | None = None) -> MutableMapping:
    """Set declared variables in ``env`` for the child processes that will inherit it (default: this
    process's environment, which forked pool processes inherit; pass a copy for a ``Popen``). Each
    value is encoded as its declaration reads it back; None removes the variable. Returns ``env``."""
    env = os.environ if env is None else env
    for name, value in values.items():
        s = SETTINGS[name]  # (KeyError: every variable handed on is declared)
        if value is None:
            env.pop(name, None)
        else:
            env[name] = s.encode(value)
    return env


def child_environment(values: dict) -> dict[str, str]:
    """A copy of this process's environment with ``values`` handed on (:func:`hand_to_children`), for a
    ``Popen``."""
    return dict(hand_to_children(values, dict(os.environ)))


# ------------------------------------------------------------------ the docs' table


def _default_text(s: Setting) -> str:
    if s.default is None or s.default == ():
        return "unset"
    if s.default is False:
        return "0"
    if s.default is True:
        return "1"
    return f"`{s.default:g}`" if isinstance(s.default, float) else f"`{s.default}`"


def markdown_table() -> str:
    """docs/operations.md section 8's table, one row per declared variable, in declaration order."""
    rows = ["| variable | group | accepts | default | what it sets |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.name}` | {s.group} | {s.kind.accepts} | {_default_text(s)} | {s.doc} |")
    return "\n".join(rows) + "\n"


def describe(name: str, env=None) -> str:
    """``NAME=value`` for logs; a secret's value is never shown."""
    s = SETTINGS[name]
    raw = s.raw(env)
    return f"{name}=" + ("(unset)" if raw is None else "(set, hidden)" if s.secret else raw)


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table(), end="")
