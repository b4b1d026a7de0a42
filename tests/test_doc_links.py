"""The documentation's pointers resolve: links and paths into docs/ and bench/ from docs/*.md and
README.md, and every `docs/NAME.md, "Section"` reference in the docs and the code names a section
that exists. (docs/journal/ is a dated record kept as written: not checked.)"""

from __future__ import annotations

import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
CODE_DIRS = ("cli.py", "core", "commands", "engines", "jobs", "workers", "bench", "tests", "docker")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.])((?:docs|bench)/[\w.*{},/-]*)")
SECTION_REF = re.compile(r"(?:docs/)?([A-Za-z_]+\.md),\s+\"([^\"]+)\"")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    """The headings of a Markdown file, outside code fences."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line.lstrip("#").strip())
    return out


def section_names(path: Path) -> list[str]:
    """What a reference may name: headings (without a "4. " number) and bold paragraph leads."""
    names = [re.sub(r"^\d+\.\s+", "", h) for h in headings(path)]
    names += re.findall(r"^\*\*([^*]+)\*\*", path.read_text(encoding="utf-8"), flags=re.M)
    return names


def braces(pattern: str) -> list[str]:
    """Expand shell braces ``a{1,2}b`` -> ``a1b``, ``a2b`` (nested sets one after another)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in braces(pattern[: m.start()] + alt + pattern[m.end():])]


def path_exists(rel: str) -> bool:
    rel = rel.rstrip(".,;:)")
    return any(glob.glob(str(ROOT / p)) for p in braces(rel))


def test_links_and_paths_in_the_docs_resolve():
    bad = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                bad.append(f"{doc.name}: link to a missing file: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in {slug(h) for h in headings(dest)}:
                bad.append(f"{doc.name}: link to a missing section: {target}")
        for rel in PATH.findall(text):
            if not path_exists(rel):
                bad.append(f"{doc.name}: path that does not exist: {rel}")
    assert not bad, "\n".join(bad)


def section_refs(path: Path):
    text = path.read_text(encoding="utf-8", errors="replace")
    # a reference may run over lines of a comment or docstring: join them
    text = re.sub(r"\s*\n\s*(?:#:?|\*|>)?\s*", " ", text)
    return SECTION_REF.findall(text)


def test_named_sections_of_the_docs_exist():
    files = list(DOCS)
    for d in CODE_DIRS:
        p = ROOT / d
        files += [p] if p.is_file() else [f for f in p.rglob("*") if f.suffix in {".py", ".md", ".sh", ".yaml", ".yml"}]
    bad = []
    for f in files:
        if f.resolve() == Path(__file__).resolve():
            continue
        for name, title in section_refs(f):
            doc = ROOT / "docs" / name if (ROOT / "docs" / name).exists() else ROOT / name
            if not doc.exists():
                continue  # not one of ours (a file name in prose)
            if not any(h.startswith(title) for h in section_names(doc)):
                bad.append(f"{f.relative_to(ROOT)}: {name} has no section {title!r}")
    assert not bad, "\n".join(bad)


def test_the_checks_can_fail(tmp_path):
    """The helpers see a missing path, a missing section and a reference over a comment's lines."""
    assert not path_exists("bench/results/no-such-file.json") and path_exists("bench/{gpu_throughput,quality}.py")
    assert slug("GPU: end-to-end (`cli.py run`)") == "gpu-end-to-end-clipy-run"
    f = tmp_path / "m.py"
    f.write_text('# see docs/PERFORMANCE.md, "Figures\n# behind the engine\'s defaults")\n', encoding="utf-8")
    assert section_refs(f) == [("PERFORMANCE.md", "Figures behind the engine's defaults")]
