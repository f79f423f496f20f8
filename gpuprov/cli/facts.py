"""``gpuprov facts [FILE]``: NVML facts of this machine, or of a fleet's hosts through the ``nvml_facts`` module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpuprov.cli import output
from gpuprov.cli.options import limit_option
from gpuprov.exceptions import ConfigError, HostsFailed
from gpuprov.facts import fleet_facts, gpu_table, local_facts, require_available


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _local(as_json: bool, strict: bool, console: Console) -> None:
    facts = local_facts()
    if as_json:
        _dump(facts)
        if strict:
            require_available(facts)
        return
    require_available(facts)  # a table of nothing helps no one: exit 4 with the NVML error
    console.print(gpu_table(facts, title="GPUs on this machine"))


def _fleet(fleet: Path, limit: str | None, as_json: bool, strict: bool, console: Console) -> None:
    result = fleet_facts(fleet, limit)
    failed = dict(result.failed)
    if strict:
        for name, facts in result.hosts.items():
            if not facts.get("available"):
                failed.setdefault(name, f"NVML unavailable: {facts.get('error_name')}")
            elif facts.get("lost_gpus"):
                failed.setdefault(name, f"lost GPU(s) {facts.get('lost_gpus')}")
    if as_json:
        _dump({"hosts": result.hosts, "failed": failed})
    else:
        for name, facts in result.hosts.items():
            console.print(gpu_table(facts, title=name))
        for name, message in sorted(failed.items()):
            console.print(f"{name}: {message}", style="red", markup=False, highlight=False)
        console.print(f"run record: {result.run_dir}", highlight=False)
    if failed:  # exit 3
        raise HostsFailed(f"{len(failed)} host(s) without NVML facts: {', '.join(sorted(failed))}", sorted(failed))


@click.command("facts")
@click.argument("fleet", required=False, type=click.Path(path_type=Path, dir_okay=False))
@limit_option("Ansible host pattern (with FLEET only).")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of a table.")
@click.option("--strict", is_flag=True,
              help="Exit 4 (locally) or 3 (fleet) when NVML is unavailable or a GPU is lost, also with --json.")
def command(fleet: Path | None, limit: str | None, as_json: bool, strict: bool) -> None:
    """Show NVML facts: this machine's, or those of FLEET's hosts (read through the nvml_facts module).

    Exit codes: 0 ok; 2 invalid input; 3 hosts failed or unreachable (fleet); 4 NVML unavailable on this
    machine (table output, or --strict). With --json an unavailable NVML prints "available": false and
    exits 0 unless --strict is given.
    """
    console = output.console(highlight=False)
    if fleet is None:
        if limit:
            raise ConfigError("--limit needs a fleet file: gpuprov facts FLEET --limit PATTERN")
        _local(as_json, strict, console)
    else:
        _fleet(fleet, limit, as_json, strict, console)
