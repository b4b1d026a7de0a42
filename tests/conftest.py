"""Shared fixtures: the real voice, a fake engine, small books."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
os.environ.setdefault("OMP_NUM_THREADS", "2")
# The suite's switch that offers `--engine fake` (test tones) on the command line; inherited by the CLI
# processes and workers the tests start. Users never see that engine (engines.spec.offered_engines).
os.environ.setdefault("BOOKTTS_TEST_ENGINES", "1")
# `--flac-level auto` (the default) follows the host's load (jobs.encoding), which the suite's neighbours
# on the machine change: the suite's processes write level 5 instead, so that files compare byte for byte
# between runs. Tests of the choice unset it (monkeypatch.delenv) or call jobs.encoding.choose directly.
os.environ.setdefault("BOOKTTS_TEST_FLAC_LEVEL", "5")


#: Fault schedule summaries read back from the tests' reports (tests/faults/conftest.py puts them there).
FAULT_SUMMARIES: list[dict] = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite in pytest-xdist processes with ``--dist loadgroup``: a test goes to
    whichever process is free, except that tests with the same ``xdist_group`` mark run in one process,
    one after another. A test that uses a module-scoped fixture (a voice's engine, a child process's
    kernel results) is put in its module's group here, so that fixture is built once, not once in
    each process."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope in ("module", "class", "package") for ds in defs.values() for d in ds):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if getattr(config.option, "loadgroup", False):  # in a pytest-xdist process of --dist loadgroup
        _name_groups_in_node_ids(items)


def _name_groups_in_node_ids(items) -> None:
    """pytest-xdist schedules by node id: a test of group G must be reported as ``<node id>@G``.
    pytest-xdist 3.8 writes that to ``item._nodeid``, which pytest 9.2's nodes no longer read (their id
    is ``item._id``, a NodeId), so every test was scheduled on its own and the groups split. Write it
    where pytest reads it (a later pytest-xdist that adds the suffix itself adds a second ``@G``; the
    scheduler reads the last one)."""
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and not item.nodeid.endswith("@" + "_".join(names)):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``@pytest.mark.alone`` (one that times itself or counts CPU, say) runs while no other
    pytest-xdist process of the run runs a test: each test holds a shared lock on a file they all see,
    from its set-up (module fixtures included) to its tear-down, an ``alone`` test an exclusive one; a
    gate lock taken first stops the others from starting tests while it waits. Without xdist, nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    import fcntl

    run_dir = item.config._tmp_path_factory.getbasetemp().parent  # a process's base is <run's base>/popen-gwN
    alone = item.get_closest_marker("alone") is not None
    with open(run_dir / "alone.gate", "a") as gate, open(run_dir / "alone.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


def pytest_runtest_logreport(report):
    from tests.faults.report import SUMMARY_PROPERTY

    if report.when == "teardown":
        FAULT_SUMMARIES.extend(v for k, v in report.user_properties if k == SUMMARY_PROPERTY)


def pytest_terminal_summary(terminalreporter):
    for s in FAULT_SUMMARIES:
        terminalreporter.write_line(f"fault schedule: {s['line']}")


@pytest.fixture(autouse=True)
def node_state_dir(tmp_path, monkeypatch) -> Path:
    """Each test is a node of its own: its workers (in-process or started as subprocesses, which
    inherit the environment) record the jobs they see here, never in the user's ~/.local/state."""
    d = tmp_path / "node-state"
    monkeypatch.setenv("BOOKTTS_STATE_DIR", str(d))
    # a worker's settings record (core.settings) wins over the variable above: one that an in-process
    # `worker` command of an earlier test handed on must not reach this test's workers
    monkeypatch.delenv("BOOKTTS_WORKER_SETTINGS", raising=False)
    return d


@pytest.fixture(scope="session")
def voice():
    from core.voice import resolve_voice

    return resolve_voice()


@pytest.fixture(scope="session")
def onnx_engine(voice):
    from engines import EngineSpec
    from engines.onnx_cpu import OnnxEngine

    return OnnxEngine(voice, EngineSpec(threads=2, max_batch=16))


@pytest.fixture
def fake_engine(voice):
    from engines.fake import FakeEngine

    return FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length)


@pytest.fixture
def short_book(tmp_path) -> Path:
    """Two short chapters of real prose (from Alice in Wonderland, public domain)."""
    p = tmp_path / "short.txt"
    p.write_text(
        "CHAPTER I.\nDown the Rabbit-Hole\n\n"
        "Alice was beginning to get very tired of sitting by her sister on the\n"
        "bank, and of having nothing to do. Once or twice she had peeped into the\n"
        "book her sister was reading.\n\n"
        "There was nothing so very remarkable in that!\n\n"
        "CHAPTER II.\nThe Pool of Tears\n\n"
        "Curiouser and curiouser! cried Alice. Now I am opening out like the\n"
        "largest telescope that ever was! Good-bye, feet!\n",
        encoding="utf-8",
    )
    return p
