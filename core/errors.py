"""The exception tree of the project.

Every error a user can cause or meet is a subclass of :class:`TTSError`, and its
message is one line that says what is wrong, where, and what to do. The CLI
prints ``error: <message>`` and exits non-zero; it never shows a traceback for
these.

    TTSError
    ├── InputError            bad input: a book file, an option, an output directory
    │   ├── EncodingError     text that is not in the expected encoding
    │   └── UnsafePathError   a name inside an input that would escape the output directory
    ├── VoiceError            a voice that cannot be found or loaded
    ├── JobError              job state: a different job in the output dir, unknown job id
    │   ├── BatchesNotDone    a finalize asked for before every batch has its record
    │   └── EngineMismatch    a job's batches come from another engine (or precision) than this one
    ├── BrokerError           Redis / Celery cannot be reached or misbehaves
    ├── ServerError           a `cli.py serve` engine server cannot be reached or cannot run this job
    ├── StorageError          writing into the output directory failed (also an OSError: retried by workers)
    │   └── DiskFullError     no space left on device (ENOSPC, or a quota: EDQUOT)
    └── EngineError           a backend failed (mapped at the engines/ boundary)
        ├── EngineUnavailable the backend cannot run here (missing package or device)
        ├── TransientEngineError   worth retrying (out of memory, lost device)
        │   └── EngineOutOfMemory  retry with a smaller batch
        └── DeterministicEngineError  will fail again with the same input
"""

from __future__ import annotations

import errno as _errno


class TTSError(Exception):
    """Base class: a one-line, user-facing error."""

    exit_code = 1


class InputError(TTSError):
    """The input (a book, an option, the output directory) is unusable."""

    exit_code = 2


class EncodingError(InputError):
    """A text file could not be decoded with the chosen encoding."""


class UnsafePathError(InputError):
    """A path taken from an input file would leave the output directory."""


class VoiceError(TTSError):
    """The voice could not be found or loaded."""

    exit_code = 3


class JobError(TTSError):
    """Job state is inconsistent with the request (for example another job's output)."""

    exit_code = 4


class BatchesNotDone(JobError):
    """A job's chapters were asked for while some of its batches have no record yet; ``batches``
    lists them (a worker queues them again, a local run resumes them)."""

    def __init__(self, job_id: str, batches: list[int], total: int) -> None:
        self.job_id, self.batches, self.total = job_id, [int(b) for b in batches], int(total)
        first = self.batches[0] if self.batches else None
        super().__init__(f"job {job_id}: {len(self.batches)} of {total} batches are not done (first: {first}); "
                         "resume the job")

    def __reduce__(self):  # (crosses process boundaries as its arguments)
        return type(self), (self.job_id, self.batches, self.total)


class EngineMismatch(JobError):
    """The job's batches were synthesized by another engine identity (backend, precision) than the
    one asked to go on with it (:func:`jobs.job.claim_engine`): its audio would mix the two.
    A local run stops with this line; a worker leaves the batch for a worker of the job's engine."""


class BrokerError(TTSError):
    """The broker (Redis) cannot be reached or answered unexpectedly."""

    exit_code = 5


class ServerError(TTSError):
    """``cli.py run --server``: no engine server answers on the socket, or it runs another engine or
    voice than the run asks for, or it stopped during the run."""

    exit_code = 8


class StorageError(TTSError, OSError):
    """Writing a file of the output directory failed: an I/O error of its filesystem.

    Also an :class:`OSError` (``errno``, ``strerror``, ``filename`` = the final path, not the
    temporary one), so the distributed runner retries it like any I/O error of a shared filesystem.
    """

    exit_code = 7
    advice = ("check that filesystem (free space, permissions), then run the same command again to resume "
              "(workers: `cli.py resume JOB`); finished batches are kept")

    def __init__(self, path, detail: str, code: int = _errno.EIO) -> None:
        OSError.__init__(self, code, detail, str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}; {self.advice}"

    def __reduce__(self):  # picklable with its own arguments (OSError's args are not these)
        return type(self), (self.filename, self.strerror, self.errno)


class DiskFullError(StorageError):
    """The filesystem of the output directory is full (ENOSPC) or a quota is exhausted (EDQUOT)."""

    advice = ("free space on that filesystem, then run the same command again to resume (workers: "
              "`cli.py resume JOB`); finished batches are kept")

    def __init__(self, path, detail: str = "no space left on device", code: int = _errno.ENOSPC) -> None:
        super().__init__(path, detail, code)

    def __str__(self) -> str:
        return f"{self.strerror} writing {self.filename}: {self.advice}"


class EngineError(TTSError):
    """A synthesis backend failed. Backend-specific exceptions are mapped to these."""

    exit_code = 6


class EngineUnavailable(EngineError):
    """The backend cannot run on this host (missing package, driver or device)."""


class TransientEngineError(EngineError):
    """A failure that may not happen again: retry."""


class EngineOutOfMemory(TransientEngineError):
    """The device ran out of memory: retry with the batch split in two."""


class DeterministicEngineError(EngineError):
    """The same input will fail again: do not retry, report."""
