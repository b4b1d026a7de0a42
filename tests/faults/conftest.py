"""Fixtures of the randomized fault schedule: the distributed runner's own (tests/workers/conftest.py:
a real redis-server on a free port, real `cli.py worker` subprocesses), imported here so both
directories use the same ones, plus a summary of every schedule run at the end of the session (put in
each test's report here, printed by tests/conftest.py: under pytest-xdist the tests run in worker
processes, and only the root conftest is loaded in the process that prints the session's end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.report import SUMMARIES, SUMMARY_PROPERTY
from tests.workers.conftest import (own_redis, redis_server, redis_url, skip_redis_tests_without_redis,  # noqa: F401
                                   start_worker)


def pytest_collection_modifyitems(config, items):
    skip_redis_tests_without_redis(items, Path(__file__).parent)


@pytest.fixture(autouse=True)
def _report_summaries(request):
    """The summaries this test added to SUMMARIES go into its report's user properties, which
    pytest-xdist sends to the controlling process (a module-level list stays in the worker)."""
    before = len(SUMMARIES)
    yield
    for s in SUMMARIES[before:]:
        request.node.user_properties.append((SUMMARY_PROPERTY, s))
