"""Fixtures of the randomized fault schedule: the distributed runner's own (tests/workers/conftest.py:
a real redis-server on a free port, real `cli.py worker` subprocesses), imported here so both
directories use the same ones, plus a summary of every schedule run at the end of the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.report import SUMMARIES
from tests.workers.conftest import HAVE_REDIS, NO_REDIS, own_redis, redis_server, redis_url, start_worker  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """Without a redis-server binary, skip this directory's tests that need one, saying why (-rs shows it)."""
    if HAVE_REDIS:
        return
    here = Path(__file__).parent
    for item in items:
        needs = {"redis_server", "redis_url", "own_redis", "start_worker"} & set(getattr(item, "fixturenames", ()))
        if here in Path(str(item.fspath)).parents and needs:
            item.add_marker(pytest.mark.skip(reason=NO_REDIS))


def pytest_terminal_summary(terminalreporter):
    for s in SUMMARIES:
        terminalreporter.write_line(f"fault schedule: {s['line']}")
