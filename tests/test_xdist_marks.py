"""`make test`'s pytest-xdist scheduling (tests/conftest.py), on a small suite of its own run with
``-n 2 --dist loadgroup``: the tests of a module with a module-scoped fixture run in one process (the
fixture built once), tests of one ``xdist_group`` across modules in one process, and an ``alone`` test
overlaps no other test. (Under pytest 9.2 pytest-xdist 3.8's own group marks reached no scheduler:
every test was sent on its own.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("xdist", reason="pytest-xdist is not installed (the test extra has it)")

CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.conftest import pytest_collection_modifyitems, pytest_runtest_protocol  # noqa: F401
"""

MODULE = """
import json, os, time
import pytest
{mark}

def record(name, t0):
    with open(os.environ["XDIST_MARKS_LOG"], "a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], t0, time.time()]) + "\\n")

@pytest.fixture(scope="module")
def shared():
    record("build-{name}", time.time())

@pytest.mark.parametrize("i", range(4))
def test_with_fixture(shared, i):
    t0 = time.time(); time.sleep(0.2); record("{name}-fixture", t0)

@pytest.mark.parametrize("i", range(3))
def test_plain(i):
    t0 = time.time(); time.sleep(0.2); record("{name}-plain", t0)

@pytest.mark.alone
def test_alone():
    t0 = time.time(); time.sleep(0.3); record("alone", t0)
"""


def test_groups_and_alone_under_two_processes(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n")
    group = 'pytestmark = pytest.mark.xdist_group("together")'
    for name, mark in (("a", ""), ("b", group), ("c", group), ("d", "")):
        (suite / f"test_{name}.py").write_text(MODULE.format(name=name, mark=mark))
    log = tmp_path / "log.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "--basetemp", str(tmp_path / "base"), str(suite)], cwd=suite, capture_output=True,
                         text=True, timeout=240, env={**__import__("os").environ, "XDIST_MARKS_LOG": str(log)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    workers = lambda name: {w for n, w, _, _ in rows if n == name}  # noqa: E731
    assert len({w for _, w, _, _ in rows}) == 2, "both processes ran tests"
    for m in "ad":  # a module fixture: its tests in one process, the fixture built once
        assert len(workers(f"{m}-fixture")) == 1 and sum(n == f"build-{m}" for n, *_ in rows) == 1, rows
    # one group across two modules: every test of both in one process
    assert len(workers("b-fixture") | workers("b-plain") | workers("c-fixture") | workers("c-plain")) == 1, rows
    spans = [(n, t0, t1) for n, _, t0, t1 in rows if not n.startswith("build-")]
    for n, t0, t1 in spans:
        if n == "alone":
            assert not [m for m, s0, s1 in spans if (m, s0, s1) != (n, t0, t1) and s0 < t1 and t0 < s1], \
                "an alone test overlapped another test"
    assert any(s0 < t1 and t0 < s1 for i, (_, t0, t1) in enumerate(spans) for (_, s0, s1) in spans[i + 1:]), \
        "other tests did run at the same time"
