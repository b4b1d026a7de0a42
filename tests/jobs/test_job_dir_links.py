"""A link planted below a job directory does not lead its files elsewhere (issue 31, finding 5).

Replacing ``.work/batches`` (or ``.work``, or another directory the job writes into) with a symbolic
link to a directory elsewhere, before the job's batches land, made a local run write the batch
audio and records there and end "done". Every directory a run writes into below the job directory is
checked: a link (or a path resolving outside it) is one ``error:`` line, and nothing lands there.
"""

from __future__ import annotations

import shutil

import pytest

from core.errors import UnsafePathError
from tests.test_cli import assert_one_line_error, cli


def _plant(out, rel, target):
    """Replace ``out/rel`` by a link to ``target`` (a directory elsewhere), keeping what was in it."""
    d = out / rel
    target.mkdir(parents=True)
    if d.exists():
        for p in d.iterdir():
            shutil.move(str(p), target / p.name)
        d.rmdir()
    d.parent.mkdir(parents=True, exist_ok=True)
    d.symlink_to(target, target_is_directory=True)


@pytest.mark.parametrize("rel", [".work/batches", ".work", ".work/chapters", ".work/loudness"])
def test_a_run_refuses_a_linked_work_directory_and_writes_nothing_through_it(short_book, tmp_path, rel):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    res = cli("plan", short_book, "-o", out, "--max-batch", "2")
    assert res.returncode == 0, res.stderr
    _plant(out, rel, elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    res = cli("run", short_book, "-o", out, "--max-batch", "2", "--engine", "fake")
    assert_one_line_error(res, "symbolic link", rel.rsplit("/", 1)[-1])
    assert sorted(p.name for p in elsewhere.iterdir()) == before, "nothing was written through the link"
    assert not (out / "manifest.parquet").exists()


def test_a_resume_of_a_planned_job_refuses_a_linked_batches_directory(short_book, tmp_path):
    """`run -o OUT` without books (a job planned elsewhere) checks the same directories."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    assert cli("plan", short_book, "-o", out, "--max-batch", "2").returncode == 0
    _plant(out, ".work/batches", elsewhere)
    res = cli("run", "-o", out, "--engine", "fake")
    assert_one_line_error(res, "symbolic link", "batches")
    assert list(elsewhere.iterdir()) == []


def test_a_link_planted_after_the_job_was_opened_stops_the_batch_write(short_book, tmp_path, fake_engine):
    """The writer checks again right before it writes (a worker holds jobs opened for long)."""
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.synthesize import run_batch

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    job = prepare_job([short_book], out, JobConfig(max_batch=2))
    run_batch(job, 0, fake_engine)
    _plant(out, ".work/batches", elsewhere)
    moved = sorted(p.name for p in elsewhere.iterdir())
    with pytest.raises(UnsafePathError, match="symbolic link"):
        run_batch(job, 1, fake_engine)
    assert sorted(p.name for p in elsewhere.iterdir()) == moved


def test_real_directory(tmp_path):
    from core.files import real_directory

    root = tmp_path / "job"
    (root / ".work" / "batches").mkdir(parents=True)
    (root / "book").mkdir()
    (tmp_path / "other").mkdir()
    assert real_directory(root, ".work/batches") == root / ".work" / "batches"
    assert real_directory(root, ".work/not-yet") == root / ".work" / "not-yet", "a directory still to be made passes"
    (root / "inner").symlink_to(root / "book")  # a link, even one that stays inside
    (root / "file").write_text("x")
    for rel, needle in (("inner", "symbolic link"), ("file", "not a directory"), ("../other", "would leave"),
                        ("/abs", "would leave")):
        with pytest.raises(UnsafePathError, match=needle):
            real_directory(root, rel)
    linked_root = tmp_path / "named-by-the-user"
    linked_root.symlink_to(root)  # the job directory itself may be a link the user chose
    assert real_directory(linked_root, ".work/batches") == linked_root / ".work" / "batches"
