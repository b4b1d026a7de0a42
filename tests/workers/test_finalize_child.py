"""Workers finalize a job in a process of its own (workers.finalize_child): the same files and
summary as finalize in-process, and its errors come back as the same kinds of exception."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from engines.fake import FakeEngine
from jobs.config import JobConfig
from core.errors import BatchesNotDone, DiskFullError, JobError
from jobs.finalize import finalize
from jobs.prepare import prepare_job
from jobs.synthesize import run_batch
from workers import finalize_child

ROOT = Path(__file__).resolve().parents[2]


def _job(tmp_path, short_book, voice, name, run_all=True):
    job = prepare_job([short_book], tmp_path / name, JobConfig(max_batch=2))
    eng = FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length)
    for b in (job.pending_batches() if run_all else job.pending_batches()[1:]):
        run_batch(job, b, eng)
    return job


def test_child_finalize_writes_what_finalize_writes(tmp_path, short_book, voice):
    a, b = _job(tmp_path, short_book, voice, "a"), _job(tmp_path, short_book, voice, "b")
    here = finalize(a)
    there = finalize_child.run(str(b.out_dir), processes=0)  # the worker's limit travels as an argument
    assert there.chapter_files == here.chapter_files and there.utterances == here.utterances
    assert there.audio_s == pytest.approx(here.audio_s)
    for rel in here.chapter_files:
        assert (b.out_dir / rel).read_bytes() == (a.out_dir / rel).read_bytes()


def test_child_finalize_errors_keep_their_kind(tmp_path, short_book, voice, monkeypatch):
    job = _job(tmp_path, short_book, voice, "c", run_all=False)
    with pytest.raises(BatchesNotDone) as missing:  # a batch is missing: refused, not retried, and named
        finalize_child.run(str(job.out_dir))
    assert isinstance(missing.value, JobError) and missing.value.batches == [job.batches[0].batch_id]
    assert missing.value.job_id == job.job_id and missing.value.total == len(job.batches)
    with pytest.raises(JobError, match="now holds job"):  # the directory holds another job than the one meant
        finalize_child.run(str(job.out_dir), job_id="0123456789abcdef")
    doc = {"error": {"kind": "disk_full", "filename": "/x/001.flac", "message": "no space left on device",
                     "errno": errno.ENOSPC}}

    class Done:
        returncode, stdout = 3, __import__("json").dumps(doc) + "\n"

        def communicate(self, input=None):
            return self.stdout, None

    monkeypatch.setattr(finalize_child, "_take_ready", lambda: None)
    monkeypatch.setattr(finalize_child, "_start", lambda args: Done())
    with pytest.raises(DiskFullError) as e:  # an OSError: the worker retries it
        finalize_child.run("/x")
    assert e.value.filename == "/x/001.flac" and isinstance(e.value, OSError)
    Done.stdout = "Traceback (most recent call last):\n"
    with pytest.raises(ChildProcessError):
        finalize_child.run("/x")


def test_a_finalize_process_serves_the_next_finalizes_and_exits_when_closed(tmp_path, short_book, voice,
                                                                            monkeypatch):
    """The process started ahead takes a finalize, goes back to wait, and takes the next (its imports
    paid once), with the same output as a finalize in this process; a failed finalize's process is
    not reused; one that served JOBS_PER_PROCESS jobs exits; closing the waiting ones ends them."""
    a, b, c, d, e = (_job(tmp_path, short_book, voice, n) for n in "abcde")
    here = finalize(a)
    finalize_child.close_ready()
    finalize_child.start_ready()
    first = finalize_child._idle[-1][1]
    finalize_child.run(str(b.out_dir))
    assert first.poll() is None and finalize_child._idle[-1][1] is first, "back, waiting"
    there = finalize_child.run(str(c.out_dir), processes=0)  # the same process again
    assert finalize_child._idle[-1][1] is first and first.poll() is None
    assert there.chapter_files == here.chapter_files
    for rel in here.chapter_files:
        assert (c.out_dir / rel).read_bytes() == (a.out_dir / rel).read_bytes()
    with pytest.raises(JobError, match="now holds job"):  # an error: that process ends, none reuses it
        finalize_child.run(str(d.out_dir), job_id="0123456789abcdef")
    assert first.wait(timeout=30) == 3 and all(p is not first for _, p in finalize_child._idle)
    finalize_child.close_ready()
    monkeypatch.setattr(finalize_child, "JOBS_PER_PROCESS", 1)  # given to the processes started from here on
    finalize_child.start_ready()
    one = finalize_child._idle[-1][1]
    finalize_child.run(str(e.out_dir))
    assert one.wait(timeout=30) == 0 and all(p is not one for _, p in finalize_child._idle), "served its one job"
    rest = [p for _, p in finalize_child._idle]
    finalize_child.close_ready()
    assert all(p.wait(timeout=30) == 0 for p in rest) and not finalize_child._idle

def test_finalizes_running_on_the_node_share_its_cores(monkeypatch, tmp_path):
    """Alone, a finalize gets every core for its chapter processes; with others it gets its share,
    and threads once the share is under PROCESS_MIN_CORES (a process per chapter costs CPU)."""
    from jobs.chapter_pool import PROCESS_MIN_CORES
    from workers import batcher, finalize_slots

    from core.host_load import HostLoad

    stat = tmp_path / "stat"
    stat.write_text("cpu  0 0 0 0 0 0 0 0 0 0\n")
    load = HostLoad(16, path=stat, sample_s=3600)
    off = batcher.Offloader(finalize_threads=4, load=load)
    assert off.load.idle_cores() is None, "no second sample yet: the load is unknown"
    assert [off.chapter_processes(n) for n in (1, 2, 4, 5, 16)] == [16, 8, 4, 0, 0]
    assert PROCESS_MIN_CORES == 4
    assert finalize_slots.chapter_processes(2, 1, PROCESS_MIN_CORES) == 0, "a small host: threads"
    # the host 85 % busy (its engines and other finalizes) while batches wait for the engines: threads,
    # whatever the share
    stat.write_text("cpu  850 0 0 150 0 0 0 0 0 0\n")
    assert load.sample() == pytest.approx(0.85)
    assert [off.chapter_processes(n, synthesis_waiting=True) for n in (1, 2, 4)] == [0, 0, 0]
    # nothing left to synthesize (the run's last finalizes): the share, however busy the host was
    assert [off.chapter_processes(n) for n in (1, 2, 4, 5)] == [16, 8, 4, 0]
    # half idle: at most the idle cores (8 of 16)
    stat.write_text("cpu  1350 0 0 650 0 0 0 0 0 0\n")
    assert load.sample() == pytest.approx(0.5)
    assert [off.chapter_processes(n, synthesis_waiting=True) for n in (1, 2, 3, 4, 5)] == [8, 8, 5, 4, 0]


def test_a_finalize_slot_counts_across_processes_until_its_holder_dies(tmp_path):
    """Slots are counted over every process of the node (another worker's finalize counts); one whose
    process was killed stops counting at once and its file is removed."""
    import signal
    import subprocess

    from workers import finalize_slots

    state = tmp_path / "state"
    code = ("import sys, time\nfrom workers import finalize_slots\n"
            "with finalize_slots.hold(sys.argv[1]) as n:\n    print(n, flush=True)\n    time.sleep(60)\n")
    other = subprocess.Popen([sys.executable, "-c", code, str(state)], stdout=subprocess.PIPE, text=True,
                             cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert other.stdout.readline().strip() == "1"
        with finalize_slots.hold(state) as n:
            assert n == 2 and finalize_slots.count(state) == 2
            other.send_signal(signal.SIGKILL)
            other.wait(30)
            assert finalize_slots.count(state) == 1, "the killed holder no longer counts"
            assert len(list((state / finalize_slots.SLOTS_DIR).iterdir())) == 1, "and its file is gone"
        assert finalize_slots.count(state) == 0 and not list((state / finalize_slots.SLOTS_DIR).iterdir())
        blocked = tmp_path / "file"
        blocked.write_text("")  # a state "directory" that cannot be one: the finalize runs, counted as alone
        with finalize_slots.hold(blocked) as n:
            assert n == 1
    finally:
        other.kill()
        other.wait(30)

def _nice(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of proc(5)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads niceness from Linux's /proc")
def test_the_chapter_writing_processes_run_niced():
    """The finalize process started ahead and the early chapter process lower their priority by
    CHILD_NICE (capped at 19), so that the engine's process keeps its core beside them."""
    import os
    import time

    from workers import chapter_writer

    want = min(19, os.nice(0) + finalize_child.CHILD_NICE)
    proc = finalize_child._start(["--stdin"])
    writer = chapter_writer.ChapterWriter(1)
    writer.start()
    try:
        for pid in (proc.pid, writer._proc.pid):
            deadline = time.monotonic() + 30
            while _nice(pid) != want:
                assert time.monotonic() < deadline, f"process {pid} runs at nice {_nice(pid)}, not {want}"
                time.sleep(0.05)
    finally:
        proc.communicate(input="", timeout=30)
        writer.close()


def test_chapter_processes_stay_within_the_limit(tmp_path, short_book, monkeypatch):
    from jobs import chapter_pool
    from jobs.finalize import selected_chapters

    job = prepare_job([short_book], tmp_path / "o", JobConfig())
    works = selected_chapters(job)
    monkeypatch.setattr(chapter_pool, "PROCESS_MIN_AUDIO_S", 0.0)
    assert chapter_pool.processes_for(job, works, cores=16) == 2
    assert chapter_pool.processes_for(job, works, cores=16, limit=chapter_pool.PROCESS_MIN_CORES - 1) == 0
    assert chapter_pool.processes_for(job, works, cores=16, limit=0) == 0


def test_an_engine_calls_units_are_written_unit_writers_at_a_time(monkeypatch):
    """``worker --unit-writers N`` (env BOOKTTS_UNIT_WRITERS) reaches the engine process's Offloader:
    an engine call's units are written N at a time, never more."""
    import threading
    import time

    from workers import batcher, runtime

    env = runtime.WorkerSettings(engine=runtime.EngineSpec(), unit_writers=3).to_env()
    assert list(env) == [runtime.RECORD_ENV]  # one record, not a variable per setting
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    runtime.reset_for_tests()
    monkeypatch.setattr(batcher, "_offloader", None)
    off = batcher.offloader()
    lock, now, most = threading.Lock(), [0], [0]

    def write(_):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1

    off.each(write, range(12))
    assert most[0] == 3
    runtime.reset_for_tests()
