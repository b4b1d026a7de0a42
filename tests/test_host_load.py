"""core.host_load: the host's busy CPU share from /proc/stat (a file the test writes, and the real one)."""

from __future__ import annotations

import sys
import time

import pytest

from core.host_load import HostLoad, read_cpu_times


def test_busy_and_total_ticks_from_the_cpu_line(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 20 800 50 1 2 3 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
    busy, total = read_cpu_times(stat)
    assert total == 100 + 5 + 20 + 800 + 50 + 1 + 2 + 3, "guest time is already in user"
    assert busy == total - 800 - 50, "idle and iowait are idle"


@pytest.mark.parametrize("text", ["", "cpu0 1 2 3 4\n", "cpu  a b c d e\n", "cpu 1 2\n"])
def test_an_unreadable_file_is_an_unknown_load(tmp_path, text):
    stat = tmp_path / "stat"
    stat.write_text(text)
    assert read_cpu_times(stat) is None
    load = HostLoad(8, path=stat)
    assert load.sample() is None and load.busy() is None and load.idle_cores() is None
    assert read_cpu_times(tmp_path / "absent") is None


def test_the_share_is_over_the_last_interval_only(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1000 0 0 1000 0 0 0 0\n")
    load = HostLoad(4, path=stat, sample_s=3600)
    stat.write_text("cpu  1100 0 0 1300 0 0 0 0\n")  # 100 busy of 400 ticks
    assert load.sample() == pytest.approx(0.25)
    assert load.idle_cores() == pytest.approx(3.0)
    stat.write_text("cpu  1500 0 0 1300 0 0 0 0\n")  # then all busy
    assert load.sample() == pytest.approx(1.0) and load.idle_cores() == pytest.approx(0.0)
    # no tick since: the last share stands
    assert load.sample() == pytest.approx(1.0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_the_sampler_thread_reads_this_host():
    load = HostLoad(2, sample_s=0.05)
    assert load.busy() is None, "no interval has passed yet"
    deadline = time.monotonic() + 5
    while load.busy() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    b = load.busy()
    assert b is not None and 0.0 <= b <= 1.0
    assert 0.0 <= load.idle_cores() <= 2.0


def test_since_gives_the_share_since_its_start_with_or_without_this_process(tmp_path, monkeypatch):
    from core import host_load

    stat = tmp_path / "stat"
    stat.write_text("cpu  1000 0 0 1000 0 0 0 0\n")
    own = [50.0]
    monkeypatch.setattr(host_load, "_own_ticks", lambda: own[0])
    since = host_load.Since(stat)
    stat.write_text("cpu  1004 0 0 1000 0 0 0 0\n")
    assert since.busy() is None, "too few ticks to say"
    stat.write_text("cpu  1300 0 0 1100 0 0 0 0\n")  # 300 busy of 400 ticks, 200 of them this process's
    own[0] = 250.0
    assert since.busy() == pytest.approx(0.75)
    assert since.busy(others=True) == pytest.approx(0.25)
    assert host_load.Since(tmp_path / "absent").busy() is None
