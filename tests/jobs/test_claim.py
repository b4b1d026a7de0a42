"""One job per output directory (issue 15): the directory's claim, the local run lock, and batch
records bound to their job. The concurrent CLI cases are in tests/test_cli.py, the distributed
ones in tests/workers/test_dir_claims.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from jobs.config import JobConfig
from core.errors import JobError
from jobs.finalize import finalize
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.synthesize import run_batch
from jobs.runner import run_local
from tests.fake_audio import assert_rows_play_their_own_audio

SMALL = dict(max_batch=3, max_batch_phonemes=803)


def tree(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else None


def write_marker(path, **fields):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_claim_is_taken_before_the_plan_is_written(short_book, tmp_path):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    claim = json.loads((out / ".work" / "claim.json").read_text())
    assert claim["job_id"] == job.job_id and claim["pid"] == os.getpid()
    assert (out / ".work" / "claim.json").stat().st_mtime_ns <= (out / "plan.parquet").stat().st_mtime_ns
    again = prepare_job([short_book], out, JobConfig(**SMALL))  # the same job: resumes
    assert again.job_id == job.job_id


def test_a_job_still_planning_keeps_another_job_out(short_book, tmp_path):
    """The race of the issue, frozen: job A has claimed the directory and is still planning (no
    job.json yet) when job B arrives. B is refused, naming the directory and A, and writes nothing."""
    out = tmp_path / "o"
    write_marker(out / ".work" / "claim.json", job_id="a0a0a0a0a0a0a0a0", claimed_at="2026-01-01T00:00:00+00:00",
                 host="elsewhere", pid=1)
    before = tree(out)
    with pytest.raises(JobError) as err:
        prepare_job([short_book], out, JobConfig(**SMALL))
    msg = str(err.value)
    assert str(out) in msg and "a0a0a0a0a0a0a0a0" in msg and "choose another -o directory" in msg
    assert "\n" not in msg
    assert tree(out) == before, "a refused job writes nothing"


def test_a_job_planned_later_into_a_claimed_directory_is_refused(short_book, tmp_path):
    out = tmp_path / "o"
    a = prepare_job([short_book], out, JobConfig(**SMALL))
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(JobError, match=f"holds another job, {a.job_id}"):
        prepare_job([short_book], out, JobConfig(chapters="2", **SMALL))
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_a_directory_from_before_claims_is_claimed_on_resume(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    (out / ".work" / "claim.json").unlink()  # as an older version left it
    assert prepare_job([short_book], out, JobConfig(**SMALL)).job_id == job.job_id
    assert json.loads((out / ".work" / "claim.json").read_text())["job_id"] == job.job_id
    (out / ".work" / "claim.json").unlink()
    with pytest.raises(JobError, match="holds another job"):  # its job.json still keeps others out
        prepare_job([short_book], out, JobConfig(chapters="1", **SMALL))
    assert not (out / ".work" / "claim.json").exists(), "the refused job claimed nothing"


def test_a_refused_or_failed_prepare_removes_what_it_created(short_book, tmp_path, monkeypatch):
    import jobs.prepare as prepare

    out = tmp_path / "new" / "o"

    def refuse(job_id):
        raise JobError("refused by the broker")

    with pytest.raises(JobError, match="refused by the broker"):
        prepare_job([short_book], out, JobConfig(**SMALL), before_write=refuse)
    assert not (tmp_path / "new").exists(), "nothing created"
    undone = []
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "mine.txt").write_text("the user's file")

    def broken_write(path, obj):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepare, "write_json", broken_write)
    with pytest.raises(OSError):
        prepare_job([short_book], tmp_path / "existing", JobConfig(**SMALL), before_write=lambda j: lambda: undone.append(j))
    assert tree(tmp_path / "existing") == ["mine.txt"], "claim, plan and .work removed; the user's file kept"
    assert len(undone) == 1, "the hook's undo ran"


def test_a_batch_record_of_another_job_is_not_taken_as_done(short_book, tmp_path, fake_engine):
    """The tester's directory: batch records (without job ids in their names) left by another job.
    They are not this job's output: its batches run, and every row plays its own audio."""
    a = prepare_job([short_book], tmp_path / "a", JobConfig(**SMALL))
    for b in a.pending_batches():
        run_batch(a, b, fake_engine)
    out = tmp_path / "b"
    b_job = prepare_job([short_book], out, JobConfig(chapters="2", **SMALL))
    assert b_job.job_id != a.job_id
    batches = out / ".work" / "batches"
    batches.mkdir(parents=True)
    for rec in (tmp_path / "a" / ".work" / "batches").glob("*.json"):
        d = json.loads(rec.read_text())
        shutil.copy(rec.with_name(d["audio_file"]), batches / d["audio_file"])
        (batches / f"b{d['batch_id']:06d}.json").write_text(json.dumps(d))  # the unnamed, pre-job-id layout
    assert b_job.batch_record(0) is None
    assert b_job.pending_batches() == [b.batch_id for b in b_job.batches]
    with pytest.raises(JobError, match="not done"):
        finalize(b_job)
    run_local(b_job, fake_engine)
    assert assert_rows_play_their_own_audio(out) == len([r for r in b_job.rows if r.batch_id >= 0])


def test_batch_records_are_checked_on_every_read(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    rec = run_batch(job, 0, fake_engine)
    path = job.record_path(0)
    assert job.job_id in path.name and job.job_id in rec.audio_file
    legacy = path.with_name("b000000.json")
    path.rename(legacy)  # a record of this job written before names carried the job id: still done
    assert job.batch_record(0) == rec and 0 not in job.pending_batches()
    d = json.loads(legacy.read_text())
    d["items"] = d["items"][::-1] if len(d["items"]) > 1 else d["items"] + d["items"]
    legacy.write_text(json.dumps(d))  # not this batch's utterances
    assert job.batch_record(0) is None and 0 in job.pending_batches()
    legacy.unlink()
    again = run_batch(job, 0, fake_engine)
    assert again.job_id == job.job_id and job.batch_record(0) == again


def test_run_lock_refuses_a_live_run_and_takes_over_a_dead_one(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    lock = out / ".work" / "run.lock"
    write_marker(lock, job_id=job.job_id, host=socket.gethostname(), pid=os.getpid(), token="live",
                 started_at="2026-01-01T00:00:00+00:00")
    with pytest.raises(JobError, match="being synthesized by another `cli.py run`") as err:
        run_local(job, fake_engine)
    assert str(lock) in str(err.value) and str(os.getpid()) in str(err.value)
    assert job.pending_batches() == [b.batch_id for b in job.batches], "nothing synthesized"
    write_marker(lock, job_id=job.job_id, host=socket.gethostname(), pid=dead_pid(), token="dead",
                 started_at="2026-01-01T00:00:00+00:00")
    run_local(job, fake_engine)  # its holder is gone (killed): taken over
    assert not lock.exists(), "released at the end"
    assert_rows_play_their_own_audio(out)
    write_marker(lock, job_id=job.job_id, host="another-host", pid=dead_pid(), token="far",
                 started_at="2026-01-01T00:00:00+00:00")
    with pytest.raises(JobError, match="another-host"):  # cannot tell whether it lives: refused
        run_local(load_job(out), fake_engine)


def test_finalize_refuses_a_directory_claimed_by_another_job(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    for b in job.pending_batches():
        run_batch(job, b, fake_engine)
    write_marker(out / ".work" / "claim.json", job_id="b1b1b1b1b1b1b1b1", pid=1, host="x")
    with pytest.raises(JobError, match="b1b1b1b1b1b1b1b1"):
        finalize(job)
    assert not (out / "manifest.parquet").exists()


def test_claims_without_hard_links_fall_back_to_exclusive_create(tmp_path, monkeypatch):
    import errno

    from jobs import claim as claims

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(claims.os, "link", no_links)
    assert claims.claim(tmp_path, "c2c2c2c2c2c2c2c2") is True
    assert claims.claim(tmp_path, "c2c2c2c2c2c2c2c2") is False, "held already by the same job"
    with pytest.raises(JobError, match="holds another job, c2c2c2c2c2c2c2c2"):
        claims.claim(tmp_path, "d3d3d3d3d3d3d3d3")
    assert [p.name for p in (tmp_path / ".work").iterdir()] == ["claim.json"], "no temporary files left"
