"""The verify role's ladder (plugins/module_utils/ladder*.py, run by the verify_ladder module), its all-reduce
script, the shared play collector (gpuprov.hostplay) and the fleet accounting of gpuprov.verify.

NVML facts come from the recorded h200x2 capture through the real collector (tests/nvml_fake.py); commands
are answered by a fake runner that records what the ladder ran. The nvidia-smi texts are real outputs
captured on a 2x H200 SXM host (2026-11-30).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import ladder
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_tools import python_candidates
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder_workload_steps import busbw_threshold, parse_p2p_matrix
from nvml_fake import FakeNvml
from rich.console import Console

from gpuprov import verify
from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED, EXIT_OK
from gpuprov.facts import collect_with
from gpuprov.hostplay import LOCAL_HOST, TaskResults, local_extravars, local_inventory, write_play

ROLE = Path(__file__).resolve().parents[2] / "roles" / "verify"

#: ``nvidia-smi topo -p2p r`` on the 2x H200 host, escape codes included.
P2P_OK = (" \t\x1b[4mGPU0\tGPU1\t\x1b[0m\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n\nLegend:\n\n  X    = Self\n"
          "  OK   = Status Ok\n  CNS  = Chipset not supported\n  NS   = Not supported\n")
P2P_NS = P2P_OK.replace("GPU0\tX\tOK", "GPU0\tX\tNS").replace("GPU1\tOK\tX", "GPU1\tNS\tX")



@pytest.fixture(scope="module")
def h200x2() -> dict[str, Any]:
    facts: dict[str, Any] = collect_with(FakeNvml())
    return facts


class FakeRun:
    """Answers commands by the basename of argv[0] (and the next argument); records every call."""

    def __init__(self, answers: dict[str, tuple[int | None, str, str] | Callable[[list[str]], Any]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: int, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> tuple[int | None, str, str]:
        self.calls.append(list(argv))
        name = Path(argv[0]).name
        for key in (f"{name} {' '.join(argv[1:3])}", f"{name} {argv[1] if len(argv) > 1 else ''}", name):
            if key in self.answers:
                answer = self.answers[key]
                return answer(argv) if callable(answer) else answer  # type: ignore[no-any-return]
        return None, "", f"could not run {argv[0]}: not found"


def _tools(tmp_path: Path, *names: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in names:
        tool = bindir / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return str(bindir)


def _ladder(nvml: dict[str, Any], tmp_path: Path, run: FakeRun, tools: tuple[str, ...] = (),
            **params: Any) -> Any:
    path = _tools(tmp_path, *tools)
    base: dict[str, Any] = {"nvml": nvml, "workdir": str(tmp_path), "expected": {}, "thresholds": {},
                            "steps": list(ladder.STEPS), "tool_dirs": [], "python": "", "nccl": {},
                            "container": {}, "dcgm": {}}
    base.update(params)
    (tmp_path / "proc").mkdir(exist_ok=True)
    # systemd is the init only where a test makes tmp_path/systemd (as /run/systemd/system on a host)
    # the PCI bus is read only where a test makes tmp_path/sys (as /sys on a host)
    return ladder.Ladder(base, run=run, proc_root=str(tmp_path / "proc"), path=path,
                         systemd_dir=str(tmp_path / "systemd"), sysfs_root=str(tmp_path / "sys"))


def systemctl(states: dict[str, dict[str, str]]) -> Callable[[list[str]], tuple[int, str, str]]:
    """A fake ``systemctl`` answering ``list-units`` and ``show`` from ``states`` ({unit: {property: value}}, the
    properties as ``systemctl show`` names them)."""

    def answer(argv: list[str]) -> tuple[int, str, str]:
        if argv[1] == "list-units":
            return 0, "".join(f"{unit} loaded {s['ActiveState']} {s['SubState']} x\n" for unit, s in states.items()), ""
        blocks = ["".join(f"{key}={value}\n" for key, value in {"Id": unit, **states[unit]}.items())
                  for unit in argv[4:] if unit in states]
        return 0, "\n".join(blocks), ""

    return answer


def unit(enabled: str = "enabled", active: str = "active", sub: str = "running", result: str = "success",
         kind: str = "simple", condition: str = "yes") -> dict[str, str]:
    return {"Type": kind, "UnitFileState": enabled, "ActiveState": active, "SubState": sub, "Result": result,
            "ConditionResult": condition}


SMI_L = "GPU 0: NVIDIA H200 (UUID: GPU-4269)\nGPU 1: NVIDIA H200 (UUID: GPU-d86b)\n"
TABLE = {"H200": {"nvlink": 250, "pcie": 35}}


def _nccl(busbw: float, correct: bool = True, available: bool = True) -> tuple[int, str, str]:
    result = {"available": available, "reason": None if available else "torch sees no CUDA device",
              "world_size": 2, "busbw_gbps": busbw, "algbw_gbps": busbw, "correct": correct}
    return 0, "warning line\n" + json.dumps(result) + "\n", ""


def _healthy_run(busbw: float = 326.5) -> FakeRun:
    return FakeRun({
        "nvidia-smi -L": (0, SMI_L, ""),
        "nvidia-smi topo -p2p": (0, P2P_OK, ""),
        "nvcc": (0, "", ""),
        "gpuprov_cuda_sample": (0, "device 0 NVIDIA H200 sm_90: ok\nRESULT PASS 2 GPU(s)\n", ""),
        "python3 -c": (0, "2.11.0+cu130\n", ""),
        "python3": _nccl(busbw),
    })


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report["steps"]}


def test_healthy_h200_pair_passes_every_present_rung(h200x2: dict[str, Any], tmp_path: Path) -> None:
    run = _healthy_run()
    report = _ladder(h200x2, tmp_path, run, tools=("nvidia-smi", "nvcc", "python3"),
                     expected={"model": "H200", "count": 2, "nvswitch": True, "driver_version": "580.159.04"},
                     thresholds={"min_busbw_gbps": "auto", "busbw_table": TABLE}).run_all()
    steps = _by_name(report)
    assert [s["name"] for s in report["steps"]] == list(ladder.STEPS)
    assert {n: s["status"] for n, s in steps.items()} == {
        "gpus": "pass", "nvidia_smi": "pass", "driver_version": "pass", "persistence": "pass",
        "fabric_manager": "pass", "services": "skip", "mig": "skip", "cuda_sample": "pass", "p2p": "pass",
        "nccl_allreduce": "pass", "container": "skip", "dcgm_diag": "skip"}
    assert report["status"] == "pass" and report["summary"] == {"pass": 8, "fail": 0, "skip": 4}
    assert steps["nccl_allreduce"]["evidence"]["min_busbw_gbps"] == 250.0
    assert steps["nccl_allreduce"]["evidence"]["threshold_source"] == "model table H200 (nvlink)"
    compile_argv = next(c for c in run.calls if Path(c[0]).name == "nvcc")
    assert "arch=compute_90,code=[sm_90,compute_90]" in compile_argv  # built for the GPUs NVML reports
    assert steps["container"]["reason"] == "docker is not installed"
    assert steps["dcgm_diag"]["reason"] == "DCGM is not installed (no dcgmi)"


def test_gpus_rung_compares_model_count_and_lost(h200x2: dict[str, Any], tmp_path: Path) -> None:
    run = FakeRun({})
    assert _ladder(h200x2, tmp_path, run, expected={"model": "A100", "count": 8}).gpus_step()["reason"] == (
        "2 GPU(s) found, the fleet file expects 8; GPU model NVIDIA H200, the fleet file expects A100")
    lost = collect_with(FakeNvml(lost={0: "query"}))
    assert "lost" in _ladder(lost, tmp_path, run).gpus_step()["reason"]
    down = collect_with(FakeNvml(init_error="NVML_ERROR_DRIVER_NOT_LOADED"))
    step = _ladder(down, tmp_path, run).gpus_step()
    assert step["status"] == "fail" and "NVML_ERROR_DRIVER_NOT_LOADED" in step["reason"]


def _pci_function(sysfs: Path, bus_id: str, vendor: str, pci_class: str) -> None:
    device = sysfs / "bus" / "pci" / "devices" / bus_id
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(pci_class + "\n")


def test_gpus_rung_without_nvml_says_whether_the_pci_bus_has_an_nvidia_gpu(tmp_path: Path) -> None:
    """A machine without an NVIDIA GPU (``verify --local`` on a controller) is named as such, not only as "NVML is
    unavailable"; GPUs on the bus that NVML cannot reach are named by bus id; an unreadable bus says only NVML's."""
    no_library = collect_with(FakeNvml(init_error="NVML_ERROR_LIBRARY_NOT_FOUND"))
    run = FakeRun({})
    unread = _ladder(no_library, tmp_path, run).gpus_step()
    assert unread["reason"] == "NVML is unavailable: NVML_ERROR_LIBRARY_NOT_FOUND"
    assert unread["evidence"]["pci_gpu_functions"] is None

    sysfs = tmp_path / "sys"
    _pci_function(sysfs, "0000:00:02.0", "0x8086", "0x030000")  # another vendor's display function
    _pci_function(sysfs, "0000:00:03.0", "0x10de", "0x068000")  # an NVIDIA function that is no GPU (NVSwitch)
    none = _ladder(no_library, tmp_path, run).gpus_step()
    assert none["status"] == "fail"
    assert none["reason"] == (f"no NVIDIA GPU on this machine: the PCI bus has no NVIDIA display function "
                              f"({sysfs}/bus/pci/devices); NVML is unavailable: NVML_ERROR_LIBRARY_NOT_FOUND")
    assert none["evidence"]["pci_gpu_functions"] == []

    _pci_function(sysfs, "0000:17:00.0", "0x10de", "0x030200")
    down = collect_with(FakeNvml(init_error="NVML_ERROR_DRIVER_NOT_LOADED"))
    present = _ladder(down, tmp_path, run).gpus_step()
    assert present["status"] == "fail"
    assert present["reason"].startswith("NVML is unavailable: NVML_ERROR_DRIVER_NOT_LOADED, with NVIDIA GPU(s) "
                                        "0000:17:00.0 on the PCI bus")
    assert present["evidence"]["pci_gpu_functions"] == ["0000:17:00.0"]


def test_driver_version_rung_catches_library_module_and_pin_mismatch(h200x2: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    run = FakeRun({})
    stale = dict(h200x2, nvml_version="13.580.95.05", kernel_module_version="580.95.05")
    step = _ladder(stale, tmp_path, run, expected={"driver_version": "580.159.04"}).driver_version_step()
    assert step["status"] == "fail"
    assert "NVML library 13.580.95.05 does not match driver 580.159.04" in step["reason"]
    assert "loaded kernel module 580.95.05" in step["reason"]
    pinned = _ladder(h200x2, tmp_path, run, expected={"driver_version": "570.1"}).driver_version_step()
    assert pinned["reason"] == "driver 580.159.04, the fleet file pins 570.1"


def test_persistence_off_fails_naming_the_gpu(h200x2: dict[str, Any], tmp_path: Path) -> None:
    facts = copy.deepcopy(h200x2)
    facts["gpus"][1]["persistence_mode"] = False
    step = _ladder(facts, tmp_path, FakeRun({})).persistence_step()
    assert step["status"] == "fail" and "GPU(s) 1" in step["reason"]
    assert step["evidence"]["persistence_mode"] == {"0": True, "1": False}


def test_fabric_manager_rung(h200x2: dict[str, Any], tmp_path: Path) -> None:
    """Off NVSwitch systems: skip. On them, the GPUs' fabric registration as NVML reports it (the capture's
    H200 pair: completed), else - no fabric state, as on A100 systems - the nv-fabricmanager process."""
    assert _ladder(h200x2, tmp_path, FakeRun({})).fabric_manager_step()["status"] == "skip"
    assert _ladder(h200x2, tmp_path, FakeRun({}), expected={"nvswitch": True}).fabric_manager_step()["status"] == \
        "pass"
    training = copy.deepcopy(h200x2)
    training["gpus"][0]["fabric"] = {"state": "in_progress", "status": "NVML_SUCCESS"}
    step = _ladder(training, tmp_path, FakeRun({}), expected={"nvswitch": True}).fabric_manager_step()
    assert step["status"] == "fail" and "GPU(s) 0 (state in_progress" in step["reason"]
    assert step["evidence"]["fabric"]["0"] == {"state": "in_progress", "status": "NVML_SUCCESS"}
    unreported = copy.deepcopy(h200x2)
    for gpu in unreported["gpus"]:
        gpu["fabric"] = None
    lab = _ladder(unreported, tmp_path, FakeRun({}), expected={"nvswitch": True})
    step = lab.fabric_manager_step()
    assert step["status"] == "fail" and "without a running nv-fabricmanager" in step["reason"]
    assert step["evidence"]["daemons"] == []
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "comm").write_text("nv-fabricmanage\n")  # comm holds 15 characters
    step = lab.fabric_manager_step()
    assert step["status"] == "pass" and step["evidence"]["daemons"] == ["nv-fabricmanager"]


def test_cuda_sample_rung(h200x2: dict[str, Any], tmp_path: Path) -> None:
    step = _ladder(h200x2, tmp_path, FakeRun({})).cuda_sample_step()
    assert step["status"] == "skip" and step["reason"].startswith("no CUDA toolkit")
    run = FakeRun({"nvcc": (0, "", ""), "gpuprov_cuda_sample": (2, "RESULT FAIL cudaSetDevice: x (y)\n", "")})
    step = _ladder(h200x2, tmp_path, run, tools=("nvcc",)).cuda_sample_step()
    assert step["status"] == "fail" and step["reason"] == "RESULT FAIL cudaSetDevice: x (y)"
    run = FakeRun({"nvcc": (1, "", "nvcc fatal: Unsupported gpu architecture 'compute_90'")})
    step = _ladder(h200x2, tmp_path, run, tools=("nvcc",)).cuda_sample_step()
    assert step["status"] == "fail" and "Unsupported gpu architecture" in step["evidence"]["compile_output"]


def test_p2p_rung_parses_the_matrix(h200x2: dict[str, Any], tmp_path: Path) -> None:
    assert parse_p2p_matrix(P2P_OK) == {"0-1": "OK", "1-0": "OK"}
    run = FakeRun({"nvidia-smi topo -p2p": (0, P2P_NS, "")})
    step = _ladder(h200x2, tmp_path, run, tools=("nvidia-smi",)).p2p_step()
    assert step["status"] == "fail"
    assert "P2P read not OK: 0-1 not supported, 1-0 not supported" in step["reason"]
    assert "NVLink P2P not OK" in step["reason"]  # 18 active NVLinks per GPU in the capture
    one = dict(h200x2, gpus=h200x2["gpus"][:1], count=1)
    assert _ladder(one, tmp_path, run).p2p_step()["status"] == "skip"


def test_nccl_rung_thresholds_and_skips(h200x2: dict[str, Any], tmp_path: Path) -> None:
    thresholds = {"min_busbw_gbps": "auto", "busbw_table": TABLE}
    slow = _ladder(h200x2, tmp_path, _healthy_run(busbw=120.0), tools=("python3",), thresholds=thresholds)
    step = slow.nccl_step()
    assert step["status"] == "fail" and step["reason"] == (
        "bus bandwidth 120.0 GB/s is below 250.0 GB/s (model table H200 (nvlink))")
    explicit = dict(thresholds, min_busbw_gbps="100")
    assert _ladder(h200x2, tmp_path, _healthy_run(busbw=120.0), tools=("python3",),
                   thresholds=explicit).nccl_step()["status"] == "pass"
    wrong = FakeRun({"python3 -c": (0, "2.11\n", ""), "python3": _nccl(400.0, correct=False)})
    assert _ladder(h200x2, tmp_path, wrong, tools=("python3",),
                   thresholds=thresholds).nccl_step()["reason"] == "all-reduce returned a wrong sum"
    no_cuda = FakeRun({"python3 -c": (0, "2.11\n", ""), "python3": _nccl(0, available=False)})
    step = _ladder(h200x2, tmp_path, no_cuda, tools=("python3",)).nccl_step()
    assert step["status"] == "skip" and step["reason"] == "torch sees no CUDA device"
    no_torch = FakeRun({"python3 -c": (1, "", "ModuleNotFoundError: No module named 'torch'")})
    step = _ladder(h200x2, tmp_path, no_torch, tools=("python3",)).nccl_step()
    assert step["status"] == "skip" and step["evidence"]["tried"][0]["rc"] == 1


def test_busbw_threshold_picks_link_kind_and_unknown_models() -> None:
    thresholds = {"busbw_table": TABLE}
    assert busbw_threshold("NVIDIA H200", True, thresholds) == (250.0, "model table H200 (nvlink)")
    assert busbw_threshold("NVIDIA H200 NVL", False, thresholds) == (35.0, "model table H200 (pcie)")
    assert busbw_threshold("NVIDIA L40S", True, thresholds) == (None, None)


def test_container_and_dcgm_rungs(h200x2: dict[str, Any], tmp_path: Path) -> None:
    run = FakeRun({"docker image": (1, "", "Error: No such image"),
                   "dcgmi diag": (0, json.dumps({"tests": [{"results": [{"status": "Pass"}, {"status": "Fail"}]}]}),
                                  "")})
    lad = _ladder(h200x2, tmp_path, run, tools=("docker", "dcgmi"), container={"image": "cuda:x", "pull": False})
    assert lad.container_step()["reason"] == ("image cuda:x is not present and pulling is off (fleet file: "
                                               "verify.container_pull; role variable verify_container_pull)")
    dcgm = lad.dcgm_step()
    assert dcgm["status"] == "fail" and dcgm["evidence"]["results"] == {"fail": 1, "pass": 1}
    run = FakeRun({"docker image": (0, "[]", ""), "docker run": (0, SMI_L, ""), "docker info": (0, "[]\n", "")})
    lad = _ladder(h200x2, tmp_path, run, tools=("docker",), container={"image": "cuda:x"})
    passed = lad.container_step()
    assert passed["status"] == "pass"
    assert passed["evidence"]["cdi"] == {
        "ran": False, "reason": "Docker reads no CDI specifications (features.cdi off, or before 25.0)"}
    assert run.calls[-2][3:5] == ["--gpus", "all"]


def test_container_rung_runs_the_cdi_device_where_docker_reads_cdi(h200x2: dict[str, Any], tmp_path: Path) -> None:
    listing = (0, "nvidia.com/gpu=0\nnvidia.com/gpu=1\nnvidia.com/gpu=all\n", "INFO[0000] Found 3 CDI devices\n")

    def docker_run(argv: list[str]) -> tuple[int, str, str]:
        return (0, SMI_L, "") if "--gpus" in argv else cdi_answer

    answers = {"docker image": (0, "[]", ""), "docker run": docker_run,
               "docker info": (0, '["/etc/cdi","/var/run/cdi"]\n', ""), "nvidia-ctk cdi": listing}
    cdi_answer: tuple[int, str, str] = (0, SMI_L, "")
    run = FakeRun(answers)
    lad = _ladder(h200x2, tmp_path, run, tools=("docker", "nvidia-ctk"), container={"image": "cuda:x"})
    passed = lad.container_step()
    assert passed["status"] == "pass"
    assert passed["evidence"]["cdi"]["ran"] is True
    assert run.calls[-1][2:6] == ["--rm", "--device", "nvidia.com/gpu=all", "cuda:x"]
    cdi_answer = (125, "", "docker: Error response from daemon: could not select device driver \"cdi\"")
    failed = lad.container_step()
    assert failed["status"] == "fail"
    assert failed["reason"].startswith("docker run --device nvidia.com/gpu=all failed (rc 125): docker: Error")
    cdi_answer = (0, SMI_L.splitlines()[0] + "\n", "")
    assert lad.container_step()["reason"] == "the CDI container sees 1 GPU(s), the host 2"
    answers["nvidia-ctk cdi"] = (0, "", "INFO[0000] Found 0 CDI devices\n")
    assert lad.container_step()["evidence"]["cdi"]["reason"] == "nvidia-ctk cdi list names no nvidia.com/gpu=all"


def test_a_crashing_rung_fails_alone_and_unselected_rungs_skip(h200x2: dict[str, Any], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    lad = _ladder(h200x2, tmp_path, FakeRun({}), steps=["gpus", "persistence"])

    def boom() -> None:
        raise KeyError("x")

    monkeypatch.setattr(lad, "persistence_step", boom)
    steps = _by_name(lad.run_all())
    assert steps["gpus"]["status"] == "pass"
    assert steps["persistence"] == {**steps["persistence"], "status": "fail", "reason": "internal error: KeyError: 'x'"}
    assert steps["p2p"]["reason"] == "not selected (fleet file: verify.skip; role variable verify_steps)"


def test_python_candidates_keep_each_virtual_environment(tmp_path: Path) -> None:
    real = tmp_path / "real-python"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    for venv in ("a", "b"):
        (tmp_path / venv).mkdir()
        (tmp_path / venv / "python3").symlink_to(real)
    path = f"{tmp_path / 'a'}:{tmp_path / 'b'}:{tmp_path / 'a'}"
    assert python_candidates([], path) == [str(tmp_path / "a" / "python3"), str(tmp_path / "b" / "python3")]


def test_allreduce_script_reports_why_it_cannot_run() -> None:
    """The shipped script runs under this venv's CPU-only torch and must say so, not crash."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(ROLE / "files" / "gpuprov_nccl_allreduce.py"), "--iters", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        assert result["available"] and result["correct"] and result["busbw_gbps"] > 0
    else:
        assert result["available"] is False and ("CUDA" in result["reason"] or "GPU" in result["reason"])


# -- the shared play collector and the fleet accounting -------------------------------------------------------


def test_task_results_keep_ok_results_per_host_and_task() -> None:
    results = TaskResults()
    results({"event": "runner_on_ok", "event_data": {"host": "a", "task": "Publish the report",
                                                     "res": {"ansible_facts": {"verify_report": {"status": "pass"}}}}})
    results({"event": "runner_on_failed", "event_data": {"host": "b", "task": "t", "res": {"msg": "x"}}})
    results({"event": "runner_on_ok", "event_data": {"host": "a", "task": "Other", "res": {"changed": False}}})
    results({"event": "verbose", "stdout": "x"})
    assert results.fact("verify_report") == {"a": {"status": "pass"}}
    assert sorted(results.results["a"]) == ["Other", "Publish the report"]
    assert "b" not in results.results


def test_local_inventory_is_one_local_host(tmp_path: Path) -> None:
    import yaml

    inventory = local_inventory(tmp_path / "inv", python="/usr/bin/python3")
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]["gpuprov"]["hosts"]
    assert list(hosts) == [LOCAL_HOST]
    assert hosts[LOCAL_HOST]["ansible_connection"] == "local"
    assert hosts[LOCAL_HOST]["ansible_python_interpreter"] == "/usr/bin/python3"
    assert local_extravars()["ansible_python_interpreter"] == sys.executable
    play = write_play(tmp_path, "x", [{"hosts": "gpuprov"}])
    assert yaml.safe_load(play.read_text()) == [{"hosts": "gpuprov"}]


def _report(*statuses: str) -> dict[str, Any]:
    steps = [{"name": f"s{i}", "status": s} for i, s in enumerate(statuses)]
    return {"status": "fail" if "fail" in statuses else "pass", "steps": steps}


def test_fleet_exit_codes_and_summary() -> None:
    assert verify.FleetVerify(reports={"a": _report("pass", "skip")}).exit_code == EXIT_OK
    mixed = verify.FleetVerify(reports={"a": _report("pass"), "b": _report("fail", "pass")})
    assert mixed.exit_code == EXIT_DRIFT
    assert mixed.summary()["failed_steps"] == {"b": ["s0"]} and mixed.summary()["passed"] == ["a"]
    down = verify.FleetVerify(reports={"a": _report("fail")}, failed={"c": "unreachable"})
    assert down.exit_code == EXIT_HOSTS_FAILED
    assert down.to_json()["summary"]["hosts"] == 2 and down.to_json()["exit_code"] == EXIT_HOSTS_FAILED


def test_host_table_shows_driver_versions_only_where_read(h200x2: dict[str, Any], tmp_path: Path) -> None:
    """Without NVML the driver_version rung has no versions: its row gives the reason, not "driver None"."""
    down = collect_with(FakeNvml(init_error="NVML_ERROR_LIBRARY_NOT_FOUND"))
    rows = {}
    for name, facts in (("down", down), ("up", h200x2)):
        report = _ladder(facts, tmp_path, FakeRun({}), steps=["driver_version"]).run_all()
        console = Console(width=200, record=True)
        console.print(verify.host_table(name, report))
        rows[name] = next(line for line in console.export_text().splitlines() if "driver_version" in line)
    assert "NVML is unavailable" in rows["down"] and "None" not in rows["down"]
    assert "driver 580.159.04" in rows["up"]


def test_services_every_unit_enabled_at_boot_runs(tmp_path: Path) -> None:
    """A persistence daemon stopped by hand (enabled, inactive) fails the step even while NVML still reports
    persistence mode on; a disabled unit and a oneshot that succeeded do not; no systemd is a skip."""
    nvml = collect_with(FakeNvml())
    states = {"nvidia-persistenced.service": unit(active="inactive", sub="dead"),
              "nvidia-fabricmanager.service": unit(),
              "dcgm-exporter.service": unit(enabled="disabled", active="inactive", sub="dead"),
              "gpuprov-mig.service": unit(active="inactive", sub="dead", kind="oneshot"),
              "gpuprov-worker@0.service": unit(active="failed", sub="failed", result="exit-code")}
    run = FakeRun({"systemctl": systemctl(states)})
    assert _ladder(nvml, tmp_path, run).services_step()["status"] == "skip"
    (tmp_path / "systemd").mkdir()
    result = _ladder(nvml, tmp_path, run).services_step()
    assert result["status"] == "fail", result
    assert result["reason"] == ("gpuprov-worker@0.service is enabled but failed (failed, result exit-code); "
                                "nvidia-persistenced.service is enabled but inactive (dead, stopped)")
    assert result["evidence"]["services"]["gpuprov-mig.service"]["type"] == "oneshot"
    assert _ladder(nvml, tmp_path, FakeRun({"systemctl": systemctl(
        {"nvidia-persistenced.service": unit()})})).services_step()["status"] == "pass"


def test_services_a_unit_skipped_by_its_condition_is_named_so(tmp_path: Path) -> None:
    """``ConditionPathExists=`` unmet: systemd skips the start and the unit is inactive without any error."""
    (tmp_path / "systemd").mkdir()
    skipped = {"nvidia-fabricmanager.service": unit(active="inactive", sub="dead", condition="no")}
    result = _ladder(collect_with(FakeNvml()), tmp_path, FakeRun({"systemctl": systemctl(skipped)})).services_step()
    assert result["status"] == "fail"
    assert result["reason"] == ("nvidia-fabricmanager.service is enabled but systemd skipped its start: a Condition "
                                "of the unit was not met (systemctl status nvidia-fabricmanager.service names it)")
    assert result["evidence"]["services"]["nvidia-fabricmanager.service"]["condition"] == "no"


#: ``nvidia-smi mig -lgi`` on an H200 with one 3g.71gb and two 1g.18gb instances on GPU 0.
MIG_LGI = """+---------------------------------------------------+
| GPU instances:                                    |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|===================================================|
|   0  MIG 3g.71gb          9        1          4:4     |
|   0  MIG 1g.18gb         19        9          0:1     |
|   0  MIG 1g.18gb         19       10          1:1     |
+---------------------------------------------------+
"""
LAYOUTS = {"split": [{"devices": [0], "mig_enabled": True, "mig_devices": {"3g.71gb": 1, "1g.18gb": 2}},
                     {"devices": [1], "mig_enabled": False}]}  # fmt: skip


def _mig_nvml(h200x2: dict[str, Any], modes: tuple[bool, bool]) -> dict[str, Any]:
    nvml = copy.deepcopy(h200x2)
    for gpu, mode in zip(nvml["gpus"], modes, strict=True):
        gpu["mig"] = {"current": mode, "pending": mode}
    return nvml


@pytest.mark.parametrize(("modes", "listed", "status", "reason"), [
    ((True, False), MIG_LGI, "pass", None),
    ((True, False), MIG_LGI.replace("|   0  MIG 1g.18gb         19       10          1:1     |\n", ""), "fail",
     "GPU 0: instances 1 x 1g.18gb, 1 x 3g.71gb, wanted 2 x 1g.18gb, 1 x 3g.71gb - apply the layout"),
    ((True, True), MIG_LGI, "fail", "GPU 1: MIG on, wanted off"),
    ((False, False), "", "fail", "GPU 0: MIG off, wanted on"),
])
def test_mig_step_compares_the_applied_layout_with_the_asked_one(
    h200x2: dict[str, Any], tmp_path: Path, modes: tuple[bool, bool], listed: str, status: str, reason: str | None
) -> None:
    run = FakeRun({"nvidia-smi mig -lgi": (0, listed, "")})
    result = _ladder(_mig_nvml(h200x2, modes), tmp_path, run, tools=("nvidia-smi",),
                     mig={"layout": "split", "layouts": LAYOUTS}).mig_step()  # fmt: skip
    assert result["status"] == status, result
    assert (result["reason"] or "").startswith(reason or ""), result["reason"]
    assert (["nvidia-smi", "mig", "-lgi"] in [[Path(c[0]).name, *c[1:]] for c in run.calls]) == any(modes)


def test_mig_step_skips_when_not_managed_and_fails_on_an_unknown_layout(h200x2: dict[str, Any],
                                                                        tmp_path: Path) -> None:  # fmt: skip
    for layout in (None, "", "None"):
        result = _ladder(h200x2, tmp_path, FakeRun({}), mig={"layout": layout, "layouts": LAYOUTS}).mig_step()
        assert result["status"] == "skip" and "not managed" in result["reason"]
    result = _ladder(h200x2, tmp_path, FakeRun({}), mig={"layout": "other", "layouts": LAYOUTS}).mig_step()
    assert result == {**result, "status": "fail", "reason": "layout other is not in mig.layouts"}
    failing = FakeRun({"nvidia-smi mig -lgi": (6, "", "Insufficient Permissions")})
    result = _ladder(_mig_nvml(h200x2, (True, False)), tmp_path, failing, tools=("nvidia-smi",),
                     mig={"layout": "split", "layouts": LAYOUTS}).mig_step()  # fmt: skip
    assert result["status"] == "fail" and "nvidia-smi mig -lgi exited 6: Insufficient Permissions" in result["reason"]
