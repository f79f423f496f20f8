"""``gpuprov check FILE``: ``apply --check --diff`` for CI; exit 0 in sync, 1 drift, 2 bad input, 3 unreachable.

With ``--json PATH`` the summary also carries the drift report (``drift``: per host, desired vs installed for
kernel, driver, Fabric Manager, CUDA, cuDNN, NCCL, container toolkit, runtime config and MIG layout; see
:mod:`gpuprov.drift`), and a component out of sync counts as drift for the exit code.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpuprov.cli import output
from gpuprov.cli.options import invocation_argv, run_extravars, run_options
from gpuprov.engine import ApplyOptions, check_output_path, execute
from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED
from gpuprov.hostplay import TaskResults


@click.command("check")
@run_options
def command(fleet: Path, roles: tuple[str, ...], tags: str | None, skip_tags: str | None, limit: str | None,
            extravars: tuple[str, ...], forks: int, json_path: Path | None, verbosity: int,
            allow_branch_change: bool) -> None:
    """Report, without changing anything, what `gpuprov apply FLEET` would change; with --json, also the
    drift report (desired vs installed per host and component).

    Exit codes: 0 in sync, 1 drift, 2 invalid input, 3 hosts failed or unreachable.
    """
    from gpuprov import drift_report

    console = output.console(highlight=False)
    if json_path is not None:
        check_output_path(json_path, "--json")
    with tempfile.TemporaryDirectory(prefix="gpuprov-check-") as tmp:
        summary_path = Path(tmp) / "summary.json" if json_path is not None else None
        options = ApplyOptions(fleet=fleet, roles=list(roles), tags=tags, skip_tags=skip_tags, limit=limit,
                               check=True, diff=True, extravars=run_extravars(extravars, allow_branch_change),
                               forks=forks, verbosity=verbosity, json_path=summary_path, argv=invocation_argv())
        results = TaskResults() if json_path is not None else None
        # with --json the drift probe runs after the site's plays, in the same run (drift_report.DRIFT_PLAY)
        code = execute(options, console, then=drift_report.DRIFT_PLAY if results is not None else None, results=results)
        if results is not None and json_path is not None and summary_path is not None:
            code = _drift_report(code, json.loads(summary_path.read_text(encoding="utf-8")), results, json_path,
                                 console)
    if code:
        raise click.exceptions.Exit(code)


def _drift_report(code: int, summary: dict[str, Any], results: TaskResults, json_path: Path,
                  console: Console) -> int:
    """The drift report from the run's drift probe: print its tables, write summary + ``drift`` to
    ``json_path``; return the exit code."""
    from gpuprov import drift_report
    from gpuprov.recap import write_summary

    hosts = summary.get("hosts") or {}
    failed = {host: f"{hosts.get(host, {}).get('status', 'failed')} before the drift probe"
              for host in summary.get("failed_hosts") or []}  # fmt: skip
    run_dir = Path(str(summary["run_dir"])) if summary.get("run_dir") else None
    report = drift_report.drift_of(results, failed, hosts, run_dir)
    for host, components in report.hosts.items():
        console.print(drift_report.drift_table(host, components))
    for host, message in sorted(report.failed.items()):
        console.print(f"{host}: drift probe failed: {message}", style="red", markup=False)
    if report.drifted:
        console.print("drift: " + "; ".join(f"{h}: {', '.join(c)}" for h, c in report.drifted.items()),
                      style="yellow", markup=False)
    if report.failed or code == EXIT_HOSTS_FAILED:
        code = EXIT_HOSTS_FAILED
    elif report.drifted:
        code = EXIT_DRIFT
    write_summary(json_path, {**summary, "drift": report.to_json(), "exit_code": code})
    return code
