"""What a worker trusts from a broker message (docs/distributed.md, "Trust model").

Anyone who can write to the broker can send any task by name. These tests send forged messages
the way such a client would (a bare Celery app of their own, JSON, the task name as a string) to
real `cli.py worker` processes and check that:

- no message makes a worker scan a directory (there is no scan task any more);
- a worker started with --allowed-root (or BOOKTTS_ALLOWED_ROOTS) writes nothing into a job
  directory outside its roots, whether named directly, through a symlink or through `..`; the
  refusal is one log line and a failure recorded in the job, not retried; a job inside the root
  still runs;
- a worker without roots says so once at start-up.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from jobs.config import JobConfig
from jobs.prepare import prepare_job
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

WARNING = "no --allowed-root set: accepting job directories anywhere"
REFUSED = "error: refused "

OTHER_BOOK = ("CHAPTER I.\nA Mad Tea-Party\n\nThere was a table set out under a tree in front of the house. "
              "The March Hare and the Hatter were having tea at it.\n")


def cli(*args, ok: bool = True):
    res = CliRunner().invoke(main, [str(a) for a in args])
    if ok and res.exit_code != 0:
        raise AssertionError(f"cli {' '.join(map(str, args))} -> {res.exit_code}\n{res.output}\n{res.exception!r}")
    return res


def forge(url: str, messages: list[tuple[str, list | dict, str]]) -> None:
    """Send (task name, args or kwargs, queue) messages with a Celery client of our own: no project code."""
    from celery import Celery

    attacker = Celery("attacker", broker=url, set_as_current=False)
    attacker.conf.task_serializer = "json"
    try:
        for name, payload, queue in messages:
            if isinstance(payload, dict):
                attacker.send_task(name, kwargs=payload, queue=queue)
            else:
                attacker.send_task(name, args=payload, queue=queue)
    finally:
        attacker.close()


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, size and mtime (what "nothing written" compares)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns)
    return out


def wait_for(pred, timeout: float, what: str, worker=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s" + (f":\n{worker.output()[-4000:]}" if worker else ""))


def refusals(worker) -> list[str]:
    return [ln for ln in worker.output().splitlines() if REFUSED in ln]


# ------------------------------------------------------------------ no scan task


def test_forged_scan_messages_move_nothing_and_default_worker_warns_once(redis_url, start_worker, tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "elsewhere"
    inbox.mkdir()
    (inbox / "secret.txt").write_text(OTHER_BOOK, encoding="utf-8")
    (inbox / "notes.md").write_text("# Notes\n\nPrivate text that must stay where it is.\n", encoding="utf-8")
    before = tree(inbox)
    queues = ["tts.high", "tts.normal", "tts.low", "booktts.ops"]
    w = start_worker(redis_url, "w1", args=["--queues", ",".join(queues)])
    scan = {"inbox": str(inbox), "out_root": str(out), "priority": "high", "settle_s": 0}
    # two passes each (the first observes, the second would take), on a batch queue and on the old ops queue
    forge(redis_url, [("booktts.watch_scan", scan, q) for q in ("tts.normal", "booktts.ops") for _ in range(2)])
    store = JobStore(redis_url)
    wait_for(lambda: all(store.r.llen(q) == 0 for q in queues), 30, "the forged messages taken", w)
    # each one is either refused as unknown, or (the old code) runs a scan that moves the files
    wait_for(lambda: w.output().count("unregistered task of type 'booktts.watch_scan'") == 4
             or (inbox / "done").exists(), 30, "the forged messages handled", w)
    time.sleep(0.5)
    assert tree(inbox) == before, "a forged scan message touched the inbox"
    assert not out.exists(), "a forged scan message created its output root"
    assert store.recent_jobs() == [], "nothing was submitted"
    assert w.proc.poll() is None, "the worker is still running"
    assert w.output().count(WARNING) == 1, w.output()[-3000:]


# ------------------------------------------------------------------ --allowed-root


def test_worker_refuses_job_directories_outside_its_allowed_root(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    # a job registered the ordinary way, but into a directory outside the worker's root
    jid = cli("submit", short_book, "-o", outside / "job", "--max-batch", "2", "--redis-url",
              redis_url).stdout.splitlines()[0]
    n_batches = store.get_job(jid).batches
    assert n_batches >= 2
    (root / "link").symlink_to(outside / "job")  # a way out of the root through a symlink
    forge(redis_url, [
        (TASK_SYNTHESIZE, [str(root / "link"), jid, 0, None], "tts.normal"),
        (TASK_SYNTHESIZE, [f"{root}/../outside/job", jid, 1, None], "tts.normal"),
        (TASK_FINALIZE, [str(outside / "job"), jid], "tts.normal"),
    ])
    before = tree(outside)
    w = start_worker(redis_url, "w1", args=["--allowed-root", str(root)])
    expected = n_batches + 3
    wait_for(lambda: len(refusals(w)) >= expected, 30, f"{expected} refusals", w)
    time.sleep(1.0)  # a retry would show up as another refusal by now
    out = w.output()
    lines = refusals(w)
    assert len(lines) == expected, "one line per message, no retries:\n" + "\n".join(lines)
    real = str((outside / "job").resolve())
    assert all(real in ln and "outside the allowed roots" in ln and str(root.resolve()) in ln for ln in lines), lines
    assert sum(f"job {jid} finalize" in ln for ln in lines) == 1
    assert "Traceback" not in out and "Retry in" not in out, out[-3000:]
    assert WARNING not in out and f"accepting job directories only under {root.resolve()}" in out
    assert tree(outside) == before, "nothing is written outside the root"
    # the refusal is a failure recorded in the job, with its reason, and the batches were never started
    info = store.get_job(jid)
    assert info.status is JobStatus.FAILED and info.done == 0 and info.failed == n_batches
    assert all(f["error_type"] == "OutsideAllowedRoots" for f in store.failures(jid).values())
    assert store.deliveries(jid) == {}, "refused before taking a lease"
    st = cli("status", jid, "--redis-url", redis_url).stdout
    assert "failure:     batch 0: OutsideAllowedRoots: job directory" in st and "outside the allowed roots" in st
    # ... while a job inside the root runs
    book2 = tmp_path / "tea.txt"
    book2.write_text(OTHER_BOOK, encoding="utf-8")
    res = cli("submit", book2, "-o", root / "ok", "--max-batch", "2", "--redis-url", redis_url, "--wait")
    assert (root / "ok" / "manifest.parquet").exists(), res.output
    assert tree(outside) == before


def test_allowed_roots_from_the_environment(redis_url, start_worker, short_book, tmp_path):
    store = JobStore(redis_url)
    r1, r2, elsewhere = tmp_path / "r1", tmp_path / "r2", tmp_path / "r10"  # r10: a sibling sharing r1's prefix
    r1.mkdir()
    r2.mkdir()
    planted = prepare_job([short_book], elsewhere, JobConfig(max_batch=2))  # a job.json the attacker found
    before = tree(elsewhere)
    w = start_worker(redis_url, "w1", env={"BOOKTTS_ALLOWED_ROOTS": f"{r1}{os.pathsep}{r2}"})
    assert f"accepting job directories only under {r1.resolve()}, {r2.resolve()}" in w.output()
    forge(redis_url, [(TASK_SYNTHESIZE, [str(elsewhere), planted.job_id, 0, None], "tts.high")])
    wait_for(lambda: refusals(w), 30, "the refusal", w)
    assert tree(elsewhere) == before
    assert store.get_job(planted.job_id) is None, "a refused message about an unknown job leaves Redis alone"
    book2 = tmp_path / "tea.txt"
    book2.write_text(OTHER_BOOK, encoding="utf-8")
    cli("submit", book2, "-o", r2 / "job", "--max-batch", "2", "--redis-url", redis_url, "--wait")
    assert (r2 / "job" / "manifest.parquet").exists()
    assert len(refusals(w)) == 1 and WARNING not in w.output()


# ------------------------------------------------------------------ the check itself, without processes


def test_job_dir_check_resolves_symlinks_and_dotdot(tmp_path):
    from workers.runtime import OutsideAllowedRoots, check_job_dir

    root = tmp_path / "out"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "out2").mkdir()
    (root / "up").symlink_to(tmp_path)
    roots = (str(root.resolve()),)
    assert check_job_dir(str(root / "a" / "b"), roots) == str((root / "a" / "b").resolve())
    assert check_job_dir(str(root / "up" / "out" / "a"), roots) == str((root / "a").resolve())
    for bad in (tmp_path / "out2", root / "up", root / "up" / "out2", Path(f"{root}/../out2"), Path("/")):
        with pytest.raises(OutsideAllowedRoots, match="outside the allowed roots"):
            check_job_dir(str(bad), roots)
    assert check_job_dir(str(tmp_path / "out2"), ()) == str((tmp_path / "out2").resolve()), "no roots: anywhere"


def test_worker_with_a_missing_allowed_root_is_a_one_line_error(redis_url, tmp_path):
    res = cli("worker", "--engine", "fake", "--voice", "", "--allowed-root", tmp_path / "nope", "--redis-url",
              redis_url, ok=False)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: --allowed-root ") and "no such directory" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
