"""The watched inbox (workers/watch.py, `cli.py watch`, `cli.py beat`) with a real redis-server
and real worker / watcher / beat subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.config import JobConfig
from workers.celery_app import use_redis
from workers.state import JobStatus, JobStore

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cli.py"
pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

BOOKS = {
    "alice.txt": "CHAPTER I.\nDown the Rabbit-Hole\n\nAlice was beginning to get very tired of sitting by her "
                 "sister on the bank. Once or twice she had peeped into the book her sister was reading.\n",
    "tea.txt": "CHAPTER I.\nA Mad Tea-Party\n\nThere was a table set out under a tree in front of the house. "
               "The March Hare and the Hatter were having tea at it.\n",
    "pool.txt": "CHAPTER I.\nThe Pool of Tears\n\nCuriouser and curiouser! cried Alice. Now I am opening out like "
                "the largest telescope that ever was! Good-bye, feet!\n",
}


def drop(inbox: Path, name: str, text: str) -> Path:
    """Drop a file the safe way: write a .part file, then rename it into place."""
    part = inbox / f"{name}.part"
    part.write_text(text, encoding="utf-8")
    os.replace(part, inbox / name)
    return inbox / name


def reason(inbox: Path, sub: str, name: str) -> str:
    text = (inbox / sub / f"{name}.reason.txt").read_text(encoding="utf-8")
    assert text.endswith("\n") and text.count("\n") == 1, f"one line: {text!r}"
    return text.strip()


def queued_messages(store: JobStore, queue: str = "tts.normal") -> int:
    return store.r.llen(queue)


def wait_for(pred, timeout: float, what: str, proc=None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s" + (f":\n{log.read_text()[-3000:]}" if log else ""))


class Proc:
    """A `cli.py` subprocess in its own process group, killed at teardown."""

    def __init__(self, args: list[str], log: Path, env: dict | None = None) -> None:
        self.log = log
        full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        full.pop("REDIS_URL", None)
        with open(log, "ab") as out:
            self.p = subprocess.Popen([sys.executable, str(CLI), *args], cwd=ROOT, env=full, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)

    def poll(self):
        return self.p.poll()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(timeout=10)


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


# ------------------------------------------------------------------ the scan function


def test_scan_waits_for_complete_files_ignores_temporaries_and_fails_bad_books(redis_url, tmp_path):
    from workers.watch import LEDGER, Inbox

    use_redis(redis_url)
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    box = Inbox(inbox, out, store, JobConfig(max_batch=2), settle_s=5)
    (inbox / ".hidden.txt").write_text(BOOKS["tea.txt"])
    (inbox / "upload.txt.part").write_text(BOOKS["tea.txt"])
    (inbox / "scratch.tmp").write_text(BOOKS["tea.txt"])
    text = BOOKS["alice.txt"]
    growing = inbox / "alice.txt"
    with open(growing, "w", encoding="utf-8") as f:  # a writer that is still writing
        f.write(text[:30])
        f.flush()
        r = box.scan(now=1000)
        assert r.waiting == ["alice.txt"] and not r.submitted
        f.write(text[30:60])
        f.flush()
        r = box.scan(now=1010)  # changed since the last pass: still waiting
        assert r.waiting == ["alice.txt"] and not r.submitted
        f.write(text[60:])
        f.flush()
    r = box.scan(now=1020)  # changed again (the last write)
    assert r.waiting == ["alice.txt"] and not r.submitted
    r = box.scan(now=1022)  # unchanged, but only for 2 s of the 5 s settle time
    assert r.waiting == ["alice.txt"] and not r.submitted
    assert store.r.dbsize() == 0, "nothing submitted early"
    r = box.scan(now=1026)
    assert [s["name"] for s in r.submitted] == ["alice.txt"] and not r.failed
    sub = r.submitted[0]
    job = store.get_job(sub["job_id"])
    assert job.status is JobStatus.QUEUED and queued_messages(store) == job.batches == sub["queued"]
    assert Path(sub["out_dir"]).parent == out and Path(sub["out_dir"]).name.startswith("alice-")
    assert (Path(sub["out_dir"]) / "job.json").exists()
    assert (inbox / "done" / "alice.txt").read_text() == text and not growing.exists()
    assert reason(inbox, "done", "alice.txt").startswith(f"submitted as job {sub['job_id']} on tts.normal")
    # temporaries and dotfiles are never touched
    assert {p.name for p in inbox.iterdir() if p.is_file()} == {".hidden.txt", "upload.txt.part", "scratch.tmp",
                                                                LEDGER, ".booktts-watch.lock"}
    # a bad book (binary) and an empty one go to failed/ with the pipeline's one-line InputError
    (inbox / "binary.txt").write_bytes(b"\x00\x01\x02\xff" * 100)
    (inbox / "empty.md").write_bytes(b"")
    assert not box.scan(now=2000).failed
    r = box.scan(now=2010)
    assert sorted(f["name"] for f in r.failed) == ["binary.txt", "empty.md"] and not r.submitted
    for name in ("binary.txt", "empty.md"):
        assert (inbox / "failed" / name).exists() and not (inbox / name).exists()
        line = reason(inbox, "failed", name)
        assert name in line and "Traceback" not in line
    assert queued_messages(store) == job.batches, "nothing queued for bad books"
    ledger = json.loads((inbox / LEDGER).read_text())
    assert [b["name"] for b in ledger["books"].values()] == ["alice.txt"] and ledger["pending"] == {}


def test_scan_killed_mid_submission_neither_loses_nor_repeats(redis_url, tmp_path, monkeypatch):
    """A pass that dies after submitting but before recording it, and one that dies after recording
    but before moving the file: the next pass finishes the work without a second submission."""
    import workers.watch as watch

    use_redis(redis_url)
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    drop(inbox, "tea.txt", BOOKS["tea.txt"])
    drop(inbox, "pool.txt", BOOKS["pool.txt"])
    real_submit, real_done = watch.submit_book, watch.Inbox._done

    class Killed(BaseException):
        pass

    def submit_then_die(*a, **kw):
        real_submit(*a, **kw)
        raise Killed()

    box = watch.Inbox(inbox, out, store, JobConfig(max_batch=2))
    box.scan()
    monkeypatch.setattr(watch, "submit_book", submit_then_die)
    with pytest.raises(Killed):
        box.scan()  # pool.txt (sorted first) submitted, the ledger still says "submitting"
    n_pool = queued_messages(store)
    assert n_pool > 0
    monkeypatch.setattr(watch, "submit_book", real_submit)

    def die_before_move(self, *a, **kw):
        raise Killed()

    monkeypatch.setattr(watch.Inbox, "_done", die_before_move)
    box = watch.Inbox(inbox, out, store, JobConfig(max_batch=2))  # "restart"
    with pytest.raises(Killed):
        box.scan()  # pool.txt: submitted again (idempotent: nothing new queued), recorded, not moved
    assert queued_messages(store) == n_pool, "the active job was not queued twice"
    monkeypatch.setattr(watch.Inbox, "_done", real_done)
    r = watch.Inbox(inbox, out, store, JobConfig(max_batch=2)).scan()  # another restart
    assert sorted(s["name"] for s in r.submitted) == ["pool.txt", "tea.txt"]
    jobs = store.recent_jobs()
    assert len(jobs) == 2 and queued_messages(store) == sum(j.batches for j in jobs)
    assert reason(inbox, "done", "pool.txt").startswith("submitted as job")
    assert not list(inbox.glob("*.txt"))


def test_a_pass_killed_after_moving_a_file_but_before_recording_it_then_a_redrop_is_a_duplicate(
        redis_url, tmp_path, monkeypatch):
    """A watcher killed between moving a submitted file into done/ (its reason file written) and recording the
    move in its ledger: the same file dropped again under the same name is a duplicate of it, not the first
    pass's unfinished move (which would move it beside the first copy as if it had never been taken)."""
    import workers.watch as watch

    use_redis(redis_url)
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    drop(inbox, "tea.txt", BOOKS["tea.txt"])
    real_save = watch.Inbox.save_ledger

    class Killed(BaseException):
        pass

    def die_once_moved(self, ledger):
        if any(e.get("moved_to") for e in ledger["books"].values()):
            raise Killed()
        real_save(self, ledger)

    box = watch.Inbox(inbox, out, store, JobConfig(max_batch=2))
    box.scan()
    monkeypatch.setattr(watch.Inbox, "save_ledger", die_once_moved)
    with pytest.raises(Killed):
        box.scan()  # submitted, recorded as such, moved to done/ with its reason: killed before recording the move
    monkeypatch.setattr(watch.Inbox, "save_ledger", real_save)
    assert reason(inbox, "done", "tea.txt").startswith("submitted as job")
    n = queued_messages(store)
    drop(inbox, "tea.txt", BOOKS["tea.txt"])  # the same book again, under the same name
    box = watch.Inbox(inbox, out, store, JobConfig(max_batch=2))  # "restart"
    box.scan()
    r = box.scan()
    [dup] = r.duplicates
    assert dup["reason"].startswith("duplicate of tea.txt") and not r.submitted
    assert reason(inbox, "done", "tea.txt").startswith("submitted as job"), "the first copy's record is kept"
    assert queued_messages(store) == n and not list(inbox.glob("*.txt"))


def test_lock_of_a_dead_watcher_is_taken_over_and_a_live_one_is_renewed(redis_url, tmp_path, monkeypatch):
    """A watcher SIGKILLed mid-pass leaves the inbox's Redis lock behind: the next watcher on this host
    sees its process is gone and scans at once. A live holder (here or on another host) keeps the inbox
    busy, and a long pass keeps its short-lived lock by renewing it."""
    import socket

    import workers.watch as watch

    use_redis(redis_url)
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    box = watch.Inbox(inbox, out, store, JobConfig(max_batch=2))
    key, host = box.redis_lock_key, socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for holder in (f"{host}:{alive.pid}:1.0", f"elsewhere:{gone.pid}:1.0", "not a holder"):
            store.r.set(key, holder, px=600_000)
            assert box.scan().busy, holder
            assert store.r.get(key) == holder.encode(), "a live or unknown holder keeps its lock"
    finally:
        alive.kill()
        alive.wait()
    store.r.set(key, f"{host}:{gone.pid}:1.0", px=600_000)  # left by a SIGKILLed watcher
    drop(inbox, "tea.txt", BOOKS["tea.txt"])
    seen = {}
    real_submit = watch.submit_book

    def slow_submit(*a, **kw):
        seen["holder"] = store.r.get(key)
        time.sleep(1.0)  # over three lifetimes of the lock below: only renewal keeps it
        seen["after"], seen["pttl"] = store.r.get(key), store.r.pttl(key)
        return real_submit(*a, **kw)

    monkeypatch.setattr(watch, "submit_book", slow_submit)
    monkeypatch.setattr(watch, "REDIS_LOCK_S", 0.3)
    assert not box.scan().busy  # first sight of tea.txt, under the taken-over lock
    r = box.scan()
    assert [s["name"] for s in r.submitted] == ["tea.txt"] and not r.busy
    mine = seen["holder"].decode()
    assert mine.startswith(f"{host}:{os.getpid()}:") and seen["after"] == seen["holder"], seen
    assert 0 < seen["pttl"] <= 300
    assert store.r.get(key) is None, "the lock is released after the pass"


# ------------------------------------------------------------------ `cli.py watch` end to end


def test_watcher_submits_each_file_once_across_restart_and_redrop(redis_url, start_worker, tmp_path, procs):
    store = JobStore(redis_url)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    args = ["watch", str(inbox), "-o", str(out), "--interval", "0.3", "--max-batch", "2", "--redis-url", redis_url]
    log = tmp_path / "watch.log"
    w1 = Proc(args, log)
    procs.append(w1)
    for name in ("alice.txt", "tea.txt"):
        drop(inbox, name, BOOKS[name])
    wait_for(lambda: all((inbox / "done" / f"{n}.reason.txt").exists() for n in ("alice.txt", "tea.txt")), 40,
             "first two books submitted", w1, log)
    w1.kill()  # SIGKILL: no goodbye
    drop(inbox, "pool.txt", BOOKS["pool.txt"])
    drop(inbox, "alice-again.txt", BOOKS["alice.txt"])  # the same content under another name
    drop(inbox, "tea.txt", BOOKS["tea.txt"])  # ... and under the same name
    log = tmp_path / "watch2.log"
    w2 = Proc(args, log)
    procs.append(w2)
    wait_for(lambda: (inbox / "done" / "pool.txt.reason.txt").exists()
             and (inbox / "done" / "alice-again.txt.reason.txt").exists() and not (inbox / "tea.txt").exists(),
             40, "second round handled", w2, log)
    assert reason(inbox, "done", "alice-again.txt").startswith("duplicate of alice.txt")
    (dup_tea,) = [p for p in (inbox / "done").glob("tea-*.txt") if not p.name.endswith(".reason.txt")]
    assert reason(inbox, "done", dup_tea.name).startswith("duplicate of tea.txt")
    jobs = store.recent_jobs()
    assert len(jobs) == 3, "three books, three jobs"
    total = sum(j.batches for j in jobs)
    assert queued_messages(store) == total, "every batch queued exactly once"
    dirs = sorted(p.name for p in out.iterdir())
    assert [d.rsplit("-", 1)[0] for d in dirs] == ["alice", "pool", "tea"]
    start_worker(redis_url, "w1")
    for j in jobs:
        deadline = time.monotonic() + 60
        while store.get_job(j.id).status is not JobStatus.DONE:
            assert time.monotonic() < deadline, store.get_job(j.id)
            time.sleep(0.1)
        assert (Path(j.out_dir) / "manifest.parquet").exists()
        assert all(n == 1 for n in store.deliveries(j.id).values()), "no batch ran twice"
    w2.p.send_signal(signal.SIGTERM)
    assert w2.p.wait(timeout=20) == 0, w2.output()[-2000:]
    lines = w2.output().splitlines()
    assert [ln.split(":")[0] for ln in lines if ln.startswith(("submitted ", "duplicate ", "failed "))] == \
        ["submitted pool.txt", "duplicate alice-again.txt", "duplicate tea.txt"]


# ------------------------------------------------------------------ beat


def test_beat_scans_its_configured_inboxes_itself_and_sends_no_scan_messages(redis_url, tmp_path, procs):
    from core.errors import InputError
    from workers.watch import load_config

    inbox, urgent, out = tmp_path / "inbox", tmp_path / "urgent", tmp_path / "out"
    inbox.mkdir()
    urgent.mkdir()
    cfg_path = tmp_path / "watch.json"
    cfg_path.write_text(json.dumps({"queue": "booktts.ops",  # an older config's key: accepted, unused
                                    "inboxes": [{"inbox": str(inbox), "out": str(out), "every_s": 0.3, "settle_s": 0,
                                                 "priority": "low", "job": {"max_batch": 2}},
                                                {"inbox": str(urgent), "out": str(out), "every_s": 0.5,
                                                 "priority": "high", "job": {"max_batch": 2}}]}))
    cfg = load_config(cfg_path)
    assert [(e["inbox"], e["every_s"], e["settle_s"], e["priority"]) for e in cfg["inboxes"]] == \
        [(str(inbox), 0.3, 0.0, "low"), (str(urgent), 0.5, 0.25, "high")]
    bad = tmp_path / "bad.json"
    for text, msg in (("{", "not valid JSON"), ('{"inboxes": []}', "non-empty"),
                      ('{"inboxes": [{"inbox": "a"}]}', 'needs "inbox" and "out"'),
                      ('{"inboxes": [{"inbox": "a", "out": "b", "job": {"speed": 2}}]}', "unknown job setting")):
        bad.write_text(text)
        with pytest.raises(InputError, match=msg):
            load_config(bad)
    # the beat process scans both inboxes itself, each at its priority
    store = JobStore(redis_url)
    beat = Proc(["beat", "--config", str(cfg_path), "--redis-url", redis_url], tmp_path / "beat.log")
    procs.append(beat)
    drop(inbox, "tea.txt", BOOKS["tea.txt"])
    drop(urgent, "pool.txt", BOOKS["pool.txt"])
    wait_for(lambda: (inbox / "done" / "tea.txt.reason.txt").exists()
             and (urgent / "done" / "pool.txt.reason.txt").exists(), 30, "both books submitted by beat", beat,
             beat.log)
    beat.p.send_signal(signal.SIGTERM)
    assert beat.p.wait(timeout=20) == 0, beat.output()[-2000:]
    jobs = {j.priority: j for j in store.recent_jobs()}
    assert set(jobs) == {"low", "high"}
    assert reason(inbox, "done", "tea.txt").startswith(f"submitted as job {jobs['low'].id} on tts.low")
    assert reason(urgent, "done", "pool.txt").startswith(f"submitted as job {jobs['high'].id} on tts.high")
    # nothing but the books' batches went through the broker: no scan task a worker would run
    lists = {k.decode(): store.r.llen(k) for k in store.r.keys("*") if store.r.type(k) == b"list"}
    assert lists == {"tts.low": jobs["low"].batches, "tts.high": jobs["high"].batches}, lists
    assert f"{inbox}: submitted tea.txt: job {jobs['low'].id}" in beat.output()
    # a missing inbox is one line when beat starts
    bad.write_text(json.dumps({"inboxes": [{"inbox": str(tmp_path / "nope"), "out": str(out)}]}))
    res = subprocess.run([sys.executable, str(CLI), "beat", "--config", str(bad), "--redis-url", redis_url],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("error: inbox ") and len(res.stderr.splitlines()) == 1


def test_watch_once_takes_new_files_after_one_settle_period_and_exits(redis_url, tmp_path):
    from click.testing import CliRunner

    from cli import main

    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    drop(inbox, "tea.txt", BOOKS["tea.txt"])
    (inbox / "bad.epub").write_bytes(b"PK\x03\x04 not really a zip")
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["watch", str(inbox), "-o", str(out), "--once", "--settle", "0.3",
                                    "--max-batch", "2", "--redis-url", redis_url])
    assert res.exit_code == 0, res.output
    assert time.monotonic() - t0 < 20
    lines = res.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["submitted tea.txt", "failed bad.epub"], lines
    assert (inbox / "done" / "tea.txt").exists() and (inbox / "failed" / "bad.epub").exists()
    assert len(JobStore(redis_url).recent_jobs()) == 1
    res = CliRunner().invoke(main, ["watch", str(tmp_path / "nope"), "-o", str(out), "--once", "--redis-url",
                                    redis_url])
    assert res.exit_code == 2 and res.stderr.strip().startswith("error: inbox ") and "no such directory" in res.stderr
