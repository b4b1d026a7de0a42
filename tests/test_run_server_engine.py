"""`run --server` keeps a job to one engine identity too (issue 31, finding 4): a finished job that
another engine synthesized is refused by a server of another engine with one line, not reported
done with the other engine's audio."""

from __future__ import annotations

from tests.test_cli import assert_one_line_error, cli
from tests.test_run_server import server  # noqa: F401  (the fixture: a `serve --engine fake`)


def test_the_server_refuses_a_finished_job_of_another_engine(server, tmp_path, short_book, onnx_engine):  # noqa: F811
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.runner import run_local

    path, _ = server
    out = tmp_path / "out"
    run_local(prepare_job([short_book], out, JobConfig(loudness="none")), onnx_engine)
    before = (out / "manifest.parquet").stat().st_mtime_ns
    res = cli("run", short_book, "-o", out, "--engine", "fake", "--loudness", "none", "--server", path)
    assert_one_line_error(res, "--engine onnx --precision fp32")
    assert (out / "manifest.parquet").stat().st_mtime_ns == before
    res = cli("run", "-o", out, "--engine", "fake", "--server", path)  # a planned job, no books
    assert_one_line_error(res, "--engine onnx --precision fp32")
