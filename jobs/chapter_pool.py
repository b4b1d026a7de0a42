"""Chapter files written by a pool of processes, when there is a lot of audio to write at once.

Writing a chapter (reading its batch audio, loudness, encoding) holds the interpreter lock for part
of its time: threads of one process reach about twice one core, whatever the host has. When many
chapters are left at once (a finalize, or the end of a local run whose length-sorted batches
complete most chapters only with the last batch) they go to processes instead. Each process opens
the job from its directory, reads the chapter's batch audio from disk (just written: the page
cache) and writes the chapter exactly as :func:`jobs.finalize.write_chapter` does in a thread; the
caller gets back the chapter's manifest columns. This module knows nothing of jobs: the caller
(:mod:`jobs.finalize`) gives it the function that writes one chapter in a process. Small amounts
of audio, or a host with few cores, stay on threads: starting the processes would cost more than
it saves.

The processes are forked when this process has no other thread (a finalize child), else forked
from a clean server process (``cli.py run``, whose engine threads run), as in
:mod:`jobs.segment_pool`.
"""

from __future__ import annotations

import errno

from jobs.plan import estimate_seconds
from jobs.segment_pool import FORKSERVER_PRELOAD, host_cores, pool_context

#: Below this much estimated audio (seconds) in the chapters to write, threads write them.
PROCESS_MIN_AUDIO_S = 1800.0
#: Fewest cores for processes to be used.
PROCESS_MIN_CORES = 4
#: Fewest chapters for processes to be used.
PROCESS_MIN_CHAPTERS = 2
#: Most processes.
MAX_PROCESSES = 16
#: What a forkserver imports before forking chapter writers (when this pool is the first to start it;
#: the same list as the segmenting pool's, which shares the server).
PRELOAD = FORKSERVER_PRELOAD


def chapter_seconds(job, work) -> float:
    """Estimated audio of one chapter (``ChapterWork``), from its planned rows."""
    return estimate_seconds(work[3], job.scales.length_scale)


def processes_for(job, works: list, cores: int | None = None, limit: int | None = None) -> int:
    """Processes to write ``works`` with; 0: write them on threads. ``cores``: the host's (default:
    this process's); ``limit``: at most this many (a caller that runs several finalizes at once
    shares the cores between them: processes beyond the cores cost CPU time, not wall time)."""
    cores = host_cores() if cores is None else cores
    if limit is not None:
        cores = min(cores, limit)
    if cores < PROCESS_MIN_CORES or len(works) < max(1, PROCESS_MIN_CHAPTERS):
        return 0
    if sum(chapter_seconds(job, w) for w in works) < PROCESS_MIN_AUDIO_S:
        return 0
    return min(MAX_PROCESSES, cores, len(works))


class KeptPool:
    """Chapter processes that a long-lived process (``cli.py serve``) starts once and keeps for every
    run, instead of forking a pool at each run's end. A pool broken by a process that died is replaced
    at the next :meth:`get`."""

    def __init__(self, processes: int | None = None) -> None:
        self.processes = max(1, min(MAX_PROCESSES, processes or host_cores()))
        self._pool = None

    def get(self):
        """The pool (started, every process forked, at the first call or after a break)."""
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is not None and getattr(self._pool, "_broken", False):
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=pool_context(PRELOAD))
            # each task holds its process a moment, so that every process is forked now, not at a run's end
            for f in [self._pool.submit(_hold, 0.2) for _ in range(self.processes)]:
                f.result()
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _hold(seconds: float) -> int:
    import os
    import time

    time.sleep(seconds)
    return os.getpid()


def write_chapters(job, works: list, processes: int, write_one, key, kept: KeptPool | None = None) -> dict:
    """Write the chapters ``works`` of ``job`` in ``processes`` processes (longest first; ``kept``: in
    those processes instead, whatever their number); what ``write_one(job_dir, job_id, key(work))``
    returns for each, by ``key(work)``. ``write_one`` runs in the processes: a module-level function
    (:func:`jobs.finalize.write_chapter_of`). The first chapter's error is raised, as a thread's would
    be; a process that dies is a :class:`ChildProcessError`."""
    import contextlib
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    order = sorted(works, key=lambda w: -chapter_seconds(job, w))
    try:
        with contextlib.ExitStack() as stack:
            pool = kept.get() if kept is not None else stack.enter_context(
                ProcessPoolExecutor(max(1, min(processes, len(works))), mp_context=pool_context(PRELOAD)))
            futures = {key(w): pool.submit(write_one, str(job.out_dir), job.job_id, key(w)) for w in order}
            return {key(w): futures[key(w)].result() for w in works}
    except BrokenProcessPool:
        # an OSError, so that a worker retries the finalize; the chapters written stay (each atomically)
        raise ChildProcessError(errno.ECHILD, f"a process writing the chapters of job {job.job_id} ended without "
                                              "its result (killed, or out of memory?); finished batches are kept: "
                                              "run the same command again (a worker retries the finalize)") from None
