"""workers.presence against a real redis-server: parked batches wait while no live worker serves their
engine (on their queue), are queued again once one does, and
those of batches done leave without being queued."""

from __future__ import annotations

import pytest

from tests.workers.test_trust import cli
from workers import presence
from workers.state import PARKED_KEY, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

TORCH = {"name": "torch", "precision": "fp32"}


def test_parked_batches_wait_for_a_live_worker_of_their_engine_on_their_queue(redis_url, short_book, tmp_path):
    store = JobStore(redis_url)
    r = store.r
    out = tmp_path / "job"
    jid = cli("submit", short_book, "-o", out, "--max-batch", "2", "--redis-url", redis_url).stdout.splitlines()[0]
    r.delete("tts.normal")  # the submit's own messages: only what drain queues is counted below
    assert not presence.served(r, TORCH, "tts.normal")
    assert presence.park(r, str(out), jid, 0, "tts.normal", TORCH) == 1
    assert presence.drain(store) == 0 and r.hexists(PARKED_KEY, f"{jid}:0"), "nobody serves torch: it waits"

    presence.announce(r, {"name": "onnx", "precision": "fp32"}, "cpu", ["tts.normal"])
    presence.announce(r, TORCH, "cuda:0", ["tts-gpu.normal"])  # (one key per process: the last one counts)
    assert presence.drain(store) == 0, "a torch worker on another queue does not serve it"
    presence.announce(r, TORCH, "cuda:0", ["tts.normal"])
    assert presence.drain(store) == 1 and not r.hexists(PARKED_KEY, f"{jid}:0")
    assert r.llen("tts.normal") == 1
    assert presence.drain(store) == 0 and r.llen("tts.normal") == 1, "queued once"

    assert presence.served(r, TORCH, "tts.normal") and not presence.served(r, TORCH, "tts.low")

    # a batch done meanwhile leaves the hash without a message
    r.sadd(store.k(jid, "done"), 1)
    presence.park(r, str(out), jid, 1, "tts.normal", TORCH)
    assert presence.drain(store) == 0 and not r.hexists(PARKED_KEY, f"{jid}:1")
    assert r.llen("tts.normal") == 1

    shown = presence.engine_line(store, store.get_job(jid))
    assert shown.startswith("any engine; served by 1 live worker process"), shown  # (no batch made yet)
