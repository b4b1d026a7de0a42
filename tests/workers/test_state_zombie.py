"""The reaper's liveness test (``workers.state.process_gone``) counts a zombie as gone, as the run
lock's does: a killed holder that its parent has not reaped yet runs nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from workers.state import process_gone


def test_a_zombie_holder_is_gone_and_a_live_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not process_gone(socket.gethostname(), child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while open(f"/proc/{child.pid}/stat").read().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.02)
        assert process_gone(socket.gethostname(), child.pid)  # not reaped yet: a zombie
        assert not process_gone("another-host", child.pid)
    finally:
        child.kill()
        child.wait()
