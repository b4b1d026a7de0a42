"""jobs.encoding: the FLAC level and chapters at once that a finalize chooses from the host's load and
the engines' backlog (a pure function; no Redis, no files)."""

from __future__ import annotations

import pytest

from jobs.encoding import AUTO, DEFAULT_LEVEL, FAST_LEVEL, MAX_THREADS, SMALL_LEVEL, Encoding, choose, describe, flac_level


@pytest.mark.parametrize("busy,waiting,level", [
    # engines with work waiting: fast unless the host is mostly idle
    (None, True, FAST_LEVEL), (0.9, True, FAST_LEVEL), (0.5, True, FAST_LEVEL), (0.3, True, DEFAULT_LEVEL),
    (0.0, True, DEFAULT_LEVEL),
    # nothing waits: small unless the host is busy anyway
    (None, False, SMALL_LEVEL), (0.0, False, SMALL_LEVEL), (0.49, False, SMALL_LEVEL),
    (0.5, False, DEFAULT_LEVEL), (0.74, False, DEFAULT_LEVEL), (0.75, False, FAST_LEVEL), (1.0, False, FAST_LEVEL),
])
def test_the_level_follows_the_load_and_the_backlog(busy, waiting, level):
    got = choose(busy, waiting, cores=16)
    assert got.flac_level == level
    assert ("have work waiting" in got.why) == waiting and (("unknown" in got.why) == (busy is None))


def test_a_busy_gpu_node_encodes_fast_and_an_idle_cpu_node_small():
    gpu = choose(0.88, True, cores=16, running=3)  # the H200 bulk: engines with a backlog, 86-90 % busy
    assert gpu.flac_level == FAST_LEVEL and gpu.threads == 5, gpu
    cpu = choose(0.05, False, cores=2)  # a CPU worker with nothing queued
    assert cpu.flac_level == SMALL_LEVEL and cpu.threads == 2, cpu


def test_threads_are_the_finalizes_share_of_the_cores_at_most_max_threads():
    assert choose(0.1, False, cores=64).threads == MAX_THREADS
    assert choose(0.1, False, cores=16, running=4).threads == 4
    assert choose(0.1, False, cores=16, running=40).threads == 1
    assert choose(None, True, cores=16, running=2).threads == 8
    assert choose(1.0, True, cores=16).threads == 8, "threads cost no CPU time of their own: the load does not cut them"
    assert choose(0.2, False, cores=0).threads == 1


def test_an_explicit_level_wins_over_the_choice(monkeypatch):
    monkeypatch.delenv("BOOKTTS_TEST_FLAC_LEVEL")  # (the suite's pin for auto)
    chosen = Encoding(SMALL_LEVEL, 4, "test")
    assert flac_level(AUTO, chosen) == SMALL_LEVEL
    assert [flac_level(n, chosen) for n in (0, 5, 8)] == [0, 5, 8]
    assert flac_level(AUTO, None) == DEFAULT_LEVEL, "nothing chosen: libFLAC's default"
    assert "--flac-level 0" in describe(0, chosen) and "auto" in describe(AUTO, chosen)
    assert "FLAC" not in describe(AUTO, chosen, "m4b")


def test_the_choice_travels_as_a_dict():
    e = choose(0.8, True, cores=8, running=2)
    assert Encoding.from_dict(e.to_dict()) == e
