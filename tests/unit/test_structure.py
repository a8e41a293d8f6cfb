"""The shape of the code: no import cycles, the platform decided in ``chatmem.runtime``
only, and ``js``/``pyodide`` imported by the page runtime only. Modules are split by
concept, never by size: there is no line cap."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = ROOT / "py"
APP = ROOT / "web" / "app"


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def imported(
    name: str, path: Path, is_pkg: bool, known: set[str] | dict[str, object] = frozenset()
) -> list[tuple[str, int]]:
    """Every module ``name`` imports (at any level, TYPE_CHECKING included), with its line."""
    pkg = name if is_pkg else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from . import x" names the submodule x when there is one, else a name in mod
            found += [
                (f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod, node.lineno) for a in node.names
            ]
    return found


def graph(root: Path, package: str) -> dict[str, set[str]]:
    mods = modules(root, package)
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        g[m] = {t for t, _ in imported(m, path, is_pkg, mods) if t in mods and t != m}
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize(("root", "package"), [(PY, "chatmem"), (APP, "chatmem_app")])
def test_no_import_cycles(root: Path, package: str) -> None:
    """Dependencies point one way: no module imports (even lazily) one that imports it back."""
    assert cycles(graph(root, package)) == []


def test_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_page_runtime_touches_the_browser() -> None:
    """``js``/``pyodide`` are imported by the ``chatmem.runtime.page`` package only; the platform is
    checked (``sys.platform``, ``emscripten``, ``IN_BROWSER``) in ``chatmem.runtime`` only."""
    bad = []
    for name, (path, is_pkg) in modules(PY, "chatmem").items():
        if name != "chatmem.runtime.page" and not name.startswith("chatmem.runtime.page."):
            bad += [
                f"{name}:{line} imports {t}"
                for t, line in imported(name, path, is_pkg)
                if t.split(".")[0] in ("js", "pyodide", "pyodide_js")
            ]
        if name.startswith("chatmem.runtime"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "platform"
                and getattr(node.value, "id", "") == "sys"
            ):
                bad.append(f"{name}:{node.lineno} checks sys.platform")
            if isinstance(node, ast.Constant) and node.value == "emscripten":
                bad.append(f"{name}:{node.lineno} checks emscripten")
            if isinstance(node, ast.Name) and node.id == "IN_BROWSER" and not isinstance(node.ctx, ast.Store):
                if name not in ("chatmem", "chatmem.memory"):  # re-exported, not tested
                    bad.append(f"{name}:{node.lineno} branches on IN_BROWSER")
    assert bad == []


def test_the_layer_contract_names_every_top_level_part() -> None:
    """``.importlinter`` (checked by ``build.py check``) places each part of the package in
    its layers, so a part that is added or moved is placed in the layers too."""
    import configparser
    import re

    contract = configparser.ConfigParser()
    contract.read(ROOT / ".importlinter")
    layers = contract["importlinter:contract:layers"]["layers"]
    listed = set(re.split(r"[\s|:]+", layers)) - {""}
    parts = {
        "chatmem." + (p.stem if p.suffix == ".py" else p.name)
        for p in (PY / "chatmem").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert listed == parts, (sorted(parts - listed), sorted(listed - parts))
