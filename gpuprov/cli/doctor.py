"""``gpuprov doctor [FILE | --local] [--fix] [--json]``: diagnose GPU hosts and name the exact fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpuprov.cli import output
from gpuprov.cli.options import limit_option
from gpuprov.exceptions import ConfigError, DriftFound, HostsFailed

STYLE = {"fail": "red", "warn": "yellow", "info": "dim"}


def _print(console: Console, title: str, diagnoses: list[dict[str, Any]], fixes: list[dict[str, Any]]) -> None:
    if not diagnoses:
        console.print(f"{title}: no problem found", style="green", markup=False)
    for d in diagnoses:
        console.print(f"{title}: [{d['severity']}] {d['id']} {d['subject']}", style=STYLE.get(d["severity"]),
                      markup=False)
        console.print(f"    {d['evidence']}", markup=False)
        console.print(f"    fix: {d['fix']}" + ("  (safe: --fix runs it)" if d.get("fixable") else ""), markup=False)
    for f in fixes:
        result = "ok" if f.get("rc") == 0 else f"FAILED (rc {f.get('rc')})"
        action = f["action"] if isinstance(f["action"], str) else " ".join(f["action"])
        console.print(f"{title}: fixed {f['id']}: ran `{action}`: {result}", markup=False)
        if f.get("output"):
            console.print(f"    {f['output']}", markup=False)


@click.command("doctor")
@click.argument("fleet", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--local", "local", is_flag=True, help="Diagnose this machine (the default without FLEET).")
@limit_option("Ansible host pattern (with FLEET only).")
@click.option("--fix", is_flag=True, help="Perform the safe repairs (persistence mode, modprobe, dkms autoinstall).")
@click.option("--json", "as_json", is_flag=True, help="Print the facts summary and diagnoses as JSON.")
@click.option("--window", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="SECONDS",
              help="Sample NVML utilisation over this many seconds.")
@click.option("--samples", type=click.IntRange(min=1), default=5, show_default=True, help="Samples in the window.")
def command(fleet: Path | None, local: bool, limit: str | None, fix: bool, as_json: bool, window: float,
            samples: int) -> None:
    """Diagnose this machine or FLEET's hosts: GPU on the bus, driver and DKMS, nouveau, Secure Boot, PCIe,
    BAR1, lost GPUs and Xids, ECC, persistence, MIG, temperature and throttling, utilisation swings and stale
    processes. Each diagnosis names its fix; --fix performs only the safe ones and says what it did.

    Exit codes: 0 no problem; 1 problems found (fail or warn); 2 invalid input; 3 hosts failed or unreachable;
    4 nothing could be checked locally (no pynvml and no readable PCI bus).
    """
    from gpuprov import doctor

    console = output.console(highlight=False)
    if fleet is not None and local:
        raise ConfigError("give either FLEET or --local, not both")
    if fleet is None:
        if limit:
            raise ConfigError("--limit needs a fleet file: gpuprov doctor FLEET --limit PATTERN")
        facts = doctor.local_facts(window, samples)
        found = doctor.diagnose(facts)
        fixes = doctor.fix_local(found) if fix else []
        if fixes:  # diagnose again so the report shows what is left
            found = doctor.diagnose(doctor.local_facts(0, 1))
        if as_json:
            click.echo(json.dumps({"diagnoses": found, "fixes": fixes}, indent=2, sort_keys=True))
        else:
            _print(console, "this machine", found, fixes)
        problems, failed = {"localhost": doctor.problems(found)}, {}
    else:
        result = doctor.fleet_doctor(fleet, limit, window, samples)
        fleet_fixes = doctor.fix_fleet(fleet, result.diagnoses, limit) if fix else {}
        if as_json:
            click.echo(json.dumps({"hosts": {h: {"diagnoses": d, "fixes": fleet_fixes.get(h, [])}
                                             for h, d in result.diagnoses.items()},
                                   "failed": result.failed}, indent=2, sort_keys=True))
        else:
            for host, found in result.diagnoses.items():
                _print(console, host, found, fleet_fixes.get(host, []))
            for host, message in sorted(result.failed.items()):
                console.print(f"{host}: unreachable or failed: {message}", style="red", markup=False)
            console.print(f"run record: {result.run_dir}", markup=False)
        problems = {h: doctor.problems(d) for h, d in result.diagnoses.items()}
        failed = result.failed
    if failed:
        raise HostsFailed(f"{len(failed)} host(s) could not be diagnosed: {', '.join(sorted(failed))}", sorted(failed))
    bad = sorted(h for h, p in problems.items() if p)
    if bad:
        raise DriftFound(f"problems found on {', '.join(bad)}")
