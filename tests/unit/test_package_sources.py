"""The gpuprov package's Python sources as files: each stays under the size limit (split by concern past it),
and no module imports another that imports it back, directly or through others (``TYPE_CHECKING`` imports
count: a cycle that only type hints need is still a part that cannot be read alone)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import assert_acyclic

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "gpuprov").rglob("*.py"))
MAX_LINES = 450


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(path): path for path in SOURCES}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_size(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (limit {MAX_LINES}): split it by concern"


def _imports(name: str, path: Path) -> set[str]:
    """The gpuprov modules ``name`` imports (``from gpuprov.x import y`` counts ``gpuprov.x.y`` when that is a
    module, else ``gpuprov.x``); the package's own ``__init__`` re-exports are not edges of their modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


def test_no_import_cycle_between_modules() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    # a package's __init__ importing its own submodules is its face, not a dependency of theirs on each other
    for name, path in MODULES.items():
        if path.name == "__init__.py":
            graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    assert_acyclic(graph)


#: The lab (containers, mock NVML, stand-in repositories) is a test double of a GPU fleet; only the
#: ``gpuprov lab`` command reaches into it, and only when it runs (the Docker SDK is the lab extra's).
LAB = "gpuprov.lab"
LAB_COMMAND = "gpuprov.cli.lab"


def test_no_runtime_module_imports_the_lab() -> None:
    runtime = {name: path for name, path in MODULES.items() if name != LAB and not name.startswith(LAB + ".")}
    reaching = {name: sorted(m for m in _imports(name, path) if m == LAB or m.startswith(LAB + "."))
                for name, path in runtime.items() if name != LAB_COMMAND}
    assert {name: found for name, found in reaching.items() if found} == {}


def test_only_the_lab_imports_the_docker_sdk() -> None:
    importing = []
    for name, path in MODULES.items():
        if name == LAB or name.startswith(LAB + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            importing += [name for n in names if n == "docker" or n.startswith("docker.")]
    assert importing == []
