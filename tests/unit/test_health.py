"""Verify and doctor tell the same truth about a host: for each rule they share (gpuprov_health,
gpuprov_miglayout), a host the verify ladder fails has the matching doctor diagnosis, and a host it passes has
none of them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nvml_fake import FakeNvml
from test_verify import LAYOUTS, MIG_LGI, FakeRun, _ladder, _mig_nvml, systemctl, unit

from gpuprov import doctor
from gpuprov.facts import collect_with

#: verify step -> the doctor diagnosis id of the same rule
SHARED = {"gpus": "gpus_unexpected", "driver_version": "driver_version_mismatch", "persistence": "persistence_off",
          "fabric_manager": "fabric_manager", "services": "service_stopped"}


def _no_fabric(nvml: dict[str, Any]) -> None:
    for gpu in nvml["gpus"]:
        gpu["fabric"] = None


def _training(nvml: dict[str, Any]) -> None:
    nvml["gpus"][1]["fabric"] = {"state": "in_progress", "status": "NVML_SUCCESS"}


def _persistence_off(nvml: dict[str, Any]) -> None:
    nvml["gpus"][0]["persistence_mode"] = False


def _stale_module(nvml: dict[str, Any]) -> None:
    nvml["kernel_module_version"] = "580.95.05"


#: systemd units per case (none: systemd is not the init)
SERVICES: dict[str, dict[str, dict[str, str]]] = {
    "persistence daemon stopped": {"nvidia-persistenced.service": unit(active="inactive", sub="dead")},
    "all units run": {"nvidia-persistenced.service": unit(), "gpuprov-mig.service": unit(
        active="inactive", sub="dead", kind="oneshot")},
}

CASES: dict[str, tuple[Callable[[dict[str, Any]], None] | None, dict[str, Any], list[str], set[str]]] = {
    # name: (change to the capture's facts, fleet expectations, daemons running, verify steps that fail)
    "healthy": (None, {"nvswitch": True, "count": 2, "model": "H200"}, [], set()),
    "other model and count": (None, {"count": 8, "model": "A100"}, [], {"gpus"}),
    "module of another version": (_stale_module, {}, [], {"driver_version"}),
    "pinned version differs": (None, {"driver_version": "570.195.03"}, [], {"driver_version"}),
    "persistence off": (_persistence_off, {}, [], {"persistence"}),
    "fabric still training": (_training, {"nvswitch": True}, ["nv-fabricmanager"], {"fabric_manager"}),
    "no fabric state, no fabric manager": (_no_fabric, {"nvswitch": True}, [], {"fabric_manager"}),
    "no fabric state, fabric manager runs": (_no_fabric, {"nvswitch": True}, ["nv-fabricmanager"], set()),
    "persistence daemon stopped": (None, {}, [], {"services"}),
    "all units run": (None, {}, [], set()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_and_doctor_agree(case: str, tmp_path: Path) -> None:
    change, expected, daemons, failing = CASES[case]
    nvml = copy.deepcopy(collect_with(FakeNvml()))
    if change is not None:
        change(nvml)
    services = SERVICES.get(case)
    if services is not None:
        (tmp_path / "systemd").mkdir()
    ladder = _ladder(nvml, tmp_path, FakeRun({"systemctl": systemctl(services or {})}), expected=expected)
    for pid, name in enumerate(daemons, start=100):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "comm").write_text(name[:15] + "\n")
    steps = {name: getattr(ladder, f"{name}_step")()["status"] for name in SHARED}
    assert {name for name, status in steps.items() if status == "fail"} == failing, steps
    facts = {"nvml": nvml, "expected": expected, "daemons": daemons, "services": ladder.services_step()["evidence"].get(
        "services")}
    found = {d["id"] for d in doctor.diagnose(facts)}
    assert found & set(SHARED.values()) == {SHARED[name] for name in failing}, found


def test_a_real_h200_host_passes_both(tmp_path: Path) -> None:
    """The facts a real H200 host reported (tests/data/real-h200/health-1gpu, see the README there): the shared
    verify steps do not fail and doctor finds none of their problems, as the ladder and doctor said on that
    host; its fabric state is unreported, as nvidia-smi said (N/A)."""
    real = Path(__file__).resolve().parents[1] / "data" / "real-h200" / "health-1gpu"
    nvml = json.loads((real / "health-facts.json").read_text(encoding="utf-8"))
    assert [g["fabric"] for g in nvml["gpus"]] == [None] and nvml["gpus"][0]["errors"] == {}
    report = json.loads((real / "health-verify-report.json").read_text(encoding="utf-8"))
    on_host = {s["name"]: s["status"] for s in report["steps"] if s["name"] in SHARED}
    ladder = _ladder(nvml, tmp_path, FakeRun({}), expected={"model": "H200", "count": 1})
    # the report predates the services step; that host has no systemd, where the step is a skip
    assert {name: getattr(ladder, f"{name}_step")()["status"] for name in SHARED} == {**on_host, "services": "skip"}
    assert on_host == {"gpus": "pass", "driver_version": "pass", "persistence": "pass", "fabric_manager": "skip"}
    assert doctor.diagnose({"nvml": nvml, "expected": {"model": "H200", "count": 1}, "daemons": []}) == []
    assert json.loads((real / "health-doctor.json").read_text(encoding="utf-8"))["diagnoses"] == []


MIG_CASES = {
    # name: (MIG mode per GPU, nvidia-smi mig -lgi, layout asked, verify's mig step fails)
    "layout applied": ((True, False), MIG_LGI, "split", False),
    "an instance missing": ((True, False), MIG_LGI.split("|   0  MIG 1g.18gb")[0], "split", True),
    "MIG off where asked on": ((False, False), "", "split", True),
    "layout not in mig.layouts": ((True, False), MIG_LGI, "other", True),
    "not managed": ((True, True), "", None, False),
}


@pytest.mark.parametrize("case", sorted(MIG_CASES))
def test_verify_and_doctor_agree_on_the_mig_layout(case: str, tmp_path: Path) -> None:
    modes, listed, layout, fails = MIG_CASES[case]
    nvml = _mig_nvml(collect_with(FakeNvml()), modes)
    ladder = _ladder(nvml, tmp_path, FakeRun({"nvidia-smi mig -lgi": (0, listed, "")}), tools=("nvidia-smi",),
                     mig={"layout": layout, "layouts": LAYOUTS})  # fmt: skip
    assert (ladder.mig_step()["status"] == "fail") is fails
    facts = {"nvml": nvml, "expected": {"mig_layout": layout, "mig_layouts": LAYOUTS},
             "mig_instances": listed if any(modes) else None}  # fmt: skip
    assert ("mig_layout" in {d["id"] for d in doctor.diagnose(facts)}) is fails
