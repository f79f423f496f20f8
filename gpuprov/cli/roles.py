"""``gpuprov roles``: the roles in the order site.yml applies them, with what each touches."""

from __future__ import annotations

import json

import click
from rich.table import Table

from gpuprov.cli import output
from gpuprov.roles import list_roles


@click.command("roles")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def command(as_json: bool) -> None:
    """List the roles in apply order and what each one touches on a host."""
    roles = list_roles()
    if as_json:
        click.echo(json.dumps([{"order": i, "name": r.name, "summary": r.summary, "touches": list(r.touches),
                                "playbook": r.playbook.name} for i, r in enumerate(roles, 1)], indent=2))
        return
    table = Table(title="gpuprov roles (site.yml order)", title_justify="left")
    for column in ("#", "role", "what it does", "touches"):
        table.add_column(column)
    for i, role in enumerate(roles, 1):
        table.add_row(str(i), role.name, role.summary, "\n".join(role.touches))
    output.console().print(table)
