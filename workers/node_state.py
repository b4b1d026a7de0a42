"""Reading one record of the node's state directory (``<state_dir>/jobs/<job id>.json``) safely.

The records are written by :func:`workers.runtime.remember_job` and read by the reaper, which may
rebuild a job Redis lost from the directory a record names (:func:`workers.recovery.rebuild_lost_jobs`).
A record is opened once, without following a symlink and without waiting for a writer (a FIFO in
the directory used to block the reaper thread for ever in ``open()``), and is used only when the
opened file is a regular file owned by this user and at most :data:`MAX_RECORD_BYTES` long.

This module does not write records, and does not judge the directory a record names (the allowed
roots and the directory's own claim are checked in :mod:`workers.recovery`).
"""

from __future__ import annotations

import json
import os
import stat

from core.errors import JobError

#: A record is a few hundred bytes; anything much larger is not one of ours.
MAX_RECORD_BYTES = 64 * 1024


class BadRecord(JobError):
    """A state-directory entry that is not a record this node wrote (a FIFO, a link, another user's
    file, an oversized or non-JSON file)."""


def read_record(path, own: bool = True) -> dict:
    """The JSON object in the state record at ``path``; :class:`BadRecord` (saying why) for anything
    that is not a small regular file (of this user, unless ``own`` is false) holding one;
    ``FileNotFoundError`` if it is gone. Also used for the small JSON files of a job directory that
    the reaper reads before it trusts the directory (``own=False``: a submitter may be another user)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise BadRecord(f"{path}: cannot be opened as a plain file ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadRecord(f"{path}: not a regular file")
        if own and st.st_uid != os.geteuid():
            raise BadRecord(f"{path}: owned by uid {st.st_uid}, not by this worker's user ({os.geteuid()})")
        if st.st_size > MAX_RECORD_BYTES:
            raise BadRecord(f"{path}: {st.st_size} bytes, more than a record ({MAX_RECORD_BYTES})")
        chunks, left = [], MAX_RECORD_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_RECORD_BYTES:
        raise BadRecord(f"{path}: grew past {MAX_RECORD_BYTES} bytes while read")
    try:
        rec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadRecord(f"{path}: not JSON") from None
    if not isinstance(rec, dict):
        raise BadRecord(f"{path}: not a JSON object")
    return rec
