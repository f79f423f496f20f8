"""``gpuprov facts``: output and exit codes, with the facts injected (no NVML or hosts needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nvml_fake import FakeNvml

import gpuprov.cli.facts as cli_facts
from gpuprov.cli.__main__ import main
from gpuprov.facts import FleetFacts, collect_with


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Make ``local_facts`` answer from the fake; tests change ``state['fake']``."""
    monkeypatch.setenv("COLUMNS", "200")  # rich would wrap the table at 80 columns
    state: dict[str, Any] = {"fake": FakeNvml()}
    monkeypatch.setattr(cli_facts, "local_facts", lambda: collect_with(state["fake"]))
    return state


def test_table(local: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "0000:00:07.0" in out and "CUDA 13.0" in out


def test_json(local: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["count"] == 2 and data["gpus"][0]["bar1_total_bytes"] == 274877906944


def test_unavailable(local: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    local["fake"] = FakeNvml(init_error="NVML_ERROR_DRIVER_NOT_LOADED")
    assert main(["facts"]) == 4
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in capsys.readouterr().err
    assert main(["facts", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["available"] is False
    assert main(["facts", "--json", "--strict"]) == 4
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error_name"] == "NVML_ERROR_DRIVER_NOT_LOADED"
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in captured.err


def test_limit_needs_a_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "--limit", "gpu01"]) == 2
    assert "--limit needs a fleet file" in capsys.readouterr().err


def test_missing_fleet_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", str(tmp_path / "nope.yml")]) == 2
    assert "no such fleet file" in capsys.readouterr().err


@pytest.mark.parametrize(("failed", "strict", "code"), [({}, False, 0), ({"b": "unreachable"}, False, 3),
                                                         ({}, True, 3)])
def test_fleet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
               failed: dict[str, str], strict: bool, code: int) -> None:
    hosts = {"a": collect_with(FakeNvml()), "c": collect_with(FakeNvml(lost={0: "query"}))}
    seen: dict[str, Any] = {}

    def fake_fleet_facts(path: Path, limit: str | None) -> FleetFacts:
        seen.update(path=path, limit=limit)
        return FleetFacts(hosts=hosts, failed=dict(failed), run_dir=tmp_path)

    monkeypatch.setattr(cli_facts, "fleet_facts", fake_fleet_facts)
    argv = ["facts", "fleet.yml", "--limit", "a:c", "--json"] + (["--strict"] if strict else [])
    assert main(argv) == code
    data = json.loads(capsys.readouterr().out)
    assert seen == {"path": Path("fleet.yml"), "limit": "a:c"}
    assert set(data["hosts"]) == {"a", "c"}
    if strict:
        assert data["failed"] == {"c": "lost GPU(s) [0]"}
    else:
        assert data["failed"] == failed


def test_fleet_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(cli_facts, "fleet_facts", lambda path, limit: FleetFacts(
        hosts={"gpu01": collect_with(FakeNvml())}, failed={"gpu02": "unreachable: ssh timed out"}, run_dir=tmp_path))
    assert main(["facts", "fleet.yml"]) == 3
    out = capsys.readouterr().out
    assert "gpu01" in out and "gpu02: unreachable: ssh timed out" in out and "NVIDIA H200" in out
