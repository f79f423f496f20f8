"""``gpuprov verify [FILE | --local] [--limit P] [--json PATH]``: prove GPU hosts ready with the verify role."""

from __future__ import annotations

from pathlib import Path

import click

from gpuprov.cli import output
from gpuprov.cli.options import limit_option
from gpuprov.exceptions import ConfigError


@click.command("verify")
@click.argument("fleet", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--local", "local", is_flag=True,
              help="Verify this machine over a local connection (with FLEET: the --limit host's settings).")
@limit_option("Ansible host pattern (with FLEET only).")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the reports and the fleet summary as JSON to this path.")
@click.option("-e", "--extra-vars", "extravars", multiple=True, metavar="KEY=VALUE",
              help="Extra variable for the role, e.g. -e verify_nccl_min_busbw_gbps=300 (repeatable).")
def command(fleet: Path | None, local: bool, limit: str | None, json_path: Path | None,
            extravars: tuple[str, ...]) -> None:
    """Run the verification ladder on FLEET's hosts (or this machine with --local): NVML model and count,
    nvidia-smi, driver/NVML versions, persistence, Fabric Manager, a CUDA sample, P2P/NVLink, NCCL all-reduce
    bandwidth, a container smoke test and DCGM diag. Prints a table per host and a fleet summary.

    Exit codes: 0 every step passed or skipped; 1 a step failed; 2 invalid input; 3 a host failed or was
    unreachable.
    """
    from gpuprov import verify
    from gpuprov.engine import check_output_path
    from gpuprov.runner import parse_extravars

    if fleet is None and not local:
        raise ConfigError("give a fleet file or --local: gpuprov verify FLEET | gpuprov verify --local")
    if json_path is not None:
        check_output_path(json_path, "--json")
    variables = parse_extravars(extravars)
    console = output.console(highlight=False)
    result = verify.verify(fleet, local=local, limit=limit, extravars=variables)
    for host, report in result.reports.items():
        console.print(verify.host_table(host, report))
    for host, message in sorted(result.failed.items()):
        console.print(f"{host}: unreachable or failed: {message}", style="red", markup=False)
    summary = result.summary()
    console.print(f"fleet: {summary['hosts']} host(s), {len(summary['passed'])} ready, "
                  f"{len(summary['failed_steps'])} with failed steps, {len(summary['unreachable'])} unreachable",
                  style="bold", markup=False)
    for host, steps in sorted(summary["failed_steps"].items()):
        console.print(f"  {host}: failed {', '.join(steps)}", style="red", markup=False)
    console.print(f"run record: {result.run_dir}", markup=False)
    if json_path is not None:
        verify.write_json(json_path, result.to_json())
    code = result.exit_code
    if code:
        raise click.exceptions.Exit(code)
