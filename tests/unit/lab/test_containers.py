"""Layout planning and the ssh command line of the lab hosts (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab.containers import HostStatus, lab_name, plan, ssh_argv
from gpuprov.lab.state import LabHost


def test_plan_default_is_one_of_each() -> None:
    assert plan(2) == [
        ("gpuprov-lab-1", "lab-debian12-1", "debian12"),
        ("gpuprov-lab-2", "lab-ubuntu2404-2", "ubuntu2404"),
    ]


def test_a_named_lab_has_containers_of_its_own() -> None:
    assert plan(2, ["ubuntu2204"], "ci1") == [
        ("gpuprov-lab-ci1-1", "lab-ubuntu2204-1", "ubuntu2204"),
        ("gpuprov-lab-ci1-2", "lab-ubuntu2204-2", "ubuntu2204"),
    ]
    assert lab_name({}) == "" and lab_name({"GPUPROV_LAB_NAME": "ci1"}) == "ci1"


@pytest.mark.parametrize("bad", ["CI", "ci-1", "a" * 17, "../x"])
def test_a_bad_lab_name_is_a_usage_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="GPUPROV_LAB_NAME") as err:
        lab_name({"GPUPROV_LAB_NAME": bad})
    assert err.value.exit_code == 2


def test_plan_cycles_over_oses() -> None:
    assert [os for _, _, os in plan(5, ["ubuntu2004", "debian12"])] == [
        "ubuntu2004", "debian12", "ubuntu2004", "debian12", "ubuntu2004",
    ]  # fmt: skip


@pytest.mark.parametrize(("hosts", "oses"), [(0, ["debian12"]), (1, []), (1, ["centos7"])])
def test_plan_rejects_bad_input(hosts: int, oses: list[str]) -> None:
    with pytest.raises(ConfigError):
        plan(hosts, oses)


def test_ssh_keeps_host_key_checking_on(tmp_path: Path) -> None:
    argv = ssh_argv(LabHost("gpuprov-lab-1", "lab-debian12-1", "debian12", 22201), tmp_path, "uname -a")
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in joined
    assert argv[-2:] == ["admin@127.0.0.1", "uname -a"]
    assert argv[argv.index("-p") + 1] == "22201"


def test_host_status_up() -> None:
    assert HostStatus("c", "h", "debian12", "running", 1, True).up
    assert not HostStatus("c", "h", "debian12", "running", 1, False).up
    assert not HostStatus("c", "h", "debian12", "exited", 1, True).up
