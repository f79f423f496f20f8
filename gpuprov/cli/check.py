"""``gpuprov check FILE``: ``apply --check --diff`` for CI; exit 0 in sync, 1 drift, 2 bad input, 3 unreachable."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from gpuprov.cli.options import invocation_argv, run_options
from gpuprov.engine import ApplyOptions, execute


@click.command("check")
@run_options
def command(fleet: Path, roles: tuple[str, ...], tags: str | None, skip_tags: str | None, limit: str | None,
            extravars: tuple[str, ...], forks: int, json_path: Path | None, verbosity: int) -> None:
    """Report, without changing anything, what `gpuprov apply FLEET` would change."""
    options = ApplyOptions(fleet=fleet, roles=list(roles), tags=tags, skip_tags=skip_tags, limit=limit,
                           check=True, diff=True, extravars=list(extravars), forks=forks,
                           verbosity=verbosity, json_path=json_path, argv=invocation_argv())
    code = execute(options, Console(highlight=False))
    if code:
        raise click.exceptions.Exit(code)
