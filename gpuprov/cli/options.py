"""Options shared by the commands: the run options of ``gpuprov apply`` and ``gpuprov check``, and ``--limit``."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuprov.exceptions import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

#: The confirmation of a driver branch or flavour change (a transition that removes the installed set, so it
#: needs confirming): the variable the fleet file's ``driver.allow_branch_change`` renders to, which the
#: nvidia_driver role's ``nvidia_driver_branch_change_ok`` follows. ``--allow-branch-change`` sets the same
#: variable for one run (an extra variable wins over the inventory's), so there is one route, not two.
BRANCH_CHANGE_VAR = "gpuprov_driver_allow_branch_change"


def _host_pattern(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a ``--limit`` that names no host: an unset shell variable (``--limit "$HOSTS"``) gives ``''``, which
    Ansible would take as no limit at all and run on every host."""
    # a part that is only operators (!, &, ~: "!$HOSTS" with HOSTS unset) names no host either; "~" alone is the
    # regex that matches every host
    if value is not None and not any(part.strip().lstrip("!&~").strip() for part in re.split(r"[,:]", value)):
        raise click.BadParameter(
            f"{value!r} names no host or group; give a pattern such as gpu-01 or 'gpu-*,!gpu-09', or leave "
            "--limit out to run on every host", param=param)
    return value


def limit_option(help_text: str) -> Callable[[F], F]:
    """The ``--limit``/``-l PATTERN`` option (an Ansible host pattern) with ``help_text``; an empty pattern is a
    usage error (exit 2)."""
    return click.option("--limit", "-l", metavar="PATTERN", callback=_host_pattern, help=help_text)


def run_options(func: F) -> F:
    """Decorate a click command with the fleet argument and the run options of apply/check."""
    decorators = [
        click.argument("fleet", type=click.Path(path_type=Path, dir_okay=False)),
        click.option("--role", "roles", multiple=True, metavar="NAME",
                     help="Run only this role's playbook (repeatable; site order is kept)."),
        click.option("--tags", "-t", metavar="TAGS", help="Only tasks/plays with these tags (comma-separated)."),
        click.option("--skip-tags", metavar="TAGS", help="Skip tasks/plays with these tags."),
        limit_option("Ansible host pattern (host or group names)."),
        click.option("-e", "--extra-vars", "extravars", multiple=True, metavar="KEY=VALUE",
                     help="Extra variable (repeatable)."),
        click.option("--forks", "-f", type=int, default=10, show_default=True, help="Hosts in parallel."),
        click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False),
                     help="Write the per-host summary as JSON to this path."),
        click.option("-v", "--verbose", "verbosity", count=True, help="More ansible output in the run record."),
        click.option("--allow-branch-change", is_flag=True,
                     help="Confirm, for this run, replacing an installed driver branch or flavour with the fleet "
                          "file's (unhold, purge, install, hold), as driver.allow_branch_change does in the fleet "
                          "file. Changes nothing by itself; with --check it shows the plan."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def run_extravars(extravars: tuple[str, ...], allow_branch_change: bool) -> list[str]:
    """The ``-e KEY=VALUE`` pairs of a run: ``extravars`` as given plus ``gpuprov_driver_allow_branch_change=true``
    with ``--allow-branch-change``.

    Raises:
        ConfigError: ``--allow-branch-change`` with ``-e gpuprov_driver_allow_branch_change=<not true>`` (exit 2).
    """
    pairs = list(extravars)
    if not allow_branch_change:
        return pairs
    for pair in pairs:
        key, _, value = pair.partition("=")
        # Ansible's own true values (ansible.module_utils.parsing.convert_bool.BOOLEANS_TRUE)
        if key == BRANCH_CHANGE_VAR and value.strip().lower() not in ("y", "yes", "on", "1", "true", "t"):
            raise ConfigError(f"--allow-branch-change contradicts -e {pair} - give one of them")
    return [*pairs, f"{BRANCH_CHANGE_VAR}=true"]


def invocation_argv() -> list[str]:
    """Return the command line after the program name, as :func:`gpuprov.cli.__main__.main` received it."""
    obj = click.get_current_context().find_root().obj
    if isinstance(obj, dict) and isinstance(obj.get("argv"), list):
        return [str(a) for a in obj["argv"]]
    return sys.argv[1:]
