"""Who counts as a live holder of ``.work/run.lock``: a runner that was killed and not yet reaped by
its parent (a zombie) runs nothing, so its lock is taken over at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from jobs import claim as claims


def _zombie() -> subprocess.Popen:
    """A child process that has exited and that this process has not reaped (state ``Z``)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    path = f"/proc/{proc.pid}/stat"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(path) as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                return proc
        time.sleep(0.01)
    raise AssertionError("the child did not exit")


def test_a_zombie_holder_of_the_run_lock_is_gone(tmp_path):
    proc = _zombie()
    try:
        lock = claims.run_lock_path(tmp_path)
        lock.parent.mkdir()
        lock.write_text(json.dumps({"job_id": "j1", "pid": proc.pid, "host": socket.gethostname(), "token": "t",
                                    "started_at": "2026-01-01T00:00:00+00:00"}))
        assert claims.local_run_holder(tmp_path) is None
        with claims.run_lock(tmp_path, "j1"):  # taken over, not "being synthesized by another run"
            assert json.loads(lock.read_text())["pid"] == os.getpid()
        assert not lock.exists()
        assert claims.process_gone(proc.pid)
    finally:
        proc.wait()


def test_a_live_holder_still_holds_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lock = claims.run_lock_path(tmp_path)
        lock.parent.mkdir()
        lock.write_text(json.dumps({"job_id": "j1", "pid": proc.pid, "host": socket.gethostname(), "token": "t",
                                    "started_at": "2026-01-01T00:00:00+00:00"}))
        assert not claims.process_gone(proc.pid)
        assert claims.local_run_holder(tmp_path)["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_inbox_watchers_lock_of_a_zombie_is_taken_over():
    """workers/watch.py judges its Redis lock's holder (``host:pid:time``) the same way."""
    from workers.watch import _holder_gone

    proc = _zombie()
    try:
        assert _holder_gone(f"{socket.gethostname()}:{proc.pid}:1.0".encode())
        assert not _holder_gone(f"{socket.gethostname()}:{os.getpid()}:1.0".encode())  # this process
        assert not _holder_gone(f"elsewhere:{proc.pid}:1.0".encode())  # another host: its lock runs out
    finally:
        proc.wait()
    assert not claims.process_gone(0) and not claims.process_gone(-1)
