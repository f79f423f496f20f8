"""``gpuprov check FILE --json PATH``: the drift report joins apply --check's summary and its exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuprov import drift
from gpuprov.cli import check
from gpuprov.cli.__main__ import main
from gpuprov.engine import ApplyOptions


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    state: dict[str, Any] = {"code": 0, "drift": drift.FleetDrift(run_dir=tmp_path), "drift_runs": 0}

    def execute(options: ApplyOptions, console: Any) -> int:
        state["options"] = options
        if options.json_path is not None:
            options.json_path.write_text(json.dumps({"check": True, "hosts": {"a": {"changed": 0}}}))
        code: int = state["code"]
        return code

    def fleet_drift(fleet: Path, limit: str | None = None, extravars: Any = None) -> drift.FleetDrift:
        state["drift_runs"] += 1
        state["drift_extravars"] = extravars
        result: drift.FleetDrift = state["drift"]
        return result

    monkeypatch.setattr(check, "execute", execute)
    monkeypatch.setattr(drift, "fleet_drift", fleet_drift)
    (tmp_path / "fleet.yml").write_text("x")
    return state


def _components(**in_sync: bool) -> dict[str, dict[str, Any]]:
    return {c: {"desired": "d", "installed": "i", "in_sync": s, "note": None if s else f"{c} differs"}
            for c, s in in_sync.items()}


def test_without_json_no_drift_probe_runs(fakes: dict[str, Any], tmp_path: Path) -> None:
    assert main(["check", str(tmp_path / "fleet.yml")]) == 0
    assert fakes["drift_runs"] == 0 and fakes["options"].check and fakes["options"].diff


def test_in_sync_exits_0_and_writes_both_reports(fakes: dict[str, Any], tmp_path: Path) -> None:
    fakes["drift"].hosts = {"a": _components(driver=True, nccl=True)}
    out = tmp_path / "check.json"
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["check"] is True and data["hosts"] == {"a": {"changed": 0}}
    assert data["drift"]["hosts"]["a"]["driver"]["in_sync"] and data["drift"]["drifted"] == {}
    assert data["exit_code"] == 0


def test_component_drift_exits_1(fakes: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fakes["drift"].hosts = {"a": _components(driver=True, nccl=False)}
    out = tmp_path / "check.json"
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(out)]) == 1
    assert json.loads(out.read_text())["drift"]["drifted"] == {"a": ["nccl"]}
    assert "drift: a: nccl" in capsys.readouterr().out


def test_unreachable_wins_over_drift(fakes: dict[str, Any], tmp_path: Path) -> None:
    fakes["drift"].hosts = {"a": _components(nccl=False)}
    fakes["drift"].failed = {"b": "unreachable"}
    out = tmp_path / "check.json"
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(out)]) == 3
    assert json.loads(out.read_text())["exit_code"] == 3


def test_play_drift_alone_still_exits_1(fakes: dict[str, Any], tmp_path: Path) -> None:
    fakes["code"] = 1
    fakes["drift"].hosts = {"a": _components(nccl=True)}
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(tmp_path / "c.json")]) == 1


def test_unwritable_json_exits_2_before_running(fakes: dict[str, Any], tmp_path: Path) -> None:
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(tmp_path / "no" / "c.json")]) == 2
    assert "options" not in fakes


def test_drift_probe_gets_the_runs_extra_vars(fakes: dict[str, Any], tmp_path: Path) -> None:
    """A local connection given with -e (the real H200 host) reaches the drift probe too, not only the play."""
    out = tmp_path / "check.json"
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(out), "-e", "ansible_connection=local"]) == 0
    assert fakes["drift_extravars"] == {"ansible_connection": "local"}
