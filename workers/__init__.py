"""The distributed runner: Celery moves work, ``jobs.pipeline`` does it.

``workers`` knows Celery, Redis, leases, retries and priorities; it does not
know how to synthesize or write audio. Every batch is run by
:func:`jobs.pipeline.run_batch` and every job is assembled by
:func:`jobs.pipeline.finalize`, exactly as the local runner does.

Modules:

- :mod:`workers.celery_app`: the Celery app and its settings (queues, acks, visibility timeout).
- :mod:`workers.state`: job state in Redis (JSON values, Lua scripts for the atomic steps).
- :mod:`workers.runtime`: per-process worker state: settings, the engine cache, the job cache.
- :mod:`workers.leases`: the heartbeat that renews a batch lease and the reaper that re-enqueues orphans.
- :mod:`workers.tasks`: the two Celery tasks (``synthesize_batch``, ``finalize_job``) and enqueueing.
- :mod:`workers.commands`: the ``submit``/``worker``/``status``/``resume``/``cancel`` click commands.
"""
