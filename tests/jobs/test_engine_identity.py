"""A job's batches all come from one engine identity (backend and precision) (issue 31, finding 4).

Before: a job started with ``--engine fake`` and resumed with ``--engine onnx`` ended "done" with tone
utterances and speech in one chapter; a finished fake job re-run with onnx kept its tones. Now the
first synthesis records the engine in ``.work/engine.json`` and a resume with another engine or
precision is one ``error:`` line naming the job's; and the fake engine is not offered to users.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.test_cli import ROOT, assert_one_line_error, cli


def _records(out):
    return sorted((out / ".work" / "batches").glob("b*.json"))


def test_a_job_started_with_fake_is_not_resumed_with_onnx(short_book, tmp_path, fake_engine):
    from jobs.job import load_job
    from jobs.synthesize import run_batch

    out = tmp_path / "out"
    assert cli("plan", short_book, "-o", out, "--max-batch", "2").returncode == 0
    job = load_job(out)
    run_batch(job, 0, fake_engine)  # a fake run that stopped after its first batch
    res = cli("run", short_book, "-o", out, "--max-batch", "2", "--engine", "onnx", "--threads", "1")
    assert_one_line_error(res, "--engine fake --precision fp32", "cannot change")
    assert len(_records(out)) == 1 and not (out / "manifest.parquet").exists()
    # the job's own engine resumes it
    res = cli("run", short_book, "-o", out, "--max-batch", "2", "--engine", "fake")
    assert res.returncode == 0, res.stderr
    assert set(pq.read_table(out / "manifest.parquet").column("engine").to_pylist()) == {"fake"}


def test_a_finished_fake_job_is_not_rerun_with_onnx(short_book, tmp_path):
    out = tmp_path / "out"
    assert cli("run", short_book, "-o", out, "--engine", "fake").returncode == 0
    before = (out / "manifest.parquet").stat().st_mtime_ns
    res = cli("run", short_book, "-o", out, "--engine", "onnx", "--threads", "1")
    assert_one_line_error(res, "--engine fake --precision fp32")
    assert (out / "manifest.parquet").stat().st_mtime_ns == before
    # also for a job planned elsewhere and run without its books
    assert_one_line_error(cli("run", "-o", out, "--engine", "onnx"), "--engine fake --precision fp32")


def test_another_precision_is_another_engine(short_book, tmp_path, onnx_engine):
    from jobs.job import load_job
    from jobs.synthesize import run_batch

    out = tmp_path / "out"
    assert cli("plan", short_book, "-o", out, "--max-batch", "2").returncode == 0
    run_batch(load_job(out), 0, onnx_engine)  # fp32
    res = cli("run", short_book, "-o", out, "--max-batch", "2", "--engine", "onnx", "--precision", "int8")
    assert_one_line_error(res, "--engine onnx --precision fp32")
    assert len(_records(out)) == 1
    assert json.loads((out / ".work" / "engine.json").read_text()) == {"name": "onnx", "precision": "fp32"}


def test_a_planned_job_takes_any_engine_until_its_first_batch(short_book, tmp_path):
    """`plan -o OUT` records no engine: the run that synthesizes chooses it."""
    out = tmp_path / "out"
    assert cli("plan", short_book, "-o", out).returncode == 0
    assert not (out / ".work" / "engine.json").exists()
    assert cli("run", "-o", out, "--engine", "fake").returncode == 0
    assert json.loads((out / ".work" / "engine.json").read_text()) == {"name": "fake", "precision": "fp32"}


def test_units_of_a_job_of_another_engine_are_refused_before_synthesis(short_book, tmp_path, fake_engine, voice):
    """The same rule inside one process: synthesize_units claims (or checks) every job of the call."""
    from core.errors import EngineMismatch
    from jobs.config import JobConfig
    from jobs.job import claim_engine
    from jobs.prepare import prepare_job
    from jobs.synthesize import Unit, synthesize_units

    job = prepare_job([short_book], tmp_path / "out", JobConfig(max_batch=2))
    claim_engine(job, {"name": "torch", "precision": "fp16"})  # as a GPU worker's first batch would
    calls = []
    fake_engine.synthesize = lambda batch, real=fake_engine.synthesize: calls.append(1) or real(batch)
    with pytest.raises(EngineMismatch, match="--engine torch --precision fp16"):
        synthesize_units([Unit(job, 0)], fake_engine)
    assert calls == [], "nothing was synthesized"


def _cli_without_test_engines(*args):
    env = {k: v for k, v in os.environ.items() if k != "BOOKTTS_TEST_ENGINES"}
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("command", ["run", "worker", "serve"])
def test_the_fake_engine_is_not_offered_to_users(command, short_book, tmp_path):
    help_text = _cli_without_test_engines(command, "--help").stdout
    assert "[onnx|torch|tensorrt]" in help_text and "fake" not in help_text
    if command == "run":
        res = _cli_without_test_engines("run", short_book, "-o", tmp_path / "out", "--engine", "fake")
        assert res.returncode == 2 and "'fake' is not one of" in res.stderr and "Traceback" not in res.stderr
        assert not (tmp_path / "out").exists()
    # the test suite's switch offers it
    assert "[onnx|torch|tensorrt|fake]" in cli(command, "--help").stdout


def test_a_directory_from_before_engine_json_is_judged_by_its_batch_records(short_book, tmp_path):
    """A job synthesized before the engine was recorded (no .work/engine.json) keeps its engine: that
    of its batch records."""
    out = tmp_path / "out"
    assert cli("run", short_book, "-o", out, "--engine", "fake").returncode == 0
    (out / ".work" / "engine.json").unlink()  # as a directory written by the previous version
    assert_one_line_error(cli("run", short_book, "-o", out, "--engine", "onnx"), "--engine fake --precision fp32")
    assert not (out / ".work" / "engine.json").exists()
    assert cli("run", short_book, "-o", out, "--engine", "fake").returncode == 0
