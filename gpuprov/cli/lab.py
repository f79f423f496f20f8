"""``gpuprov lab``: build the lab base images and run a local fleet of systemd containers.

Sub-commands: ``images`` (build or reuse the base images), ``up`` (start N hosts and write the lab
fleet file), ``status`` (exit 0 when every host is up, 3 otherwise) and ``down``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import click
from rich.table import Table

from gpuprov.cli import output
from gpuprov.exceptions import HostsFailed

#: Every lab OS (gpuprov.lab.imagespecs.SPECS: debian12 and the Ubuntu stand-ins), without importing the lab.
OS_CHOICES = ("debian12", "ubuntu2004", "ubuntu2204", "ubuntu2404")


def _split_list(values: Sequence[str]) -> list[str]:
    """``--opt a --opt b,c`` -> ``[a, b, c]``."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _split_oses(values: Sequence[str]) -> list[str]:
    """``--os a --os b,c`` -> ``[a, b, c]``; rejects unknown names with a usage error."""
    oses = _split_list(values)
    for os_name in oses:
        if os_name not in OS_CHOICES:
            raise click.BadParameter(f"{os_name!r} is not one of {', '.join(OS_CHOICES)}", param_hint="--os")
    return oses


@contextlib.contextmanager
def _progress() -> Iterator[None]:
    """Print the lab's own progress log (``gpuprov.lab`` at INFO: image build steps, container boot, key,
    simulated hardware, stand-in repository) to stderr, each line with the seconds since the start."""
    started = time.time()

    class Elapsed(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"lab: [{record.created - started:4.0f} s] {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Elapsed())
    logger = logging.getLogger("gpuprov.lab")
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


@click.group("lab")
def command() -> None:
    """Run a local lab fleet of systemd containers that look like bare servers."""


@command.command("images")
@click.option(
    "--os", "oses", multiple=True, metavar="OS[,OS]",
    help=f"Image(s) to build: {', '.join(OS_CHOICES)} (default: all).",
)
@click.option("--rebuild", is_flag=True, help="Build even if an image with the current recipe exists.")
def images_cmd(oses: tuple[str, ...], rebuild: bool) -> None:
    """Build the lab base images if their recipe changed, and print their references."""
    from gpuprov.lab import dockerenv, images

    client = dockerenv.client()
    for os_name in _split_oses(oses) or list(OS_CHOICES):
        if rebuild or images.find_image(client, os_name) is None:
            click.echo(f"building {images.image_name(os_name)} (a few minutes) ...", err=True)
        with _progress():
            ref, result = images.ensure_image_result(os_name, rebuild=rebuild, client=client)
        size_mb = dockerenv.image_size(client, ref) / 1e6
        if result is None:
            click.echo(f"{ref}  (cached, {size_mb:.0f} MB)")
        else:
            steps = ", ".join(f"{step} {seconds:.0f} s" for step, seconds in result.steps.items())
            click.echo(f"{ref}  (built in {result.seconds:.0f} s: {steps}; {size_mb:.0f} MB)")


@command.command("up")
@click.option("--hosts", "count", type=click.IntRange(min=1), default=2, show_default=True, help="Number of hosts.")
@click.option(
    "--os",
    "oses",
    multiple=True,
    metavar="OS[,OS]",
    help=f"OS per host, cycled over the hosts (repeat or comma-separate; one of {', '.join(OS_CHOICES)}; "
         "default: debian12,ubuntu2404).",
)
@click.option(
    "--fleet-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("inventory/lab.yml"),
    show_default=True,
    help="Where to write the lab fleet file.",
)
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    metavar="NAME[,NAME]",
    help="Mock NVML hardware profile per host, cycled over the hosts (default: h200x2); see docs/mock-nvml.md.",
)
@click.option(
    "--stack/--no-stack",
    default=True,
    show_default=True,
    help="Docker with the NVIDIA runtime and DCGM with dcgm-exporter in the fleet file, beside the driver and the "
         "CUDA stack (docs/lab.md); --no-stack leaves them out for a quicker lab.",
)
def up_cmd(count: int, oses: tuple[str, ...], fleet_file: Path, profiles: tuple[str, ...], stack: bool) -> None:
    """Start (or reconcile) the lab hosts, install their GPU hardware profile, write the fleet file."""
    from gpuprov.lab import containers, fleetfile, hardware, repo, state

    chosen = _split_oses(oses) or list(containers.DEFAULT_OSES)
    hardware_profiles = _split_list(profiles) or [hardware.DEFAULT_PROFILE]
    lab_dir = state.state_dir()
    with _progress():
        hosts = containers.up(count, chosen, profiles=hardware_profiles, lab_dir=lab_dir)
    path = fleetfile.write_fleet_file(fleet_file, hosts, state.key_path(lab_dir), state.known_hosts_path(lab_dir),
                                      repo.lab_fingerprint(lab_dir), stack=stack)
    for host in hosts:
        click.echo(f"{host.hostname}  {host.name}  {host.os}  admin@127.0.0.1:{host.port}  profile {host.profile}")
    click.echo(f"fleet file: {path}")


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON ({hosts: [...], up: bool}) instead of a table.")
def status_cmd(as_json: bool) -> None:
    """Show each lab host; exit 0 when all are running and answer SSH, 3 otherwise.

    With ``--json`` each host is ``{name (inventory name), container, os, state, port, ssh, up, reason}``
    (``reason``: why a host is not up and what repairs it; ``""`` when it is).
    """
    from gpuprov.lab import containers

    rows = containers.status()
    down = sorted(row.hostname for row in rows if not row.up)
    if as_json:
        hosts = [
            {"name": r.hostname, "container": r.name, "os": r.os, "state": r.state, "port": r.port,
             "ssh": r.ssh_ok, "up": r.up, "reason": r.reason}
            for r in rows
        ]  # fmt: skip
        click.echo(json.dumps({"hosts": hosts, "up": bool(rows) and not down}, indent=2))
    else:
        table = Table(title="gpuprov lab")
        for column in ("name", "host", "os", "state", "port", "ssh", "why not"):
            table.add_column(column)
        for r in rows:
            table.add_row(r.name, r.hostname, r.os, r.state, str(r.port or "-"), "yes" if r.ssh_ok else "no", r.reason)
        output.console().print(table)
    if not rows:
        raise HostsFailed("no lab hosts: run `gpuprov lab up`", [])
    if down:
        raise HostsFailed(f"lab hosts down or unreachable: {', '.join(down)}", down)


@command.command("down")
@click.option("--purge", is_flag=True, help="Also delete the lab key, known_hosts and state.")
def down_cmd(purge: bool) -> None:
    """Remove the lab containers (images and, without --purge, the key are kept)."""
    from gpuprov.lab import containers

    removed = containers.down(purge=purge)
    click.echo(f"removed {len(removed)} lab container(s)" + (" and the lab state" if purge else ""))
