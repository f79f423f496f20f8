"""Fleet-file side of the driver branch change and of the controller-file checks: the
``driver.allow_branch_change`` confirmation merges per layer, the SSH key and known_hosts files the fleet names
are checked with ``check_files`` (exit 2 before anything runs), and ``version`` / ``bios_check.severity`` get
errors that name the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import findings

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import load_fleet
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.types import finding_ids
from gpuprov.fleet.validate import local_file_problem, validate_loaded

DATA = Path(__file__).resolve().parents[2] / "data"
HOSTS = "settings: {os: ubuntu2204, gpus: {model: T4, count: 1}}\nhosts:\n  gpu01: {address: 10.0.0.11%s}\n"


def _problems(text: str, *, check_files: bool = False) -> dict[str, str]:
    """Field path -> "problem - fix" of every problem in ``text``; {} when it is valid."""
    try:
        validate_loaded(load_text(text, "t.yml"), Path("t.yml"), check_files=check_files)
    except FleetValidationError as exc:
        return {p.path: f"{p.problem} - {p.fix}" for p in exc.problems}
    return {}


def test_allow_branch_change_defaults_false_and_merges_per_layer() -> None:
    fleet = load_fleet(DATA / "good" / "driver_branch_change.yml")
    allowed = {name: host.settings["driver"]["allow_branch_change"] for name, host in fleet.hosts.items()}
    assert allowed == {"gpu01": True, "gpu02": False, "gpu03": False}
    assert fleet.defaults["driver"]["allow_branch_change"] is False
    assert fleet.groups["h100"] == {"driver": {"allow_branch_change": True}}
    assert fleet.hosts["gpu03"].layer == {"driver": {"allow_branch_change": False}}


@pytest.mark.parametrize("value", ['"yes"', '"true"', "1", "null", "[true]"])
def test_allow_branch_change_must_be_a_boolean(value: str) -> None:
    text = "version: 1\n" + HOSTS.replace("count: 1}", f"count: 1}}, driver: {{allow_branch_change: {value}}}") % ""
    problems = _problems(text)
    assert list(problems) == ["settings.driver.allow_branch_change"], problems
    assert "true or false" in problems["settings.driver.allow_branch_change"]


@pytest.mark.parametrize(("value", "problem"), [
    ('"1"', "expected the number 1, got the string '1' - write `version: 1` without quotes"),
    ("1.0", "unsupported fleet file version 1.0"),
    ("true", "expected the fleet file version as a number, got a boolean"),
    ("2", "unsupported fleet file version 2"),
    ("{a: 1}", "expected the fleet file version as a number, got a mapping"),
])
def test_version_must_be_the_number_one(value: str, problem: str) -> None:
    problems = _problems(f"version: {value}\n" + HOSTS % "")
    assert list(problems) == ["version"]
    assert problems["version"].startswith(problem)
    assert _problems("version: 1\n" + HOSTS % "") == {}


def test_bios_check_severity_keys_are_finding_ids() -> None:
    assert finding_ids() == tuple(findings.FINDING_IDS) and "acs_redirect" in finding_ids()
    ok = "version: 1\n" + HOSTS % ", settings: {bios_check: {severity: {acs_redirect: fail, ram_low: info}}}"
    assert _problems(ok) == {}
    bad = "version: 1\n" + HOSTS % ", settings: {bios_check: {severity: {acs_redirct: fail, bogus: warn}}}"
    problems = _problems(bad)
    assert problems["hosts.gpu01.settings.bios_check.severity.acs_redirct"] == (
        "unknown bios_check finding 'acs_redirct' - did you mean 'acs_redirect'?")
    assert "pcie_link_degraded" in problems["hosts.gpu01.settings.bios_check.severity.bogus"]
    wrong = "version: 1\n" + HOSTS % ", settings: {bios_check: {severity: {ram_low: fatal}}}"
    assert list(_problems(wrong)) == ["hosts.gpu01.settings.bios_check.severity.ram_low"]


def _ssh_fleet(tmp_path: Path, ssh: str, host: str = "") -> Path:
    path = tmp_path / "fleet.yml"
    path.write_text(f"version: 1\nssh: {{{ssh}}}\n" + HOSTS % host, encoding="utf-8")
    return path


def test_missing_ssh_files_are_reported_with_field_line_and_path(tmp_path: Path) -> None:
    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    host_key = tmp_path / "other_key"
    path = _ssh_fleet(tmp_path, f"key: {key}, known_hosts: {known}", f", key: {host_key}")
    load_fleet(path)  # without check_files the paths are not looked at (render / CI on another machine)
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path, check_files=True)
    got = {p.path: (p.line, p.problem) for p in info.value.problems}
    assert got == {
        "ssh.key": (2, f"SSH private key {key} does not exist"),
        "ssh.known_hosts": (2, f"known_hosts file {known} does not exist"),
        "hosts.gpu01.key": (5, f"SSH private key {host_key} does not exist"),
    }
    for problem in info.value.problems:
        assert str(problem).startswith(f"{path}:{problem.line}: {problem.path}: ") and " - " in str(problem)
    for file in (key, known, host_key):
        file.write_text("x", encoding="utf-8")
    assert load_fleet(path, check_files=True).hosts["gpu01"].connection.key == str(host_key)


def test_known_hosts_is_not_checked_when_host_key_checking_is_off(tmp_path: Path) -> None:
    path = _ssh_fleet(tmp_path, f"known_hosts: {tmp_path / 'nope'}, host_key_checking: false")
    assert load_fleet(path, check_files=True).hosts


def test_local_file_problem_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert local_file_problem("~/missing") == f"does not exist ({tmp_path / 'missing'})"
    (tmp_path / "key").write_text("k", encoding="utf-8")
    assert local_file_problem("~/key") is None
    assert local_file_problem(str(tmp_path)) == "is not a regular file"
    (tmp_path / "key").chmod(0)
    try:
        expected = None if os.geteuid() == 0 else "is not readable by this user"
        assert local_file_problem(str(tmp_path / "key")) == expected
    finally:
        (tmp_path / "key").chmod(0o600)


def test_relative_ssh_paths_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-playbook runs in gpuprov's run directory, so a relative key path that exists here would not be
    found there: validate names the field and asks for an absolute or ~/ path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("k", encoding="utf-8")
    (tmp_path / "kh").write_text("h", encoding="utf-8")
    path = _ssh_fleet(tmp_path, "key: keys/id, known_hosts: kh")
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path, check_files=True)
    got = {p.path: p.problem for p in info.value.problems}
    assert set(got) == {"ssh.key", "ssh.known_hosts"}
    assert all("relative path" in problem for problem in got.values()), got


def test_known_hosts_path_with_spaces_is_refused(tmp_path: Path) -> None:
    """ssh splits UserKnownHostsFile at whitespace (several files), so such a path cannot be passed on."""
    spaced = tmp_path / "my hosts"
    spaced.write_text("h", encoding="utf-8")
    path = _ssh_fleet(tmp_path, f"known_hosts: '{spaced}'")
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path, check_files=True)
    assert [p.path for p in info.value.problems] == ["ssh.known_hosts"]
    assert "whitespace" in info.value.problems[0].problem
