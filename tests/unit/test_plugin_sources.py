"""The collection's Python sources as files: each parses as Python 3.8 (modules and module_utils run on Ubuntu
20.04 hosts), stays under the size limit, and module_utils import each other only in the absolute
``ansible_collections.gpuprov.gpu.plugins.module_utils.X`` form that AnsiballZ follows, without a cycle. What the
code imports is there where it runs: on the controller, gpuprov's runtime dependencies (not the test extras this
environment also has); on a host, the standard library, anything else only behind ``except ImportError``."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from tests.import_graph import assert_acyclic

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted((ROOT / "plugins").glob("*/*.py"))
MODULE_UTILS = "ansible_collections.gpuprov.gpu.plugins.module_utils"
MAX_LINES = 450


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PLUGINS, ids=_name)
def test_python38_syntax_and_size(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    ast.parse(source, filename=str(path), feature_version=(3, 8))
    assert len(source.splitlines()) <= MAX_LINES, f"{_name(path)} has more than {MAX_LINES} lines: split it"


def _module_utils_imports(path: Path) -> set[str]:
    """The module_utils files that ``path`` imports; relative imports fail the test (AnsiballZ misses them)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        assert not node.level, f"{_name(path)}: relative import of {node.module}; use {MODULE_UTILS}.X"
        module = node.module or ""
        if module == MODULE_UTILS:
            found.update(alias.name for alias in node.names)
        elif module.startswith(MODULE_UTILS + "."):
            found.add(module[len(MODULE_UTILS) + 1 :].split(".")[0])
    return found


def test_module_utils_imports_resolve_without_cycles() -> None:
    files = {path.stem: path for path in PLUGINS if path.parent.name == "module_utils"}
    graph = {name: _module_utils_imports(path) for name, path in files.items()}
    for path in PLUGINS:
        missing = _module_utils_imports(path) - set(files)
        assert not missing, f"{_name(path)} imports module_utils that do not exist: {sorted(missing)}"
    assert_acyclic(graph)


@pytest.mark.parametrize("path", sorted((ROOT / "plugins" / "modules").glob("*.py")), ids=_name)
def test_module_documentation_is_yaml_ansible_doc_reads(path: Path) -> None:
    """DOCUMENTATION, EXAMPLES and RETURN parse as YAML (a plain scalar holding ``: `` does not; ansible-doc and
    the generated module docs then fail), and DOCUMENTATION names the module and describes every option."""
    docs = {node.targets[0].id: node.value.value for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")}  # fmt: skip
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{_name(path)}: {sorted(docs)}"
    parsed = {key: yaml.safe_load(text) for key, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == path.stem
    for option, spec in (parsed["DOCUMENTATION"].get("options") or {}).items():
        assert spec.get("description"), f"{_name(path)}: option {option} has no description"


def _filter_names() -> dict[str, Path]:
    """Every filter the collection's filter plugins return from ``FilterModule.filters``, by its file."""
    import importlib

    found = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.gpuprov.gpu.plugins.filter.{path.stem}")
        found.update(dict.fromkeys(module.FilterModule().filters(), path))
    return found


@pytest.mark.parametrize("name", sorted(_filter_names()))
def test_every_filter_is_documented(name: str) -> None:
    """ansible-doc reads a filter's documentation from ``plugins/filter/<filter>.yml``; it names the filter and
    describes its input, and its example uses the filter by its full name."""
    path = ROOT / "plugins" / "filter" / f"{name}.yml"
    assert path.is_file(), f"{name}: no {path.relative_to(ROOT)}"
    docs = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert docs["DOCUMENTATION"]["name"] == name
    assert docs["DOCUMENTATION"]["options"]["_input"]["description"]
    assert f"gpuprov.gpu.{name}" in docs["EXAMPLES"]
    assert docs["RETURN"]["_value"]["type"]


#: The collection's code that runs in the controller's Python (gpuprov's runtime install), and that AnsiballZ ships
#: to the hosts (their Python 3.8 and later: the standard library, plus what a module probes for and reports).
CONTROLLER_DIRS = ("action", "filter", "plugin_utils")
HOST_DIRS = ("modules", "module_utils")
ALWAYS_THERE = {"__future__", "ansible", "ansible_collections"}


def _dist(name: str) -> str:
    """A distribution name in PEP 503's normal form."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, whether an ``except ImportError`` guards it) for each absolute import of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            "ImportError" in ast.unparse(h.type) or "ModuleNotFoundError" in ast.unparse(h.type)
            for h in node.handlers if h.type is not None
        ):
            guarded.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], id(node) in guarded) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module.split(".")[0], id(node) in guarded))
    return found


def _sources(dirs: tuple[str, ...]) -> list[Path]:
    return [path for path in PLUGINS if path.parent.name in dirs]


@pytest.mark.parametrize("path", _sources(CONTROLLER_DIRS), ids=_name)
def test_controller_plugins_import_only_the_runtime_dependencies(path: Path) -> None:
    """``pip install gpuprov`` (no extras) is what runs the action, filter and plugin_utils code."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {_dist(re.match(r"[A-Za-z0-9._-]+", req).group(0)) for req in project["dependencies"]}  # type: ignore[union-attr]
    by_module = importlib.metadata.packages_distributions()
    for top, _ in _imports(path):
        if top in ALWAYS_THERE or top in sys.stdlib_module_names:
            continue
        dists = {_dist(d) for d in by_module.get(top, [])}
        assert dists & runtime, f"{_name(path)} imports {top} ({sorted(dists)}), not a runtime dependency of gpuprov"


@pytest.mark.parametrize("path", _sources(HOST_DIRS), ids=_name)
def test_host_code_imports_the_standard_library_or_guards_the_import(path: Path) -> None:
    """python3-apt, python3-tomlkit or the pynvml.py an action plugin ships may be missing on a host: a module
    imports them behind ``except ImportError`` and reports what is missing."""
    for top, guarded in _imports(path):
        assert guarded or top in ALWAYS_THERE or top in sys.stdlib_module_names, (
            f"{_name(path)} imports {top} unguarded: hosts have the standard library only")
