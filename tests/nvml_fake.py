"""A stand-in for the pynvml module that answers from the recorded h200x2 fixture, for the collector's tests.

:class:`FakeNvml` has the pynvml functions the collector calls. Values come from
``tests/data/nvml-h200x2/nvml.json`` (readings through pynvml on a real 2x H200 host); an ``{"error": ...}``
entry there raises that pynvml error class. A few values the JSON does not hold (the fabric state) come from the
same capture's other files, each named where it is used; calls the capture did not record at all raise
``NVMLError_NotSupported`` (see :data:`NOT_RECORDED`). Errors are pynvml's own classes, so the collector sees
exactly what the real library raises.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

ROOT = Path(__file__).resolve().parents[1]


def fixture_dir() -> Path:
    """``tests/data/nvml-h200x2``: the recorded readings of a real 2x H200 host (its README says how)."""
    return ROOT / "tests" / "data" / "nvml-h200x2"


def load_fixture() -> dict[str, Any]:
    """The parsed ``nvml.json`` of the h200x2 fixture."""
    data: dict[str, Any] = json.loads((fixture_dir() / "nvml.json").read_text(encoding="utf-8"))
    return data


#: Fact fields whose NVML calls the fixture did not record, so the fake answers NOT_SUPPORTED for them.
NOT_RECORDED = (
    "nvlink.links[].version (nvmlDeviceGetNvLinkVersion)",
    "nvlink.links[].remote_device_type (nvmlDeviceGetNvLinkRemoteDeviceType), hence nvswitch_present",
    "live.utilization_* (nvmlDeviceGetUtilizationRates)",
)


def _smi_fabric() -> list[dict[str, str]]:
    """``[{state, status}]`` per GPU from the fabric sections of the capture's ``nvidia-smi-q.xml``."""
    import xml.etree.ElementTree as ET

    root = ET.parse(fixture_dir() / "nvidia-smi-q.xml").getroot()
    return [{"state": gpu.findtext("fabric/state") or "", "status": gpu.findtext("fabric/status") or ""}
            for gpu in root.findall("gpu")]


def _raise(name: str) -> None:
    raise getattr(pynvml, name)()


class FakeNvml:
    """pynvml look-alike. ``init_error``: NVML_ERROR_* name nvmlInit raises; ``lost``: GPU index -> "handle"
    (nvmlDeviceGetHandleByIndex fails) or "query" (every query fails) with GPU_IS_LOST; ``gpus``: override the
    fixture's per-GPU list (``[]`` for zero devices)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, data: dict[str, Any] | None = None, *, init_error: str | None = None,
                 lost: dict[int, str] | None = None, gpus: list[dict[str, Any]] | None = None) -> None:
        self.data = copy.deepcopy(data if data is not None else load_fixture())
        if gpus is not None:
            self.data["gpus"] = gpus
        self.init_error = init_error
        self.lost = lost or {}
        self.initialised = 0
        self.calls: list[str] = []

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {name for name in dir(pynvml) if name.startswith("NVML_")})

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "c_nvml")):  # pynvml's constants and ctypes structures
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- library ------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error:
            raise pynvml.NVMLError(getattr(pynvml, self.init_error))
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.data["driver"])

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self.data["nvml"])

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self.data["cuda_driver"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.data["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.lost.get(index) == "handle":
            raise pynvml.NVMLError_GpuIsLost()
        if index >= len(self.data["gpus"]):
            raise pynvml.NVMLError_InvalidArgument()
        return index

    # -- per GPU --------------------------------------------------------------------------------------
    def _get(self, handle: int, key: str) -> Any:
        self.calls.append(key)
        if self.lost.get(handle) == "query":
            raise pynvml.NVMLError_GpuIsLost()
        gpu = self.data["gpus"][handle]
        if key not in gpu:
            raise pynvml.NVMLError_NotSupported()
        value = gpu[key]
        if isinstance(value, dict) and "error" in value:
            _raise(value["error"])
        return value

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._get(h, "Name"))

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._get(h, "UUID"))

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return str(self._get(h, "Serial"))

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return int(self._get(h, "MinorNumber"))

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(**self._get(h, "PciInfo"))

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(**self._get(h, "MemoryInfo"))

    def nvmlDeviceGetBAR1MemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(**self._get(h, "BAR1MemoryInfo"))

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return int(self._get(h, "PersistenceMode"))

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return list(self._get(h, "MigMode"))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return int(self._get(h, "MaxMigDeviceCount"))

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return list(self._get(h, "EccMode"))

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter_type: int) -> int:
        # nvidia-smi-q.xml of the same capture: every volatile and aggregate ECC counter reads 0.
        self._get(h, "EccMode")
        return 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        # nvidia-smi-q.xml: <pending_retirement>N/A</pending_retirement> (Hopper remaps rows instead).
        self._get(h, "EccMode")
        raise pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        # nvidia-smi-q.xml: remapped_row_corr 0, remapped_row_unc 0, pending No, failure No.
        self._get(h, "EccMode")
        return (0, 0, 0, 0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "CurrPcieLinkGeneration"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "MaxPcieLinkGeneration"))

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "GpuMaxPcieLinkGeneration"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return int(self._get(h, "CurrPcieLinkWidth"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return int(self._get(h, "MaxPcieLinkWidth"))

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return int(self._get(h, "PowerManagementLimit"))

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return int(self._get(h, "PowerManagementDefaultLimit"))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(self._get(h, "EnforcedPowerLimit"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._get(h, "PowerUsage"))

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        major, minor = self._get(h, "CudaComputeCapability")
        return int(major), int(minor)

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return int(self._get(h, "Architecture"))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._get(h, "Temperature"))

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return int(self._get(h, "PerformanceState"))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(**self._get(h, "UtilizationRates"))  # not recorded: NOT_SUPPORTED

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return int(self._get(h, "NumaNodeId"))

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        # probe.txt, `nvidia-smi topo -m`: CPU Affinity 0-31 for both GPUs.
        self._get(h, "Name")
        return [0xFFFFFFFF] + [0] * (words - 1)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        states = self._get(h, "NvLink")
        if link >= len(states):
            raise pynvml.NVMLError_InvalidArgument()
        return int(states[link])

    def nvmlDeviceGetGpuFabricInfo(self, h: int, info: Any) -> int:
        """The fabric section of the capture's ``nvidia-smi -q -x`` (the JSON has none): each GPU's state and
        status there, written into the ``c_nvmlGpuFabricInfo_t`` that ``info`` (``ctypes.byref``) points at."""
        self.calls.append("GpuFabricInfo")
        if self.lost.get(h) == "query":
            raise pynvml.NVMLError_GpuIsLost()
        fabric = _smi_fabric()[h]
        states = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}
        target = info._obj
        target.state = states[fabric["state"].lower()]
        target.status = 0 if fabric["status"].lower() == "success" else pynvml.NVML_ERROR_UNKNOWN
        return 0

    def nvmlDeviceGetNvLinkVersion(self, h: int, link: int) -> int:
        return int(self._get(h, "NvLinkVersion"))  # not recorded: NOT_SUPPORTED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return int(self._get(h, "NvLinkRemoteDeviceType"))  # not recorded: NOT_SUPPORTED
