"""``gpuprov validate FILE``: check a fleet file and print every problem, or a short summary.

Problems go to stdout, one per line, as ``FILE:LINE: path.to.field: problem - fix`` (exit 2); a valid
file prints hosts, groups and each host's resolved choices (exit 0). Warnings (a driver branch past NVIDIA's
end of life) print as ``warning: FILE:LINE: ...`` and leave the file valid, or count as problems with
``--strict``. Never a traceback. The SSH key and
known_hosts files the fleet names are checked on this machine unless ``--no-file-checks`` (CI).
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuprov.exceptions import ConfigError, FleetValidationError
from gpuprov.fleet import Fleet, Host, load_fleet


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def host_summary(host: Host) -> str:
    """One line: address, groups and the effective choices that matter for provisioning."""
    s = host.settings
    gpus, drv = s["gpus"], s["driver"]
    parts = [
        f"{host.connection.address}:{host.connection.port}",
        f"groups: {','.join(host.groups) or '-'}",
        s["os"],
        f"{gpus['count']}x {gpus['model']}" + (" NVSwitch" if gpus["nvswitch"] else ""),
        f"driver {drv['version'] or drv['branch']} {drv['flavour']} ({drv['method']})"
        + (" branch change allowed" if drv["allow_branch_change"] else ""),
    ]
    for lib, label in (("cuda", "CUDA"), ("cudnn", "cuDNN"), ("nccl", "NCCL")):
        if s[lib]["version"]:
            parts.append(f"{label} {s[lib]['version']}")
    parts.append(f"runtime {s['container_runtime']}")
    if s["mig"]["layout"]:
        parts.append(f"MIG {s['mig']['layout']}")
    return "  ".join(parts)


def summary(fleet: Fleet, display: str) -> list[str]:
    """The OK report: a headline, then per host a summary line, resolved choices and notes."""
    lines = [f"{display}: OK - {_count(len(fleet.hosts), 'host')}, {_count(len(fleet.groups), 'group')}"
             + (f" (fleet {fleet.name})" if fleet.name else "")]
    for host in fleet.hosts.values():
        lines.append(f"  {host.name}  {host_summary(host)}")
        lines += [f"    auto {r.field} = {r.value}: {r.reason}" for r in host.resolutions]
        lines += [f"    note: {note}" for note in host.notes]
    return lines


def report_problems(exc: FleetValidationError, display: str) -> ConfigError:
    """Print each problem line on stdout; return the error that ends the command with exit 2.

    The returned error's message is only a count (``gpuprov: error: 3 problems in FILE``), so the
    problem lines stay exactly ``FILE:LINE: path: problem - fix``.
    """
    for problem in exc.problems:
        click.echo(str(problem))
    count = len(exc.problems)
    return ConfigError(f"{count} problem{'s' if count != 1 else ''} in {display}")


@click.command("validate")
@click.argument("fleet_file", metavar="FILE", type=click.Path(path_type=Path))
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when the file is valid.")
@click.option("--strict", is_flag=True,
              help="Count warnings (a driver branch past NVIDIA's end of life) as problems: exit 2.")
@click.option("--no-file-checks", is_flag=True,
              help="Skip the check that the SSH key and known_hosts files the fleet names exist on this machine "
                   "(CI, or any machine that is not the controller); their paths must still be absolute or ~/.")
def command(fleet_file: Path, quiet: bool, strict: bool, no_file_checks: bool) -> None:
    """Validate the fleet FILE and report every problem at once (exit 2), or a summary (exit 0).

    Besides the schema and the compatibility matrix, the SSH private keys and the known_hosts file the fleet
    names must exist on this machine, unless --no-file-checks (which keeps the rule that their paths are
    absolute or start with ~/). Warnings print even with --quiet; --strict makes them problems.
    """
    try:
        fleet = load_fleet(fleet_file, check_files=not no_file_checks)
    except FleetValidationError as exc:
        raise report_problems(exc, str(fleet_file)) from None
    if strict and fleet.warnings:
        raise report_problems(FleetValidationError(fleet.warnings), str(fleet_file))
    if not quiet:
        for line in summary(fleet, str(fleet_file)):
            click.echo(line)
    for warning in fleet.warnings:
        click.echo(f"warning: {warning}")
