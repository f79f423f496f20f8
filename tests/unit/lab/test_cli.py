"""``gpuprov lab ...`` against injected lab functions: options, output and exit codes (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.cli.__main__ import main
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab import containers
from gpuprov.lab.containers import HostStatus
from gpuprov.lab.state import LabHost


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)


def _fake_up(calls: list[tuple[int, list[str]]]) -> Any:
    def up(count: int, oses: list[str], **_: Any) -> list[LabHost]:
        calls.append((count, list(oses)))
        return [
            LabHost(name, hostname, os_name, 22200 + n)
            for n, (name, hostname, os_name) in enumerate(containers.plan(count, oses), start=1)
        ]

    return up


def test_up_defaults_to_one_host_per_os_and_writes_fleet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[int, list[str]]] = []
    monkeypatch.setattr(containers, "up", _fake_up(calls))
    assert main(["lab", "up"]) == 0
    assert calls == [(2, ["debian12", "ubuntu2404"])]
    doc = yaml.safe_load((tmp_path / "inventory" / "lab.yml").read_text())
    assert doc["hosts"]["lab-debian12-1"]["settings"]["os"] == "debian12"
    assert doc["hosts"]["lab-ubuntu2404-2"]["port"] == 22202
    assert doc["ssh"]["key"] == str(tmp_path / "state" / "lab" / "id_ed25519")


def test_up_os_repeated_and_comma_separated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[int, list[str]]] = []
    monkeypatch.setattr(containers, "up", _fake_up(calls))
    fleet = tmp_path / "x" / "fleet.yml"
    assert main(["lab", "up", "--hosts", "3", "--os", "ubuntu2004,debian12", "--os", "debian12",
                 "--fleet-file", str(fleet)]) == 0  # fmt: skip
    assert calls == [(3, ["ubuntu2004", "debian12", "debian12"])]
    assert list(yaml.safe_load(fleet.read_text())["hosts"]) == [
        "lab-ubuntu2004-1", "lab-debian12-2", "lab-debian12-3",
    ]  # fmt: skip


def test_up_rejects_unknown_os(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "up", "--os", "ubuntu2604"]) == 2
    err = capsys.readouterr().err
    assert "'ubuntu2604' is not one of debian12, ubuntu2004, ubuntu2204, ubuntu2404" in err


def test_up_environment_missing_exits_4(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_: Any, **__: Any) -> list[LabHost]:
        raise EnvironmentMissing("cannot reach the Docker daemon: start it")

    monkeypatch.setattr(containers, "up", broken)
    assert main(["lab", "up"]) == 4
    assert "start it" in capsys.readouterr().err


def _rows(*states: tuple[str, bool]) -> list[HostStatus]:
    return [
        HostStatus(f"gpuprov-lab-{n}", f"lab-debian12-{n}", "debian12", state, 22200 + n, ok)
        for n, (state, ok) in enumerate(states, start=1)
    ]


def test_status_all_up_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(containers, "status", lambda **_: _rows(("running", True), ("running", True)))
    assert main(["lab", "status"]) == 0
    out = capsys.readouterr().out
    assert "gpuprov-lab-2" in out and "22202" in out


@pytest.mark.parametrize("rows", [[("running", True), ("exited", False)], [("running", False)], []])
def test_status_any_down_exits_3(monkeypatch: pytest.MonkeyPatch, rows: list[tuple[str, bool]]) -> None:
    monkeypatch.setattr(containers, "status", lambda **_: _rows(*rows))
    assert main(["lab", "status"]) == 3


def test_status_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(containers, "status", lambda **_: _rows(("running", True), ("missing", False)))
    assert main(["lab", "status", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["up"] is False
    assert doc["hosts"][1] == {
        "name": "lab-debian12-2", "container": "gpuprov-lab-2", "os": "debian12",
        "state": "missing", "port": 22202, "ssh": False, "up": False, "reason": "",
    }  # fmt: skip


def test_down_purge(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Any] = {}

    def down(*, purge: bool = False, **_: Any) -> list[str]:
        seen["purge"] = purge
        return ["gpuprov-lab-1"]

    monkeypatch.setattr(containers, "down", down)
    assert main(["lab", "down", "--purge"]) == 0
    assert seen == {"purge": True}
    assert "removed 1 lab container" in capsys.readouterr().out


def test_up_prints_each_step_of_the_lab_to_stderr(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The lab's progress log (gpuprov.lab at INFO) reaches stderr during `lab up`, with elapsed seconds, and
    only then: the logger is as it was afterwards."""
    import logging

    def up(count: int, oses: list[str], **_: Any) -> list[LabHost]:
        logging.getLogger("gpuprov.lab.containers").info("%s: installing the lab key", "lab-debian12-1")
        return [LabHost("gpuprov-lab-1", "lab-debian12-1", "debian12", 22201)]

    monkeypatch.setattr(containers, "up", up)
    before = (logging.getLogger("gpuprov.lab").level, logging.getLogger("gpuprov.lab").propagate)
    assert main(["lab", "up", "--hosts", "1"]) == 0
    err = capsys.readouterr().err
    assert "s] lab-debian12-1: installing the lab key" in err and err.startswith("lab: [")
    assert (logging.getLogger("gpuprov.lab").level, logging.getLogger("gpuprov.lab").propagate) == before


def test_up_provisions_the_whole_stack_unless_no_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The main job's fleet file asks for Docker with the NVIDIA runtime and monitoring; --no-stack leaves them
    out."""
    from gpuprov.lab import repo

    monkeypatch.setattr(containers, "up", _fake_up([]))
    monkeypatch.setattr(repo, "lab_fingerprint", lambda lab_dir: "A" * 40)
    assert main(["lab", "up"]) == 0
    settings = yaml.safe_load((tmp_path / "inventory" / "lab.yml").read_text())["settings"]
    assert settings["container_runtime"] == "docker" and settings["monitoring"]["enabled"] is True
    assert main(["lab", "up", "--no-stack"]) == 0
    settings = yaml.safe_load((tmp_path / "inventory" / "lab.yml").read_text())["settings"]
    assert settings["container_runtime"] == "none" and settings["monitoring"]["enabled"] is False
