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
    ├── BrokerError           Redis / Celery cannot be reached or misbehaves
    └── EngineError           a backend failed (mapped at the engines/ boundary)
        ├── EngineUnavailable the backend cannot run here (missing package or device)
        ├── TransientEngineError   worth retrying (out of memory, lost device)
        │   └── EngineOutOfMemory  retry with a smaller batch
        └── DeterministicEngineError  will fail again with the same input
"""

from __future__ import annotations


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


class BrokerError(TTSError):
    """The broker (Redis) cannot be reached or answered unexpectedly."""

    exit_code = 5


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
