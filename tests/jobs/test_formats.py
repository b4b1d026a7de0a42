"""Deliverables (issue 16): M4B with chapter markers, MP3/Opus/FLAC/WAV tags, loudness, captions.

Everything is read back from the written files (mutagen, PyAV, libsndfile, pyloudnorm), never
taken from the writer. Jobs run with the fake engine through the local runner.
"""

from __future__ import annotations

import builtins
import sys
import json
import math
import re
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from click.testing import CliRunner

from cli import main
from jobs import loudness
from jobs.config import JobConfig
from core.files import TMP_NAME
from jobs.job import load_job
from jobs.prepare import prepare_job
from jobs.runner import run_local
from tests.fake_audio import assert_rows_play_their_own_audio

DATA = Path(__file__).resolve().parent.parent / "data"
DET = dict(noise_scale=0.0, noise_w=0.0)
#: One AAC frame at the voice's 22.05 kHz: the precision chapter starts are checked to.
AAC_FRAME_S = 1024 / 22050


def run_job(book, out, fake_engine, **cfg):
    job = prepare_job([book], out, JobConfig(**DET, **cfg))
    run_local(job, fake_engine)
    return load_job(out)


def manifest(out):
    return pq.read_table(Path(out) / "manifest.parquet").to_pylist()


def no_temp_files(out):
    return [p for p in Path(out).rglob("*") if TMP_NAME.match(p.name)] == []


def chapter_starts(rows):
    """(title, start of the chapter's first row) per chapter, in order."""
    out = []
    for r in rows:
        if not out or out[-1][0] != (r["book_index"], r["chapter_index"]):
            out.append(((r["book_index"], r["chapter_index"]), r["chapter_title"], r["start_s"]))
    return [(t, s) for _, t, s in out]


def parse_captions(text: str, sep: str):
    """(start, end, text) per cue of an SRT (sep ',') or WebVTT (sep '.') file."""
    stamp = rf"(\d\d):(\d\d):(\d\d){re.escape(sep)}(\d\d\d)"
    cues = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        m = next((re.fullmatch(rf"{stamp} --> {stamp}", l) for l in lines if "-->" in l), None)
        if m is None:
            continue
        g = [int(x) for x in m.groups()]
        a = g[0] * 3600 + g[1] * 60 + g[2] + g[3] / 1000
        b = g[4] * 3600 + g[5] * 60 + g[6] + g[7] / 1000
        body = " ".join(lines[lines.index(m.group(0)) + 1:])
        tags = [_seconds(*t) for t in re.findall(r"<(\d\d):(\d\d):(\d\d)\.(\d\d\d)>", body)]
        cues.append((a, b, re.sub(r"<[^>]+>", "", body), tags) if tags else (a, b, body))
    return cues


def _seconds(h, m, s, ms):
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def spoken(rows):
    return [r for r in rows if r["duration_s"] > 0]


def cues_of_rows(cues, rows, tol=0.0015):
    """Each spoken row's cues, in order (a long utterance is split into several readable cues:
    jobs.captions); every cue belongs to exactly one row."""
    groups = [[c for c in cues if r["start_s"] - tol <= c[0] and c[1] <= r["start_s"] + r["duration_s"] + tol]
              for r in rows]
    assert sum(map(len, groups)) == len(cues)
    return groups


def word_starts_from_manifest(row, job):
    """Start of each word of a manifest row: the durations of the phonemes before it (words begin
    after the voice's space phoneme)."""
    ids = next(r.utt.phoneme_ids for r in job.rows
               if r.key == (row["book_index"], row["chapter_index"], row["utterance_index"]))
    space, silent = job.voice.phoneme_id_map[" "], [job.voice.phoneme_id_map[k][0] for k in "^$_"]
    starts, t, prev_space = [], row["start_s"], True
    for pid, d in zip(ids, row["phoneme_durations_s"]):
        if pid in space:
            prev_space = True
        elif pid not in silent:
            if prev_space:
                starts.append(t)
            prev_space = False
        t += d
    return starts


def test_manifest_has_the_engines_phoneme_durations(short_book, tmp_path, fake_engine, voice):
    out = tmp_path / "o"
    job = run_job(short_book, out, fake_engine, loudness="none")
    per_id = fake_engine.frames_per_phoneme * voice.hop_length / voice.sample_rate
    for r in spoken(manifest(out)):
        d = r["phoneme_durations_s"]
        assert len(d) == r["phoneme_count"] and abs(sum(d) - r["duration_s"]) < 1e-9
        assert all(abs(x - per_id) < 1e-9 for x in d[:-1])  # the fake engine: the same length per id


# --------------------------------------------------------------------------- M4B


def test_m4b_chapters_tags_and_captions_read_back(short_book, tmp_path, fake_engine, voice):
    import av
    from mutagen.mp4 import MP4

    out = tmp_path / "o"
    job = run_job(short_book, out, fake_engine, audio_format="m4b", captions="srt,vtt")
    rows = manifest(out)
    m4bs = sorted(out.glob("*.m4b"))
    assert [p.name for p in m4bs] == [f"{job.meta['books'][0]['dir']}.m4b"]
    assert {r["chapter_path"] for r in rows} == {m4bs[0].name}
    assert no_temp_files(out)

    want = chapter_starts(rows)
    assert len(want) == 2 and want[0][1] == 0.0 and want[1][1] > 5
    f = MP4(str(m4bs[0]))  # Nero chapters (chpl), as mutagen reads them
    assert [c.title for c in f.chapters] == [t for t, _ in want]
    for c, (_, start) in zip(f.chapters, want):
        assert abs(c.start - start) <= AAC_FRAME_S, (c.start, start)
    assert f["\xa9nam"] == ["Short"] or f["\xa9nam"] == [job.meta["books"][0]["title"]]
    assert f["\xa9alb"] == [job.meta["books"][0]["title"]]
    assert f["\xa9wrt"] == [voice.name] and f["\xa9cmt"] == [f"Narrated by {voice.name}"]
    assert f["\xa9gen"] == ["Audiobook"] and f["stik"] == [2]
    last = rows[-1]
    total = last["start_s"] + last["duration_s"] + last["pause_after_s"]
    assert abs(f.info.length - total) < 0.1, (f.info.length, total)
    assert f.info.codec.startswith("mp4a") and f.info.sample_rate == voice.sample_rate

    with av.open(str(m4bs[0])) as c:  # the QuickTime chapter track, as FFmpeg reads it
        chs = c.chapters()
        assert [ch["metadata"].get("title") for ch in chs] == [t for t, _ in want]
        for ch, (_, start) in zip(chs, want):
            assert abs(float(ch["start"] * ch["time_base"]) - start) <= AAC_FRAME_S
        assert c.streams.audio[0].codec_context.name == "aac"
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(c.streams.audio[0])])
    sr = voice.sample_rate
    assert abs(len(decoded) - round(total * sr)) <= 2048  # every sample of every chapter is in the M4B
    for k, (_, start) in enumerate(want):  # and each chapter keeps its -23 LUFS through AAC
        end = want[k + 1][1] if k + 1 < len(want) else total
        part = decoded[round(start * sr):round(end * sr)]
        assert abs(loudness.integrated_lufs(part, sr) - loudness.EBU_TARGET_LUFS) <= 0.5

    for ext, sep in (("srt", ","), ("vtt", ".")):
        text = m4bs[0].with_suffix(f".{ext}").read_text(encoding="utf-8")
        if ext == "vtt":
            assert text.startswith("WEBVTT\n")
        cues = parse_captions(text, sep)
        rs = spoken(rows)
        timed = 0
        for group, r in zip(cues_of_rows(cues, rs), rs):  # book-level offsets: the manifest's, in the M4B
            a, b = group[0][0], group[-1][1]
            assert abs(a - r["start_s"]) <= 0.0015 and abs(b - (r["start_s"] + r["duration_s"])) <= 0.0015
            assert " ".join(c[2] for c in group).split() == r["text"].split()
            for cue in group:
                if len(cue) > 3 and len(cue[2].split()) > 1:  # word timestamps (VTT): from the phoneme durations
                    timed += 1
                    assert ext == "vtt" and len(cue[3]) == len(cue[2].split()) - 1
                    assert all(cue[0] < w < cue[1] for w in cue[3]) and cue[3] == sorted(cue[3])
            if len(group[-1]) > 3 and len(group[-1][2].split()) > 1:
                assert abs(group[-1][3][-1] - word_starts_from_manifest(r, job)[-1]) <= 0.0015
        assert (timed > len(rs) // 2) == (ext == "vtt"), timed
    assert not list(out.glob("*/*.srt")), "an M4B job writes captions for the M4B, not per chapter"


def test_m4b_from_epub_has_author_year_and_cover(tmp_path, fake_engine):
    from mutagen.mp4 import MP4, MP4Cover

    out = tmp_path / "o"
    job = run_job(DATA / "alice-pg11.epub", out, fake_engine, audio_format="m4b", chapters="2-3")
    book = job.meta["books"][0]
    assert book["author"] == "Lewis Carroll" and book["year"] == "2008"
    f = MP4(str(out / f"{book['dir']}.m4b"))
    assert f["\xa9ART"] == ["Lewis Carroll"] and f["aART"] == ["Lewis Carroll"] and f["\xa9day"] == ["2008"]
    with zipfile.ZipFile(DATA / "alice-pg11.epub") as z:
        cover = z.read(book["cover"])
    assert f["covr"][0] == cover and f["covr"][0].imageformat == MP4Cover.FORMAT_JPEG
    selected = [c["title"] for c in book["chapters"] if c["selected"]]
    assert [c.title for c in f.chapters] == selected and len(selected) == 2


# --------------------------------------------------------------------------- other formats and tags


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac", "wav"])
def test_chapter_files_are_tagged_and_as_long_as_the_manifest_says(short_book, tmp_path, fake_engine, voice, fmt):
    import mutagen

    out = tmp_path / "o"
    job = run_job(short_book, out, fake_engine, audio_format=fmt, captions="vtt")
    rows = manifest(out)
    book = job.meta["books"][0]
    chapters = [c for c in book["chapters"] if c["selected"]]
    assert no_temp_files(out)
    for ch in chapters:
        path = out / ch["file"]
        assert path.suffix == f".{fmt}" and path.exists()
        mine = [r for r in rows if r["chapter_path"] == ch["file"]]
        length = mine[-1]["start_s"] + mine[-1]["duration_s"] + mine[-1]["pause_after_s"]
        if fmt == "wav":
            with sf.SoundFile(str(path)) as f:  # RIFF LIST/INFO
                assert f.title == ch["title"] and f.album == book["title"]
                assert f.comment == f"Narrated by {voice.name}" and f.tracknumber == str(ch["index"])
                assert abs(f.frames / f.samplerate - length) < 1e-3
            continue
        f = mutagen.File(str(path))
        assert abs(f.info.length - length) < 0.08, (fmt, f.info.length, length)
        if fmt == "mp3":
            assert f.tags["TIT2"].text == [ch["title"]] and f.tags["TALB"].text == [book["title"]]
            assert f.tags["TCOM"].text == [voice.name] and f.tags["TRCK"].text == [f"{ch['index']}/{len(book['chapters'])}"]
            assert f.info.sample_rate == voice.sample_rate
        else:
            assert f["title"] == [ch["title"]] and f["album"] == [book["title"]]
            assert f["composer"] == [voice.name] and f["tracknumber"] == [str(ch["index"])]
            assert f["genre"] == ["Audiobook"]
            if fmt == "opus":
                import av

                with av.open(str(path)) as c:
                    assert c.streams.audio[0].codec_context.name == "opus" and c.streams.audio[0].rate == 48000
            else:
                assert f.info.sample_rate == voice.sample_rate
        cues = parse_captions(path.with_suffix(".vtt").read_text(encoding="utf-8"), ".")
        groups = cues_of_rows(cues, spoken(mine))
        assert [round(g[0][0], 3) for g in groups] == [round(r["start_s"], 3) for r in spoken(mine)]
    if fmt in ("flac", "wav"):
        assert assert_rows_play_their_own_audio(out) > 0  # the gain keeps every row's own audio


def test_flac_from_epub_carries_the_cover(tmp_path, fake_engine):
    from mutagen.flac import FLAC

    out = tmp_path / "o"
    job = run_job(DATA / "alice-pg11.epub", out, fake_engine, chapters="2")
    book = job.meta["books"][0]
    ch = next(c for c in book["chapters"] if c["selected"])
    f = FLAC(str(out / ch["file"]))
    assert f["artist"] == ["Lewis Carroll"] and f["date"] == ["2008"]
    with zipfile.ZipFile(DATA / "alice-pg11.epub") as z:
        assert f.pictures[0].data == z.read(book["cover"]) and f.pictures[0].type == 3


# --------------------------------------------------------------------------- loudness


def test_ebu_default_hits_minus_23_lufs_under_the_true_peak_ceiling(short_book, tmp_path, fake_engine):
    import pyloudnorm

    out = tmp_path / "o"
    job = run_job(short_book, out, fake_engine)
    assert job.config.loudness == "ebu" and job.meta["config"]["loudness"] == "ebu"
    report = json.loads((out / "loudness.json").read_text())
    assert report["mode"] == "ebu" and len(report["chapters"]) == 2
    for c in report["chapters"]:
        x, sr = sf.read(str(out / c["file"]), dtype="float64")
        lufs = pyloudnorm.Meter(sr).integrated_loudness(x)
        assert abs(lufs - loudness.EBU_TARGET_LUFS) <= 0.5, lufs
        assert loudness.true_peak_db(x.astype(np.float32)) <= loudness.EBU_CEILING_DBTP
        assert abs(c["output"]["integrated_lufs"] - lufs) <= 0.1
        assert c["input"]["integrated_lufs"] > -10 and c["gain_db"] < -10  # fake tones are loud


def test_acx_is_44k1_rms_in_range_peaks_under_minus_3(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    run_job(short_book, out, fake_engine, loudness="acx")
    rows = manifest(out)
    report = json.loads((out / "loudness.json").read_text())
    for c in report["chapters"]:
        x, sr = sf.read(str(out / c["file"]), dtype="float32")
        assert sr == 44100 and c["sample_rate_out"] == 44100 and c["sample_rate_in"] == 22050
        rms = loudness.rms_db(x)
        assert loudness.ACX_RMS_RANGE_DB[0] <= rms <= loudness.ACX_RMS_RANGE_DB[1]
        assert abs(rms - loudness.ACX_TARGET_RMS_DB) <= 0.5
        assert loudness.true_peak_db(x) <= loudness.ACX_CEILING_DBTP
        mine = [r for r in rows if r["chapter_path"] == c["file"]]
        length = mine[-1]["start_s"] + mine[-1]["duration_s"] + mine[-1]["pause_after_s"]
        assert abs(len(x) / sr - length) < 1e-3  # the manifest's offsets hold at the new rate


def test_limiter_holds_the_true_peak_and_keeps_the_loudness():
    """Speech-like audio whose gain to -23 LUFS would put clicks over -1 dBTP."""
    rng = np.random.default_rng(1)
    sr = 22050
    x = (0.01 * rng.standard_normal(sr * 20)).astype(np.float32)
    x[::sr // 3] = 0.99  # sharp peaks, 3 a second
    out, rate, rep = loudness.process(x, sr, "ebu")
    assert rate == sr and rep.limited and rep.gain_db > 10
    assert loudness.true_peak_db(out) <= loudness.EBU_CEILING_DBTP
    assert abs(loudness.integrated_lufs(out, sr) - loudness.EBU_TARGET_LUFS) <= 0.5
    m = np.arange(len(x)) % (sr // 3)
    quiet = np.minimum(m, sr // 3 - m) > 0.02 * sr  # away from the peaks: pure gain
    np.testing.assert_allclose(out[quiet], x[quiet] * rep.gain, rtol=1e-4, atol=1e-6)


def test_integrated_loudness_agrees_with_pyloudnorm_and_true_peak_sees_between_samples():
    import pyloudnorm

    rng = np.random.default_rng(0)
    for sr in (22050, 44100):
        gate = np.repeat(rng.random(60) < 0.7, sr // 4)  # speech-like: bursts and silences
        x = (0.1 * rng.standard_normal(len(gate)) * gate).astype(np.float32)
        assert abs(loudness.integrated_lufs(x, sr) - pyloudnorm.Meter(sr).integrated_loudness(x.astype(np.float64))) < 0.01
    t = np.arange(22050) / 22050
    s = np.sin(2 * np.pi * 5512.5 * t + np.pi / 4).astype(np.float32)  # samples at +-0.707, true peak 1.0
    assert abs(loudness.sample_peak_db(s) + 3.01) < 0.01 and abs(loudness.true_peak_db(s)) < 0.2
    assert loudness.integrated_lufs(np.zeros(22050, np.float32), 22050) == -math.inf


def test_loudness_none_keeps_the_samples_and_still_reports(short_book, tmp_path, fake_engine):
    out = tmp_path / "o"
    run_job(short_book, out, fake_engine, loudness="none", audio_format="wav")
    assert assert_rows_play_their_own_audio(out) > 0
    c = json.loads((out / "loudness.json").read_text())["chapters"][0]
    assert c["gain_db"] == 0 and c["output"]["sample_peak_dbfs"] == c["input"]["sample_peak_dbfs"]


# --------------------------------------------------------------------------- CLI


def test_cli_options_are_recorded_and_planned(short_book, tmp_path):
    res = CliRunner().invoke(main, ["plan", str(short_book), "-o", str(tmp_path / "p"), "--format", "m4b",
                                    "--loudness", "acx", "--captions", "vtt,srt"])
    assert res.exit_code == 0, res.output
    assert "output: one M4B per book" in res.output and "loudness: ACX" in res.output
    assert "44100 Hz" in res.output and "captions: srt,vtt" in res.output
    cfg = json.loads((tmp_path / "p" / "job.json").read_text())["config"]
    assert (cfg["audio_format"], cfg["loudness"], cfg["captions"]) == ("m4b", "acx", "srt,vtt")
    res = CliRunner().invoke(main, ["plan", str(short_book), "--captions", "txt"])
    assert res.exit_code == 2 and res.stderr.count("error:") == 1 and "--captions" in res.stderr


def test_cli_resume_with_other_output_settings_is_one_line(short_book, tmp_path):
    out = tmp_path / "o"
    base = ["run", str(short_book), "-o", str(out), "--engine", "fake"]
    assert CliRunner().invoke(main, base).exit_code == 0
    for extra in (["--format", "m4b"], ["--loudness", "none"], ["--captions", "srt"], ["--flac-level", "0"]):
        res = CliRunner().invoke(main, base + extra)
        assert res.exit_code == 4, res.output
        lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
        assert len(lines) == 1 and "--format flac --loudness ebu --captions none --flac-level auto" in lines[0], res.stderr


def test_flac_level_changes_the_files_size_not_their_audio(short_book, tmp_path, monkeypatch):
    """``--flac-level 0`` (less CPU to encode) and 8 give the same samples as the default (``auto``, here
    chosen as 5), in files of other sizes; the job is the same job (its id: the batches do not depend on it)."""
    runs = {}  # (the suite's BOOKTTS_TEST_FLAC_LEVEL=5 stands for the choice)
    for level in (None, 0, 8):
        out = tmp_path / f"l{level}"
        args = ["run", str(short_book), "-o", str(out), "--engine", "fake", "--loudness", "none"]
        res = CliRunner().invoke(main, args + ([] if level is None else ["--flac-level", str(level)]))
        assert res.exit_code == 0, res.output
        job = load_job(out)
        assert job.config.flac_level == ("auto" if level is None else level)
        files = sorted(out.rglob("*.flac"))
        assert files
        runs[level] = (job.job_id, [sf.read(f, dtype="int16")[0] for f in files], sum(f.stat().st_size for f in files))
    ids = {r[0] for r in runs.values()}
    assert len(ids) == 1, "the level is not part of the job's identity"
    for level in (0, 8):
        assert all(np.array_equal(a, b) for a, b in zip(runs[None][1], runs[level][1])), f"level {level}: other audio"
    assert runs[0][2] > runs[None][2] > runs[8][2], {k: v[2] for k, v in runs.items()}
    res = CliRunner().invoke(main, ["plan", str(short_book), "-o", str(tmp_path / "p"), "--flac-level", "0"])
    assert res.exit_code == 0 and "FLAC per chapter" in res.output and "compression level 0" in res.output, res.output
    res = CliRunner().invoke(main, ["plan", str(short_book), "--flac-level", "9"])
    assert res.exit_code == 2 and res.stderr.count("error:") == 1 and "--flac-level" in res.stderr, res.stderr
    with pytest.raises(Exception, match="--flac-level 9 is out of range"):
        JobConfig(flac_level=9)
    with pytest.raises(Exception, match="--flac-level 'fast' is out of range: .* or auto"):
        JobConfig(flac_level="fast")


def _levels(out: Path) -> set:
    """The FLAC levels the job's chapters were written at (their loudness records, loudness.json)."""
    return {c.get("flac_level") for c in json.loads((out / "loudness.json").read_text())["chapters"]}


def test_flac_level_auto_is_chosen_at_finalize_and_an_explicit_level_wins(short_book, tmp_path, monkeypatch):
    """The default ``--flac-level auto`` stays ``auto`` in job.json; each finalize chooses the level
    (jobs.encoding.choose, here made to say 8 or 0) and records it per chapter and in finalized.json;
    the files decode to the same samples whatever was chosen; ``--flac-level N`` (run, and deliver)
    is kept as given whatever the choice."""
    from jobs import encoding

    monkeypatch.delenv(encoding.TEST_LEVEL_ENV)
    chosen = {"level": 8}
    monkeypatch.setattr(encoding, "choose",
                        lambda busy, waiting, cores, running=1: encoding.Encoding(chosen["level"], 2, "test"))
    samples = {}
    for name, extra, choice in (("auto8", [], 8), ("auto0", [], 0), ("given0", ["--flac-level", "0"], 8),
                                ("given8", ["--flac-level", "8"], 0)):
        chosen["level"] = choice
        out = tmp_path / name
        res = CliRunner().invoke(main, ["run", str(short_book), "-o", str(out), "--engine", "fake", *extra])
        assert res.exit_code == 0, res.output
        cfg = json.loads((out / "job.json").read_text())["config"]
        want = int(extra[1]) if extra else choice
        assert cfg["flac_level"] == (int(extra[1]) if extra else "auto"), "job.json keeps what was asked"
        assert _levels(out) == {want}, (name, _levels(out))
        fin = json.loads((out / ".work" / "finalized.json").read_text())
        assert fin["encoding"] is None or fin["encoding"]["flac_level"] == choice
        files = sorted(out.rglob("*.flac"))
        samples[name] = ([sf.read(f, dtype="int16")[0] for f in files], sum(f.stat().st_size for f in files))
    for name in ("auto0", "given0", "given8"):
        assert all(np.array_equal(a, b) for a, b in zip(samples["auto8"][0], samples[name][0])), name
    assert samples["auto0"][1] == samples["given0"][1] > samples["auto8"][1] == samples["given8"][1]
    # deliver: an explicit level wins over the choice, auto takes it
    chosen["level"] = 0
    out = tmp_path / "auto8"
    res = CliRunner().invoke(main, ["deliver", "-o", str(out), "--flac-level", "8"])
    assert res.exit_code == 0, res.output
    assert _levels(out) == {8} and load_job(out).config.flac_level == 8
    res = CliRunner().invoke(main, ["deliver", "-o", str(out), "--flac-level", "auto"])
    assert res.exit_code == 0, res.output
    assert _levels(out) == {0} and load_job(out).config.flac_level == "auto"
    assert json.loads((out / ".work" / "finalized.json").read_text())["encoding"]["flac_level"] == 0
    assert all(np.array_equal(a, sf.read(f, dtype="int16")[0])
               for a, f in zip(samples["auto8"][0], sorted(out.rglob("*.flac"))))
    res = CliRunner().invoke(main, ["deliver", "-o", str(out), "--flac-level", "fast"])
    assert res.exit_code == 2 and "is not auto or a whole number from 0 to 8" in res.stderr, res.stderr


def test_a_job_made_with_a_level_resumes_with_the_default_auto(short_book, tmp_path):
    """A job whose job.json has a level (one made before ``auto``, or with ``--flac-level 0``) is resumed
    by the same command without the option: ``auto`` takes the job's level (the same samples)."""
    out = tmp_path / "o"
    base = ["run", str(short_book), "-o", str(out), "--engine", "fake"]
    assert CliRunner().invoke(main, base + ["--flac-level", "0"]).exit_code == 0
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 0, res.output
    assert load_job(out).config.flac_level == 0


@pytest.mark.parametrize("module,args,package", [
    ("av", ["--format", "m4b"], "pip install av"),
    ("av", ["--format", "opus"], "pip install av"),
    ("mutagen", ["--format", "flac"], "pip install mutagen"),
    ("pyloudnorm", ["--loudness", "ebu"], "pip install pyloudnorm"),
], ids=["m4b-av", "opus-av", "flac-mutagen", "ebu-pyloudnorm"])
def test_missing_package_is_one_error_line_before_synthesis(short_book, tmp_path, monkeypatch, module, args, package):
    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name == module or name.startswith(module + "."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setitem(sys.modules, module, None)  # not installed, for importlib.util.find_spec too
    out = tmp_path / "o"
    res = CliRunner().invoke(main, ["run", str(short_book), "-o", str(out), "--engine", "fake", *args])
    assert res.exit_code == 2, (res.output, res.exception)
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and package in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert not (out / "job.json").exists() and not list(out.rglob("*.wav"))


def test_captions_escape_cue_breakers():
    from jobs import captions

    cue = captions.cues([{"text": "a --> b\n\nc", "start_s": 3661.5, "duration_s": 1.25}])
    text = captions.vtt(cue)
    assert "01:01:01.500 --> 01:01:02.750" in text and text.count("-->") == 1
    assert parse_captions(captions.srt(cue), ",") == [(3661.5, 3662.75, "a -> b c")]


def test_identity_leaves_out_loudness_and_captions():
    a = JobConfig(loudness="ebu", captions=None).identity()
    assert a == JobConfig(loudness="acx", captions="srt").identity()
    assert a != JobConfig(audio_format="m4b").identity()
    assert JobConfig(captions="vtt,srt,srt").captions == "srt,vtt" and JobConfig(captions="none").captions is None
    assert not math.isnan(loudness.rms_db(np.ones(10, np.float32)))


def test_real_voice_acx_mp3_meets_acx_after_encoding(tmp_path, onnx_engine):
    """The real voice (speech, not tones), through LAME: what Audible would measure, decoded."""
    import av

    out = tmp_path / "o"
    job = run_job(DATA / "short-story.txt", out, onnx_engine, audio_format="mp3", loudness="acx", chapters="1")
    report = json.loads((out / "loudness.json").read_text())["chapters"]
    assert len(report) == 1 and report[0]["input"]["true_peak_dbtp"] > -3  # it needed the limiter's work
    ch = next(c for c in job.meta["books"][0]["chapters"] if c["selected"])
    with av.open(str(out / ch["file"])) as c:
        s = c.streams.audio[0]
        assert s.rate == 44100
        x = np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(s)])
    assert loudness.ACX_RMS_RANGE_DB[0] <= loudness.rms_db(x) <= loudness.ACX_RMS_RANGE_DB[1]
    assert loudness.sample_peak_db(x) <= loudness.ACX_CEILING_DBTP
    rows = manifest(out)
    assert abs(len(x) / 44100 - (rows[-1]["start_s"] + rows[-1]["duration_s"] + rows[-1]["pause_after_s"])) < 0.08


def test_run_plan_submit_take_the_output_options():
    for name in ("run", "plan", "submit"):
        opts = {o for p in main.commands[name].params for o in p.opts}
        assert {"--format", "--loudness", "--captions"} <= opts, name


def test_true_peak_is_exact_where_it_can_reach_the_floor_and_lufs_agrees_on_every_grid():
    """The oversampled peaks skip samples whose neighbourhood cannot reach the floor: wherever the
    full four-phase convolution reaches the floor they are equal to it, nowhere above it, and the
    maximum (the true peak) is exact; the hop-grid loudness sums agree with pyloudnorm's meter at
    rates on and off the 100 ms grid."""
    import pyloudnorm

    rng = np.random.default_rng(3)

    def full(x):
        out = np.abs(x)
        for h in loudness._true_peak_phases():
            np.maximum(out, np.abs(np.convolve(x, h)[5:5 + len(x)]), out=out)
        return out

    for _ in range(12):
        n = int(rng.integers(1, 120_000))
        x = (rng.standard_normal(n) * rng.choice([0.01, 0.1, 0.4]) * (rng.random(n) < 0.3)).astype(np.float32)
        ref = full(x)
        for floor in (None, 0.03, 0.2):
            got = loudness._oversampled_abs(x, floor)
            f = float(np.abs(x).max()) if floor is None else floor
            reach = ref >= f
            assert np.allclose(got[reach], ref[reach], rtol=1e-5, atol=1e-7)
            assert np.all(got <= ref + 1e-6)
        assert loudness.true_peak_db(x) == pytest.approx(20 * np.log10(ref.max()) if ref.max() > 0 else -np.inf,
                                                         abs=1e-4)
    for rate in (22050, 44100, 16000, 11025):
        for secs in (0.5, 3.0, 47.3):
            t = np.arange(int(rate * secs))
            x = (rng.standard_normal(len(t)) * 0.1 * np.sin(t / 4000.0) ** 2).astype(np.float32)
            want = pyloudnorm.Meter(rate).integrated_loudness(x.astype(np.float64))
            assert loudness.integrated_lufs(x, rate) == pytest.approx(want, abs=0.01)


@pytest.mark.parametrize("chunk", [1024, 4096 + 16])
def test_chunked_measurements_match_the_whole_signal_across_chunk_edges(monkeypatch, chunk):
    """Loudness, true peaks and the limiter read the signal a chunk at a time: with small chunks (many
    edges, a last partial chunk) they give what the whole-signal computation gives."""
    import pyloudnorm
    monkeypatch.setattr(loudness, "CHUNK", chunk)
    rng = np.random.default_rng(11)
    sr = 22050
    gate = np.repeat(rng.random(40) < 0.7, sr // 8)
    x = (0.3 * rng.standard_normal(len(gate) + 77) * np.concatenate([gate, np.ones(77, bool)])).astype(np.float32)
    assert len(x) % chunk
    assert loudness.integrated_lufs(x, sr) == pytest.approx(
        pyloudnorm.Meter(sr).integrated_loudness(x.astype(np.float64)), abs=1e-6)
    ref = np.abs(x)
    for h in loudness._true_peak_phases():
        np.maximum(ref, np.abs(np.convolve(x, h)[5:5 + len(x)]), out=ref)
    for floor in (None, 0.5):
        got = loudness._oversampled_abs(x, floor)
        reach = ref >= (ref.max() if floor is None else floor)
        np.testing.assert_allclose(got[reach], ref[reach], rtol=1e-5, atol=1e-7)
        assert np.all(got <= ref + 1e-6)
    out, limited = loudness.limit(x, sr, -1.0)
    assert limited and loudness.true_peak_db(out) <= -1.0
    # the chunked limiter's gain curve against one chunk for the whole signal
    first, _ = loudness.limit(x, sr, -1.0, peaks=ref)
    monkeypatch.setattr(loudness, "CHUNK", 1 << 30)
    whole, _ = loudness.limit(x, sr, -1.0, peaks=ref)
    assert not np.array_equal(first, x)
    np.testing.assert_allclose(first, whole, rtol=0, atol=1e-7)
