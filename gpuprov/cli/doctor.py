"""``gpuprov doctor [FILE | --local] [--fix] [--json]``: diagnose GPU hosts and name the exact fix."""

from __future__ import annotations

import json
import sys
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
        console.print(f"{title}: fixed {f['id']}: ran `{action}`: {result}", markup=False, soft_wrap=True)
        if f.get("output"):
            console.print(f"    {f['output']}", markup=False)


def _end_leftovers(console: Console, found: list[dict[str, Any]], yes: bool, as_json: bool) -> list[dict[str, Any]]:
    """End the leftover GPU processes once confirmed (``--yes``, or y at the prompt on a terminal); returns
    fix records ``{id, action, rc, output}`` per process."""
    from gpuprov import holders

    if not found:
        return []
    err = output.console(stderr=True, highlight=False) if as_json else console
    for h in found:
        memory = h.get("gpu_memory_bytes")
        err.print(f"leftover GPU process {h['pid']} (user {h.get('user') or '?'}): {h.get('cmdline') or h['command']}"
                  + (f", {memory // 2**20} MiB of GPU memory" if isinstance(memory, int) else "")
                  + f", holds {', '.join(h.get('devices') or []) or 'GPU memory'}", markup=False, soft_wrap=True)
    question = f"End these {len(found)} process(es) (SIGTERM, SIGKILL after {holders.GRACE_S:g} s)?"
    if not yes:
        if not sys.stdin.isatty():
            err.print("not ended: confirm on a terminal, or pass --yes", markup=False)
            return []
        if not click.confirm(question, default=False, err=True):
            return []
    return [{"id": "leftover_gpu_process", "action": f"end pid {r['pid']} (SIGTERM, then SIGKILL)",
             "rc": 0 if r["ended"] else 1, "output": f"{r['command']}: {'ended' if r['ended'] else 'still running'}"}
            for r in holders.end(found)]


@click.command("doctor")
@click.argument("fleet", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--local", "local", is_flag=True, help="Diagnose this machine (the default without FLEET).")
@limit_option("Ansible host pattern (with FLEET only).")
@click.option("--fix", is_flag=True, help="Perform the safe repairs (persistence mode, modprobe, dkms autoinstall); "
              "locally also end leftover GPU processes after confirmation.")
@click.option("--yes", is_flag=True, help="With --fix: end leftover GPU processes without asking.")
@click.option("--devices", default=None, metavar="GLOB",
              help="Device files whose holders are listed (locally; default /dev/nvidia*).")
@click.option("--json", "as_json", is_flag=True, help="Print the facts summary and diagnoses as JSON.")
@click.option("--window", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="SECONDS",
              help="Sample NVML utilisation over this many seconds.")
@click.option("--samples", type=click.IntRange(min=1), default=5, show_default=True, help="Samples in the window.")
def command(fleet: Path | None, local: bool, limit: str | None, fix: bool, yes: bool, devices: str | None,
            as_json: bool, window: float, samples: int) -> None:
    """Diagnose this machine or FLEET's hosts: GPU on the bus, driver and DKMS, nouveau, Secure Boot, PCIe,
    BAR1, lost GPUs and Xids, ECC, persistence, MIG, temperature and throttling, utilisation swings and stale
    processes. Each diagnosis names its fix; --fix performs only the safe ones and says what it did, and
    locally ends the processes left over from ended jobs once confirmed (--yes: without asking).

    Exit codes: 0 no problem; 1 problems found (fail or warn); 2 invalid input; 3 hosts failed or unreachable;
    4 nothing could be checked locally (no pynvml and no readable PCI bus).
    """
    from gpuprov import doctor, holders

    console = output.console(highlight=False)
    if yes and not fix:
        raise ConfigError("--yes answers --fix's question: use it with --fix")
    if devices is not None and fleet is not None:
        raise ConfigError("--devices applies to this machine only: drop FLEET or --devices")
    if fleet is not None and local:
        raise ConfigError("give either FLEET or --local, not both")
    if fleet is None:
        if limit:
            raise ConfigError("--limit needs a fleet file: gpuprov doctor FLEET --limit PATTERN")
        glob = devices or holders.DEVICE_GLOB
        facts = doctor.local_facts(window, samples, device_glob=glob)
        found = doctor.diagnose(facts)
        fixes = doctor.fix_local(found) if fix else []
        if fix:
            fixes += _end_leftovers(console, holders.leftovers(facts.get("holders") or []), yes, as_json)
        if fixes:  # diagnose again so the report shows what is left
            found = doctor.diagnose(doctor.local_facts(0, 1, device_glob=glob))
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
