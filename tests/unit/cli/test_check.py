"""``gpuprov check FILE --json PATH``: the drift report joins apply --check's summary and its exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuprov import drift_report
from gpuprov.cli import check
from gpuprov.cli.__main__ import main
from gpuprov.engine import ApplyOptions
from gpuprov.hostplay import TaskResults


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    state: dict[str, Any] = {"code": 0, "drift": drift_report.FleetDrift(run_dir=tmp_path), "drift_runs": 0,
                             "failed_hosts": []}  # fmt: skip

    def execute(options: ApplyOptions, console: Any, then: Any = None, results: Any = None) -> int:
        state.update(options=options, then=then, results=results)
        if options.json_path is not None:
            options.json_path.write_text(json.dumps({"check": True, "hosts": {"a": {"changed": 0}},
                                                     "failed_hosts": state["failed_hosts"]}))  # fmt: skip
        code: int = state["code"]
        return code

    def drift_of(results: Any, failed: dict[str, str], seen: Any, run_dir: Any) -> drift_report.FleetDrift:
        state["drift_runs"] += 1
        state["drift_of"] = (results, failed, set(seen))
        result: drift_report.FleetDrift = state["drift"]
        return result

    monkeypatch.setattr(check, "execute", execute)
    monkeypatch.setattr(drift_report, "drift_of", drift_of)
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


def test_the_drift_probe_runs_after_the_sites_plays_in_the_same_run(fakes: dict[str, Any], tmp_path: Path) -> None:
    """One run, so a local connection given with -e (the real H200 host) reaches the drift probe as the plays,
    and a host the plays failed is reported failed, not probed again."""
    fakes["failed_hosts"], fakes["code"] = ["a"], 3
    out = tmp_path / "check.json"
    assert main(["check", str(tmp_path / "fleet.yml"), "--json", str(out), "-e", "ansible_connection=local"]) == 3
    assert fakes["then"] is drift_report.DRIFT_PLAY and fakes["results"] is fakes["drift_of"][0]
    assert "ansible_connection=local" in fakes["options"].extravars
    assert fakes["drift_of"][1:] == ({"a": "failed before the drift probe"}, {"a"})


def test_drift_of_a_run_compares_what_each_host_published() -> None:
    results = TaskResults()
    fact = {"desired": {}, "installed": {}}
    results({"event": "runner_on_ok", "event_data": {"host": "a", "task": "Drift | Publish",
                                                     "res": {"ansible_facts": {"verify_drift": fact}}}})  # fmt: skip
    report = drift_report.drift_of(results, {"c": "unreachable before the drift probe"}, ["a", "b", "c"], None)
    assert set(report.hosts) == {"a"}
    assert report.failed == {"b": "the drift probe published nothing", "c": "unreachable before the drift probe"}
