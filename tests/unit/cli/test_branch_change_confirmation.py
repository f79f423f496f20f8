"""CLI side of the driver branch change: ``--allow-branch-change`` reaches the run as the nvidia_driver role's
confirmation (``apply``, ``apply --check`` and ``check``), conflicts with a contrary ``-e`` are refused before
anything runs, and ``gpuprov validate`` checks the SSH files the fleet names (exit 2) unless ``--no-file-checks``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprov.cli import apply, check
from gpuprov.cli.__main__ import main
from gpuprov.engine import ApplyOptions
from gpuprov.runner import parse_extravars

DATA = Path(__file__).resolve().parents[2] / "data"
FLEET = DATA / "good" / "minimal.yml"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[ApplyOptions]:
    """Replaces the engine in apply and check; collects the options each run would have used."""
    seen: list[ApplyOptions] = []

    def execute(options: ApplyOptions, console: Any, **_: Any) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(apply, "execute", execute)
    monkeypatch.setattr(check, "execute", execute)
    return seen


@pytest.mark.parametrize("argv", [["apply"], ["apply", "--check"], ["check"]])
def test_allow_branch_change_flag_sets_the_role_confirmation_for_the_run(runs: list[ApplyOptions],
                                                                      argv: list[str]) -> None:
    assert main([*argv, str(FLEET), "-e", "foo=bar", "--allow-branch-change"]) == 0
    assert parse_extravars(runs[-1].extravars) == {"foo": "bar", "gpuprov_driver_allow_branch_change": "true"}
    assert runs[-1].check == (argv != ["apply"])
    assert main([*argv, str(FLEET), "-e", "foo=bar"]) == 0
    assert parse_extravars(runs[-1].extravars) == {"foo": "bar"}


def test_allow_branch_change_flag_contradicted_by_extra_var_exits_2(runs: list[ApplyOptions],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["apply", str(FLEET), "--allow-branch-change", "-e", "gpuprov_driver_allow_branch_change=false"])
    assert code == 2 and not runs
    assert "--allow-branch-change contradicts -e gpuprov_driver_allow_branch_change=false" in capsys.readouterr().err
    for true in ("true", "y", "T"):  # any of Ansible's true spellings agrees with the flag
        extra = f"gpuprov_driver_allow_branch_change={true}"
        assert main(["apply", str(FLEET), "--allow-branch-change", "-e", extra]) == 0


def test_allow_branch_change_flag_is_in_the_help() -> None:
    from click.testing import CliRunner

    for command in (apply.command, check.command):
        result = CliRunner().invoke(command, ["--help"])
        assert "--allow-branch-change" in result.output and "allow_branch_change" in result.output


def test_validate_reports_missing_ssh_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "id_ed25519"
    path = tmp_path / "fleet.yml"
    path.write_text(FLEET.read_text(encoding="utf-8").replace("version: 1\n", f"version: 1\nssh: {{key: {key}}}\n"),
                    encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}:3: ssh.key: SSH private key {key} does not exist - ")
    assert "1 problem in" in err
    assert main(["validate", "--no-file-checks", "-q", str(path)]) == 0
    key.write_text("k", encoding="utf-8")
    assert main(["validate", "-q", str(path)]) == 0


def test_validate_summary_names_the_confirmation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(DATA / "good" / "driver_branch_change.yml")]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  gpu")}
    assert "branch change allowed" in lines["gpu01"]
    assert "branch change allowed" not in lines["gpu02"] and "branch change allowed" not in lines["gpu03"]
