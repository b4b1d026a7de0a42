"""Atomic file writes and safe output paths.

Every output is written under a temporary name in its final directory and
renamed into place, so a crash never leaves a file that looks complete and is
not. Output names are built from slugs, and :func:`inside` refuses any path
that would leave the output directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import unicodedata
import uuid
from pathlib import Path
from typing import Iterator

from jobs.errors import UnsafePathError

TMP_MARK = ".tmp-"


def sha256_file(path) -> str:
    """Hex SHA-256 of a file's contents, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{TMP_MARK}{uuid.uuid4().hex[:12]}-{final.name}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(final: Path, obj) -> None:
    with atomic_path(final) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True), encoding="utf-8")


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def slug(text: str, fallback: str, max_len: int = 60) -> str:
    """ASCII slug of ``text`` (letters, digits, dashes) or ``fallback``; never contains a path separator."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    s = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:max_len].strip("-")
    return s or fallback


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, refusing anything that resolves outside ``root``."""
    root = Path(root).resolve()
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"output path {relative!r} would escape the output directory {root}; refusing to write it")
    return target
