"""The roles' task files as Ansible links them (docs/design.md, "Role task files"): an unconditional file is imported,
the tasks a converged host skips sit behind one conditional `include_tasks`. Moving tasks behind such an include
changes what the rest of the role sees, so these checks read every role's YAML:

- every imported or included file exists, and every task file is reached from an entry point;
- a variable registered only in files that a conditional include may leave out is undefined, not "skipped", when
  they do not run: a file that runs without them, or that includes them, reads it through ``| default(...)``, and
  never as ``| default(...) is skipped`` (a default mapping is never skipped);
- `include_tasks` passes the play's tags to its tasks but not its own, so a task tag (``never``, ``drift``, ...)
  inside a dynamically included file selects nothing: such tags belong on the include's ``apply``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
INCLUDE = "ansible.builtin.include_tasks"
IMPORT = "ansible.builtin.import_tasks"
_TASKS_FROM = re.compile(r"tasks_from[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9_.]+)")
_IS_TEST = re.compile(r"(?P<var>\b__[a-z0-9_]+)(?P<default>\s*\|\s*default\([^)]*\))?"
                      r"\s+is\s+(?:not\s+)?(?P<test>[a-z_]+)")


@dataclass
class Edge:
    parent: str
    child: str
    dynamic: bool  # include_tasks, not import_tasks
    conditional: bool  # a when (its own or an enclosing block's), a loop, or a rescue section


@dataclass
class Role:
    files: dict[str, str] = field(default_factory=dict)  # file name -> text
    edges: list[Edge] = field(default_factory=list)
    registers: dict[str, set[str]] = field(default_factory=dict)  # variable -> files that register or set it
    tagged: list[tuple[str, str]] = field(default_factory=list)  # (file, task name) of tasks with their own tags


def _walk(role: Role, name: str, tasks: list[dict[str, Any]], conditional: bool) -> None:
    for task in tasks or []:
        cond = conditional or "when" in task or "loop" in task or any(k.startswith("with_") for k in task)
        for kind in (INCLUDE, IMPORT):
            if kind in task:
                target = task[kind] if isinstance(task[kind], str) else task[kind]["file"]
                role.edges.append(Edge(name, target, kind == INCLUDE, cond))
        if "register" in task:
            role.registers.setdefault(task["register"], set()).add(name)
        for key in task.get("ansible.builtin.set_fact") or {}:
            role.registers.setdefault(key, set()).add(name)
        if task.get("tags"):
            role.tagged.append((name, str(task.get("name"))))
        _walk(role, name, task.get("block", []), cond)
        _walk(role, name, task.get("rescue", []), True)
        _walk(role, name, task.get("always", []), cond)


def load_role(tasks_dir: Path) -> Role:
    role = Role()
    for path in sorted(tasks_dir.glob("*.yml")):
        role.files[path.name] = path.read_text(encoding="utf-8")
        _walk(role, path.name, yaml.safe_load(role.files[path.name]) or [], False)
    return role


def _closure(start: set[str], step: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        for nxt in step.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def always_run(role: Role, roots: set[str]) -> set[str]:
    """The files that run whenever an entry point runs: reached through imports and unconditional includes."""
    always = set(roots)
    changed = True
    while changed:
        changed = False
        for edge in role.edges:
            if edge.parent in always and edge.child not in always and not (edge.dynamic and edge.conditional):
                always.add(edge.child)
                changed = True
    return always


def undefined_reads(role: Role, roots: set[str]) -> list[str]:
    """Reads of a registered variable that is undefined where the files registering it did not run."""
    children: dict[str, set[str]] = {}
    parents: dict[str, set[str]] = {}
    for edge in role.edges:
        children.setdefault(edge.parent, set()).add(edge.child)
        parents.setdefault(edge.child, set()).add(edge.parent)
    always = always_run(role, roots)
    problems = []
    for name, text in role.files.items():
        for match in _IS_TEST.finditer(text):
            var, default, test = match["var"], match["default"], match["test"]
            if default and test == "skipped":
                problems.append(f"{name}: {match[0]!r}: a default is never skipped; test the variable's own value")
                continue
            definers = role.registers.get(var, set())
            if default or not definers or definers & always:
                continue
            below = definers | _closure(definers, children)
            if name in below:
                continue
            if name in always or name in _closure(definers, parents):
                problems.append(f"{name}: {match[0]!r}: {var} is set only in {', '.join(sorted(definers))}, which a "
                                f"conditional include may leave out; read it as {var} | default(...)")
    return problems


def dynamic_tags(role: Role, roots: set[str]) -> list[str]:
    """Tasks with their own tags in files reached only through include_tasks."""
    static: dict[str, set[str]] = {}
    for edge in role.edges:
        if not edge.dynamic:
            static.setdefault(edge.parent, set()).add(edge.child)
    statically_loaded = roots | _closure(roots, static)
    return [f"{name}: {task}" for name, task in role.tagged if name not in statically_loaded]


def _entry_points() -> dict[str, set[str]]:
    """Each role's entry points: meta/argument_specs.yml's, and every tasks_from the collection and gpuprov name."""
    roots: dict[str, set[str]] = {}
    for spec in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        names = yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"]
        roots[spec.parents[1].name] = {f"{n}.yml" for n in names}
    sources = [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/**/*.yml"), *ROOT.glob("gpuprov/**/*.py")]
    found = {m.group(1) for path in sources for m in _TASKS_FROM.finditer(path.read_text(encoding="utf-8"))}
    for role, names in roots.items():
        tasks = ROOT / "roles" / role / "tasks"
        names |= {f for f in (n if n.endswith(".yml") else f"{n}.yml" for n in found) if (tasks / f).is_file()}
    return roots


ROLES = sorted(p.parent.name for p in ROOT.glob("roles/*/tasks"))
ENTRY_POINTS = _entry_points()


@pytest.mark.parametrize("name", ROLES)
def test_every_task_file_is_linked_and_exists(name: str) -> None:
    role = load_role(ROOT / "roles" / name / "tasks")
    missing = sorted({f"{e.parent} -> {e.child}" for e in role.edges if e.child not in role.files})
    assert not missing, f"{name}: included or imported files that do not exist: {missing}"
    children: dict[str, set[str]] = {}
    for edge in role.edges:
        children.setdefault(edge.parent, set()).add(edge.child)
    roots = ENTRY_POINTS[name]
    unreached = sorted(set(role.files) - roots - _closure(roots, children))
    assert not unreached, f"{name}: task files no entry point reaches: {unreached}"


@pytest.mark.parametrize("name", ROLES)
def test_registered_variables_are_read_where_they_are_defined(name: str) -> None:
    role = load_role(ROOT / "roles" / name / "tasks")
    assert undefined_reads(role, ENTRY_POINTS[name]) == []


@pytest.mark.parametrize("name", ROLES)
def test_no_task_tag_hides_behind_a_dynamic_include(name: str) -> None:
    role = load_role(ROOT / "roles" / name / "tasks")
    assert dynamic_tags(role, ENTRY_POINTS[name]) == []


def _write(tasks: Path, files: dict[str, str]) -> Role:
    tasks.mkdir(parents=True)
    for file_name, text in files.items():
        (tasks / file_name).write_text(text, encoding="utf-8")
    return load_role(tasks)


CHILD = "- name: c\n  ansible.builtin.command: 'true'\n  register: __r_done\n"


@pytest.mark.parametrize(("main", "expected"), [
    # the includer reads the child's register: undefined when the include is skipped
    ("- ansible.builtin.include_tasks: child.yml\n  when: x\n"
     "- ansible.builtin.debug: {msg: hi}\n  when: __r_done is changed\n", ["__r_done is changed"]),
    # a default mapping is never skipped
    ("- ansible.builtin.include_tasks: child.yml\n  when: x\n"
     "- ansible.builtin.debug: {msg: hi}\n  when: __r_done | default({}) is skipped\n",
     ["__r_done | default({}) is skipped"]),
    # read through a default, or the child imported (its task then runs, skipped or not): fine
    ("- ansible.builtin.include_tasks: child.yml\n  when: x\n"
     "- ansible.builtin.debug: {msg: hi}\n  when: __r_done | default({}) is changed\n", []),
    ("- ansible.builtin.import_tasks: child.yml\n  when: x\n"
     "- ansible.builtin.debug: {msg: hi}\n  when: __r_done is skipped\n", []),
])
def test_the_register_check_finds_undefined_reads(tmp_path: Path, main: str, expected: list[str]) -> None:
    role = _write(tmp_path / "tasks", {"main.yml": main, "child.yml": CHILD})
    problems = undefined_reads(role, {"main.yml"})
    assert [p for p in problems if not any(e in p for e in expected)] == []
    assert all(any(e in p for p in problems) for e in expected)


def test_the_tag_check_finds_a_tag_behind_an_include(tmp_path: Path) -> None:
    tagged = "- name: t\n  ansible.builtin.debug: {msg: hi}\n  tags: [drift]\n"
    role = _write(tmp_path / "tasks", {"main.yml": "- ansible.builtin.include_tasks: a.yml\n"
                                                   "- ansible.builtin.import_tasks: b.yml\n",
                                       "a.yml": tagged, "b.yml": tagged})
    assert dynamic_tags(role, {"main.yml"}) == ["a.yml: t"]
