"""Chapters written while their job is still synthesized: a user hears chapter 1 before the book is done.

A worker process, once it has written and counted a unit, asks :func:`batch_done` which chapters of
that job now have every batch on disk; each one not yet asked for by any worker (a Redis ``SET NX``
per chapter) goes to this process's **chapter process** (``python -m workers.chapter_writer THREADS``,
started with the worker process, its imports done before the first chapter), which writes it with
:func:`jobs.finalize.write_chapter` on up to THREADS threads. That writes the chapter's file and its
record (:mod:`jobs.chapter_records`); the job's ``finalize`` then keeps the
chapters whose records match and writes only the rest, the manifest and the book-level files.

Nothing here can lose or spoil output: a chapter written early is the file ``finalize`` would write
(same function, same batch records), written atomically; a chapter that is not written early, for
any reason (the chapter process is busy or died, a write failed, the job was replaced, cancelled or
is already finalizing), is simply written by ``finalize``. The chapter containing a job's last batch
is left to ``finalize``, which starts at once. The work is in a process of its own, not in the
engine's, whose launch thread needs the interpreter lock (see :class:`workers.batcher.Offloader`).

The chapter process reads one JSON line per request on standard input (``job_dir``, ``job_id``,
``keys``: ``[book index, chapter index]`` pairs) and exits at its end; its log lines go to the
worker's log.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

from workers.finalize_child import ROOT, child_env, lower_priority

log = logging.getLogger("booktts.chapters")

#: Requests waiting for the chapter process; more are dropped (finalize writes those chapters).
QUEUE_DEPTH = 256
#: Jobs whose chapter layout a worker process keeps (batch -> chapters).
JOBS_KEPT = 32
#: How long a chapter stays claimed by the worker that asked for it (seconds); past it (the chapter
#: process died, say) another worker may ask again, and finalize writes it anyway.
CLAIM_S = 900


# ------------------------------------------------------------------ the worker's side


class _Layout:
    """One job's chapters: which batches each reads, which chapters each batch feeds."""

    def __init__(self, job) -> None:
        from jobs.chapter_records import batches_of
        from jobs.finalize import chapter_key, selected_chapters

        # per chapter, its batches not yet seen on disk (ascending): a record, once written, stays (a
        # reset job is a new job id), so each batch is looked for until it is found, not on every unit
        self.left = {chapter_key(w): batches_of(w[3]) for w in selected_chapters(job)}
        self.of_batch: dict[int, list[tuple[int, int]]] = {}
        for key, bs in self.left.items():
            for b in bs:
                self.of_batch.setdefault(b, []).append(key)
        self.lock = threading.Lock()


class ChapterWriter:
    """A worker process's chapter process and the requests it is sent (one per worker process)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(0, int(threads))
        self._layouts: OrderedDict[tuple[str, str], _Layout] = OrderedDict()  # by (directory, job id)
        self._q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._feeder: threading.Thread | None = None

    def _layout(self, job) -> _Layout:
        with self._lock:
            key = (str(job.out_dir), job.job_id)
            lay = self._layouts.get(key)
            if lay is None:
                lay = self._layouts[key] = _Layout(job)
                while len(self._layouts) > JOBS_KEPT:
                    self._layouts.popitem(last=False)
            else:
                self._layouts.move_to_end(key)
            return lay

    def ready_chapters(self, job, batch_id: int) -> list[tuple[int, int]]:
        """Chapters that read ``batch_id`` and now have every batch's record on disk."""
        lay = self._layout(job)
        ready = []
        with lay.lock:
            for key in lay.of_batch.get(batch_id, []):
                left = lay.left[key]
                # newest first: the batch just written, then the likeliest to be missing (length-sorted
                # plans run a chapter's batches in id order); stop at the first one still missing
                while left and (left[-1] == batch_id or job.record_path(left[-1]).exists()):
                    left.pop()
                if not left:
                    ready.append(key)
        return ready

    def batch_done(self, store, job, job_dir: str, batch_id: int, worker: str) -> list[tuple[int, int]]:
        """After ``batch_id`` of ``job`` was written and counted (the job not complete yet): send the
        chapters it completed to the chapter process. Returns the chapters sent."""
        if not self.threads:
            return []
        keys = [k for k in self.ready_chapters(job, batch_id)
                if store.r.set(store.k(job.job_id, f"chapter:{k[0]}:{k[1]}"), worker, nx=True, ex=CLAIM_S)]
        if not keys:
            return []
        try:
            self._q.put_nowait({"job_dir": str(job_dir), "job_id": job.job_id, "keys": [list(k) for k in keys]})
        except queue.Full:
            log.info("job %s: chapter process busy; finalize writes chapters %s", job.job_id, keys)
            return []
        self._start_feeder()
        return keys

    def start(self) -> None:
        """Start the chapter process now (a worker process's start), so that the first chapter is
        written as soon as it is complete, not after an interpreter's start and imports; nothing
        when early chapters are off."""
        if self.threads:
            self._process()

    def _start_feeder(self) -> None:
        with self._lock:
            if self._feeder is None or not self._feeder.is_alive():
                self._feeder = threading.Thread(target=self._feed, name="booktts-chapters", daemon=True)
                self._feeder.start()

    def _feed(self) -> None:
        while True:
            req = self._q.get()
            if req is None:
                return
            line = json.dumps(req) + "\n"
            for _ in range(2):  # a chapter process that died is started again, once per request
                proc = self._process()
                if proc is None:
                    break
                try:
                    proc.stdin.write(line)
                    proc.stdin.flush()
                    break
                except (OSError, ValueError):
                    with self._lock:
                        self._proc = None

    def _process(self) -> subprocess.Popen | None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
            try:
                self._proc = subprocess.Popen([sys.executable, "-m", "workers.chapter_writer", str(self.threads)],
                                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=None,
                                              text=True, env=child_env(), cwd=str(ROOT))
            except OSError as exc:
                log.warning("no chapter process (%s); finalize writes the chapters", exc)
                self._proc = None
            return self._proc

    def close(self, timeout: float = 60.0) -> None:
        """Let the chapter process finish what it was sent, then exit (a worker's shutdown)."""
        with self._lock:
            feeder, proc = self._feeder, self._proc
        if feeder is not None and feeder.is_alive():
            self._q.put(None)
            feeder.join(timeout)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()


_writer: tuple[int, ChapterWriter] | None = None
_writer_lock = threading.Lock()


def writer(threads: int) -> ChapterWriter:
    """This process's :class:`ChapterWriter` (a new one after a fork)."""
    global _writer
    with _writer_lock:
        if _writer is None or _writer[0] != os.getpid():
            _writer = (os.getpid(), ChapterWriter(threads))
        return _writer[1]


def close() -> None:
    """Close this process's chapter writer, if it has one (a worker process's shutdown)."""
    with _writer_lock:
        w = _writer[1] if _writer is not None and _writer[0] == os.getpid() else None
    if w is not None:
        w.close()


# ------------------------------------------------------------------ the chapter process


_jobs: OrderedDict[tuple[str, str], object] = OrderedDict()
_jobs_lock = threading.Lock()


def _opened(job_dir: str, job_id: str, load_job):
    """Job ``job_id`` from ``job_dir``, opened once per chapter process (a plan does not change under
    its job id; a directory that now holds another job is caught by its claim); None if the
    directory holds another job."""
    with _jobs_lock:
        job = _jobs.get((job_dir, job_id))
    if job is None:
        job = load_job(Path(job_dir))
        if job.job_id != job_id:
            return None
        with _jobs_lock:
            _jobs[(job_dir, job_id)] = job
            while len(_jobs) > JOBS_KEPT:
                _jobs.popitem(last=False)
    return job


def write_requested(job_dir: str, job_id: str, keys) -> list[str]:
    """Write the chapters ``keys`` of job ``job_id`` that are still wanted; the files written.
    Skipped: a job that is replaced, finalized or has every batch done (its finalize writes them), a
    chapter whose record matches or whose batches are not all done. Errors propagate (the caller logs
    them; finalize writes the chapter)."""
    from jobs import chapter_records
    from jobs import claim as claims
    from jobs.finalize import chapter_key, selected_chapters, write_chapter
    from jobs.job import MANIFEST_FILE, load_job

    job = _opened(job_dir, job_id, load_job)
    if job is None or (job.out_dir / MANIFEST_FILE).exists():
        return []
    if all(job.record_path(b.batch_id).exists() for b in job.batches):
        # every batch is done: the job's finalize is due, and writes its chapters on processes of
        # its own; a request that waited here behind other jobs' chapters would only hold it up
        return []
    claims.check_claim(job.out_dir, job.job_id)
    wanted = {tuple(k) for k in keys}
    works = [w for w in selected_chapters(job) if chapter_key(w) in wanted]
    records: dict = {}
    kept = {chapter_key(w) for w in chapter_records.valid(job, works, records)}
    out = []
    # the job's own batches still wait for engines (else its finalize would write these): a chapter
    # written now takes CPU time they may need, so --flac-level auto encodes fast (jobs.encoding)
    from jobs.encoding import choose
    from jobs.segment_pool import host_cores

    chosen = choose(None, True, host_cores())
    for w in works:
        if chapter_key(w) in kept or chapter_records.sources(job, w[3], records) is None:
            continue
        with chapter_records.writing(job) as ok:
            if not ok or (job.out_dir / MANIFEST_FILE).exists():  # its finalize is finishing, or done
                break
            write_chapter(job, w, records, chosen=chosen)
        out.append(w[2]["file"])
    return out


def main(argv: list[str]) -> int:
    from concurrent.futures import ThreadPoolExecutor

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[%(asctime)s: %(levelname)s/chapters-{os.getpid()}] %(message)s")
    threads = int(argv[0]) if argv and argv[0].isdigit() and int(argv[0]) > 0 else 1
    lower_priority()
    import jobs.finalize  # noqa: F401 - imported before the first request, not while it waits

    def one(req: dict) -> None:
        t0 = time.perf_counter()
        try:
            files = write_requested(req["job_dir"], req["job_id"], req["keys"])
        except Exception as exc:  # noqa: BLE001 - finalize writes the chapter; say why once
            log.info("job %s: chapters %s not written early (%s: %s); finalize writes them", req.get("job_id"),
                     req.get("keys"), type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return
        if files:
            log.info("job %s: wrote %s early in %.2f s", req["job_id"], ", ".join(files), time.perf_counter() - t0)

    with ThreadPoolExecutor(threads, thread_name_prefix="chapter") as pool:
        for line in sys.stdin:
            try:
                req = json.loads(line)
                if not isinstance(req, dict) or not isinstance(req.get("keys"), list):
                    raise ValueError("not a request")
            except ValueError:
                log.warning("unreadable chapter request %r", line.strip()[:200])
                continue
            pool.submit(one, req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
