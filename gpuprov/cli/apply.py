"""``gpuprov apply FILE``: validate the fleet file, render it and run the roles on the hosts."""

from __future__ import annotations

from pathlib import Path

import click

from gpuprov.cli import output
from gpuprov.cli.options import invocation_argv, run_extravars, run_options
from gpuprov.engine import ApplyOptions, execute


@click.command("apply")
@run_options
@click.option("--check", "-C", is_flag=True, help="Dry run: report what would change (exit 1 on drift).")
@click.option("--diff", "-D", is_flag=True, help="Show file differences.")
def command(fleet: Path, roles: tuple[str, ...], tags: str | None, skip_tags: str | None, limit: str | None,
            extravars: tuple[str, ...], forks: int, json_path: Path | None, verbosity: int,
            allow_branch_change: bool, check: bool, diff: bool) -> None:
    """Provision the hosts of FLEET (a fleet file).

    A host whose installed driver branch or flavour differs from the fleet file's stops with the plan unless
    the change is confirmed: driver.allow_branch_change in the fleet file, or --allow-branch-change.

    Exit codes: 0 success (with --check: no drift), 1 drift (--check only), 2 invalid input,
    3 hosts failed or unreachable (the retry command is printed).
    """
    options = ApplyOptions(fleet=fleet, roles=list(roles), tags=tags, skip_tags=skip_tags, limit=limit,
                           check=check, diff=diff, extravars=run_extravars(extravars, allow_branch_change),
                           forks=forks, verbosity=verbosity, json_path=json_path, argv=invocation_argv())
    code = execute(options, output.console(highlight=False))
    if code:
        raise click.exceptions.Exit(code)
