"""One job per output directory in the distributed runner (issue 15): real redis-server, real
`cli.py submit` and `cli.py worker` processes, fake engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.config import JobConfig
from jobs.prepare import prepare_job
from tests.fake_audio import assert_rows_play_their_own_audio
from tests.workers.test_distributed import cli, submit, wait_status
from workers.state import JobInfo, JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
ALICE = ROOT / "tests" / "data" / "alice-pg11.txt"


def one_error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def submit_proc(url: str, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BOOKTTS_DEBUG", None)
    env.pop("REDIS_URL", None)
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "submit", *map(str, args), "--redis-url", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def test_two_different_jobs_submitted_into_one_directory_at_once(redis_url, start_worker, tmp_path):
    """The tester's case: `submit alice -o D --chapters ...` and `submit alice -o D` at the same time,
    two workers. One is accepted; the other is refused with one line naming D and the accepted job,
    leaving nothing in Redis; the accepted job ends done and every row plays its own audio."""
    store = JobStore(redis_url)
    start_worker(redis_url, "w1")
    start_worker(redis_url, "w2")
    out = tmp_path / "D"
    common = ["-o", out, "--max-batch", "32", "--length-scale", "0.1"]
    procs = [submit_proc(redis_url, ALICE, "--chapters", "1-11", *common), submit_proc(redis_url, ALICE, *common)]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    ok = [r for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode != 0]
    assert len(ok) == 1 and len(refused) == 1, [(r.returncode, r.stderr[-800:]) for r in results]
    winner = ok[0].stdout.strip().splitlines()[0]
    line = one_error_line(refused[0])
    assert refused[0].returncode == 4 and str(out) in line and winner in line, line
    assert [j.id for j in store.recent_jobs()] == [winner], "the refused job is not in Redis"
    info = wait_status(store, winner, timeout=120)
    assert info.status is JobStatus.DONE and info.done == info.batches
    assert json.loads((out / "job.json").read_text())["job_id"] == winner
    assert assert_rows_play_their_own_audio(out) > 0
    assert all(winner in p.name for p in (out / ".work" / "batches").iterdir())


def test_submit_into_a_directory_another_active_job_holds_in_redis(redis_url, tmp_path, short_book):
    """Redis knows D as the directory of a queued job whose files are not there yet (submitted from
    another host a moment ago, say): a different job is refused before anything is written."""
    store = JobStore(redis_url)
    out = tmp_path / "D"
    other = "0f0f0f0f0f0f0f0f"
    store.create_job(JobInfo(id=other, out_dir=str(out.resolve()), status=JobStatus.QUEUED, priority="normal",
                             queue="tts.normal", batches=3, utterances=9, audio_s_est=10.0, created=time.time()))
    store.claim_dir(str(out.resolve()), other)
    keys = set(store.r.keys("*"))
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4, res.output
    line = one_error_line(res)
    assert str(out.resolve()) in line and other in line and "choose another -o directory" in line
    assert not out.exists(), "a refused submit leaves nothing behind"
    assert set(store.r.keys("*")) == keys and store.r.llen("tts.normal") == 0
    store.fail_job(other, "gave up")  # no longer active: the directory can be taken
    job_id = submit(redis_url, short_book, out, "--max-batch", "2")
    assert store.dir_holder(str(out.resolve())) == job_id


def test_same_job_into_a_second_directory_while_active_leaves_nothing(redis_url, tmp_path, short_book):
    store = JobStore(redis_url)
    job_id = submit(redis_url, short_book, tmp_path / "D1", "--max-batch", "2")
    n = store.r.llen("tts.normal")
    res = cli("submit", short_book, "-o", tmp_path / "D2", "--max-batch", "2", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4 and f"job {job_id} (same books and settings) is already queued in" in one_error_line(res)
    assert not (tmp_path / "D2").exists(), "no job.json or plan.parquet of the refused submit"
    assert store.r.llen("tts.normal") == n


def test_submit_while_a_local_run_synthesizes_the_directory(redis_url, tmp_path, short_book):
    out = tmp_path / "D"
    job = prepare_job([short_book], out, JobConfig(max_batch=2))
    lock = out / ".work" / "run.lock"
    lock.parent.mkdir(exist_ok=True)
    import socket

    lock.write_text(json.dumps({"job_id": job.job_id, "pid": os.getpid(), "host": socket.gethostname(),
                                "token": "t", "started_at": "2026-01-01T00:00:00+00:00"}))
    before = sorted(p.name for p in out.rglob("*"))
    res = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4 and "being synthesized by another `cli.py run`" in one_error_line(res)
    assert sorted(p.name for p in out.rglob("*")) == before and JobStore(redis_url).r.dbsize() == 0


def test_resume_refuses_a_job_whose_directory_now_holds_another(redis_url, tmp_path, short_book):
    import shutil

    store = JobStore(redis_url)
    out = tmp_path / "D"
    a = submit(redis_url, short_book, out, "--max-batch", "2")
    cli("cancel", a, "--redis-url", redis_url)
    shutil.rmtree(out)  # the user recycles the directory for another job
    b = submit(redis_url, short_book, out, "--max-batch", "2", "--chapters", "2")
    assert a != b
    res = cli("resume", a, "--redis-url", redis_url, ok=False)
    assert res.exit_code == 4 and f"now holds job {b}, not {a}" in one_error_line(res)
    assert store.dir_holder(str(out.resolve())) == b
    assert store.get_job(a).status is JobStatus.CANCELLED
    res = cli("resume", out, "--redis-url", redis_url)  # by directory: the job that is there
    assert f"job {b}:" in res.stdout
