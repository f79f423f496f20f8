"""The NVML collector (the collection's plugins/module_utils/nvml.py) through gpuprov.facts.

The collector runs against :class:`nvml_fake.FakeNvml`, which answers from the real h200x2 capture and raises
pynvml's own error classes; where the C mock NVML can be built, it also runs in a subprocess against the real
pynvml loading the mock with each profile.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import nvml, nvml_values
from nvml_fake import FakeNvml, load_fixture
from rich.console import Console

from gpuprov.exceptions import NVMLUnavailable
from gpuprov.facts import FactsEvents, collect_with, collector_path, gpu_table, require_available, summary_line

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def facts() -> dict[str, Any]:
    return collect_with(FakeNvml())


def test_system_fields(facts: dict[str, Any]) -> None:
    assert facts["available"] is True
    assert facts["error_name"] is None and facts["error"] is None
    assert facts["driver_version"] == "580.159.04"
    assert facts["nvml_version"] == "13.580.159.04"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["cuda_driver_version_int"] == 13000
    assert facts["count"] == 2 and len(facts["gpus"]) == 2
    assert facts["cuda_arch_bin"] == "9.0"
    assert facts["lost_gpus"] == []
    assert facts["nvswitch_present"] is None  # the capture did not record the remote device type


def test_every_gpu_field(facts: dict[str, Any]) -> None:
    gpu = facts["gpus"][0]
    assert gpu["index"] == 0 and gpu["lost"] is False and gpu["error_name"] is None
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    assert gpu["serial"] == "0000000000000"
    assert gpu["minor_number"] == 0
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["pci_bus_id_sysfs"] == "0000:00:06.0"
    assert gpu["pci_bus_id_source"] == "nvml"
    assert gpu["pci_device_id"] == "0x233510de"
    assert gpu["pci_subsystem_id"] == "0x18bf10de"
    assert gpu["compute_capability"] == "9.0" and gpu["architecture"] == "hopper"
    assert gpu["memory_total_bytes"] == 150754820096
    assert gpu["bar1_total_bytes"] == 256 * 1024**3
    assert gpu["persistence_mode"] is True
    assert gpu["mig"] == {"current": False, "pending": False, "max_devices": 0}
    assert gpu["ecc"] == {
        "current": True, "pending": True, "uncorrected_volatile": 0, "uncorrected_aggregate": 0,
        "corrected_volatile": 0, "corrected_aggregate": 0, "retired_pages_pending": None,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    }
    assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "gen_gpu_max": 5, "width_current": 16, "width_max": 16}
    assert gpu["power_limit_w"] == 700.0
    assert gpu["power_default_limit_w"] == 700.0
    assert gpu["enforced_power_limit_w"] == 700.0
    assert gpu["numa_node"] is None  # NVMLError_NotSupported in the capture (VM)
    assert gpu["cpu_affinity"] == list(range(32))
    assert gpu["nvlink"]["active_links"] == 18 and len(gpu["nvlink"]["links"]) == 18
    assert gpu["nvlink"]["links"][0] == {"link": 0, "active": True, "version": None, "remote_device_type": None}
    assert gpu["errors"] == {}  # NOT_SUPPORTED is quiet
    assert gpu["live"] == {
        "temperature_c": 34, "power_draw_w": 78.083, "utilization_gpu_pct": None, "utilization_memory_pct": None,
        "performance_state": 0, "memory_used_bytes": 644939776, "bar1_used_bytes": 1703936,
    }
    assert facts["gpus"][1]["pci_bus_id_sysfs"] == "0000:00:07.0"


def test_nvml_is_shut_down_again() -> None:
    fake = FakeNvml()
    collect_with(fake)
    assert fake.initialised == 0


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"),
        ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."),
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"),
    ],
)
def test_init_errors_become_available_false(error: str, reason: str) -> None:
    facts = collect_with(FakeNvml(init_error=error))
    assert facts["available"] is False
    assert facts["error_name"] == error and facts["error"] == reason
    assert facts["count"] == 0 and facts["gpus"] == [] and facts["cuda_arch_bin"] is None
    with pytest.raises(NVMLUnavailable) as info:
        require_available(facts)
    assert info.value.nvml_error == error and info.value.exit_code == 4


def test_zero_devices() -> None:
    facts = collect_with(FakeNvml(gpus=[]))
    assert facts["available"] is True and facts["count"] == 0 and facts["gpus"] == []
    assert facts["cuda_arch_bin"] is None and facts["driver_version"] == "580.159.04"


def test_gpu_lost_on_query_keeps_other_gpus() -> None:
    fake = FakeNvml(lost={1: "query"})
    facts = collect_with(fake)
    lost, healthy = facts["gpus"][1], facts["gpus"][0]
    assert facts["available"] is True and facts["lost_gpus"] == [1]
    assert lost["lost"] is True and lost["error_name"] == "NVML_ERROR_GPU_IS_LOST"
    assert "GPU is lost" in lost["error"]
    assert lost["name"] is None and lost["pcie"]["gen_current"] is None and lost["live"]["temperature_c"] is None
    assert set(lost) == set(healthy)  # one shape for lost and healthy GPUs
    assert healthy["lost"] is False and healthy["name"] == "NVIDIA H200"
    assert fake.calls.count("Name") >= 1  # the healthy GPU was read in full


def test_gpu_lost_at_handle_guesses_bus_id_from_procfs(tmp_path: Path) -> None:
    for bus in ("0000:00:06.0", "0000:00:07.0"):
        (tmp_path / "driver" / "nvidia" / "gpus" / bus).mkdir(parents=True)
    facts = load_collector_facts(FakeNvml(lost={1: "handle"}), proc_root=tmp_path)
    lost = facts["gpus"][1]
    assert lost["lost"] is True and lost["error_name"] == "NVML_ERROR_GPU_IS_LOST"
    assert lost["pci_bus_id_sysfs"] == "0000:00:07.0" and lost["pci_bus_id_source"] == "procfs"
    assert facts["gpus"][0]["lost"] is False


def test_other_errors_are_recorded_per_field() -> None:
    data = load_fixture()
    data["gpus"][0]["PowerManagementLimit"] = {"error": "NVMLError_NoPermission"}
    facts = collect_with(FakeNvml(data))
    assert facts["gpus"][0]["power_limit_w"] is None
    assert facts["gpus"][0]["errors"] == {"power_limit_w": "NVML_ERROR_NO_PERMISSION"}
    assert facts["gpus"][0]["lost"] is False


def test_kernel_module_version_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "module" / "nvidia" / "version").write_text("460.56\n", encoding="utf-8")
    facts = load_collector_facts(FakeNvml(init_error="NVML_ERROR_LIB_RM_VERSION_MISMATCH"), sysfs_root=tmp_path)
    assert facts["kernel_module_version"] == "460.56"  # version mismatch: the module, not the userland, is old


def load_collector_facts(fake: FakeNvml, **roots: Path) -> dict[str, Any]:
    result: dict[str, Any] = nvml.collect(fake, **{k: str(v) for k, v in roots.items()})
    return result


def test_helpers() -> None:
    mod = nvml_values
    assert mod.sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert mod.cuda_version_text(12040) == "12.4"
    assert mod.cpu_ids([0b101, 1]) == [0, 2, 64]
    assert mod.milliwatts_to_watts(450500) == 450.5
    import pynvml

    assert mod.nvlink_version_text(pynvml, pynvml.NVML_NVLINK_VERSION_4_0) == "4.0"


def test_collector_is_python38_syntax() -> None:
    files = sorted(collector_path().parent.glob("nvml*.py"))
    assert collector_path() in files and len(files) > 1
    for path in [*files, ROOT / "plugins" / "modules" / "nvml_facts.py"]:
        ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 8), filename=str(path))


def test_table_and_summary(facts: dict[str, Any]) -> None:
    console = Console(record=True, width=200)
    console.print(gpu_table(facts, title="h"))
    text = console.export_text()
    assert "0000:00:06.0" in text and "140.4" in text and "256.0" in text and "Gen5 x16 / Gen5 x16" in text
    assert "driver 580.159.04, NVML 13.580.159.04, CUDA 13.0, 2 GPU(s), CUDA_ARCH_BIN 9.0" in summary_line(facts)
    lost = collect_with(FakeNvml(lost={0: "query"}))
    console = Console(record=True, width=200)
    console.print(gpu_table(lost))
    assert "LOST: NVML_ERROR_GPU_IS_LOST" in console.export_text()
    assert "LOST GPU(s): 0" in summary_line(lost)
    assert summary_line(collect_with(FakeNvml(init_error="NVML_ERROR_DRIVER_NOT_LOADED"))).startswith(
        "NVML unavailable: NVML_ERROR_DRIVER_NOT_LOADED"
    )


def test_facts_events_reads_runner_on_ok() -> None:
    events = FactsEvents()
    fact = {"available": True}
    events({"event": "runner_on_ok", "event_data": {"host": "a", "res": {"ansible_facts": {"gpuprov_gpus": fact}}}})
    events({"event": "runner_on_ok", "event_data": {"host": "b", "res": {"changed": False}}})
    events({"event": "runner_on_failed", "event_data": {"host": "c", "res": {"ansible_facts": {"gpuprov_gpus": {}}}}})
    events({"event": "verbose", "stdout": "x"})
    assert events.facts == {"a": fact}


# -- the C mock NVML, when it can be built ------------------------------------------------------------------

COLLECT_SCRIPT = "import json, pynvml; from gpuprov.facts import collect_with; print(json.dumps(collect_with(pynvml)))"


@pytest.fixture(scope="module")
def mock_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        from gpuprov.lab.mocknvml import build_library
    except ImportError as exc:
        pytest.skip(f"gpuprov.lab.mocknvml is not there yet ({exc})")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    out = tmp_path_factory.mktemp("mocknvml")
    build_library(out)
    return out


def mock_facts(lib_dir: Path, profile: str, conf_dir: Path) -> dict[str, Any]:
    """Run the collector in a subprocess whose pynvml loads the mock with ``profile``; no traceback allowed."""
    from gpuprov.lab.mocknvml import mock_environment

    env = mock_environment(lib_dir, profile, conf_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / ".collections")])  # this checkout's collection
    proc = subprocess.run([sys.executable, "-c", COLLECT_SCRIPT], env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _gpus(f: dict[str, Any]) -> list[dict[str, Any]]:
    return list(f["gpus"])


MOCK_EXPECTATIONS: dict[str, Any] = {
    "h200x2": lambda f: f["count"] == 2 and f["cuda_arch_bin"] == "9.0" and not f["lost_gpus"]
    and all(g["fabric"] == {"state": "completed", "status": "NVML_SUCCESS"} for g in _gpus(f)),
    # A100 NVSwitch systems do not report a fabric state (Hopper on): Fabric Manager's process is the evidence
    "a100x8-nvswitch": lambda f: f["count"] == 8 and f["cuda_arch_bin"] == "8.0" and f["nvswitch_present"] is True
    and all(g["fabric"] is None for g in _gpus(f)),
    "rtx3090x4": lambda f: f["count"] == 4 and f["cuda_arch_bin"] == "8.6",
    "v100x4": lambda f: f["count"] == 4 and f["cuda_arch_bin"] == "7.0",
    "pcie-downtrained": lambda f: (_gpus(f)[2]["pcie"]["gen_current"], _gpus(f)[2]["pcie"]["width_current"],
                                   _gpus(f)[2]["pcie"]["gen_gpu_max"]) == (3, 4, 4),
    "pcie-idle-downclock": lambda f: all(g["pcie"]["gen_current"] == 1 and g["pcie"]["gen_max"] == 5 for g in _gpus(f)),
    "above4g-off": lambda f: all(g["bar1_total_bytes"] == 256 * 1024**2 for g in _gpus(f)),
    "no-devices": lambda f: f["available"] is True and f["count"] == 0 and f["gpus"] == [],
    "xid79": lambda f: f["count"] == 8 and f["lost_gpus"] == [1]
    and _gpus(f)[1]["error_name"] == "NVML_ERROR_GPU_IS_LOST" and not _gpus(f)[0]["lost"],
    "ecc-uncorrectable": lambda f: _gpus(f)[1]["ecc"]["uncorrected_volatile"] == 2
    and _gpus(f)[1]["ecc"]["remapped_rows"]["pending"] is True and _gpus(f)[0]["ecc"]["uncorrected_volatile"] == 0,
    "persistence-off": lambda f: all(g["persistence_mode"] is False for g in _gpus(f)),
    "mig-pending": lambda f: all(g["mig"]["current"] is False and g["mig"]["pending"] is True for g in _gpus(f)),
    "driver-mismatch": lambda f: f["available"] is False and f["error_name"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "driver-not-loaded": lambda f: f["available"] is False and f["error_name"] == "NVML_ERROR_DRIVER_NOT_LOADED",
    "no-gpu": lambda f: f["available"] is False and f["error_name"] == "NVML_ERROR_DRIVER_NOT_LOADED",
    "heterogeneous-ordering": lambda f: f["count"] == 5 and len({g["name"] for g in _gpus(f)}) == 2
    and len({g["uuid"] for g in _gpus(f)}) == 5,
}


@pytest.mark.parametrize("profile", sorted(MOCK_EXPECTATIONS))
def test_collector_on_mock_profile(profile: str, mock_lib_dir: Path, tmp_path: Path) -> None:
    from gpuprov.lab.mocknvml import list_profiles

    if profile not in list_profiles():
        pytest.skip(f"mock profile {profile} not written yet")
    facts = mock_facts(mock_lib_dir, profile, tmp_path)
    assert MOCK_EXPECTATIONS[profile](facts), json.dumps({k: v for k, v in facts.items() if k != "gpus"}, indent=1)
