"""The local runner (`cli.py run`) under a seeded schedule of SIGKILLs (issue 15): killed at random
moments (mid-batch, mid-write, mid-finalize), then run again with the same command, until it
completes; the directory must then satisfy the same invariant as the distributed runner's
(tests/faults/invariants.py). No Redis involved."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.invariants import check_job_dir
from tests.faults.report import SUMMARIES
from tests.faults.test_fault_schedule import alice_paragraphs, make_book, seed_from_env

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def run_cmd(book: Path, out: Path) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), "run", str(book), "-o", str(out), "--engine", "fake",
            "--max-batch", "2"]


def records(out: Path) -> int:
    work = out / ".work" / "batches"
    return len(list(work.glob("b*.json"))) if work.exists() else 0


def wait_until(pred, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)


def kill_at(rng: random.Random, p: subprocess.Popen, out: Path) -> str:
    """Wait for a moment drawn by ``rng``: after k more batch records (mid-batch, mid-write), or once
    every batch is written (mid-finalize: each chapter file takes 0.5 s more); returns which it was."""
    wait_until(lambda: ((out / "job.json").exists() and (out / "plan.parquet").exists()) or p.poll() is not None)
    if p.poll() is not None:
        return "ended"
    from jobs.job import load_job

    total = len(load_job(out).batches)
    if rng.random() < 0.3:
        wait_until(lambda: records(out) >= total or p.poll() is not None)
        time.sleep(rng.uniform(0.0, 0.8))
    else:
        k = rng.randint(records(out), total - 1) if records(out) < total else total
        wait_until(lambda: records(out) >= k or p.poll() is not None)
        time.sleep(rng.uniform(0.0, 0.3))
    return "finalize" if records(out) >= total else "batches"


def test_local_runner_killed_at_random_moments(tmp_path):
    seed = seed_from_env()
    rng = random.Random(seed)
    print(f"local kill schedule seed {seed} (BOOKTTS_FAULT_SEED={seed} replays it)", flush=True)
    paras = alice_paragraphs()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "BOOKTTS_FAKE_DELAY_S": "0.3",
           "BOOKTTS_TEST_FINALIZE_DELAY_S": "0.5"}
    env.pop("BOOKTTS_DEBUG", None)
    kills = jobs = utterances = 0
    t0 = time.monotonic()
    at: list[str] = []  # where each kill landed
    for j in range(3):
        book = make_book(rng, tmp_path / f"book{j}.txt", paras)
        out = tmp_path / f"job{j}"
        for attempt in range(12):
            p = subprocess.Popen(run_cmd(book, out), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
            if attempt < 4:
                phase = kill_at(rng, p, out)
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    kills += 1
                    at.append(phase)
            stdout, stderr = p.communicate(timeout=120)
            if p.returncode == 0:
                break
            assert p.returncode == -signal.SIGKILL, f"run exited {p.returncode}: {stderr[-2000:]}"
        else:
            raise AssertionError(f"job {j} never completed (seed {seed})")
        meta = json.loads((out / "job.json").read_text())
        job_id = meta["job_id"]
        from jobs.job import load_job

        batches = len(load_job(out).batches)
        utterances += check_job_dir(out, job_id, batches)
        jobs += 1
    took = time.monotonic() - t0
    line = (f"local runner, seed {seed}: {jobs} jobs, {utterances} utterances checked, {kills} SIGKILLs "
            f"(mid-batches {at.count('batches')}, mid-finalize {at.count('finalize')}), {took:.0f} s")
    SUMMARIES.append({"seed": seed, "jobs": jobs, "utterances_checked": utterances, "faults": {"kill_run": kills},
                      "line": line})
    print(line, flush=True)
    assert jobs == 3 and kills >= 3, line
