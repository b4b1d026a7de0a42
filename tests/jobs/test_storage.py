"""A full disk and interrupted writers, for the local runner.

- A full disk is one ``error:`` line naming the file and "no space left on device" (exit 7), never
  libsndfile's traceback; after space is freed the same command resumes. Tested on a real small
  filesystem (a tmpfs: needs root, else skipped with the reason) and, without privileges, by writing
  through /dev/full (a real ENOSPC from the kernel, through the real libsndfile / pyarrow / json).
- Temporary files of killed writers are removed when a run and a finalize start; those of live
  writers (also stopped ones) are kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import jobs.finalize as finalize_module
import jobs.prepare as prepare_module
import jobs.synthesize as synthesize_module
from cli import main
from jobs.config import JobConfig
from core.errors import DiskFullError, StorageError, TTSError
from core.files import TMP_NAME, atomic_path, sweep_temp_files
from jobs.prepare import prepare_job
from jobs.runner import run_local
from tests.smallfs import fill, small_tmpfs

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(max_batch=2)


def temp_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if TMP_NAME.match(p.name))


def manifest(out: Path) -> list[dict]:
    return pq.read_table(out / "manifest.parquet").to_pylist()


def same_rows(a: list[dict], b: list[dict]) -> None:
    keys = ("book_index", "chapter_index", "utterance_index", "text", "chapter_path", "start_s", "duration_s")
    assert [tuple(r[k] for k in keys) for r in a] == [tuple(r[k] for k in keys) for r in b]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def cli_run(out: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``cli.py run -o OUT --engine fake`` in a subprocess (the job is planned in OUT)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("BOOKTTS_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", "-o", str(out), "--engine", "fake"],
                          capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


# ------------------------------------------------------------------ the error itself


def test_disk_full_error_is_an_os_error_naming_the_file():
    e = DiskFullError("/out/book/001-x.flac")
    assert isinstance(e, OSError) and isinstance(e, StorageError) and isinstance(e, TTSError)
    assert e.errno == errno.ENOSPC and e.filename == "/out/book/001-x.flac" and e.exit_code == 7
    msg = str(e)
    assert msg.startswith("no space left on device writing /out/book/001-x.flac: free space")
    assert "run the same command again to resume" in msg and "\n" not in msg
    again = pickle.loads(pickle.dumps(e))  # crosses process boundaries (Celery's pool) intact
    assert type(again) is DiskFullError and str(again) == msg and again.errno == errno.ENOSPC


def test_atomic_path_turns_enospc_into_disk_full_and_leaves_nothing(tmp_path):
    final = tmp_path / "x.json"
    with pytest.raises(DiskFullError) as ei:
        with atomic_path(final) as tmp:
            tmp.unlink()
            tmp.symlink_to("/dev/full")  # every write: ENOSPC, from the kernel
            tmp.write_bytes(b"{}" * 100)
    assert ei.value.filename == str(final) and isinstance(ei.value.__cause__, OSError)
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def _through_dev_full(final, match, real):
    """``atomic_path`` whose temporary file, for final names matching the regex ``match``, is /dev/full."""
    with real(final) as tmp:
        if re.search(match, Path(final).name):
            tmp.unlink()
            tmp.symlink_to("/dev/full")
        yield tmp


@pytest.mark.parametrize("target,needle,error,done_before", [
    (r"^b000002-.*\.wav$", "no space left on device", "DiskFull", 2),  # batch audio: libsndfile ("System error." before)
    (r"^b000002-.*\.json$", "no space left on device", "DiskFull", 2),  # batch record (named with the job id): json
    (r"\.flac$", "no space left on device", "DiskFull", 5),    # chapter: libsndfile's FLAC encoder
    (r"^manifest", "no space left on device", "DiskFull", 5),  # manifest: pyarrow
], ids=["batch-audio", "batch-record", "chapter", "manifest"])
def test_cli_run_full_disk_is_one_line_then_resumes(short_book, tmp_path, voice, monkeypatch, target, needle,
                                                     error, done_before):
    """Without privileges: the write of one kind of file goes to /dev/full. One error line naming
    that file, exit 7; the same command then resumes and completes."""
    import core.files as files

    out = tmp_path / "o"
    job = prepare_job([short_book], out, JobConfig(**SMALL))
    assert len(job.batches) == 5
    real = files.atomic_path
    patched = lambda final: _through_dev_full(final, target, real)  # noqa: E731
    for module in (prepare_module, synthesize_module, finalize_module):
        monkeypatch.setattr(module, "atomic_path", patched)
    monkeypatch.setattr(files, "atomic_path", patched)
    res = CliRunner().invoke(main, ["run", "-o", str(out), "--engine", "fake"])
    assert res.exit_code == 7, (res.output, res.exception)
    line = one_error_line(res.stderr)
    assert needle in line and "run the same command again" in line, line
    named = line.split(" writing " if error == "DiskFull" else "cannot write ", 1)[1].split(":", 1)[0]
    assert Path(named).parent.is_relative_to(out) and re.search(target, Path(named).name), line
    assert temp_files(out) == [] and not (out / "manifest.parquet").exists()
    monkeypatch.undo()
    res = CliRunner().invoke(main, ["run", "-o", str(out), "--engine", "fake"])
    assert res.exit_code == 0, res.output
    assert f"resuming: {done_before} batches already done" in res.stderr
    ref = prepare_job([short_book], tmp_path / "ref", JobConfig(**SMALL))
    run_local(ref, pipeline_fake(voice))
    same_rows(manifest(out), manifest(tmp_path / "ref"))
    assert temp_files(out) == [] and job.job_id == ref.job_id


def pipeline_fake(voice):
    from engines.fake import FakeEngine

    return FakeEngine(sample_rate=voice.sample_rate, hop_length=voice.hop_length)


def test_cli_run_on_a_real_full_filesystem_then_resume(short_book, tmp_path, voice):
    """A tmpfs of 4 MiB filled up: while synthesizing (a batch's audio), then while finalizing (a
    chapter file); each time one error line; after freeing the space, `run` resumes and the output
    equals a run that never saw a full disk."""
    ref = prepare_job([short_book], tmp_path / "ref", JobConfig(**SMALL))
    run_local(ref, pipeline_fake(voice))
    batch_bytes = [sum(p.stat().st_size for p in (tmp_path / "ref" / ".work" / "batches").glob(f"b{b:06d}*"))
                   for b in range(len(ref.batches))]
    chapter_bytes = sorted(p.stat().st_size for p in (tmp_path / "ref").rglob("*.flac"))
    assert len(batch_bytes) >= 4 and batch_bytes[2] > 60_000 and chapter_bytes[0] > 100_000
    with small_tmpfs(tmp_path / "disk", 4096) as disk:
        out = disk / "job"
        prepare_job([short_book], out, JobConfig(**SMALL))
        # 1) room for the first two batches only
        filler = fill(disk, batch_bytes[0] + batch_bytes[1] + 40_000)
        res = cli_run(out)
        assert res.returncode == 7, res.stderr
        line = one_error_line(res.stderr)
        assert "no space left on device writing " + str(out / ".work" / "batches") in line, line
        assert "free space" in line and "run the same command again to resume" in line
        done = len([p for p in (out / ".work" / "batches").glob("b*.json")])
        assert 1 <= done < len(batch_bytes)
        assert temp_files(out) == []
        # 2) room for the remaining batches, not for the chapter files
        filler.unlink()
        filler = fill(disk, sum(batch_bytes[done:]) + 40_000)
        res = cli_run(out)
        assert res.returncode == 7, res.stderr
        line = one_error_line(res.stderr)
        assert "no space left on device writing " + str(out / "01-short") in line and ".flac" in line, line
        assert f"resuming: {done} batches already done" in res.stderr
        assert not (out / "manifest.parquet").exists() and temp_files(out) == []
        # 3) space freed: resume completes
        filler.unlink()
        res = cli_run(out)
        assert res.returncode == 0, res.stderr
        assert f"resuming: {len(batch_bytes)} batches already done" in res.stderr
        same_rows(manifest(out), manifest(tmp_path / "ref"))
        assert temp_files(out) == []


# ------------------------------------------------------------------ temporary files of killed writers

WRITER = """
import sys, time
from pathlib import Path
from core.files import atomic_path
with atomic_path(Path(sys.argv[1])) as tmp:
    tmp.write_bytes(b"partial")
    print("writing", flush=True)
    time.sleep(120)
"""


def _writer(final: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT)), str(final)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "writing"
    return p


def test_sweep_removes_only_the_temp_files_of_dead_writers(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    dead, stopped, live = _writer(d / "a.flac"), _writer(d / "b.flac"), _writer(d / "c.flac")
    try:
        names = {p.name.rsplit("-", 1)[-1]: p for p in d.iterdir()}
        assert set(names) == {"a.flac", "b.flac", "c.flac"}
        dead.kill()
        dead.wait()
        os.kill(stopped.pid, signal.SIGSTOP)
        # not ours to touch: other names, a link named like ours, a temp name in another directory
        (d / ".tmp-notours.flac").write_text("x")
        (d / "notes.txt").write_text("x")
        (tmp_path / "elsewhere.flac").write_text("precious")
        (d / ".tmp-0123456789ab-link.flac").symlink_to(tmp_path / "elsewhere.flac")
        (d / "sub").mkdir()
        (d / "sub" / ".tmp-0123456789ab-deeper.flac").write_text("x")
        removed = sweep_temp_files([d, tmp_path / "missing-dir"])
        assert removed == [names["a.flac"]]
        assert names["b.flac"].exists() and names["c.flac"].exists(), "live writers (even stopped) keep theirs"
        assert (tmp_path / "elsewhere.flac").read_text() == "precious"
        assert {p.name for p in d.iterdir()} == {names["b.flac"].name, names["c.flac"].name, ".tmp-notours.flac",
                                                "notes.txt", ".tmp-0123456789ab-link.flac", "sub"}
        assert sweep_temp_files([d], min_age_s=3600) == []
    finally:
        for p in (dead, stopped, live):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
    assert sorted(sweep_temp_files([d])) == sorted([names["b.flac"], names["c.flac"]])


def test_local_run_killed_during_finalize_then_rerun_leaves_no_temp_files(short_book, tmp_path, voice):
    """`cli.py run` SIGKILLed while finalize writes the chapter files (slowed down by the test knob):
    its temporary chapter files stay behind; the re-run removes them and completes."""
    out = tmp_path / "o"
    prepare_job([short_book], out, JobConfig(**SMALL))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", finalize_module.FINALIZE_DELAY_ENV: "60"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "run", "-o", str(out), "--engine", "fake"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len([p for p in temp_files(out) if p.suffix == ".flac"]) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "finalize did not start"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    left = temp_files(out)
    assert len(left) >= 2 and all(p.parent.name == "01-short" for p in left)
    res = cli_run(out)
    assert res.returncode == 0, res.stderr
    assert "removed" in res.stderr and "temporary files" in res.stderr
    assert temp_files(out) == []
    ref = prepare_job([short_book], tmp_path / "ref", JobConfig(**SMALL))
    run_local(ref, pipeline_fake(voice))
    same_rows(manifest(out), manifest(tmp_path / "ref"))


def test_a_killed_writers_temp_files_are_swept_from_every_directory_a_job_writes(tmp_path):
    """The loudness records (``.work/loudness``) and chapter records (``.work/chapters``) are written
    atomically like the rest: a writer killed there left its temporary file for good, because the sweep did
    not look in those directories (the local-kills fault schedule found one after a completed job)."""
    from types import SimpleNamespace

    from jobs import chapter_records, deliver
    from jobs.finalize import sweep_stale_temp_files
    from jobs.job import BATCHES_DIR, WORK_DIR

    out = tmp_path / "job"
    job = SimpleNamespace(out_dir=out, job_id="0123456789abcdef",
                          meta={"books": [{"chapters": [{"file": "01-book/001-chapter.flac"}]}]})
    left = []
    for rel in (WORK_DIR, BATCHES_DIR, deliver.LOUDNESS_DIR, chapter_records.CHAPTERS_DIR, "01-book"):
        (out / rel).mkdir(parents=True, exist_ok=True)
        p = out / rel / ".tmp-0123456789ab-b00-c0002.json"  # nobody holds its lock: its writer is dead
        p.write_text("{")
        left.append(p)
    assert sorted(sweep_stale_temp_files(job)) == sorted(left)
    assert not any(p.exists() for p in left)
