"""``--limit`` on every command that takes it: a pattern that names no host (an unset shell variable) is a usage
error, never "no limit"."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from gpuprov.cli import cli
from gpuprov.cli.__main__ import main

EXAMPLE = Path(__file__).resolve().parents[3] / "inventory" / "example.yml"


def _walk(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += _walk(command, (*path, name))
        elif command is not None and any(isinstance(p, click.Option) and "--limit" in p.opts for p in command.params):
            found.append((*path, name))
    return found


def _commands_with_limit() -> list[str]:
    """Every command of the CLI, sub-commands included, that has a ``--limit`` option (space-joined path)."""
    return sorted(" ".join(path) for path in _walk(cli))


def test_the_commands_that_take_limit_are_found() -> None:
    assert {"apply", "check", "verify", "doctor", "facts"} <= set(_commands_with_limit())


@pytest.mark.parametrize("command", _commands_with_limit())
@pytest.mark.parametrize("pattern", ["", "  ", ",", " , : "])
def test_a_pattern_naming_no_host_is_refused(command: str, pattern: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("hosts: {}\n")
    assert main([*command.split(), str(fleet), "--limit", pattern]) == 2
    err = capsys.readouterr().err
    assert "--limit" in err and "names no host or group" in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["apply", "verify", "facts"])
@pytest.mark.parametrize("pattern", ["!", "&", "~", "! ,", "&,!", "!:&"])
def test_a_pattern_of_operators_alone_is_refused(command: str, pattern: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("hosts: {}\n")
    assert main([command, str(fleet), "--limit", pattern]) == 2
    assert "names no host or group" in capsys.readouterr().err


@pytest.mark.parametrize("pattern", ["~(", "v100a[99999999999999999999]"])
def test_a_pattern_ansible_cannot_read_is_a_usage_error(pattern: str, tmp_path: Path) -> None:
    from gpuprov.exceptions import ConfigError
    from gpuprov.fleet import load_fleet
    from gpuprov.hostplay import check_limit
    from gpuprov.render import render_inventory

    inventory = render_inventory(load_fleet(EXAMPLE), tmp_path / "inventory")
    with pytest.raises(ConfigError, match="not a host pattern Ansible can read") as err:
        check_limit(inventory, pattern)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("command", ["verify", "doctor", "facts"])
def test_a_limit_matching_no_host_leaves_no_run_record(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(state))
    assert main([command, str(EXAMPLE), "--limit", "no-such-host"]) == 2
    assert "--limit no-such-host: matches no host" in capsys.readouterr().err
    runs = state / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())
