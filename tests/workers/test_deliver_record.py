"""``cli.py deliver`` of a job the workers ran brings the job's Redis record up to date.

Before, ``deliver`` rewrote the files of a distributed job but left its record in Redis as its
finalize wrote it: ``status`` and the record still named the old format's files. Now deliver writes
the new summary (files, format, loudness, captions) into the record, and says in one line, without
failing, when Redis cannot be reached.
"""

from __future__ import annotations

import json

import pytest

from tests.workers.procs import free_port
from tests.workers.test_trust import cli, wait_for
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]


def test_deliver_updates_a_distributed_jobs_record_and_says_when_redis_is_away(redis_url, start_worker, short_book,
                                                                               tmp_path):
    store = JobStore(redis_url)
    out = tmp_path / "job"
    fake = start_worker(redis_url, "fake")
    jid = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url).stdout.splitlines()[0]
    wait_for(lambda: store.get_job(jid).status in (JobStatus.DONE, JobStatus.FAILED), 90, "the job's end", fake)
    before = store.get_job(jid).summary
    assert before["chapter_files"] and all(f.endswith(".flac") for f in before["chapter_files"]), before
    assert "flac" in cli("status", jid, "--redis-url", redis_url).output

    res = cli("deliver", "-o", out, "--format", "mp3", "--loudness", "acx", "--redis-url", redis_url, ok=False)
    assert res.exit_code == 0, res.output
    on_disk = json.loads((out / ".work" / "finalized.json").read_text())
    info = store.get_job(jid)
    assert info.status is JobStatus.DONE
    s = info.summary
    assert s["chapter_files"] == on_disk["chapter_files"] and all(f.endswith(".mp3") for f in s["chapter_files"]), s
    assert (s["audio_format"], s["loudness"]) == ("mp3", "acx"), s
    assert all((out / f).is_file() for f in s["chapter_files"])
    shown = cli("status", jid, "--redis-url", redis_url).output
    assert "MP3" in shown and "acx" in shown and ".flac" not in shown, shown
    assert store.r.ttl(store.k_job(jid)) > 0, "a done job's record still expires"

    # Redis away: the local deliver is done and says in one line that the record was not updated
    away = f"redis://127.0.0.1:{free_port()}/0"
    res = cli("deliver", "-o", out, "--format", "flac", "--redis-url", away, ok=False)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if "Redis" in ln]
    assert len(lines) == 1 and "not updated" in lines[0] and f"resume {out}" in lines[0], res.output
    assert all(f.endswith(".flac") for f in json.loads((out / ".work" / "finalized.json").read_text())["chapter_files"])
    assert store.get_job(jid).summary["audio_format"] == "mp3"  # (unchanged: it could not be reached)

    # a Redis that does not know the job (another database): one line, the deliver stands
    other = redis_url.rsplit("/", 1)[0] + "/1"
    res = cli("deliver", "-o", out, "--format", "flac", "--redis-url", other, ok=False)
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    lines = [ln for ln in res.output.splitlines() if "Redis" in ln]
    assert len(lines) == 1 and "not updated" in lines[0] and "has no done job" in lines[0], res.output

    # `resume OUT` brings the record up to date from the directory
    assert cli("resume", out, "--redis-url", redis_url, ok=False).exit_code == 0
    s = store.get_job(jid).summary
    assert s["audio_format"] == "flac" and all(f.endswith(".flac") for f in s["chapter_files"]), s
