"""The distributed runner: Celery moves work, ``jobs`` does it.

``workers`` knows Celery, Redis, leases, retries and priorities; it does not
know how to synthesize or write audio. Every batch is synthesized by
:func:`jobs.synthesize.synthesize_units` and written by :func:`jobs.synthesize.write_unit`, and every
job is assembled by :func:`jobs.finalize.finalize`, exactly as the local runner does.

Modules:

- :mod:`workers.celery_app`: the Celery app and its settings (queues, acks, visibility timeout).
- :mod:`workers.state`: job state in Redis (JSON values, Lua scripts for the atomic steps).
- :mod:`workers.runtime`: per-process worker state: settings, the engine cache, the job cache.
- :mod:`workers.control`: starting and resuming jobs (submit, resume, the inbox watcher).
- :mod:`workers.recovery`: the heartbeat that renews a batch lease, the reaper that re-enqueues
  orphans, the rebuild of jobs Redis lost.
- :mod:`workers.enqueue`: sending ``synthesize_batch`` / ``finalize_job`` messages by task name.
- :mod:`workers.tasks`: the two Celery tasks (``synthesize_batch``, ``finalize_job``), thin.
- :mod:`workers.batcher`: combining queued units of several jobs into one engine call.
- :mod:`workers.finalize_child`: a job's finalize in a process of its own.
- :mod:`workers.gpus`: one worker process per GPU (``worker --gpus``).

The click commands are in :mod:`commands.distributed` and :mod:`commands.ops`.
"""
