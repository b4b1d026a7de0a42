"""The layers of docs/DESIGN.md, checked on the source: no import cycle between modules, and
``core`` imports no other layer (every layer may import it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "jobs", "engines", "workers", "commands")


def _modules() -> dict[str, Path]:
    mods = {"cli": ROOT / "cli.py"}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in the file, lazy imports included)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in mods]
                if len(targets) < len(subs):
                    targets.append(base)
            for t in targets:
                while t and t not in mods:  # `import jobs.pipeline.x` -> the longest project module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, f"import cycles: {found}"


def test_core_imports_no_other_layer():
    graph = import_graph()
    bad = {m: sorted(t for t in ts if t.split(".")[0] != "core")
           for m, ts in graph.items() if m.split(".")[0] == "core"}
    assert not {m: t for m, t in bad.items() if t}


def test_engines_import_no_jobs():
    """The engines see no text: offline tools (engines/tools/) take phoneme ids from their caller."""
    graph = import_graph()
    bad = {m: sorted(t for t in ts if t.split(".")[0] == "jobs")
           for m, ts in graph.items() if m.split(".")[0] == "engines"}
    assert not {m: t for m, t in bad.items() if t}


def test_engines_know_no_commands_or_workers():
    graph = import_graph()
    bad = {m: sorted(t for t in ts if t.split(".")[0] in ("commands", "workers", "cli"))
           for m, ts in graph.items() if m.split(".")[0] == "engines"}
    assert not {m: t for m, t in bad.items() if t}
