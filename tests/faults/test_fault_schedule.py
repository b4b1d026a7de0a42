"""A seeded, bounded, randomized fault schedule against the distributed runner (issue 15).

Real redis-server (own port), real `cli.py worker` processes (fake engine, 3 s leases), real
`cli.py submit` processes. Several multi-batch jobs run one after the other; around each one the
schedule (drawn from ``random.Random(seed)``) submits conflicting jobs at once and then injects
faults while the job runs:

- ``kill_node``: SIGKILL of a worker's whole process group (a replacement is started);
- ``kill_child``: SIGKILL of a worker's pool child, preferably the one holding a batch lease;
- ``stop_past_lease``: SIGSTOP of a worker's group for longer than its lease, then SIGCONT;
- ``redis_lost`` / ``redis_kept``: redis-server killed (data lost) or shut down saving (data
  kept), then started again on the same port;
- ``dup_batches`` / ``dup_finalize``: batch or finalize messages sent again by task name from a
  Celery client of our own (as in tests/workers/test_trust.py);
- ``cancel_resume``: `cli.py cancel` then `cli.py resume DIR`;
- ``forged_messages``: task messages and kombu ``unacked`` entries naming batches the job does not
  have (one past its last, -1), and Celery built-in tasks (``celery.chord_unlock``, ``celery.map``)
  sent by name: the job still ends done, no built-in task ever runs;
- ``state_dir``: a forged record in the node's state directory naming a copy of an earlier job's
  directory outside the workers' ``--allowed-root`` (a later ``redis_lost`` would have it rebuilt
  there), and a FIFO among the records (the reapers used to block on it for ever): the copy is
  never written to, the reapers keep sweeping.

Each job must end done and its directory satisfy tests/faults/invariants.py; duplicates sent after
it is done must change nothing. The seed is printed (and in every failure message);
``BOOKTTS_FAULT_SEED`` replays one, ``BOOKTTS_FAULT_JOBS`` and ``BOOKTTS_FAULT_MAX`` bound the run,
``BOOKTTS_FAULT_SUMMARY`` names a JSON file for the counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.invariants import check_job_dir, temp_files
from tests.faults.report import SUMMARIES
from tests.workers.test_dir_claims import one_error_line, submit_proc
from tests.workers.test_distributed import cli
from tests.workers.test_trust import forge, tree
from workers.backlog import UNACKED_INDEX_KEY, UNACKED_KEY
from workers.celery_app import TASK_FINALIZE, TASK_SYNTHESIZE, redact_url
from workers.enqueue import UNIT_HEADER
from workers.state import JobStatus, JobStore

pytestmark = [pytest.mark.redis, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
ALICE = ROOT / "tests" / "data" / "alice-pg11.txt"
LEASE_S = 3.0
WORKER_ENV = {"BOOKTTS_FAKE_DELAY_S": "0.5"}
KINDS = ("kill_node", "kill_child", "stop_past_lease", "redis_lost", "redis_kept", "dup_batches", "dup_finalize",
         "cancel_resume", "forged_messages", "state_dir")
ROMAN = ("I", "II", "III", "IV")


def seed_from_env() -> int:
    s = os.environ.get("BOOKTTS_FAULT_SEED")
    return int(s) if s else int.from_bytes(os.urandom(4), "big")


def alice_paragraphs() -> list[str]:
    text = ALICE.read_text(encoding="utf-8")
    body = text[text.index("CHAPTER I.\nDown the Rabbit-Hole"):] if "CHAPTER I.\nDown the Rabbit-Hole" in text else text
    paras = [" ".join(p.split()) for p in body.split("\n\n")]
    return [p for p in paras if 80 <= len(p) <= 320 and not p.startswith(("CHAPTER", "*")) and p[0].isupper()]


def make_book(rng: random.Random, path: Path, paras: list[str]) -> Path:
    """2-3 chapters of 3-4 paragraphs of real prose drawn by ``rng`` (a new job each time)."""
    chapters = []
    for c in range(rng.randint(2, 3)):
        chosen = rng.sample(paras, rng.randint(3, 4))
        chapters.append(f"CHAPTER {ROMAN[c]}.\nPart {rng.randint(1, 10**6)}\n\n" + "\n\n".join(chosen) + "\n")
    path.write_text("\n".join(chapters), encoding="utf-8")
    return path


def digest(out: Path) -> dict[str, str]:
    files = [out / "manifest.parquet", *sorted(out.rglob("*.flac"))]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


class Schedule:
    """The workers, the Redis server and the fault counts of one schedule run."""

    def __init__(self, rng: random.Random, redis, start_worker, seed: int, tmp: Path, state_dir: Path) -> None:
        self.rng, self.redis, self._start, self.seed, self.tmp = rng, redis, start_worker, seed, tmp
        self.state_dir = state_dir
        self.finished: list[tuple[str, Path]] = []  # (job id, directory) of the jobs done so far
        self.copies: dict[Path, dict] = {}  # copies outside the allowed root -> their tree when made
        self.store = JobStore(redis.url)
        self.workers: list = []
        self.n_started = 0
        self.faults: Counter = Counter()
        self.hits: Counter = Counter()  # faults whose target held a batch or finalize lease of the job
        self.killed: set[int] = set()
        self.log: list[str] = []

    def note(self, what: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {what}"
        self.log.append(line)
        print(line, flush=True)

    def where(self) -> str:
        return f"(seed {self.seed}; replay: BOOKTTS_FAULT_SEED={self.seed})\n" + "\n".join(self.log[-40:])

    def worker_logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.output()[-2500:]}" for w in self.workers)

    # ---------------------------------------------------------------- workers

    def start_worker(self, ready: bool = False):
        self.n_started += 1
        w = self._start(self.redis.url, f"w{self.n_started}", ready=ready, env=WORKER_ENV, lease_s=LEASE_S,
                        args=["--allowed-root", str(self.tmp)])
        self.workers.append(w)
        return w

    def live(self) -> list:
        return [w for w in self.workers if w.proc.poll() is None]

    def ready(self) -> list:
        return [w for w in self.live() if " ready." in w.output()]

    def keep_two(self) -> None:
        while len(self.live()) < 2:
            self.start_worker()

    # ---------------------------------------------------------------- waiting

    def info(self, job_id: str):
        try:
            return self.store.get_job(job_id)
        except Exception:  # Redis being restarted
            return None

    def wait_done(self, job_id: str, timeout: float = 120):
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            info = self.info(job_id)
            if info is not None and info.status is JobStatus.DONE:
                return info
            assert info is None or info.status is not JobStatus.FAILED, \
                f"job {job_id} failed: {self.store.failures(job_id)} {self.where()}\n{self.worker_logs()}"
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not done after {timeout} s: {info} {self.where()}\n{self.worker_logs()}")

    def wait_quiet(self, job_id: str, timeout: float = 30) -> None:
        """Nothing queued or running: every message (duplicates too) taken and handled. (Messages a
        killed node had taken stay in Redis's ``unacked`` until the visibility timeout, hours: not
        waited for; their batches were re-enqueued by the reaper.)"""
        r = self.store.r
        deadline = time.monotonic() + timeout
        pending: object = None
        while time.monotonic() < deadline:
            try:
                pending = ({q: r.llen(q) for q in ("tts.high", "tts.normal", "tts.low")}, self.store.running(job_id))
                busy = sum(pending[0].values()) + len(pending[1])
            except Exception as e:
                pending, busy = repr(e), 1
            if not busy:
                time.sleep(1.5)  # the last messages taken, handled; a SIGCONTed worker's last steps
                return
            time.sleep(0.2)
        raise AssertionError(f"job {job_id}: messages still pending after {timeout} s (queued, running: {pending}) "
                             f"{self.where()}")

    # ---------------------------------------------------------------- submits

    def concurrent_submits(self, book: Path, out: Path) -> str:
        """The job twice and a different job (other --length-scale) into the same directory, at once:
        one job wins the directory; every submit of it prints its id, every other is refused with
        one error line naming the directory and the winner."""
        common = ["-o", out, "--max-batch", "2"]
        variants = [[book, *common], [book, *common], [book, *common, "--length-scale", "0.9"]]
        self.rng.shuffle(variants)
        procs = [(v, submit_proc(self.redis.url, *v)) for v in variants]
        results = []
        for v, p in procs:
            stdout, stderr = p.communicate(timeout=120)
            results.append((v, subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)))
        ok = [(v, r) for v, r in results if r.returncode == 0]
        assert ok, [(r.returncode, r.stderr[-600:]) for _, r in results]
        ids = {r.stdout.strip().splitlines()[0] for _, r in ok}
        assert len(ids) == 1, f"two jobs accepted into one directory: {ids}"
        (winner,) = ids
        won = ok[0][0]
        for v, r in results:
            if v == won:
                assert r.returncode == 0, f"a submit of the accepted job failed: {r.stderr[-600:]}"
            else:
                line = one_error_line(r)
                assert r.returncode == 4 and str(out.resolve()) in line and winner in line, line
        self.faults["concurrent_submit"] += len(variants)
        self.note(f"submits: {len(ok)} of {len(variants)} accepted job {winner}"
                  f"{' (length-scale 0.9)' if '--length-scale' in won else ''}")
        assert [j.id for j in self.store.recent_jobs() if j.out_dir == str(out.resolve())] == [winner]
        return winner

    # ---------------------------------------------------------------- faults

    def holders(self, job_id: str) -> list:
        try:
            return [h for h in self.store.running(job_id).values() if h is not None]
        except Exception:  # Redis being restarted
            return []

    def pick_worker(self, job_id: str):
        """A ready worker, the one holding a lease of the job more often than not; (worker, held?)."""
        ws = self.ready()
        if not ws:
            return None, False
        busy = [w for w in ws if w.name in {h.worker for h in self.holders(job_id)}]
        w = self.rng.choice(busy if busy and self.rng.random() < 0.75 else ws)
        return w, w in busy

    def inject(self, kind: str, job_id: str, out: Path, batches: int) -> bool:
        """One fault of ``kind``; False if it does not apply right now (nothing counted)."""
        rng = self.rng
        if kind == "kill_node":
            w, held = self.pick_worker(job_id)
            if w is None:
                return False
            w.kill_group()
            self.hits[kind] += held
            self.note(f"kill_node {w.name}{' (holding a lease)' if held else ''}")
            self.keep_two()
        elif kind == "kill_child":
            children = {c: w for w in self.ready() for c in w.children() if c not in self.killed}
            held = [h.pid for h in self.holders(job_id) if h.pid in children]
            pids = held if held and rng.random() < 0.75 else sorted(children)
            if not pids:
                return False
            pid = rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return False
            self.killed.add(pid)
            self.hits[kind] += pid in held
            self.note(f"kill_child pid {pid} of {children[pid].name}{' (holding a lease)' if pid in held else ''}")
        elif kind == "stop_past_lease":
            w, held = self.pick_worker(job_id)
            if w is None:
                return False
            pause = LEASE_S + rng.uniform(1.0, 2.5)
            os.killpg(w.pid, signal.SIGSTOP)
            self.hits[kind] += held
            self.note(f"stop_past_lease {w.name} for {pause:.1f} s{' (holding a lease)' if held else ''}")
            time.sleep(pause)
            os.killpg(w.pid, signal.SIGCONT)
        elif kind in ("redis_lost", "redis_kept"):
            if kind == "redis_kept":
                self.redis.shutdown_saving()
            else:
                self.redis.kill()
                (self.redis.dir / "dump.rdb").unlink(missing_ok=True)  # lost means lost: no older snapshot
            down = rng.uniform(0.3, 2.0)
            self.note(f"{kind}: down {down:.1f} s")
            time.sleep(down)
            self.redis.start()
        elif kind == "dup_batches":
            ids = rng.sample(range(batches), rng.randint(1, batches))
            forge(self.redis.url, [(TASK_SYNTHESIZE, [str(out.resolve()), job_id, b, None], "tts.normal") for b in ids])
            self.note(f"dup_batches {sorted(ids)}")
        elif kind == "dup_finalize":
            forge(self.redis.url, [(TASK_FINALIZE, [str(out.resolve()), job_id], "tts.normal")] * rng.randint(1, 2))
            self.note("dup_finalize")
        elif kind == "cancel_resume":
            info = self.info(job_id)
            if info is None or info.status is not JobStatus.RUNNING and info.status is not JobStatus.QUEUED:
                return False
            c = cli("cancel", job_id, "--redis-url", self.redis.url)
            time.sleep(rng.uniform(0.0, 1.5))
            r = cli("resume", out, "--redis-url", self.redis.url)
            self.note(f"cancel_resume: {c.stdout.strip()} / {r.stdout.strip()}")
        elif kind == "forged_messages":
            bad = [batches + rng.randint(0, 999), -1]
            forge(self.redis.url, [(TASK_SYNTHESIZE, [str(out.resolve()), job_id, b, None], "tts.normal") for b in bad]
                  + [("celery.chord_unlock", ["forged", {"task": "x", "args": [], "kwargs": {}}], "tts.normal"),
                     ("celery.map", [{"task": TASK_SYNTHESIZE}, [[str(out.resolve()), job_id, 0, None]]], "tts.normal")])
            try:  # entries of kombu's unacked hash, delivered an hour ago (what requeue_stranded acts on)
                for b in bad:
                    tag = f"forged-{job_id}-{b}"
                    msg = {"body": "", "headers": {"task": TASK_SYNTHESIZE, UNIT_HEADER: f"{job_id}:{b}"},
                           "properties": {"delivery_tag": tag}}
                    self.store.r.hset(UNACKED_KEY, tag, json.dumps([msg, "", "tts.normal"]))
                    self.store.r.zadd(UNACKED_INDEX_KEY, {tag: time.time() - 3600})
            except Exception:  # Redis being restarted: the messages were sent all the same
                pass
            self.note(f"forged_messages: batches {bad}, celery.chord_unlock, celery.map")
        elif kind == "state_dir":
            if not self.finished:
                return False
            prev_id, prev_out = rng.choice(self.finished)
            copy = Path(tempfile.mkdtemp(prefix="booktts-outside-")) / "job"
            shutil.copytree(prev_out, copy, symlinks=True)
            self.copies[copy] = tree(copy)
            jobs = self.state_dir / "jobs"
            jobs.mkdir(parents=True, exist_ok=True)
            (jobs / f"{prev_id}.json").write_text(json.dumps({"job_id": prev_id, "job_dir": str(copy), "queue": "tts.normal",
                                                              "broker": redact_url(self.redis.url)}))
            os.mkfifo(jobs / f"0-fifo-{len(self.copies)}.json")
            self.note(f"state_dir: record of job {prev_id} naming {copy}, and a FIFO")
        else:  # pragma: no cover
            raise ValueError(kind)
        self.faults[kind] += 1
        return True


def test_randomized_fault_schedule(own_redis, start_worker, tmp_path, node_state_dir):
    seed = seed_from_env()
    n_jobs = int(os.environ.get("BOOKTTS_FAULT_JOBS", "6"))
    max_faults = int(os.environ.get("BOOKTTS_FAULT_MAX", "4"))  # per job, on average
    rng = random.Random(seed)
    print(f"fault schedule seed {seed} (BOOKTTS_FAULT_SEED={seed} replays it): {n_jobs} jobs, "
          f"up to {max_faults} faults each", flush=True)
    s = Schedule(rng, own_redis, start_worker, seed, tmp_path, node_state_dir)
    try:
        _run(s, rng, seed, n_jobs, max_faults, own_redis, tmp_path)
    finally:
        for copy in s.copies:
            shutil.rmtree(copy.parent, ignore_errors=True)


def _run(s: Schedule, rng: random.Random, seed: int, n_jobs: int, max_faults: int, own_redis, tmp_path: Path) -> None:
    paras = alice_paragraphs()
    assert len(paras) > 50
    s.start_worker()
    s.start_worker()
    for w in s.workers:
        w.wait_ready()
    t0 = time.monotonic()
    jobs = utterances = 0
    # the deck: every kind at least once, the rest drawn at random; dealt to the jobs in order, what a
    # job did not use (it ended first) goes to the next one
    deck = list(KINDS) + [rng.choice(KINDS) for _ in range(max(0, n_jobs * max_faults - len(KINDS)))]
    rng.shuffle(deck)
    deck = deck[:max(n_jobs * max_faults, len(KINDS))]
    j = -1
    while True:
        j += 1
        if j >= n_jobs and (not deck or j >= n_jobs + 2):  # up to two more jobs for faults not injected yet
            break
        deck.sort(key=lambda k: k in s.faults)  # kinds not injected yet first (a stable sort: the deal stays random)
        book = make_book(rng, tmp_path / f"book{j}.txt", paras)
        out = tmp_path / f"job{j}"
        job_id = s.concurrent_submits(book, out)
        batches = s.store.get_job(job_id).batches
        assert batches >= 3, f"a multi-batch job: {batches}"
        # this job's share of the deck, at random moments while it runs (the last job takes what is left)
        share = -(-len(deck) // max(n_jobs - j, 1))
        injected = 0
        while injected < share and deck:
            time.sleep(rng.uniform(0.1, 0.8))
            info = s.info(job_id)
            if info is not None and info.status is JobStatus.DONE:
                break
            if s.inject(deck[0], job_id, out, batches):
                deck.pop(0)
                injected += 1
            else:
                deck.append(deck.pop(0))  # does not apply now (no worker ready yet, say): later
        s.keep_two()
        info = s.wait_done(job_id)
        assert info.done == info.batches == batches and info.failed == 0 and not s.store.failures(job_id), \
            f"{info} {s.where()}"
        s.wait_quiet(job_id)
        try:
            checked = check_job_dir(out, job_id, batches)
        except AssertionError as exc:
            raise AssertionError(f"job {job_id} in {out}: {exc} {s.where()}\n{s.worker_logs()}") from exc
        # duplicates after the end change nothing
        before = digest(out)
        forge(own_redis.url, [(TASK_SYNTHESIZE, [str(out.resolve()), job_id, b, None], "tts.normal")
                              for b in range(batches)] + [(TASK_FINALIZE, [str(out.resolve()), job_id], "tts.normal")])
        s.faults["dup_after_done"] += batches + 1
        s.wait_quiet(job_id)
        assert digest(out) == before, f"duplicates after the end rewrote {out} {s.where()}"
        assert s.store.get_job(job_id).status is JobStatus.DONE and not temp_files(out)
        jobs += 1
        utterances += checked
        s.finished.append((job_id, out))
        s.note(f"job {j} ({job_id}): {batches} batches, {checked} utterances checked, {injected} faults")
    took = time.monotonic() - t0
    faults = dict(sorted(s.faults.items()))
    injected_total = sum(v for k, v in faults.items() if k not in ("concurrent_submit", "dup_after_done"))
    summary = {"seed": seed, "jobs": jobs, "utterances_checked": utterances, "faults": faults,
               "faults_injected_while_running": injected_total, "process_faults_on_a_lease_holder": dict(s.hits),
               "dealt_not_injected": len(deck), "workers_started": s.n_started,
               "seconds": round(took, 1)}
    summary["line"] = (f"seed {seed}: {jobs} jobs, {utterances} utterances checked, {injected_total} faults while "
                       f"running, {len(deck)} dealt but not injected (the jobs ended first) ({', '.join(f'{k} {v}' for k, v in faults.items())}; {sum(s.hits.values())} kills/stops "
                       f"hit a lease holder), {s.n_started} workers "
                       f"started, {took:.0f} s")
    SUMMARIES.append(summary)
    print("fault schedule summary: " + json.dumps(summary), flush=True)
    if os.environ.get("BOOKTTS_FAULT_SUMMARY"):
        Path(os.environ["BOOKTTS_FAULT_SUMMARY"]).write_text(json.dumps(summary, indent=1) + "\n")
    assert jobs >= n_jobs and utterances > 0
    for copy, before in s.copies.items():
        assert tree(copy) == before, f"a forged state record had {copy} (outside the allowed root) written {s.where()}"
    ran = [w.name for w in s.workers if "Task celery." in w.output()]
    assert not ran, f"a Celery built-in task was received as a task by {ran} {s.where()}"
    assert set(KINDS) <= set(s.faults), f"kinds never injected (every job ended first): {set(KINDS) - set(s.faults)}"
