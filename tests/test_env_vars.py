"""Every ``BOOKTTS_*`` environment variable the product reads is in docs/operations.md's list."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"BOOKTTS_[A-Z0-9_]*[A-Z0-9]")


def names_in_code() -> set[str]:
    """Names in the product's source; a name followed by ``_*`` is a prefix in prose, not a variable."""
    files = [ROOT / "cli.py"] + [p for d in ("core", "jobs", "engines", "workers", "commands")
                                 for p in (ROOT / d).rglob("*.py")]
    out = set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        out |= {m.group() for m in NAME.finditer(text) if text[m.end():m.end() + 2] != "_*"}
    return out


def names_in_docs() -> set[str]:
    """The names in the first column of section 8's table."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("## 8. Every environment variable"):]
    return {tok for row in section.splitlines() if row.startswith("| `BOOKTTS_")
            for tok in re.findall(r"`(BOOKTTS_[A-Z0-9_]+)`", row.split("|")[1])}


def test_names_in_docs_are_parsed():
    docs = names_in_docs()
    assert {"BOOKTTS_TORCH_WARMUP", "BOOKTTS_FAKE_DELAY_S", "BOOKTTS_STATE_DIR"} <= docs


def test_every_variable_is_listed():
    missing = sorted(names_in_code() - names_in_docs())
    assert not missing, f"BOOKTTS_* variables read in the code but not in docs/operations.md section 8: {missing}"
