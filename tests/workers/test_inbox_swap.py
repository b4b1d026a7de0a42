"""The watched inbox plans the bytes it checked (issue 31, finding 1): a drop that someone keeps
swapping between a regular file and a symlink to a file of the watcher's never gets that file
planned. Real redis-server (the submissions register jobs and queue their batches there), real
files, the real voice planning each book.

The "secret" is a file of the test's own, readable by the watcher, that no drop may bring into a
plan; the swapping runs in a thread while the inbox is scanned, as fast as renames go.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.config import JobConfig
from workers.celery_app import app, use_redis
from workers.state import JobStore
from workers.watch import DONE, FAILED, Inbox

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]

SECRET_WORD = "zanzibar"
SECRET = f"CHAPTER I.\nThe Vault\n\nThe combination of the vault is {SECRET_WORD} {SECRET_WORD} seven.\n"


def book(n: int) -> str:
    return f"CHAPTER I.\nA Drop\n\nThis is drop number {n}. Alice sat by the river and read her sister's book.\n"


class Swapper(threading.Thread):
    """Keeps ``inbox/a.txt`` flipping: a regular file of its own (the same inode, moved aside and back),
    then a symlink to the secret, then the regular file again. A regular file taken by the watcher is
    replaced by a new one (new content each time, so each is a new book)."""

    def __init__(self, inbox: Path, secret: Path) -> None:
        super().__init__(daemon=True)
        self.inbox, self.secret = inbox, secret
        self.stop = threading.Event()
        self.flips = 0

    def run(self) -> None:
        name, aside, link = self.inbox / "a.txt", self.inbox / ".aside", self.inbox / ".link"
        n = 0
        while not self.stop.is_set():
            try:
                if not aside.exists():
                    n += 1
                    aside.write_text(book(n), encoding="utf-8")
                os.replace(aside, name)  # the regular file
                time.sleep(0.002)
                os.replace(name, aside)  # moved aside (fails if the watcher took it)
                if link.is_symlink():
                    link.unlink()
                os.symlink(self.secret, link)
                os.replace(link, name)  # the symlink to the secret
                time.sleep(0.002)
                self.flips += 1
            except FileNotFoundError:
                continue


def planned_text(out_dir: Path) -> str:
    rows = pq.read_table(out_dir / "plan.parquet").to_pylist()
    return json.dumps(rows, default=str).lower()


def test_symlink_swapped_into_the_inbox_never_gets_its_target_planned(redis_url, tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    secret = tmp_path / "private" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET, encoding="utf-8")
    os.chmod(secret, 0o600)
    before = app.conf.broker_url
    use_redis(redis_url)
    box = Inbox(inbox, out, JobStore(redis_url), JobConfig(), settle_s=0.0)
    swapper = Swapper(inbox, secret)
    swapper.start()
    submitted: list[dict] = []
    crashes: list[str] = []
    try:
        deadline = time.monotonic() + 25
        # scan until both enough drops were taken and the swapping ran long enough to mean something
        while time.monotonic() < deadline and (len(submitted) < 12 or swapper.flips <= 50):
            try:
                res = box.scan()
            except OSError as exc:  # the old watcher: the file vanished between planning and its move
                crashes.append(repr(exc))
                continue
            assert res.error is None, res.error
            submitted += res.submitted
    finally:
        swapper.stop.set()
        swapper.join(timeout=10)
        use_redis(before)
    assert swapper.flips > 50, "the swapping ran"
    leaked = [s["name"] + " -> " + s["out_dir"] for s in submitted if SECRET_WORD in planned_text(Path(s["out_dir"]))]
    assert not leaked, f"{len(leaked)} of {len(submitted)} submissions planned the symlink's target: {leaked}"
    assert submitted, "some regular drops were taken while the swapping ran"
    assert not crashes, f"scan raised {len(crashes)} times: {crashes[:3]}"
    for sub in (DONE, FAILED):  # nothing moved aside holds the secret either (a moved link is only a link)
        for p in (inbox / sub).iterdir():
            if not p.name.endswith(".reason.txt") and not p.is_symlink():
                assert SECRET_WORD not in p.read_text(encoding="utf-8", errors="replace"), p
    # with the swapping over, the regular file left is taken like any drop
    if not (inbox / "a.txt").exists() or (inbox / "a.txt").is_symlink():
        (inbox / "a.txt").unlink(missing_ok=True)
        (inbox / "a.txt").write_text(book(10_000), encoding="utf-8")
    use_redis(redis_url)
    try:
        box.scan()
        res = box.scan()
    finally:
        use_redis(before)
    assert [s["name"] for s in res.submitted] == ["a.txt"], res.lines()
    assert "drop number" in planned_text(Path(res.submitted[0]["out_dir"]))


def test_hard_link_to_a_file_elsewhere_is_refused(redis_url, tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET, encoding="utf-8")
    os.link(secret, inbox / "b.txt")
    before = app.conf.broker_url
    use_redis(redis_url)
    try:
        box = Inbox(inbox, out, JobStore(redis_url), JobConfig(), settle_s=0.0)
        box.scan()
        res = box.scan()
    finally:
        use_redis(before)
    assert res.submitted == [] and [f["name"] for f in res.failed] == ["b.txt"], res.lines()
    assert "2 hard links" in res.failed[0]["reason"] and not out.joinpath("b").exists()
    assert not any(out.iterdir()), "nothing was planned"
