"""Fixtures of the randomized fault schedule: the distributed runner's own (tests/workers/conftest.py:
a real redis-server on a free port, real `cli.py worker` subprocesses), imported here so both
directories use the same ones, plus a summary of every schedule run at the end of the session."""

from __future__ import annotations

from pathlib import Path

from tests.faults.report import SUMMARIES
from tests.workers.conftest import (own_redis, redis_server, redis_url, skip_redis_tests_without_redis,  # noqa: F401
                                   start_worker)


def pytest_collection_modifyitems(config, items):
    skip_redis_tests_without_redis(items, Path(__file__).parent)


def pytest_terminal_summary(terminalreporter):
    for s in SUMMARIES:
        terminalreporter.write_line(f"fault schedule: {s['line']}")
