"""``gpuprov doctor`` command: exit codes, text and JSON output, --fix, on injected facts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuprov import doctor
from gpuprov.cli.__main__ import main
from gpuprov.exceptions import EnvironmentMissing

HEALTHY: dict[str, Any] = {"nvml": {"available": True, "count": 1, "gpus": [
    {"index": 0, "lost": False, "pci_bus_id_sysfs": "0000:00:06.0", "persistence_mode": True, "live": {}}]}}
PERSISTENCE_OFF: dict[str, Any] = {"nvml": {"available": True, "count": 1, "gpus": [
    {"index": 0, "lost": False, "pci_bus_id_sysfs": "0000:00:06.0", "persistence_mode": False, "live": {}}]}}


@pytest.fixture
def facts(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Facts local_facts returns, in order (the last one repeats)."""
    queue: list[dict[str, Any]] = []

    def fake(*_args: Any, **_kw: Any) -> dict[str, Any]:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(doctor, "local_facts", fake)
    return queue


def test_healthy_exits_0(facts: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    facts.append(HEALTHY)
    assert main(["doctor", "--local"]) == 0
    assert "no problem found" in capsys.readouterr().out


def test_problem_exits_1_and_prints_fix(facts: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    facts.append(PERSISTENCE_OFF)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "persistence_off" in out and "fix: nvidia-smi -pm 1" in out and "--fix runs it" in out


def test_json(facts: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    facts.append(PERSISTENCE_OFF)
    assert main(["doctor", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data["diagnoses"]] == ["persistence_off"] and data["fixes"] == []


def test_fix_runs_only_the_safe_action(facts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    facts.extend([PERSISTENCE_OFF, HEALTHY])
    ran: list[list[str]] = []

    def fake_run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "Enabled persistence mode for GPU 00000000:00:06.0.\n", "")

    monkeypatch.setattr(doctor.subprocess, "run", fake_run)
    assert main(["doctor", "--fix"]) == 0
    assert ran == [["nvidia-smi", "-pm", "1"]]
    out = capsys.readouterr().out
    assert "fixed persistence_off: ran `nvidia-smi -pm 1`: ok" in out and "no problem found" in out


def test_unfixable_is_not_run(facts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    facts.append({"nvml": {"available": False, "error_name": "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "error": "x"}})
    monkeypatch.setattr(doctor.subprocess, "run", lambda *a, **k: pytest.fail("must not run anything"))
    assert main(["doctor", "--fix"]) == 1


def test_nothing_checkable_exits_4(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_a: Any, **_k: Any) -> dict[str, Any]:
        raise EnvironmentMissing("pynvml missing and no PCI bus")

    monkeypatch.setattr(doctor, "local_facts", missing)
    assert main(["doctor"]) == 4


def test_bad_input_exits_2(tmp_path: Path) -> None:
    assert main(["doctor", str(tmp_path / "missing.yml")]) == 2
    assert main(["doctor", str(tmp_path / "x.yml"), "--local"]) == 2
    assert main(["doctor", "--limit", "a"]) == 2
    assert main(["doctor", "--window", "-1"]) == 2
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("x")
    assert main(["doctor", str(fleet), "--devices", "/dev/nvidia*"]) == 2
    assert main(["doctor", "--yes"]) == 2


def test_fleet_unreachable_exits_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text("x")
    result = doctor.FleetDoctor(diagnoses={"a": []}, failed={"b": "unreachable"}, run_dir=tmp_path)
    monkeypatch.setattr(doctor, "fleet_doctor", lambda *a, **k: result)
    assert main(["doctor", str(fleet)]) == 3
    assert "b: unreachable or failed" in capsys.readouterr().out


def test_doctor_events_read_registered_results() -> None:
    events = doctor.DoctorEvents()

    def ok(task: str, res: dict[str, Any]) -> None:
        events({"event": "runner_on_ok", "event_data": {"host": "h", "task": task, "res": res}})

    gpus = {"available": True, "count": 1, "gpus": [{"index": 0, "live": {"utilization_gpu_pct": 7}}]}
    ok("Read NVML facts", {"ansible_facts": {"gpuprov_gpus": gpus}})
    ok("Sample NVML utilisation", {"results": [{"ansible_facts": {"gpuprov_gpus": gpus}}] * 3})
    ok("List processes holding the NVIDIA device files",
       {"rc": 0, "stdout": "", "stderr": "/dev/nvidia0: root 5 F.... python\n"})
    ok("Read kernels and DKMS", {"running_kernel": "k", "kernels": [], "problems": []})
    events({"event": "verbose", "stdout": "Read NVML facts"})
    facts = events.facts["h"]
    assert facts["nvml"] == gpus and facts["samples"] == {"gpus": {"0": [7, 7, 7]}}
    assert facts["holders"] == [{"pid": 5, "command": "python", "devices": ["/dev/nvidia0"]}]
    assert facts["kernel"]["running_kernel"] == "k"
