"""``gpuprov apply``/``check`` from fleet file to exit code: validate, render, run, account.

Nothing reaches a host before the whole fleet file has validated (:func:`gpuprov.fleet.load_fleet`
raises first), the ``--limit`` pattern matches at least one host, and every ``--role`` exists.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED, ConfigError
from gpuprov.fleet import load_fleet
from gpuprov.recap import ProgressPrinter, findings_table, recap_table, retry_command, summary, write_summary
from gpuprov.render import render_inventory
from gpuprov.resources import playbooks_dir, roles_dir, state_dir
from gpuprov.roles import list_roles, role_playbook
from gpuprov.runner import RunRequest, RunResult, exit_code, new_run_dir, parse_extravars, run_playbook

log = logging.getLogger(__name__)


@dataclass
class ApplyOptions:
    """Options of ``gpuprov apply`` (and ``check``, which sets ``check`` and ``diff``).

    ``argv`` is the command line after the program name, used to print the retry command.
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


def _check_limit(inventory: Path, limit: str | None) -> None:
    if not limit:
        return
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
    if not manager.get_hosts(pattern=limit):
        names = ", ".join(sorted(h.name for h in manager.get_hosts()))
        raise ConfigError(f"--limit {limit}: matches no host in the fleet - use a host or group name ({names})")


def execute(options: ApplyOptions, console: Console) -> int:
    """Validate, render and run; print progress and the recap; return the exit code.

    Returns 0 on success (``--check``: no drift), 1 on drift (``--check`` only), 3 when any host failed
    or was unreachable (the retry command is printed).

    Raises:
        FleetValidationError: the fleet file is invalid (nothing was run).
        ConfigError: an unknown ``--role``, a ``--limit`` matching no host, a bad ``-e``.
    """
    fleet = load_fleet(options.fleet)
    extravars = parse_extravars(options.extravars)
    if options.forks < 1:
        raise ConfigError(f"--forks {options.forks}: must be at least 1")
    for name in options.roles:
        role_playbook(name)
    run_dir = new_run_dir(state_dir(), "-".join(options.roles) or "site")
    inventory = render_inventory(fleet, run_dir / "inventory")
    _check_limit(inventory, options.limit)
    playbook, label = _select_playbook(options.roles, run_dir)
    request = RunRequest(
        inventory=inventory, playbook=playbook, roles_path=roles_dir(), run_dir=run_dir,
        check=options.check, diff=options.diff, tags=options.tags, skip_tags=options.skip_tags,
        limit=options.limit, extravars=extravars, forks=options.forks, verbosity=options.verbosity,
    )
    mode = "check" if options.check else "apply"
    console.print(f"gpuprov {mode}: {label} on {options.fleet} (run record: {run_dir})")
    result = run_playbook(request, on_event=ProgressPrinter(console))
    code = exit_code(result, options.check)
    console.print(recap_table(result, options.check))
    findings = findings_table(result)
    if findings is not None:
        console.print(findings)
    data = summary(result, fleet=options.fleet, playbook=label, check=options.check, exit_code=code)
    write_summary(run_dir / "summary.json", data)
    if options.json_path is not None:
        write_summary(options.json_path, data)
    _explain(result, code, options, console)
    return code


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
