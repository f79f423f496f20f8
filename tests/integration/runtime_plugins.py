"""Resolve every plugin gpuprov's playbooks and roles name, as the installed gpuprov would run them.

Run with the Python of an environment that has gpuprov installed (``python runtime_plugins.py``); it needs only
what gpuprov's runtime install brings (ansible-core, ansible-runner, Jinja2, PyYAML) and prints one JSON
document::

    {"collection_dir": str, "checked": {"module": int, "filter": int, "test": int, "lookup": int},
     "unresolved": [{"playbook": str, "kind": "module"|"filter"|"test"|"lookup", "name": str, "file": str}],
     "syntax": {"<playbook>.yml": {"status": str, "rc": int, "error": str}}}

Each playbook is checked as Ansible runs it: the ``gpuprov.gpu`` collection on the collections path gpuprov gives
ansible-playbook, the roles the playbook names and their ``meta`` dependencies (transitively). Modules and actions are
resolved by ansible-core's own task parser (``ModuleArgsParser``), filters, tests and lookups (in task keywords,
``when``-style conditions and role templates) by its plugin loaders. Every playbook then runs
``--syntax-check`` through ansible-runner's API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes
import yaml

#: Task keywords whose value is a bare Jinja expression (no ``{{ }}``); ``that`` belongs to assert's arguments.
CONDITIONALS = ("when", "changed_when", "failed_when", "until", "that")
BLOCK_KEYS = ("block", "rescue", "always")
CHECKED_KINDS = ("module", "filter", "test", "lookup")


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _role_closure(roles_dir: Path, names: list[str]) -> list[Path]:
    """The role folders of ``names`` (``gpuprov.gpu.<role>`` or a short name) and of their meta dependencies,
    dependencies first."""
    seen: dict[str, Path] = {}

    def visit(name: str) -> None:
        name = name.removeprefix("gpuprov.gpu.")
        if name in seen:
            return
        role = roles_dir / name
        meta = role / "meta" / "main.yml"
        for dep in ((_yaml(meta) or {}).get("dependencies") or []) if meta.is_file() else []:
            visit(dep["role"] if isinstance(dep, dict) else dep)
        seen[name] = role

    for name in names:
        visit(name)
    return list(seen.values())


def _playbook_roles(playbook: Path) -> list[str]:
    names: list[str] = []
    for play in _yaml(playbook) or []:
        for entry in play.get("roles") or []:
            names.append(entry["role"] if isinstance(entry, dict) else entry)
        for task in _tasks(play.get("tasks") or []):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if isinstance(task.get(key), dict):
                    names.append(task[key]["name"])
    return names


def _tasks(tasks: list[Any]) -> Iterator[dict[str, Any]]:
    """Every task dict of a task list, blocks' own keywords included, recursively."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in BLOCK_KEYS:
            if isinstance(task.get(key), list):
                yield from _tasks(task[key])


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _jinja_names(env: jinja2.Environment, source: str) -> Iterator[tuple[str, str]]:
    """``(kind, name)`` for every filter, test and lookup a template string uses."""
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError:
        return  # not Jinja (e.g. a shell snippet with braces); Ansible's syntax check reports real errors
    for node in tree.find_all(jinja2.nodes.Filter):
        yield "filter", node.name
        # map('f', ...) names a filter; select/reject('t') and selectattr/rejectattr('attr', 't') name a test
        named = {"map": ("filter", 0), "select": ("test", 0), "reject": ("test", 0), "selectattr": ("test", 1),
                 "rejectattr": ("test", 1)}.get(node.name)
        if named and len(node.args) > named[1]:
            arg = node.args[named[1]]
            if isinstance(arg, jinja2.nodes.Const) and isinstance(arg.value, str):
                yield named[0], arg.value
    for test in tree.find_all(jinja2.nodes.Test):
        yield "test", test.name
    for call in tree.find_all(jinja2.nodes.Call):
        if isinstance(call.node, jinja2.nodes.Name) and call.node.name in ("lookup", "query", "q") and call.args:
            first = call.args[0]
            if isinstance(first, jinja2.nodes.Const) and isinstance(first.value, str):
                yield "lookup", first.value


def _task_names(env: jinja2.Environment, task: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for key, value in task.items():
        if key in BLOCK_KEYS:
            continue
        if key.startswith("with_"):
            yield "lookup", key.removeprefix("with_")
        for text in _strings(value):
            yield from _jinja_names(env, text)
        if key in CONDITIONALS:
            for text in _strings(value):
                yield from _jinja_names(env, "{{ " + text + " }}")
    for args in task.values():  # assert's `that` and debug's `var` sit in the module's arguments, bare
        for bare in ("that", "var"):
            if isinstance(args, dict) and bare in args:
                for text in _strings(args[bare]):
                    yield from _jinja_names(env, "{{ " + text + " }}")


def _yaml_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("**/*.yml"), *folder.glob("**/*.yaml")])


def _action_found(action: str) -> bool:
    """An action name ansible-core can run: a built-in task keyword, a module or an action plugin. (The task
    parser checks names only in the ``module: args`` form, not in ``action:``/``local_action:``.)"""
    from ansible.parsing.mod_args import BUILTIN_TASKS
    from ansible.plugins.loader import action_loader, module_loader

    if action in BUILTIN_TASKS:
        return True
    if module_loader.find_plugin_with_context(action).resolved:
        return True
    return bool(action_loader.find_plugin_with_context(action).resolved)


def check_playbook(collection_dir: Path, playbook: Path) -> dict[str, Any]:
    """Resolve every plugin of one playbook and its roles; returns ``{"checked": {...}, "unresolved": [...]}``."""
    from ansible.errors import AnsibleError
    from ansible.parsing.mod_args import ModuleArgsParser
    from ansible.plugins.loader import filter_loader, lookup_loader, test_loader

    roles = _role_closure(collection_dir / "roles", _playbook_roles(playbook))
    env = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
    builtin = {"filter": set(env.filters), "test": set(env.tests)}
    loaders = {"filter": filter_loader, "test": test_loader, "lookup": lookup_loader}
    checked = dict.fromkeys(CHECKED_KINDS, 0)
    unresolved: list[dict[str, str]] = []

    def resolve(kind: str, name: str, where: Path) -> None:
        checked[kind] += 1
        if name in builtin.get(kind, ()):
            return
        try:
            found = loaders[kind].get(name) is not None
        except (KeyError, AnsibleError, ImportError, ValueError):
            found = False
        if not found:
            unresolved.append({"playbook": playbook.name, "kind": kind, "name": name, "file": str(where)})

    def task_files() -> Iterator[tuple[Path, list[Any]]]:
        yield playbook, [t for play in _yaml(playbook) or [] for k in ("pre_tasks", "tasks", "post_tasks", "handlers")
                         for t in play.get(k) or []]
        for role in roles:
            for sub in ("tasks", "handlers"):
                for path in _yaml_files(role / sub):
                    yield path, _yaml(path) or []

    for path, tasks in task_files():
        for task in _tasks(tasks):
            if any(key in task for key in BLOCK_KEYS):
                action = None
            else:
                try:
                    action, _args, _delegate = ModuleArgsParser(task_ds=task).parse()
                except AnsibleError as exc:
                    checked["module"] += 1
                    unresolved.append({"playbook": playbook.name, "kind": "module", "name": str(exc).splitlines()[0],
                                       "file": str(path)})
                    action = None
                else:
                    checked["module"] += 1
                    if not _action_found(action):
                        unresolved.append({"playbook": playbook.name, "kind": "module", "name": action,
                                           "file": str(path)})
            for kind, name in _task_names(env, task):
                resolve(kind, name, path)
    for play in _yaml(playbook) or []:  # play-level vars
        for text in _strings(play.get("vars") or {}):
            for kind, name in _jinja_names(env, text):
                resolve(kind, name, playbook)
    for role in roles:
        for sub in ("vars", "defaults"):
            for path in _yaml_files(role / sub):
                for text in _strings(_yaml(path)):
                    for kind, name in _jinja_names(env, text):
                        resolve(kind, name, path)
        for path in sorted((role / "templates").glob("**/*.j2")):
            for kind, name in _jinja_names(env, path.read_text(encoding="utf-8")):
                resolve(kind, name, path)
    return {"checked": checked, "unresolved": unresolved}


def syntax_check(collections_path: Path, playbook: Path) -> dict[str, Any]:
    """``--syntax-check`` of one playbook through ansible-runner; ``{"status", "rc", "error"}``."""
    import ansible_runner

    with tempfile.TemporaryDirectory(prefix="gpuprov-syntax-") as private:
        (Path(private) / "inventory").mkdir()
        (Path(private) / "inventory" / "hosts").write_text("localhost ansible_connection=local\n")
        run = ansible_runner.run(
            private_data_dir=private, playbook=str(playbook),
            cmdline="--syntax-check", quiet=True, suppress_env_files=True,
            # this environment's ansible-playbook, whatever the caller's PATH holds
            envvars={"ANSIBLE_COLLECTIONS_PATH": str(collections_path), "ANSIBLE_NOCOLOR": "1",
                     "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
        )
        error = run.stdout.read()[-2000:] if run.rc else ""
        return {"status": run.status, "rc": run.rc, "error": error}


def main(argv: list[str]) -> int:
    """With a playbook name: check that one (plugin paths are process-wide, so each playbook gets a process of
    its own); without: every playbook, merged into one document."""
    from gpuprov.resources import collection_dir, collections_path

    if argv:
        from ansible.plugins.loader import init_plugin_loader

        init_plugin_loader([str(collections_path())])
        playbook = collection_dir() / "playbooks" / argv[0]
        result = check_playbook(collection_dir(), playbook)
        result["syntax"] = {playbook.name: syntax_check(collections_path(), playbook)}
        json.dump(result, sys.stdout)
        return 0
    merged: dict[str, Any] = {"collection_dir": str(collection_dir()), "checked": dict.fromkeys(CHECKED_KINDS, 0),
                              "unresolved": [], "syntax": {}}
    for playbook in sorted((collection_dir() / "playbooks").glob("*.yml")):
        proc = subprocess.run([sys.executable, __file__, playbook.name], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{playbook.name}: checker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}", file=sys.stderr)
            return 1
        result = json.loads(proc.stdout)
        for kind, count in result["checked"].items():
            merged["checked"][kind] += count
        merged["unresolved"] += result["unresolved"]
        merged["syntax"].update(result["syntax"])
    json.dump(merged, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
