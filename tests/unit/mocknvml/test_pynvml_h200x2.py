"""The h200x2 profile, read through pynvml, equals the real capture (tests/data/nvml-h200x2/nvml.json)."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from nvml_fake import fixture_dir

FIXTURE = fixture_dir() / "nvml.json"

# nvml.json keys read by something other than nvmlDeviceGet<Key>(handle).
SPECIAL: dict[str, Callable[[ModuleType, Any], Any]] = {
    "Temperature": lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    "MaxClockSM": lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
    "MaxClockMem": lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM),
    "NvLink": lambda n, h: [n.nvmlDeviceGetNvLinkState(h, link) for link in range(18)],
}


def _plain(value: Any) -> Any:
    """ctypes structures -> dicts, bytes -> str, tuples -> lists, so values compare with JSON."""
    if isinstance(value, ctypes.Structure):
        return {name: _plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _read(nvml: ModuleType, handle: Any, key: str) -> Any:
    reader = SPECIAL.get(key)
    if reader is not None:
        return reader(nvml, handle)
    return getattr(nvml, f"nvmlDeviceGet{key}")(handle)


@pytest.fixture(scope="module")
def capture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def test_system_values(nvml: Callable[[str], ModuleType], capture: dict[str, Any]) -> None:
    n = nvml("h200x2")
    assert n.nvmlSystemGetDriverVersion() == capture["driver"]
    assert n.nvmlSystemGetNVMLVersion() == capture["nvml"]
    assert n.nvmlSystemGetCudaDriverVersion() == capture["cuda_driver"]
    assert n.nvmlSystemGetCudaDriverVersion_v2() == capture["cuda_driver"]
    assert n.nvmlDeviceGetCount() == capture["count"]


@pytest.mark.parametrize("index", [0, 1])
def test_every_gpu_value_matches_the_capture(
    nvml: Callable[[str], ModuleType], capture: dict[str, Any], index: int
) -> None:
    n = nvml("h200x2")
    handle = n.nvmlDeviceGetHandleByIndex(index)
    expected_gpu = capture["gpus"][index]
    mismatches = {}
    for key, expected in expected_gpu.items():
        if isinstance(expected, dict) and "error" in expected:
            with pytest.raises(n.NVMLError) as info:
                _read(n, handle, key)
            got: Any = {"error": type(info.value).__name__, "msg": str(info.value)}
        else:
            got = _plain(_read(n, handle, key))
        if got != expected:
            mismatches[key] = (got, expected)
    assert not mismatches, mismatches
    assert len(expected_gpu) >= 40  # the comparison really covered the capture


def test_handles_by_uuid_serial_and_bus_id(nvml: Callable[[str], ModuleType], capture: dict[str, Any]) -> None:
    n = nvml("h200x2")
    for index, gpu in enumerate(capture["gpus"]):
        for handle in (
            n.nvmlDeviceGetHandleByUUID(gpu["UUID"]),
            n.nvmlDeviceGetHandleByPciBusId(gpu["PciInfo"]["busId"]),
            n.nvmlDeviceGetHandleByPciBusId(gpu["PciInfo"]["busIdLegacy"].lower()),
            n.nvmlDeviceGetHandleBySerial(gpu["Serial"]),
        ):
            assert n.nvmlDeviceGetIndex(handle) == index
    with pytest.raises(n.NVMLError_NotFound):
        n.nvmlDeviceGetHandleByUUID("GPU-ffffffff-0000-4000-8000-000000000000")


def test_topology_and_p2p(nvml: Callable[[str], ModuleType], capture: dict[str, Any]) -> None:
    n = nvml("h200x2")
    h0, h1 = (n.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert n.nvmlDeviceGetTopologyCommonAncestor(h0, h1) == capture["topo01"]
    caps = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
    assert {k: n.nvmlDeviceGetP2PStatus(h0, h1, v) for k, v in caps.items()} == capture["p2p01"]


def test_values_nvidia_smi_shows(nvml: Callable[[str], ModuleType]) -> None:
    """Values from nvidia-smi-q.xml that nvml.json does not carry."""
    n = nvml("h200x2")
    h = n.nvmlDeviceGetHandleByIndex(0)
    mem = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    assert (mem.total, mem.reserved, mem.used) == (150754820096, 644939776, 0)
    assert mem.free == mem.total - mem.reserved
    assert n.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200000, 700000]
    assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_GRAPHICS) == 345
    assert n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) == 1023
    assert n.nvmlDeviceGetNvLinkRemotePciInfo(h, 0).busId in (b"00000000:00:07.0", "00000000:00:07.0")
    info = n.c_nvmlGpuFabricInfo_t()
    n.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    assert info.state == n.NVML_GPU_FABRIC_STATE_COMPLETED
    util = n.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (0, 0)
