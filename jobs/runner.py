"""The local (embedded) runner: the whole pipeline in one process, no broker.

It calls exactly the functions the Celery workers call (:mod:`jobs.pipeline`);
the only difference is that the loop over batches runs here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from jobs.claim import claim, run_lock
from jobs.pipeline import FinalizeSummary, Job, finalize, finalized_summary, run_batch, sweep_stale_temp_files


@dataclass
class RunStats:
    batches_run: int
    batches_skipped: int
    audio_s: float
    wall_s: float
    summary: FinalizeSummary

    @property
    def x_real_time(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0


def run_local(job: Job, engine, on_batch: Callable[[int, float], None] | None = None) -> RunStats:
    """Run every pending batch of ``job`` through ``engine``, then finalize.

    ``on_batch(batch_id, audio_seconds)`` is called after each batch (for progress bars).
    Batches already done (a previous, interrupted run) are not synthesized again, and the
    temporary files such a run left behind are removed.
    The directory's run lock is held throughout: another local run into the same directory
    (even of the same job) is refused while this one runs (:func:`jobs.claim.run_lock`).
    """
    with run_lock(job.out_dir, job.job_id):
        claim(job.out_dir, job.job_id)
        sweep_stale_temp_files(job)
        pending = job.pending_batches()
        skipped = len(job.batches) - len(pending)
        audio_s = 0.0
        t0 = time.perf_counter()
        for batch_id in pending:
            rec = run_batch(job, batch_id, engine, worker="local")
            secs = rec.audio_samples / rec.sample_rate
            audio_s += secs
            if on_batch:
                on_batch(batch_id, secs)
        wall = time.perf_counter() - t0
        summary = finalized_summary(job) if not pending and job.finalized else finalize(job)
    return RunStats(len(pending), skipped, audio_s, wall, summary)
