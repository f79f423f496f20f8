"""Options shared by ``gpuprov apply`` and ``gpuprov check``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def run_options(func: F) -> F:
    """Decorate a click command with the fleet argument and the run options of apply/check."""
    decorators = [
        click.argument("fleet", type=click.Path(path_type=Path, dir_okay=False)),
        click.option("--role", "roles", multiple=True, metavar="NAME",
                     help="Run only this role's playbook (repeatable; site order is kept)."),
        click.option("--tags", "-t", metavar="TAGS", help="Only tasks/plays with these tags (comma-separated)."),
        click.option("--skip-tags", metavar="TAGS", help="Skip tasks/plays with these tags."),
        click.option("--limit", "-l", metavar="PATTERN", help="Ansible host pattern (host or group names)."),
        click.option("-e", "--extra-vars", "extravars", multiple=True, metavar="KEY=VALUE",
                     help="Extra variable (repeatable)."),
        click.option("--forks", "-f", type=int, default=10, show_default=True, help="Hosts in parallel."),
        click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
                     help="Write the per-host summary as JSON to this path."),
        click.option("-v", "--verbose", "verbosity", count=True, help="More ansible output in the run record."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def invocation_argv() -> list[str]:
    """Return the command line after the program name, as :func:`gpuprov.cli.__main__.main` received it."""
    obj = click.get_current_context().find_root().obj
    if isinstance(obj, dict) and isinstance(obj.get("argv"), list):
        return [str(a) for a in obj["argv"]]
    return sys.argv[1:]
