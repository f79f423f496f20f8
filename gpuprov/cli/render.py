"""``gpuprov render FILE -o DIR``: write the fleet as a plain Ansible inventory (no lock-in).

Validation problems are printed like ``gpuprov validate`` does (exit 2); on success the inventory
path is printed, ready for ``ANSIBLE_CONFIG=DIR/ansible.cfg ansible-playbook -i DIR gpuprov.gpu.site``.
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuprov.cli.validate import report_problems
from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import load_fleet
from gpuprov.render import render_inventory


@click.command("render")
@click.argument("fleet_file", metavar="FILE", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR",
              type=click.Path(path_type=Path, file_okay=False), help="Directory to write the inventory into.")
def command(fleet_file: Path, out_dir: Path) -> None:
    """Validate FILE and render it to an Ansible inventory under DIR."""
    try:
        fleet = load_fleet(fleet_file)
    except FleetValidationError as exc:
        raise report_problems(exc, str(fleet_file)) from None
    inventory = render_inventory(fleet, out_dir)
    click.echo(f"rendered {len(fleet.hosts)} hosts to {inventory} (use: ANSIBLE_CONFIG={inventory}/ansible.cfg "
               f"ansible-playbook -i {inventory} gpuprov.gpu.site)")
