"""The command line: bad input gets one clear line and a non-zero exit, never a traceback;
real runs produce complete output and resume."""

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None, timeout=600):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BOOKTTS_DEBUG", None)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


def assert_one_line_error(res, *needles):
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])


def epub(path, files):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        for name, data in files.items():
            z.writestr(name, data)
    return path


CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             '</rootfiles></container>')


@pytest.fixture
def bad_inputs(tmp_path):
    """Each bad input the issue lists, built here (nothing hostile is committed)."""
    d = tmp_path
    (d / "empty.txt").write_text("")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 40)
    (d / "latin1.txt").write_bytes("Caf\xe9 au lait.\n\nChapter 1\n\nIt was a fine d\xe9j\xe0 vu.\n".encode("latin-1"))
    # Russian in KOI8-R: not UTF-8, and nearly every letter a byte 0x80-0xFF, so no Western 8-bit text either
    (d / "koi8.txt").write_bytes("\u0413\u043b\u0430\u0432\u0430 1\n\n\u0421\u0447\u0430\u0441\u0442\u044c\u0435 "
                                 "\u043d\u0430\u0448\u0435 \u0431\u043b\u0438\u0437\u043a\u043e.\n".encode("koi8-r"))
    (d / "corrupt.epub").write_bytes(b"PK\x03\x04 this is not really a zip file")
    epub(d / "drm.epub", {"META-INF/container.xml": CONTAINER,
                          "META-INF/encryption.xml": '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
                          '<EncryptedData xmlns="http://www.w3.org/2001/04/xmlenc#"><CipherData><CipherReference '
                          'URI="OEBPS/ch1.xhtml"/></CipherData></EncryptedData></encryption>',
                          "OEBPS/content.opf": "<package/>", "OEBPS/ch1.xhtml": "\x00\x01garbage"})
    epub(d / "escape.epub", {"META-INF/container.xml": CONTAINER.replace("OEBPS/content.opf", "../../content.opf"),
                             "../../content.opf": "<package/>"})
    return d


@pytest.mark.parametrize("name,needles", [
    ("missing.txt", ["missing.txt"]),
    (".", ["directory"]),
    ("empty.txt", ["empty.txt"]),
    ("binary.txt", ["binary.txt"]),
    ("koi8.txt", ["koi8.txt", "--encoding"]),
    ("corrupt.epub", ["corrupt.epub"]),
    ("drm.epub", ["drm"]),
    ("escape.epub", ["escape.epub"]),
], ids=["missing", "directory", "empty", "binary", "not-utf8", "corrupt-epub", "drm-epub", "path-escape-epub"])
def test_bad_input_is_one_line_and_leaves_no_output(bad_inputs, tmp_path, name, needles):
    out = tmp_path / "out"
    res = cli("run", bad_inputs / name, "-o", out)
    assert_one_line_error(res, *needles)
    assert not (out / "manifest.parquet").exists()


def test_wrong_encoding_works_with_encoding_option(bad_inputs, tmp_path):
    res = cli("plan", bad_inputs / "latin1.txt", "--encoding", "latin-1")
    assert res.returncode == 0, res.stderr
    assert "utterances" in res.stdout
    res = cli("plan", bad_inputs / "koi8.txt", "--encoding", "koi8-r")
    assert res.returncode == 0, res.stderr


def test_undeclared_8_bit_western_text_plans_with_one_warning_line(bad_inputs, tmp_path):
    res = cli("plan", bad_inputs / "latin1.txt", "-o", tmp_path / "p")
    assert res.returncode == 0, res.stderr
    assert "utterances" in res.stdout
    warned = [line for line in res.stderr.splitlines() if "Windows-1252" in line]
    assert len(warned) == 1 and "latin1.txt" in warned[0] and "--encoding" in warned[0], res.stderr


def test_bad_options_are_one_line(short_book, tmp_path):
    assert_one_line_error(cli("run", short_book, "-o", tmp_path / "o", "--chapters", "7"), "chapters")
    assert_one_line_error(cli("run", short_book, "-o", tmp_path / "o", "--voice", "no-such-voice"), "no-such-voice")
    (tmp_path / "file").write_text("x")
    assert_one_line_error(cli("run", short_book, "-o", tmp_path / "file"), "not a directory")


def test_plan_prints_without_synthesizing(short_book, tmp_path):
    res = cli("plan", short_book, "-o", tmp_path / "p")
    assert res.returncode == 0, res.stderr
    for word in ("utterances", "batches", "padding efficiency", "estimated audio"):
        assert word in res.stdout
    assert (tmp_path / "p" / "plan.parquet").exists() and not list((tmp_path / "p").rglob("*.flac"))


def test_five_megabyte_line_without_punctuation_is_split_between_words(tmp_path):
    words = [f"word{i % 97}" for i in range(5 * 1024 * 1024 // 7)]
    (tmp_path / "line.txt").write_text(" ".join(words) + "\n")
    res = cli("plan", tmp_path / "line.txt", "-o", tmp_path / "p", timeout=900)
    assert res.returncode == 0, res.stderr
    plan = pq.read_table(tmp_path / "p" / "plan.parquet").to_pydict()
    body = [t for t, p in zip(plan["text"], plan["paragraph_index"]) if p >= 0]  # the title row is not body text
    assert " ".join(body).split() == words, "every word exactly once, in order"
    assert max(plan["phoneme_count"]) <= 2 * 400 + 3


@pytest.mark.integration
def test_run_real_voice_on_hard_text_and_resume(tmp_path):
    """Emoji, URLs, numbers, non-Latin scripts and a long unpunctuated line are spoken or skipped
    and recorded, never a crash; a second run of the same command resumes and changes nothing."""
    text = ("Chapter 1\n\nThe price was $1,234.56 on 3/4/2020; see https://example.com/a?b=1 for more. "
            "Party time \U0001F389\U0001F600! Greek: \u03b1\u03b2\u03b3. Russian: \u041f\u0440\u0438\u0432\u0435\u0442.\n\n"
            "\u2026\n\n" + " ".join(["and then another word"] * 60) + "\n")
    (tmp_path / "hard.txt").write_text(text)
    out = tmp_path / "out"
    res = cli("run", tmp_path / "hard.txt", "-o", out, "--format", "wav", "--max-phonemes", "120")
    assert res.returncode == 0, res.stderr
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    assert " ".join(r["text"] for r in rows).split() == ("Chapter 1 " + text.split("\n", 2)[2]).split()
    assert all(r["status"] == "synthesized" or r["status"].startswith("skipped") for r in rows)
    assert any(r["status"].startswith("skipped") for r in rows), "the lone ellipsis has nothing to say"
    first = (out / rows[0]["chapter_path"]).stat().st_mtime_ns
    again = cli("run", tmp_path / "hard.txt", "-o", out, "--format", "wav", "--max-phonemes", "120")
    assert again.returncode == 0 and "resuming" in again.stderr
    assert "synthesized" not in again.stdout, "no batch is synthesized twice"
    assert pq.read_table(out / "manifest.parquet").to_pylist() == rows
    assert (out / rows[0]["chapter_path"]).stat().st_mtime_ns == first, "a finished job is not rewritten"


def test_run_without_books_runs_the_job_planned_in_the_directory(short_book, tmp_path):
    """Plan on one host, synthesize on another (a GPU host without piper-tts): `run -o OUT`."""
    out = tmp_path / "job"
    assert cli("plan", short_book, "-o", out).returncode == 0
    res = cli("run", "-o", out, "--engine", "fake")
    assert res.returncode == 0, res.stderr
    assert (out / "manifest.parquet").exists()
    assert_one_line_error(cli("run", "-o", tmp_path / "nothing-here", "--engine", "fake"), "no job")


def test_planned_job_refuses_another_voice(short_book, tmp_path, voice):
    import json
    import shutil

    out = tmp_path / "job"
    assert cli("plan", short_book, "-o", out).returncode == 0
    other = tmp_path / "other.onnx"
    other.symlink_to(voice.model_path)
    cfg = json.loads(voice.config_path.read_text())
    cfg["audio"]["sample_rate"] = 16000  # a different voice, as far as the job can tell
    (tmp_path / "other.onnx.json").write_text(json.dumps(cfg))
    assert_one_line_error(cli("run", "-o", out, "--engine", "fake", "--voice", other), "not the voice")
    shutil.rmtree(out)


def cli_proc(*args, env=None):
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full.pop("BOOKTTS_DEBUG", None)
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full)


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


ALICE = ROOT / "tests" / "data" / "alice-pg11.txt"


def test_two_different_jobs_run_into_one_directory_at_once(tmp_path):
    """Issue 15: two `run` of the same book with different --chapters into one directory at the same
    time. One job gets the directory; the other is refused with one line naming the directory and
    the first job; the finished job's every manifest row plays its own audio."""
    from tests.fake_audio import assert_rows_play_their_own_audio

    out = tmp_path / "D"
    common = ["-o", out, "--max-batch", "32", "--length-scale", "0.1", "--engine", "fake"]
    procs = [cli_proc("run", ALICE, "--chapters", "1-11", *common), cli_proc("run", ALICE, *common)]
    results = [finish(p) for p in procs]
    ok = [r for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode != 0]
    assert len(ok) == 1 and len(refused) == 1, [(r.returncode, r.stderr[-600:]) for r in results]
    winner = json.loads((out / "job.json").read_text())["job_id"]
    assert f"job {winner}:" in ok[0].stderr
    assert_one_line_error(refused[0], str(out), f"holds another job, {winner}", "choose another -o directory")
    assert refused[0].returncode == 4
    assert assert_rows_play_their_own_audio(out) > 0
    assert all(winner in p.name for p in (out / ".work" / "batches").iterdir())


def test_identical_runs_into_one_directory_at_once(short_book, tmp_path):
    """Two identical `run` at once: the second is refused while the first synthesizes (engines may
    differ between them, and their chapter files and manifest must not mix); each batch is
    synthesized once and the output plays its own audio."""
    from tests.fake_audio import assert_rows_play_their_own_audio

    out = tmp_path / "D"
    args = ["run", short_book, "-o", out, "--max-batch", "1", "--engine", "fake"]
    # 1 s a batch (9 batches): the second `run` must start and plan while the first still runs; with
    # 0.25 s, under pytest -n 2 on a loaded 2-core host the first had finished before the second got there
    first = cli_proc(*args, env={"BOOKTTS_FAKE_DELAY_S": "1.0"})
    batches = out / ".work" / "batches"
    deadline = time.monotonic() + 60
    while not (batches.exists() and any(batches.glob("*.json"))):
        assert first.poll() is None and time.monotonic() < deadline, finish(first).stderr
        time.sleep(0.05)
    second = cli(*args)
    assert_one_line_error(second, str(out), "being synthesized by another `cli.py run`", "wait for it")
    res = finish(first)
    assert res.returncode == 0, res.stderr
    job = json.loads((out / "job.json").read_text())
    assert len(list(batches.glob("*.wav"))) == len(job["batches"]), "every batch synthesized once"
    assert not (out / ".work" / "run.lock").exists()
    assert assert_rows_play_their_own_audio(out) > 0
    again = cli(*args)  # and once it is over, the same command resumes (nothing to do)
    assert again.returncode == 0 and "resuming" in again.stderr, again.stderr


# ------------------------------------------------------------------ numeric ranges, usage errors, inputs, pipes


@pytest.mark.parametrize("option,value,allowed", [
    ("--length-scale", "0", "0.1<=x<=10"),
    ("--length-scale", "-5", "0.1<=x<=10"),
    ("--length-scale", "nan", "0.1<=x<=10"),
    ("--length-scale", "1000", "0.1<=x<=10"),
    ("--noise-scale", "-0.1", "0.0<=x<=10"),
    ("--noise-w", "-1", "0.0<=x<=10"),
    ("--noise-w", "inf", "0.0<=x<=10"),
    ("--sentence-pause", "-1", "0.0<=x<=60"),
    ("--paragraph-pause", "1e9", "0.0<=x<=60"),
    ("--title-pause", "nan", "0.0<=x<=60"),
    ("--max-batch", "0", "1<=x<=4096"),
    ("--max-batch-phonemes", "0", "16<=x<="),
    ("--max-phonemes", "3", "8<=x<=2000"),
    ("--max-phonemes", "100000", "8<=x<=2000"),
])
def test_out_of_range_numbers_are_one_line_naming_option_value_and_range(short_book, tmp_path, option, value,
                                                                         allowed):
    """`--length-scale 0` once planned 0.012 s utterances and exited 0; every numeric job option has a range."""
    res = cli("plan", short_book, "-o", tmp_path / "p", option, value)
    assert res.returncode == 2
    assert_one_line_error(res, option, value if value not in ("1e9",) else "1000000000", allowed)
    assert not (tmp_path / "p").exists(), "nothing planned"


def test_threads_out_of_range_on_run(short_book, tmp_path):
    res = cli("run", short_book, "-o", tmp_path / "o", "--engine", "fake", "--threads", "0")
    assert res.returncode == 2
    assert_one_line_error(res, "--threads", "0", "1<=x<=1024")


def test_batch_budget_must_hold_the_longest_utterance(short_book, tmp_path):
    """--max-batch-phonemes below one utterance of --max-phonemes (2 n + 3 ids) is refused, naming both."""
    res = cli("plan", short_book, "--max-batch-phonemes", "100")
    assert res.returncode == 2
    assert_one_line_error(res, "--max-batch-phonemes 100", "--max-phonemes 400", "803")
    assert cli("plan", short_book, "--max-batch-phonemes", "100", "--max-phonemes", "48").returncode == 0


def test_job_json_cannot_bypass_the_ranges(short_book, tmp_path):
    """A job.json edited (or written by a caller) with an out-of-range setting is refused, not run."""
    import json

    out = tmp_path / "job"
    assert cli("plan", short_book, "-o", out).returncode == 0
    meta = json.loads((out / "job.json").read_text())
    meta["config"]["length_scale"] = 0
    (out / "job.json").write_text(json.dumps(meta))
    res = cli("run", "-o", out, "--engine", "fake")
    assert res.returncode == 2
    assert_one_line_error(res, "--length-scale 0", "allowed 0.1 to 10")
    assert not (out / "manifest.parquet").exists()


@pytest.mark.parametrize("args,needles", [
    (["plan", "--bogus"], ["--bogus", "cli.py plan --help"]),
    (["plan"], ["missing argument", "books"]),
    (["plan", "BOOK", "--format", "aiff"], ["--format", "aiff", "flac", "m4b"]),  # mp3 is a format now
    (["nosuchcommand"], ["nosuchcommand"]),
    (["run", "BOOK"], ["--out"]),
    (["status", "--limit", "0"], ["--limit", "0"]),
    (["worker", "--pool", "threads"], ["--pool", "threads"]),
], ids=["unknown-option", "missing-argument", "bad-choice", "unknown-command", "missing-option", "status-range",
        "worker-choice"])
def test_usage_errors_are_one_error_line(short_book, args, needles):
    """click's own usage errors: one `error:` line (no Usage:/Try block), exit code 2."""
    res = cli(*[short_book if a == "BOOK" else a for a in args])
    assert res.returncode == 2, res.stderr
    assert_one_line_error(res, *needles)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Usage:" not in res.stderr and "Try " not in res.stderr


def test_help_still_works():
    res = cli("plan", "--help")
    assert res.returncode == 0 and "Usage:" in res.stdout and "--length-scale" in res.stdout
    res = cli()
    assert res.returncode in (0, 2) and "Commands:" in (res.stdout + res.stderr)


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
def test_non_regular_input_files_are_refused_before_reading(tmp_path, kind):
    """`plan /dev/zero` or a FIFO once hung (the file was hashed before the regular-file check)."""
    if kind == "fifo":
        path = tmp_path / "book.txt"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
        assert path.exists() and not path.is_file()
    res = cli("plan", path, "-o", tmp_path / "p", timeout=60)
    assert res.returncode == 2
    assert_one_line_error(res, str(path), "not a regular file")
    assert not (tmp_path / "p").exists()


def test_broken_stdout_pipe_exits_quietly(tmp_path):
    """`cli.py plan book | head -1`: the reader went away; no traceback, no 'disk space' message, code 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    env = {**os.environ}
    env.pop("BOOKTTS_DEBUG", None)
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "plan", str(ROOT / "tests/data/short-story.txt")],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == "", proc.stderr


def test_version_and_the_console_script():
    """`cli.py --version` and the installed `booktts` script (pyproject's [project.scripts]) name the
    package's version."""
    import importlib.metadata
    import shutil

    want = f"booktts {importlib.metadata.version('booktts')}"
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == want, (res.stdout, res.stderr)
    script = shutil.which("booktts", path=str(Path(sys.executable).parent))
    assert script, "the booktts console script is installed beside the venv's python"
    out = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == want, (out.stdout, out.stderr)
