"""``gpuprov verify``: exit codes, table, fleet summary and --json; one real local run of the role."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuprov import verify
from gpuprov.cli.__main__ import main


def _steps(**statuses: str) -> dict[str, Any]:
    steps = [{"name": n, "status": s, "evidence": {}, "reason": None if s == "pass" else f"{n} {s}",
              "duration_s": 0.1} for n, s in statuses.items()]
    summary = {k: sum(1 for s in statuses.values() if s == k) for k in ("pass", "fail", "skip")}
    return {"status": "fail" if summary["fail"] else "pass", "summary": summary, "steps": steps}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {"result": verify.FleetVerify(run_dir=tmp_path)}

    def run(fleet: Path | None, local: bool = False, limit: str | None = None,
            extravars: dict[str, str] | None = None) -> verify.FleetVerify:
        seen.update(fleet=fleet, local=local, limit=limit, extravars=extravars)
        result: verify.FleetVerify = seen["result"]
        return result

    monkeypatch.setattr(verify, "verify", run)
    return seen


def test_all_pass_or_skip_exits_0_and_writes_json(fake: dict[str, Any], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fake["result"].reports = {"localhost": _steps(gpus="pass", container="skip")}
    out = tmp_path / "verify.json"
    assert main(["verify", "--local", "--json", str(out), "-e", "verify_nccl_min_busbw_gbps=300"]) == 0
    assert fake["local"] is True and fake["extravars"] == {"verify_nccl_min_busbw_gbps": "300"}
    text = capsys.readouterr().out
    assert "localhost: PASS" in text and "container skip" in text and "1 ready" in text
    data = json.loads(out.read_text())
    assert data["exit_code"] == 0 and data["hosts"]["localhost"]["summary"] == {"pass": 1, "fail": 0, "skip": 1}


def test_failed_step_exits_1_and_names_it(fake: dict[str, Any], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("x")
    fake["result"].reports = {"a": _steps(gpus="pass", persistence="fail"), "b": _steps(gpus="pass")}
    assert main(["verify", str(fleet), "--limit", "a,b"]) == 1
    assert fake["fleet"] == fleet and fake["limit"] == "a,b" and fake["local"] is False
    text = capsys.readouterr().out
    assert "a: failed persistence" in text and "1 ready, 1 with failed steps" in text


def test_unreachable_host_exits_3(fake: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("x")
    fake["result"].reports = {"a": _steps(gpus="fail")}
    fake["result"].failed = {"b": "ssh: connect to host b port 22: Connection refused"}
    assert main(["verify", str(fleet)]) == 3
    assert "b: unreachable or failed: ssh: connect" in capsys.readouterr().out


def test_bad_input_exits_2(fake: dict[str, Any], tmp_path: Path) -> None:
    assert main(["verify"]) == 2
    assert main(["verify", "--local", "--json", str(tmp_path / "no" / "x.json")]) == 2
    assert main(["verify", "--local", "-e", "novalue"]) == 2
    assert "fleet" not in fake  # nothing ran


def test_bad_fleet_input_exits_2_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    assert main(["verify", str(tmp_path / "missing.yml")]) == 2
    assert main(["verify", "--local", "--limit", "a"]) == 2


def test_local_run_of_the_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs playbooks/verify.yml on this machine for real: whatever the hardware, every rung reports, the host
    file is written, and the exit code follows the report (1 exactly when a rung failed)."""
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    report_path = tmp_path / "host-report.json"
    out = tmp_path / "verify.json"
    args = ["verify", "--local", "--json", str(out), "-e", f"verify_report_path={report_path}",
            "-e", "verify_steps=gpus,nvidia_smi,driver_version,persistence,p2p,dcgm_diag"]
    if os.geteuid() != 0:
        pytest.skip("writes the report as root over a local connection")
    code = main(args)
    data = json.loads(out.read_text())
    host = data["hosts"]["localhost"]
    assert [s["name"] for s in host["steps"]][:3] == ["gpus", "nvidia_smi", "driver_version"]
    assert all(s["status"] in ("pass", "fail", "skip") for s in host["steps"])
    unselected = "not selected (fleet file: verify.skip; role variable verify_steps)"
    assert {s["name"] for s in host["steps"] if s["reason"] == unselected} == {
        "fabric_manager", "services", "mig", "cuda_sample", "nccl_allreduce", "container"}
    assert code == (1 if host["summary"]["fail"] else 0) == data["exit_code"]
    assert json.loads(report_path.read_text())["steps"] == host["steps"]


def test_local_with_a_fleet_needs_one_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    example = Path(__file__).resolve().parents[3] / "inventory" / "example.yml"
    assert main(["verify", str(example), "--local"]) == 2
    assert "--local runs on this machine as one host" in capsys.readouterr().err
