"""What a user sees first (issue 28, R4): durations written right, progress as log lines where
stderr is not a terminal, and where the audio is in the closing lines."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from commands.progress import Progress, audio_lines, fmt_duration

ROOT = Path(__file__).resolve().parent.parent


def test_fmt_duration():
    assert fmt_duration(2118) == "35m18s"  # `plan` showed it as "1h35m"
    assert fmt_duration(42.4) == "42s"
    assert fmt_duration(59.6) == "1m00s"
    assert fmt_duration(3600) == "1h00m"
    assert fmt_duration(3 * 3600 + 25 * 60 + 59) == "3h25m"
    assert fmt_duration(0) == "0s" and fmt_duration(None) == "-"


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_progress_lines_every_interval_when_not_a_terminal():
    out, clock = io.StringIO(), Clock()
    p = Progress(100.0, "s audio", stream=out, interval_s=5.0, terminal=False, clock=clock)
    clock.t += 1
    p.advance(10)  # the first update: a line at once
    clock.t += 1
    p.advance(10)  # 1 s later: none
    clock.t += 4
    p.advance(10)  # 5 s after the first line: one
    clock.t += 1
    p.advance(70)  # done: one
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("progress: 10% (10 of 100 s audio)") and "ETA 9s" in lines[0]
    assert lines[1].startswith("progress: 30% (30 of 100 s audio)") and "5.0x real-time" in lines[1]
    assert lines[2].startswith("progress: 100%") and "ETA" not in lines[2]


def test_progress_of_batches_shows_audio_and_the_given_eta():
    out, clock = io.StringIO(), Clock()
    p = Progress(40, "batches", stream=out, terminal=False, clock=clock)
    clock.t += 10
    p.set(10, audio_s=300.0, eta_s=2118.0, note="1 failed")
    p.set(12, audio_s=360.0, eta_s=2000.0)  # within the interval: no line
    p.close()  # progress since the last line: a last one
    lines = out.getvalue().splitlines()
    assert lines[0] == ("progress: 25% (10 of 40 batches, 5m00s of audio), 30.0x real-time, 1 failed, elapsed 10s, "
                        "ETA 35m18s")
    assert lines[1].startswith("progress: 30% (12 of 40 batches, 6m00s of audio)") and "ETA" not in lines[1]


def test_audio_lines():
    assert audio_lines("/o", ["01-book.m4b"], "m4b") == ["audio: /o/01-book.m4b"]
    assert audio_lines("/o", ["01-a/001-x.flac", "01-a/002-y.flac", "01-a/003-z.flac"], "flac") == \
        ["audio: /o/01-a/ (3 FLAC files: 001-x.flac ... 003-z.flac)"]
    assert audio_lines("/o", [], "flac") == []


def test_a_piped_run_prints_progress_lines_and_where_the_audio_is(short_book, tmp_path):
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", str(short_book), "-o", str(out), "--engine",
                          "fake", "--max-batch", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    progress = [l for l in res.stderr.splitlines() if l.startswith("progress: ")]
    assert progress and "s audio" in progress[0] and "real-time" in progress[-1], res.stderr
    flacs = sorted(p.relative_to(out) for p in out.rglob("*.flac"))
    audio = [l for l in res.stdout.splitlines() if l.startswith("audio: ")]
    assert audio == [f"audio: {out / flacs[0].parent}{os.sep} (2 FLAC files: {flacs[0].name} ... {flacs[1].name})"]
    plan = subprocess.run([sys.executable, str(ROOT / "cli.py"), "plan", str(short_book)], capture_output=True,
                          text=True, env=env, timeout=300)
    est = [l for l in plan.stdout.splitlines() if l.startswith("estimated audio: ")]
    assert est and est[0].split()[2] == fmt_duration(float(est[0].split("(")[1].split()[0])), plan.stdout
