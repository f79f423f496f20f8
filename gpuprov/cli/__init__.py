"""The ``gpuprov`` command line: one module per command under :mod:`gpuprov.cli`.

Each command module exposes a :class:`click.Command` named ``command``; :data:`COMMANDS` maps the
command name to its module and the group imports a module only when its command runs, so
``gpuprov validate`` never pays for importing ansible-runner.
"""

from __future__ import annotations

import importlib

import click

from gpuprov import __version__

#: command name -> module under gpuprov.cli, in the order ``gpuprov --help`` lists them.
COMMANDS: dict[str, str] = {
    "validate": "validate",
    "render": "render",
    "matrix": "matrix",
    "roles": "roles",
    "apply": "apply",
    "check": "check",
    "lab": "lab",
    "facts": "facts",
    "doctor": "doctor",
    "verify": "verify",
    "images": "images",
    "bundle": "bundle",
    "upgrade": "upgrade",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        module_name = COMMANDS.get(name)
        if module_name is None:
            return None
        try:
            module = importlib.import_module(f"gpuprov.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpuprov.cli.{module_name}":
                return None  # command not built yet
            raise
        command: click.Command = module.command
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprov")
def cli() -> None:
    """Provision multi-GPU servers from one validated fleet file."""
