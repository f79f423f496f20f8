"""``gpuprov upgrade FILE``: move live hosts to the fleet file's driver and CUDA stack in batches, each host
passing the verify ladder before the next batch starts (playbooks/upgrade.yml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from gpuprov.cli import output
from gpuprov.cli.options import invocation_argv, limit_option, run_extravars
from gpuprov.engine import ApplyOptions, check_options, run_fleet
from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED
from gpuprov.recap import retry_command
from gpuprov.runner import RunResult

#: The components of the drift report an upgrade moves (gpuprov.drift.COMPONENTS), and an earlier upgrade left
#: unfinished on the host; hosts where all are in sync are left alone.
STACK = ("driver", "fabric_manager", "cuda", "cudnn", "nccl", "upgrade")

#: What each stage the upgrade play records means in the report (ansible_facts['gpuprov_upgrade'].stage).
STAGES = {
    "planned": "stopped before any change (services started again)",
    "stopped": "driver unloaded (by this run or an unfinished earlier one); the new stack is not installed "
               "(services left stopped)",
    "applied": "new stack installed and services started; the verify ladder failed",
    "verified": "upgraded and verified",
}


def _serial(_ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Ansible's ``serial``: a host count (``2``) or a percentage of the hosts (``25%``)."""
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*(%?)\s*", value)
    if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(1)) > 100):
        raise click.BadParameter(f"{value!r} is not a host count or a percentage - write e.g. 1, 4 or 25%",
                                 param=param)
    return str(int(match.group(1))) + match.group(2)


def _percent(_ctx: click.Context, param: click.Parameter, value: str) -> int:
    match = re.fullmatch(r"\s*([0-9]{1,3})\s*%?\s*", value)
    if not match or int(match.group(1)) > 100:
        raise click.BadParameter(f"{value!r} is not a percentage from 0 to 100 - write e.g. 0 or 25%", param=param)
    return int(match.group(1))


@click.command("upgrade")
@click.argument("fleet", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--serial", default="1", show_default=True, callback=_serial, metavar="N|P%",
              help="Hosts upgraded at a time: a count or a percentage of the hosts (Ansible's serial).")
@click.option("--max-fail", "max_fail", default="0", show_default=True, callback=_percent, metavar="P%",
              help="Stop the rollout when more than this share of a batch fails (Ansible's max_fail_percentage); "
                   "a batch that fails entirely always stops it.")
@click.option("--kill-holders", is_flag=True,
              help="End the processes that still hold /dev/nvidia* after the GPU services are stopped (SIGTERM, "
                   "then SIGKILL) instead of stopping at them.")
@click.option("--check", "-C", is_flag=True, help="Show the plan per host; change nothing.")
@limit_option("Ansible host pattern: upgrade only these hosts.")
@click.option("-e", "--extra-vars", "extravars", multiple=True, metavar="KEY=VALUE",
              help="Extra variable (repeatable).")
@click.option("--forks", "-f", type=int, default=10, show_default=True, help="Hosts of a batch in parallel.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the per-host summary as JSON to this path.")
@click.option("-v", "--verbose", "verbosity", count=True, help="More ansible output in the run record.")
def command(fleet: Path, serial: str, max_fail: int, kill_holders: bool, check: bool, limit: str | None,
            extravars: tuple[str, ...], forks: int, json_path: Path | None, verbosity: int) -> None:
    """Upgrade the hosts of FLEET to what it now says (e.g. a new driver branch or CUDA version), a batch at a
    time. Each host: stop the GPU services and the containers using the GPUs, refuse if another process still
    holds /dev/nvidia* (naming it; --kill-holders ends it), unload the NVIDIA modules, apply the driver and CUDA
    stack, load the new driver (or reboot where reboot.allowed), apply the MIG layout and container toolkit,
    pass the verify ladder, and start what was stopped. Hosts marked `canary: true` go first, one at a time.
    A failed batch stops the rollout, leaving later hosts untouched, and the command that resumes is printed.
    The upgrade confirms a driver branch change (driver.allow_branch_change) for the hosts it moves.

    Exit codes: 0 every host upgraded (with --check: nothing to change), 1 changes planned (--check only),
    2 invalid input, 3 the rollout stopped (failed or unreachable hosts; the resume command is printed).
    """
    from gpuprov import drift, drift_report
    from gpuprov.runner import parse_extravars

    console = output.console(highlight=False)
    pairs = run_extravars(extravars, allow_branch_change=True)
    # what needs no host is checked before the probe reaches the hosts (an unset {env: NAME}, --forks 0)
    check_options(ApplyOptions(fleet=fleet, limit=limit, extravars=pairs, forks=forks, json_path=json_path,
                               playbook="upgrade"))
    probe = drift_report.fleet_drift(fleet, limit, parse_extravars(extravars))
    # a damaged marker no longer says what an earlier upgrade stopped: the upgrade play cannot finish that host
    damaged = {host: comps["upgrade"]["note"] for host, comps in probe.hosts.items()
               if drift.damaged_upgrade(comps["upgrade"])}
    probe.failed.update(damaged)
    plan = {host: [c for c in STACK if not comps[c]["in_sync"]] for host, comps in probe.hosts.items()
            if host not in damaged}
    for host, components in plan.items():
        console.print(f"{host}: " + (", ".join(_change(c, probe.hosts[host][c]) for c in components) if components
                                     else "runs the fleet file's driver and CUDA stack: nothing to upgrade"),
                      markup=False, highlight=False)
    for host, message in sorted(probe.failed.items()):
        console.print(f"{host}: {'' if host in damaged else 'cannot read the installed stack: '}{message}",
                      style="red", markup=False)
    moving = [host for host, components in plan.items() if components]
    code = 0
    if moving:
        options = ApplyOptions(
            fleet=fleet, limit=",".join(moving), check=check, diff=check, forks=forks, verbosity=verbosity,
            json_path=json_path, argv=invocation_argv(), playbook="upgrade",
            extravars=[*pairs, f"gpuprov_upgrade_serial={serial}", f"gpuprov_upgrade_max_fail_percentage={max_fail}",
                       f"gpuprov_upgrade_kill_holders={'true' if kill_holders else 'false'}"])
        code, result, _fleet = run_fleet(options, console)
        code = report(result, code, options, moving, sorted(probe.failed), console)
    elif probe.failed:
        console.print("retry those hosts with:", style="bold")
        console.print(retry_command(invocation_argv(), sorted(probe.failed)), markup=False, highlight=False,
                      soft_wrap=True)
        code = EXIT_HOSTS_FAILED
    if code:
        raise click.exceptions.Exit(code)


def _change(component: str, entry: dict[str, Any]) -> str:
    return f"{component} {entry.get('note') or 'differs'} -> {entry.get('desired')}"


def _result(host: Any, check: bool) -> str:
    if host is None:
        return "untouched"
    stage = str(host.upgrade.get("stage", ""))
    if host.status in ("failed", "unreachable"):
        return f"{host.status}: {STAGES.get(stage, 'before the plan was read')}"
    if check:
        return "would change" if host.changed else "nothing to change"
    return STAGES.get(stage, stage or "?")


def _names(items: list[Any], key: str | None = None) -> str:
    return ", ".join(str(i.get(key) if key and isinstance(i, dict) else i) for i in items) or "-"


def report(result: RunResult, code: int, options: ApplyOptions, moving: list[str], unread: list[str],
           console: Console) -> int:
    """Print the plan and outcome of each host of ``moving`` and, when the rollout stopped, the hosts left
    untouched and the command that resumes (with the hosts in ``unread``, whose stack could not be read);
    returns the exit code."""
    table = Table(title="upgrade" + (" plan" if options.check else ""))
    for column in ("host", "result", "services stopped", "containers", "other GPU holders"):
        table.add_column(column)
    for name in moving:
        host = result.hosts.get(name)
        plan = host.upgrade if host is not None else {}
        holders = [f"pid {h.get('pid')} ({h.get('command')})" for h in plan.get("holders") or [] if isinstance(h, dict)]
        table.add_row(name, _result(host, options.check), _names(plan.get("units") or []),
                      _names(plan.get("containers") or [], "name"), ", ".join(holders) or "-")
    console.print(table)
    failed = [n for n in moving if n in result.failed_hosts]
    untouched = [n for n in moving if n not in result.hosts]
    for name in failed:
        for failure in result.hosts[name].failures[:2]:
            console.print(f"{name}: {failure['task']}: {failure['msg']}", style="red", markup=False, highlight=False)
    if failed or unread:
        if failed:
            console.print(f"rollout stopped: {len(failed)} host(s) failed ({', '.join(failed)}); "
                          f"{len(untouched)} left untouched ({', '.join(untouched) or 'none'})", style="bold red")
        console.print("resume with:", style="bold")
        console.print(retry_command(options.argv, failed + untouched + unread), markup=False, highlight=False,
                      soft_wrap=True)
        return EXIT_HOSTS_FAILED
    if options.check:
        return EXIT_DRIFT
    return code
