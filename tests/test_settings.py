"""The settings registry (core/settings.py): every environment variable the product reads is declared
there once, read only there, typed, documented in docs/operations.md section 8 from it, and handed to
child processes through it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from core import settings
from core.settings import SETTINGS, SettingError

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"BOOKTTS_[A-Z0-9_]*[A-Z0-9]")
#: A read of the process environment: os.environ (a lookup, .get, a copy) or os.getenv.
ENV_READ = re.compile(r"os\.environ\b|os\.getenv\b|\bgetenv\(")
#: Where the environment is touched for another reason than a declared variable, with why.
ENV_ELSEWHERE = {
    # copies the whole environment for its child (PYTHONPATH first), reading no declared name
    "workers/finalize_child.py": 1,
}


def product_files() -> list[Path]:
    return [ROOT / "cli.py"] + sorted(p for d in ("core", "jobs", "engines", "workers", "commands")
                                      for p in (ROOT / d).rglob("*.py"))


def names_in_code() -> set[str]:
    """Names in the product's source; a name followed by ``_*`` (prose) or ``_{`` (an f-string) is a prefix."""
    out = set()
    for f in product_files():
        text = f.read_text(encoding="utf-8")
        out |= {m.group() for m in NAME.finditer(text) if text[m.end():m.end() + 2] not in ("_*", "_{")}
    return out


def test_every_name_in_the_code_is_declared():
    assert {"BOOKTTS_TORCH_WARMUP", "BOOKTTS_FAKE_DELAY_S", "BOOKTTS_STATE_DIR"} <= names_in_code()
    missing = sorted(names_in_code() - set(SETTINGS))
    assert not missing, f"BOOKTTS_* names in the code but not declared in core/settings.py: {missing}"


def test_only_the_registry_reads_the_environment():
    found = {}
    for f in product_files():
        rel = f.relative_to(ROOT).as_posix()
        if rel == "core/settings.py":
            continue
        n = sum(1 for line in f.read_text(encoding="utf-8").splitlines() if ENV_READ.search(line))
        if n:
            found[rel] = n
    assert found == ENV_ELSEWHERE, "read the environment through core.settings, not os.environ/getenv"


def test_the_operations_table_is_the_registry():
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert settings.markdown_table() in text, ("docs/operations.md section 8 differs from core/settings.py; "
                                               "paste `python -m core.settings` over its table")
    section = text[text.index("## 8. Every environment variable"):]
    documented = {m for row in section.splitlines() if row.startswith("| `")
                  for m in re.findall(r"^\| `([A-Z0-9_]+)`", row)}
    assert documented == set(SETTINGS)


def test_every_declaration_is_complete_and_its_default_survives_a_round_trip():
    for s in SETTINGS.values():
        assert s.doc and s.group in settings.GROUPS and s.kind.accepts, s.name
        if s.default not in (None, "auto", ()) and s.kind is not settings.SWITCH:
            assert s.get({s.name: s.encode(s.default)}) == s.default, s.name
    assert [s.name for s in SETTINGS.values() if s.secret] == ["REDIS_URL"]


def test_typed_readers(monkeypatch):
    monkeypatch.setenv("BOOKTTS_LEASE_SECONDS", " 30 ")
    assert settings.get("BOOKTTS_LEASE_SECONDS") == 30.0
    assert settings.BOOKTTS_LEASE_SECONDS == 30.0  # (read at the call: a test's setenv is seen)
    monkeypatch.setenv("BOOKTTS_LEASE_SECONDS", "")
    assert settings.BOOKTTS_LEASE_SECONDS == 180.0
    assert settings.get("BOOKTTS_GATHER", {"BOOKTTS_GATHER": "No"}) is False
    assert settings.get("BOOKTTS_GATHER", {}) is None
    assert settings.get("BOOKTTS_ALLOWED_ROOTS", {"BOOKTTS_ALLOWED_ROOTS": "/a::/b"}) == ("/a", "/b")
    assert settings.get("BOOKTTS_TORCH_GRAPHS", {"BOOKTTS_TORCH_GRAPHS": "0"}) == "off"
    assert settings.get("BOOKTTS_TORCH_WARMUP", {"BOOKTTS_TORCH_WARMUP": "FULL"}) == "full"
    with pytest.raises(AttributeError):
        settings.BOOKTTS_NOT_DECLARED  # noqa: B018


@pytest.mark.parametrize("name, bad, accepts", [
    ("BOOKTTS_LEASE_SECONDS", "soon", "seconds >= 0.1"),
    ("BOOKTTS_LEASE_SECONDS", "nan", "seconds >= 0.1"),
    ("BOOKTTS_MAX_DELIVERIES", "0", "a whole number >= 1"),
    ("BOOKTTS_MAX_DELIVERIES", "2.5", "a whole number >= 1"),
    ("BOOKTTS_GATHER", "sometimes", "1 or 0"),
    ("BOOKTTS_TORCH_GRAPHS", "maybe", "1 (on) or 0 (off)"),
    ("BOOKTTS_TORCH_WARMUP", "eager", "full or lazy"),
    ("BOOKTTS_WORKER_SETTINGS", "[1, 2]", "a JSON object"),
    ("BOOKTTS_WORKER_SETTINGS", "{", "a JSON object"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_what_it_takes(name, bad, accepts):
    with pytest.raises(SettingError) as info:
        settings.get(name, {name: bad})
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"environment variable {name}=") and f"give {accepts}" in msg


def test_a_secret_value_is_never_shown():
    url = "redis://:hunter2@host:6379/0"
    assert "hunter2" not in settings.describe("REDIS_URL", {"REDIS_URL": url})
    assert settings.describe("BOOKTTS_SERVER", {"BOOKTTS_SERVER": "/s"}) == "BOOKTTS_SERVER=/s"


def test_hand_to_children_encodes_declared_names_and_removes_none():
    env = settings.hand_to_children({"BOOKTTS_GATHER": False, "BOOKTTS_LEASE_SECONDS": 12.5,
                                     "BOOKTTS_ALLOWED_ROOTS": ("/a", "/b"), "BOOKTTS_METRICS_PORT": None},
                                    {"BOOKTTS_METRICS_PORT": "9100", "PATH": "/bin"})
    assert env["BOOKTTS_GATHER"] == "0" and "BOOKTTS_METRICS_PORT" not in env and env["PATH"] == "/bin"
    assert settings.get("BOOKTTS_LEASE_SECONDS", env) == 12.5
    assert settings.get("BOOKTTS_ALLOWED_ROOTS", env) == ("/a", "/b")
    with pytest.raises(KeyError):
        settings.hand_to_children({"BOOKTTS_UNDECLARED": "1"}, {})


@pytest.mark.parametrize("name, value, args, line", [
    # read while a command runs
    ("BOOKTTS_DEBUG", "maybe", ["plan", "BOOK"],
     "error: environment variable BOOKTTS_DEBUG='maybe': give 1 or 0 (true/false, yes/no, on/off) "
     "(tracebacks instead of one-line errors), or unset it"),
    # read while the commands are built (the Celery app's transport options)
    ("BOOKTTS_VISIBILITY_TIMEOUT", "6h", ["--help"],
     "error: environment variable BOOKTTS_VISIBILITY_TIMEOUT='6h': give a whole number >= 1 "
     "(the broker's visibility timeout (seconds)), or unset it"),
], ids=["at-run", "at-start"])
def test_the_cli_says_one_line_for_a_bad_variable(tmp_path, name, value, args, line):
    import os

    book = tmp_path / "b.txt"
    book.write_text("Chapter 1\n\nHello there.\n", encoding="utf-8")
    env = {**os.environ, name: value}
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), *[str(book) if a == "BOOK" else a for a in args]],
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [line]


def test_a_workers_settings_travel_as_one_record():
    from engines import EngineSpec
    from engines.torch_options import TorchOptions
    from workers.runtime import RECORD_ENV, WorkerSettings

    ws = WorkerSettings(engine=EngineSpec(name="torch", device="cuda:0", max_batch=512,
                                          options=TorchOptions(autotune="off")),
                        lease_seconds=7.5, voice="v", max_deliveries=3, gather=True, max_batch_phonemes=9000,
                        allowed_roots=("/",), state_dir="/tmp/s", prepare_shapes_s=0.0, early_chapters=0,
                        unit_writers=5)
    env = settings.child_environment(ws.child_values())
    assert WorkerSettings.from_env(env) == ws
    # the record wins over the single variables (which a `celery` worker started directly reads)
    assert WorkerSettings.from_env({**env, "BOOKTTS_LEASE_SECONDS": "99"}).lease_seconds == 7.5
    single = WorkerSettings.from_env({"BOOKTTS_LEASE_SECONDS": "99", "BOOKTTS_GATHER": "0",
                                      "BOOKTTS_UNIT_WRITERS": "2"})
    assert (single.lease_seconds, single.gather, single.unit_writers) == (99.0, False, 2)
    for bad in ('{"engine": {}}', '{"engine": 3, "lease_seconds": 1}'):
        with pytest.raises(SettingError, match=f"^environment variable {RECORD_ENV}: not a worker's settings record"):
            WorkerSettings.from_env({RECORD_ENV: bad})
    with pytest.raises(SettingError, match="BOOKTTS_UNIT_WRITERS='0'"):
        WorkerSettings.from_env({"BOOKTTS_UNIT_WRITERS": "0"})
