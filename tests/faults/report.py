"""The counts of every fault schedule run in this session (a module of its own: conftest.py is
imported under another name by pytest, so a list there would not be the one the tests fill)."""

from __future__ import annotations

#: One dict per schedule run: seed, faults by kind, jobs, utterances checked, ``line`` (printed at the end).
SUMMARIES: list[dict] = []
#: The user property each summary travels under in its test's report: from the process that ran the
#: test (a pytest-xdist worker under `make test`) to the one that prints the session's end.
SUMMARY_PROPERTY = "fault_schedule"
