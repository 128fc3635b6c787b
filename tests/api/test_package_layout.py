"""The Python package's shape, checked from its source (issue 33): modules import one
another without circles, each module has one job and stays readable (at most ~600
lines), and no module reaches into another module's private names."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "python" / "lenet"
MAX_LINES = 600


def _modules() -> dict:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


MODULES = _modules()


def _imports(name: str, f: Path) -> set:
    """The package's modules that `name` imports (compiled modules, _core and _cuda, are
    not nodes: they import nothing of the package)."""
    package = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
    deps = set()
    for node in ast.walk(ast.parse(f.read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" for a in node.names] + ([module] if node.module else [])
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        deps |= {t for t in targets if t in MODULES and t != name}
    return deps


GRAPH = {name: _imports(name, f) for name, f in MODULES.items()}


def test_the_import_graph_has_no_circle():
    def circle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in GRAPH[node]:
                if dep == start:
                    return path + [dep]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, path + [dep]))
        return None

    # A package imports its own children in its __init__: an edge from a child to its
    # parent package is then a circle through the __init__, which counts too.
    circles = [c for c in map(circle_from, GRAPH) if c]
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_the_graph_sees_the_imports():
    assert "lenet.images.prepare" in GRAPH["lenet.engine"] or "lenet.images" in GRAPH["lenet.engine"]
    assert "lenet.images.decode" in GRAPH["lenet.images.prepare"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_readable(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines (at most {MAX_LINES}: split it by job)"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_reaches_into_another_modules_private_names(name):
    """`other._name` on a module of the package, or `from .x import _name`: a private name
    used where it is not defined (the package's own compiled modules and Python's
    sunder names aside)."""
    text = MODULES[name].read_text()
    tree = ast.parse(text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module not in (None,):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and a.name not in ("_core", "_cuda"):
                    found.append(f"from {node.module} import {a.name}")
    modules = {m.rsplit(".", 1)[-1] for m in MODULES} - {"lenet"}
    for m in re.finditer(r"\b([a-z_]+)\.(_[a-z][a-z_0-9]*)\b", text):
        owner, attr = m.groups()
        if owner in modules and owner != name.rsplit(".", 1)[-1] and attr not in ("_core", "_cuda", "_native"):
            found.append(m.group(0))
    assert not found, f"{name}: " + ", ".join(sorted(set(found)))
