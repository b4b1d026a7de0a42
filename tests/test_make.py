"""The README's two commands (issue 28, R4): ``make demo`` installs only what a CPU run needs (no
torch extra: with CUDA and Triton it is GBs) and says how long the demo takes; ``make test`` still
installs the test and torch extras (the tests use torch), and CI's script still calls it. Read from
``make -n`` (what make would run), into a venv path that is never created."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")


def dry_run(target: str, tmp_path) -> list[str]:
    res = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    """What each package install line installs (the arguments after ``pip install``)."""
    return [l.split("pip install", 1)[1] for l in lines if "pip install" in l and "--upgrade pip" not in l]


def test_demo_installs_no_torch_and_says_how_long(tmp_path):
    lines = dry_run("demo", tmp_path)
    assert installs(lines) and all(l.rstrip().endswith("-e .") for l in installs(lines)), lines
    assert not any("torch" in l or "[test" in l for l in installs(lines))
    said = " ".join(l for l in lines if l.startswith("echo "))
    assert "minute" in said and "CPU" in said, lines
    assert any("cli.py run" in l and "--chapters 1" in l for l in lines)


def test_test_installs_the_test_and_torch_extras(tmp_path):
    lines = dry_run("test", tmp_path)
    assert any("'.[test,torch]'" in l for l in installs(lines)), lines
    assert any("pytest" in l for l in lines)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
