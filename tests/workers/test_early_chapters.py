"""A worker writes each chapter of a job as soon as its batches are done (workers/chapter_writer.py),
with a real redis-server and real worker processes: the first chapter exists while the job still
runs, and the job's output is the one its finalize alone writes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from jobs import chapter_records
from jobs.finalize import chapter_key, selected_chapters
from jobs.job import load_job
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

CHAPTERS = [
    ("Down the Rabbit-Hole", "Alice was beginning to get very tired of sitting by her sister on the bank. Once or "
                             "twice she had peeped into the book her sister was reading. So she was considering "
                             "in her own mind what to do."),
    ("The Pool of Tears", "Curiouser and curiouser! cried Alice. Now I am opening out like the largest telescope "
                          "that ever was! Good-bye, feet! Oh, my poor little feet, I wonder who will put on your "
                          "shoes and stockings for you now."),
    ("A Caucus-Race", "They were indeed a queer-looking party that assembled on the bank. The first question of "
                      "course was, how to get dry again. They had a consultation about this."),
    ("The Rabbit Sends in a Little Bill", "It was the White Rabbit, trotting slowly back again. It looked anxiously "
                                          "about as it went. Alice guessed in a moment that it was looking for the "
                                          "fan and the pair of white kid gloves."),
]
# reading order: chapter 1's batches run first, so its file must appear with most of the job still to
# run (in length order chapter 1 completed with the 8th batch of 9, leaving the chapter writer one
# batch, 0.6 s, and the timing check failed on a loaded CI host)
OPTS = ["--max-batch", "2", "--batch-order", "reading", "--noise-scale", "0", "--noise-w", "0", "--captions", "vtt"]


def book(tmp_path: Path) -> Path:
    p = tmp_path / "four.txt"
    p.write_text("".join(f"CHAPTER {'I' * (i + 1) if i < 3 else 'IV'}.\n{t}\n\n{body}\n\n"
                         for i, (t, body) in enumerate(CHAPTERS)), encoding="utf-8")
    return p


def submit(url: str, src: Path, out: Path) -> str:
    res = CliRunner().invoke(main, ["submit", str(src), "-o", str(out), "--redis-url", url, *OPTS])
    assert res.exit_code == 0, res.output
    return res.stdout.strip().splitlines()[0]


def outputs(out: Path):
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and p.suffix in (".flac", ".vtt") and ".work" not in p.parts}
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    for r in rows:  # stamps of the run, not of the audio
        for k in ("started_at", "finished_at", "queued_at", "infer_ms", "worker", "batch_size"):
            r.pop(k)
    return files, rows


def test_chapters_are_written_while_the_job_runs_and_the_output_is_finalizes(redis_url, start_worker, tmp_path):
    store = JobStore(redis_url)
    src = book(tmp_path)
    # per batch: the job runs for over 10 s, so chapter 1 (done after its first batches) has time to be
    # written with batches to go even on a busy host (0.6 s a batch left about 4 s, and under two
    # pytest-xdist processes on a loaded 2-core machine chapter 1 appeared only when all 9 were done)
    slow = {"BOOKTTS_FAKE_DELAY_S": "1.5"}
    w = start_worker(redis_url, "early", env=slow)
    out = tmp_path / "early"
    job_id = submit(redis_url, src, out)
    job = load_job(out)
    works = selected_chapters(job)
    assert len(works) == 4 and len(job.batches) >= 8
    first = out / works[0][2]["file"]
    seen_first_at_done = None
    deadline = time.monotonic() + 120
    while (info := store.get_job(job_id)).status is not JobStatus.DONE:
        assert time.monotonic() < deadline and info.status is not JobStatus.FAILED, info
        if seen_first_at_done is None and first.exists():
            seen_first_at_done = info.done
        time.sleep(0.05)
    assert seen_first_at_done is not None and seen_first_at_done < len(job.batches) - 2, \
        f"chapter 1 was there with batches of the job still to run (seen at {seen_first_at_done} of {len(job.batches)})"
    log = w.output()
    early = [ln for ln in log.splitlines() if "written early" in ln]
    assert len(early) >= 2, log[-3000:]
    wrote = [ln for ln in log.splitlines() if "early in" in ln and "wrote" in ln]
    assert any(works[0][2]["file"] in ln for ln in wrote), log[-3000:]
    last = works[-1]
    assert chapter_records.record_path(job, chapter_key(last)).exists()

    # the same job by a worker that leaves every chapter to finalize
    w.kill_group()
    store.r.flushall()
    start_worker(redis_url, "late", args=["--early-chapters", "0"])  # no delay: nothing timed here
    ref = tmp_path / "late"
    assert submit(redis_url, src, ref) == job_id
    deadline = time.monotonic() + 120
    while store.get_job(job_id).status is not JobStatus.DONE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert outputs(out) == outputs(ref)
    for w_ in works:  # every chapter has its record, whoever wrote it
        doc = json.loads(chapter_records.record_path(job, chapter_key(w_)).read_text())
        assert doc["job_id"] == job_id


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_a_chapter_is_ready_exactly_when_its_last_batch_record_exists(tmp_path, order):
    """ChapterWriter.ready_chapters remembers the records it has seen (each batch is looked for until
    found, not on every unit) and must still name a chapter on the unit that completes it, whatever
    the order the records land in, including records another worker wrote (not reported here)."""
    import random

    from jobs.chapter_records import batches_of
    from workers.chapter_writer import ChapterWriter

    out = tmp_path / "job"
    res = CliRunner().invoke(main, ["plan", str(book(tmp_path)), "-o", str(out), *OPTS])
    assert res.exit_code == 0, res.output
    job = load_job(out)
    chapters = {chapter_key(w): set(batches_of(w[3])) for w in selected_chapters(job)}
    ids = sorted(job.batches) if isinstance(job.batches, dict) else list(range(len(job.batches)))
    assert len(ids) >= 6 and len(chapters) == 4
    if order == "descending":
        ids.reverse()
    elif order == "shuffled":
        random.Random(7).shuffle(ids)
    writer = ChapterWriter(1)  # never started: ready_chapters only reads the disk
    on_disk: set[int] = set()
    named: list[tuple[int, int]] = []
    for i, b in enumerate(ids):
        path = job.record_path(b)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        on_disk.add(b)
        if i % 3 == 1:
            continue  # another worker wrote this one: this process is not told
        got = writer.ready_chapters(job, b)
        expect = [k for k, bs in chapters.items() if b in bs and bs <= on_disk]
        assert sorted(got) == sorted(expect), (b, got, expect)
        named += got
    # every chapter was named once its last batch landed, unless only unreported units completed it
    reported_last = {k for k, bs in chapters.items()
                     if max(bs, key=ids.index) in {b for i, b in enumerate(ids) if i % 3 != 1}}
    assert reported_last <= set(named)


def test_a_request_for_a_job_with_every_batch_done_is_left_to_its_finalize(tmp_path):
    """The chapter process drops requests of a job whose batches are all done (its finalize writes
    the chapters on processes of its own), and still writes those of a job with batches to go."""
    import shutil

    from jobs.chapter_records import batches_of
    from jobs.job import MANIFEST_FILE
    from workers.chapter_writer import write_requested

    out = tmp_path / "job"
    res = CliRunner().invoke(main, ["run", str(book(tmp_path)), "-o", str(out), "--engine", "fake", *OPTS])
    assert res.exit_code == 0, res.output
    job = load_job(out)
    works = selected_chapters(job)
    for w in works:
        (out / w[2]["file"]).unlink()
    shutil.rmtree(out / ".work" / "chapters")
    (out / MANIFEST_FILE).unlink()
    keys = [list(chapter_key(w)) for w in works]
    assert write_requested(str(out), job.job_id, keys) == []
    assert not any((out / w[2]["file"]).exists() for w in works)
    # a batch that chapter 1 does not read goes missing: the job has work to go, chapter 1 is written
    first = works[0]
    other = next(b for b in range(len(job.batches)) if b not in set(batches_of(first[3])))
    job.record_path(other).unlink()
    assert write_requested(str(out), job.job_id, [list(chapter_key(first))]) == [first[2]["file"]]
    assert (out / first[2]["file"]).exists()
