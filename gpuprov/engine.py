"""``gpuprov apply``/``check`` from fleet file to exit code: validate, render, run, account.

Nothing reaches a host before the whole fleet file has validated (:func:`gpuprov.fleet.load_fleet`
raises first), the ``--limit`` pattern matches at least one host, and every ``--role`` exists.
"""

from __future__ import annotations

import difflib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED, ConfigError
from gpuprov.fleet import Fleet, load_fleet
from gpuprov.fleet.environment import check_env_refs
from gpuprov.hostplay import TaskResults, check_limit, write_play
from gpuprov.recap import (
    ProgressPrinter,
    findings_table,
    needs_table,
    recap_table,
    retry_command,
    summary,
    write_summary,
)
from gpuprov.render import render_inventory
from gpuprov.resources import playbooks_dir, roles_dir, state_dir
from gpuprov.roles import list_roles, role_playbook
from gpuprov.rolevars import with_role_variables
from gpuprov.runner import RunRequest, RunResult, exit_code, new_run_dir, parse_extravars, run_playbook
from gpuprov.workerdist import build_worker_wheel

log = logging.getLogger(__name__)


@dataclass
class ApplyOptions:
    """Options of ``gpuprov apply`` (and ``check``, which sets ``check`` and ``diff``).

    ``argv`` is the command line after the program name, used to print the retry command; ``playbook`` names
    one of gpuprov's other playbooks (``upgrade``) to run instead of the roles' plays.
    """

    fleet: Path
    roles: list[str] = field(default_factory=list)
    tags: str | None = None
    skip_tags: str | None = None
    limit: str | None = None
    check: bool = False
    diff: bool = False
    extravars: list[str] = field(default_factory=list)
    forks: int = 10
    verbosity: int = 0
    json_path: Path | None = None
    argv: list[str] = field(default_factory=list)
    playbook: str | None = None


def _select_playbook(roles: list[str], run_dir: Path) -> tuple[Path, str]:
    """Return (playbook path, label): site.yml, one role's playbook, or a generated selection in site order."""
    if not roles:
        return playbooks_dir() / "site.yml", "site"
    paths = {name: role_playbook(name) for name in roles}  # raises ConfigError on an unknown role
    if len(paths) == 1:
        name = next(iter(paths))
        return paths[name], name
    ordered = [r.name for r in list_roles() if r.name in paths]
    selection = [{"name": f"Import {name}", "ansible.builtin.import_playbook": str(paths[name])} for name in ordered]
    path = run_dir / "project" / "selection.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(selection, sort_keys=False), encoding="utf-8")
    return path, "+".join(ordered)


#: Tags every play carries or Ansible defines.
_COMMON_TAGS = frozenset({"gpuprov", "all", "always", "tagged", "untagged"})


def _task_tags(role: str) -> set[str]:
    """The tags ``role``'s tasks set (``never``, Molecule skip tags), read from its task files."""
    tags: set[str] = set()
    for path in (roles_dir() / role / "tasks").glob("*.yml"):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith("tags:") and "[" in stripped:
                tags.update(t.strip(" '\"") for t in stripped.split("[", 1)[1].rstrip("]").split(","))
            elif stripped.startswith("- ") and stripped[2:].strip().startswith("molecule-"):
                tags.add(stripped[2:].strip())
    return {t for t in tags if t}


def known_tags(roles: list[str] | None = None) -> set[str]:
    """Tags a run of ``roles`` (default: every role, the site) can select: the roles' names (play-level
    tags), ``gpuprov``, Ansible's special tags and the tags the roles' tasks set."""
    names = roles or [r.name for r in list_roles()]
    # `never` is Ansible's too, but it selects something only where a task carries it
    special = set(_COMMON_TAGS) | (set() if roles else {"never"})
    return special | set(names) | {tag for name in names for tag in _task_tags(name)}


def check_tags(value: str | None, option: str, roles: list[str] | None = None) -> None:
    """Reject a tag no play or task carries (Ansible would silently run nothing on the hosts), and ``--tags``
    that select no task of the roles this run applies (``--role nouveau --tags cuda``).

    Raises:
        ConfigError: naming the unknown tag and a close match, or the tags of the run's roles.
    """
    if not value:
        return
    everywhere, here = known_tags(), known_tags(roles)
    chosen = [t.strip() for t in value.split(",") if t.strip()]
    for tag in chosen:
        if tag not in everywhere:
            close = difflib.get_close_matches(tag, sorted(everywhere), n=1)
            hint = (f" - did you mean '{close[0]}'?" if close
                    else f" - use a role name ({', '.join(sorted(everywhere))})")
            raise ConfigError(f"{option} {tag}: no play or task has this tag{hint}")
    if option == "--tags" and roles and not set(chosen) & here:
        raise ConfigError(f"{option} {value}: selects no task of {', '.join(roles)} - the tags of this run: "
                          f"{', '.join(sorted(here))}")


def check_output_path(path: Path, option: str) -> None:
    """The summary path must be writable before the run starts.

    Raises:
        ConfigError: its directory does not exist or is not writable, or it is a directory.
    """
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a directory - give a file path")
    parent = path.parent if str(path.parent) else Path()
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ConfigError(f"{option} {path}: {parent} is not a writable directory - choose another path")


#: the image_workers role's variable for the controller's worker wheel (gpuprov.workerdist)
WORKER_WHEEL_VAR = "image_workers_wheel"


def _worker_wheel(fleet: Fleet, extravars: dict[str, str], run_dir: Path) -> None:
    """Set :data:`WORKER_WHEEL_VAR` in ``extravars`` to this controller's worker wheel, built into ``run_dir``, when
    a host enables image workers and ``-e`` did not name one; a named one must be an existing absolute file.

    Raises:
        ConfigError: ``-e image_workers_wheel=PATH`` names no file, or a relative path (exit 2).
    """
    given = extravars.get(WORKER_WHEEL_VAR)
    if given:
        if not Path(given).is_absolute() or not Path(given).is_file():
            raise ConfigError(f"-e {WORKER_WHEEL_VAR}={given}: not an existing wheel file given by its absolute path - "
                              "name the .whl with its full path, or leave the option out to use this gpuprov's")
        return
    if given is None and any(h.settings["image_workers"]["enabled"] for h in fleet.hosts.values()):
        # the image_workers role installs this controller's worker distribution on the hosts
        extravars[WORKER_WHEEL_VAR] = str(build_worker_wheel(run_dir.resolve() / "worker"))


def execute(options: ApplyOptions, console: Console, then: list[dict[str, Any]] | None = None,
            results: TaskResults | None = None) -> int:
    """Validate, render and run; print progress and the recap; return the exit code. ``then``: plays to run
    after the selected ones in the same run (one connection per host, one ansible-runner start), whose task
    results go to ``results`` with every other task's (``gpuprov check --json`` reads its drift probe so).

    Returns 0 on success (``--check``: no drift), 1 on drift (``--check`` only), 3 when any host failed
    or was unreachable (the retry command is printed).

    Raises:
        FleetValidationError: the fleet file is invalid (nothing was run).
        ConfigError: an unknown ``--role``, a ``--limit`` matching no host, a bad ``-e``.
    """
    code, result, _fleet = run_fleet(options, console, then, results)
    _explain(result, code, options, console)
    return code


def check_options(options: ApplyOptions) -> tuple[Fleet, dict[str, str]]:
    """The checks of ``options`` that need no host: the fleet file (with the files it names), ``-e``, ``--forks``,
    the roles, every ``{env: NAME}`` secret set, ``--tags``/``--skip-tags`` and the ``--json`` path. Returns the
    validated fleet and the extra variables (with the role variables that ``-e``'s fleet variables map onto).

    Raises:
        FleetValidationError / ConfigError: the first bad input, naming the field or option. Exit 2.
    """
    fleet = load_fleet(options.fleet, check_files=True)
    # -e may name fleet variables (gpuprov_*): the role variables they map onto go with them
    extravars = with_role_variables(parse_extravars(options.extravars))
    if options.forks < 1:
        raise ConfigError(f"--forks {options.forks}: must be at least 1")
    for name in options.roles:
        role_playbook(name)
    check_env_refs(fleet)
    check_tags(options.tags, "--tags", options.roles)
    check_tags(options.skip_tags, "--skip-tags")
    if options.json_path is not None:
        check_output_path(options.json_path, "--json")
    return fleet, extravars


def run_fleet(options: ApplyOptions, console: Console, then: list[dict[str, Any]] | None = None,
              results: TaskResults | None = None) -> tuple[int, RunResult, Fleet]:
    """What :func:`execute` does short of explaining failures: validate, render, run, print the recap and
    write the summary; returns the exit code, the run's result and the validated fleet. Raises as
    :func:`execute`."""
    fleet, extravars = check_options(options)
    run_dir = new_run_dir(state_dir(), options.playbook or "-".join(options.roles) or "site")
    inventory = render_inventory(fleet, run_dir / "inventory")
    try:
        check_limit(inventory, options.limit)
        _worker_wheel(fleet, extravars, run_dir)
    except ConfigError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: leave no run record behind
        raise
    if options.playbook:
        playbook, label = playbooks_dir() / f"{options.playbook}.yml", options.playbook
    else:
        playbook, label = _select_playbook(options.roles, run_dir)
    if then:
        playbook = write_play(run_dir, "run", [{"name": f"Import {label}",
                                                "ansible.builtin.import_playbook": str(playbook)}, *then])
    request = RunRequest(
        inventory=inventory, playbook=playbook, run_dir=run_dir,
        check=options.check, diff=options.diff, tags=options.tags, skip_tags=options.skip_tags,
        limit=options.limit, extravars=extravars, forks=options.forks, verbosity=options.verbosity,
    )
    mode = "check" if options.check else "apply"
    for warning in fleet.warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False)
    if options.playbook:
        mode = f"{options.playbook} --check" if options.check else options.playbook
        console.print(f"gpuprov {mode} on {options.fleet} (run record: {run_dir})")
    else:
        console.print(f"gpuprov {mode}: {label} on {options.fleet} (run record: {run_dir})")
    progress = ProgressPrinter(console)

    def on_event(event: dict[str, Any]) -> None:
        progress(event)
        if results is not None:
            results(event)

    result = run_playbook(request, on_event=on_event)
    code = exit_code(result, options.check)
    console.print(recap_table(result, options.check))
    for table in (findings_table(result), needs_table(result)):
        if table is not None:
            console.print(table)
    data = summary(result, fleet=options.fleet, playbook=label, check=options.check, exit_code=code)
    write_summary(run_dir / "summary.json", data)
    if options.json_path is not None:
        write_summary(options.json_path, data)
    return code, result, fleet


def _explain(result: RunResult, code: int, options: ApplyOptions, console: Console) -> None:
    if code == EXIT_HOSTS_FAILED:
        failed = result.failed_hosts
        for name in failed:
            host = result.hosts[name]
            for failure in host.failures[:3]:
                console.print(f"{name}: {host.status} in {failure['role']} / {failure['task']}: {failure['msg']}",
                              style="red", markup=False, highlight=False)
        console.print(f"{len(failed)} host(s) failed or unreachable: {', '.join(failed)}", style="bold red")
        console.print("retry only those hosts with:", style="bold")
        console.print(retry_command(options.argv, failed), markup=False, highlight=False, soft_wrap=True)
    elif code == EXIT_DRIFT:
        console.print(f"drift: {len(result.changed_hosts)} host(s) would change: {', '.join(result.changed_hosts)}",
                      style="yellow")
