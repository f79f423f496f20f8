"""Each shipped profile, and each fault, as pynvml sees it: values and NVML error classes."""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from gpuprov.lab.mocknvml import NVML_ERRORS, list_profiles

Init = Callable[[str | Path], ModuleType]


@pytest.mark.parametrize(
    ("profile", "error"),
    [
        ("driver-not-loaded", "NVMLError_DriverNotLoaded"),
        ("no-gpu", "NVMLError_DriverNotLoaded"),
        ("driver-mismatch", "NVMLError_LibRmVersionMismatch"),
    ],
)
def test_init_failures(use_profile: Init, profile: str, error: str) -> None:
    n = use_profile(profile)
    with pytest.raises(getattr(n, error)):
        n.nvmlInit()
    with pytest.raises(n.NVMLError_Uninitialized):
        n.nvmlDeviceGetCount()


def test_error_strings_match_nvml(use_profile: Init) -> None:
    n = use_profile("h200x2")
    assert n.nvmlErrorString(n.NVML_ERROR_LIB_RM_VERSION_MISMATCH) == "RM has detected an NVML/RM version mismatch."
    assert n.nvmlErrorString(n.NVML_ERROR_GPU_IS_LOST) == "GPU is lost"
    assert n.nvmlErrorString(n.NVML_ERROR_DRIVER_NOT_LOADED) == "Driver Not Loaded"
    assert n.nvmlErrorString(n.NVML_ERROR_NOT_SUPPORTED) == "Not Supported"
    for name, code in NVML_ERRORS.items():  # the profile compiler and pynvml agree on every code
        assert getattr(n, "NVML_SUCCESS" if name == "SUCCESS" else f"NVML_ERROR_{name}") == code


def test_no_devices_inits_with_zero_gpus(nvml: Init) -> None:
    n = nvml("no-devices")
    assert n.nvmlDeviceGetCount() == 0
    assert n.nvmlSystemGetDriverVersion() == "580.159.04"
    with pytest.raises(n.NVMLError_InvalidArgument):
        n.nvmlDeviceGetHandleByIndex(0)


def test_calls_before_init_and_after_shutdown(use_profile: Init) -> None:
    n = use_profile("h200x2")
    with pytest.raises(n.NVMLError_Uninitialized):
        n.nvmlSystemGetDriverVersion()
    n.nvmlInit()
    n.nvmlInit()  # reference counted like the real library
    n.nvmlShutdown()
    assert n.nvmlDeviceGetCount() == 2
    handle = n.nvmlDeviceGetHandleByIndex(0)
    n.nvmlShutdown()
    with pytest.raises(n.NVMLError_Uninitialized):
        n.nvmlDeviceGetName(handle)
    with pytest.raises(n.NVMLError_Uninitialized):
        n.nvmlShutdown()


def test_xid79_one_gpu_lost_at_handle(nvml: Init) -> None:
    n = nvml("xid79")
    assert n.nvmlDeviceGetCount() == 8
    with pytest.raises(n.NVMLError_GpuIsLost):
        n.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(n.NVMLError_GpuIsLost):
        n.nvmlDeviceGetHandleByPciBusId("0000:3b:00.0")
    with pytest.raises(n.NVMLError_GpuIsLost):
        n.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-4000-8000-0000000a1001")
    healthy = [n.nvmlDeviceGetHandleByIndex(i) for i in range(8) if i != 1]
    assert {n.nvmlDeviceGetName(h) for h in healthy} == {"NVIDIA A100-SXM4-80GB"}


def test_gpu_lost_after_handle(nvml: Init, tmp_path: Path) -> None:
    profile = tmp_path / "lost-query.yaml"
    profile.write_text("base: h200x2\ngpu_overrides: {1: {lost: query}}\n", encoding="utf-8")
    n = nvml(profile)
    handle = n.nvmlDeviceGetHandleByIndex(1)
    for call in (
        n.nvmlDeviceGetName,
        n.nvmlDeviceGetUUID,
        n.nvmlDeviceGetPciInfo,
        n.nvmlDeviceGetMemoryInfo,
        n.nvmlDeviceGetCurrPcieLinkGeneration,
        n.nvmlDeviceGetPowerUsage,
    ):
        with pytest.raises(n.NVMLError_GpuIsLost):
            call(handle)
    assert n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(0)) == "NVIDIA H200"


def test_above4g_off_small_bar1(nvml: Init) -> None:
    n = nvml("above4g-off")
    for i in range(2):
        bar1 = n.nvmlDeviceGetBAR1MemoryInfo(n.nvmlDeviceGetHandleByIndex(i))
        assert bar1.bar1Total == 256 * 2**20
        assert bar1.bar1Free == bar1.bar1Total - bar1.bar1Used


def test_ecc_uncorrectable(nvml: Init) -> None:
    n = nvml("ecc-uncorrectable")
    bad, good = n.nvmlDeviceGetHandleByIndex(1), n.nvmlDeviceGetHandleByIndex(0)
    unc, vol, agg = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC
    assert n.nvmlDeviceGetTotalEccErrors(bad, unc, vol) == 2
    assert n.nvmlDeviceGetTotalEccErrors(bad, unc, agg) == 2
    assert n.nvmlDeviceGetTotalEccErrors(good, unc, vol) == 0
    assert n.nvmlDeviceGetMemoryErrorCounter(bad, unc, vol, n.NVML_MEMORY_LOCATION_DEVICE_MEMORY) == 2
    assert n.nvmlDeviceGetRemappedRows(bad) == (0, 1, 1, 0)


def test_persistence_off_and_mig_pending(nvml: Init) -> None:
    n = nvml("persistence-off")
    assert n.nvmlDeviceGetPersistenceMode(n.nvmlDeviceGetHandleByIndex(0)) == n.NVML_FEATURE_DISABLED
    n.nvmlShutdown()
    n = nvml("mig-pending")
    assert n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(1)) == [0, 1]


def test_pcie_downtrained_vs_idle_downclock(nvml: Init) -> None:
    n = nvml("pcie-downtrained")
    h = n.nvmlDeviceGetHandleByIndex(2)
    assert n.nvmlDeviceGetMaxPcieLinkGeneration(h) == 3
    assert n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h) == 4
    assert (n.nvmlDeviceGetCurrPcieLinkWidth(h), n.nvmlDeviceGetMaxPcieLinkWidth(h)) == (4, 4)
    assert n.nvmlDeviceGetUtilizationRates(h).gpu >= 90
    assert n.nvmlDeviceGetMaxPcieLinkWidth(n.nvmlDeviceGetHandleByIndex(0)) == 16
    n.nvmlShutdown()
    n = nvml("pcie-idle-downclock")
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetCurrPcieLinkGeneration(h) == 1
    assert n.nvmlDeviceGetMaxPcieLinkGeneration(h) == n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h) == 5
    assert n.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
    assert n.nvmlDeviceGetUtilizationRates(h).gpu == 0


def test_heterogeneous_ordering_bus_order(nvml: Init) -> None:
    n = nvml("heterogeneous-ordering")
    rows = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        rows.append((n.nvmlDeviceGetName(h), n.nvmlDeviceGetPciInfo(h).busId, n.nvmlDeviceGetUUID(h)))
    assert [(name, bus if isinstance(bus, str) else bus.decode(), uuid) for name, bus, uuid in rows] == [
        ("DGX Display", "00000000:01:00.0", "GPU-00000000-0000-4000-8000-00000000d150"),
        ("NVIDIA A100-SXM4-80GB", "00000000:07:00.0", "GPU-00000000-0000-4000-8000-000000000a01"),
        ("NVIDIA A100-SXM4-80GB", "00000000:47:00.0", "GPU-00000000-0000-4000-8000-000000000a02"),
        ("NVIDIA A100-SXM4-80GB", "00000000:81:00.0", "GPU-00000000-0000-4000-8000-000000000a03"),
        ("NVIDIA A100-SXM4-80GB", "00000000:C2:00.0", "GPU-00000000-0000-4000-8000-000000000a04"),
    ]
    with pytest.raises(n.NVMLError_NotSupported):
        n.nvmlDeviceGetEccMode(n.nvmlDeviceGetHandleByIndex(0))


def test_a100x8_nvswitch(nvml: Init) -> None:
    n = nvml("a100x8-nvswitch")
    assert n.nvmlDeviceGetCount() == 8
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    assert n.nvmlDeviceGetMigMode(h) == [0, 0]
    assert n.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0) == n.NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert all(n.nvmlDeviceGetNvLinkState(h, link) == 1 for link in range(12))
    with pytest.raises(n.NVMLError_InvalidArgument):
        n.nvmlDeviceGetNvLinkState(h, 12)
    with pytest.raises(n.NVMLError_NotSupported):
        n.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(n.c_nvmlGpuFabricInfo_t()))
    h7 = n.nvmlDeviceGetHandleByIndex(7)
    assert n.nvmlDeviceGetTopologyCommonAncestor(h, h7) == n.NVML_TOPOLOGY_SYSTEM
    assert n.nvmlDeviceGetTopologyCommonAncestor(h, n.nvmlDeviceGetHandleByIndex(1)) == n.NVML_TOPOLOGY_MULTIPLE
    assert list(n.nvmlDeviceGetCpuAffinity(h, 4)) == [0xFFFF000000000000, 0, 0xFFFF000000000000, 0]


def test_rtx3090x4_consumer(nvml: Init) -> None:
    n = nvml("rtx3090x4")
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetMaxPcieLinkWidth(h) == 8
    assert n.nvmlDeviceGetFanSpeed(h) == 30
    for call in (n.nvmlDeviceGetEccMode, n.nvmlDeviceGetMigMode, n.nvmlDeviceGetSerial):
        with pytest.raises(n.NVMLError_NotSupported):
            call(h)


def test_v100x4_proprietary_only(nvml: Init) -> None:
    n = nvml("v100x4")
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetArchitecture(h) == n.NVML_DEVICE_ARCH_VOLTA
    assert n.nvmlDeviceGetCudaComputeCapability(h) == (7, 0)
    assert n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) == []
    with pytest.raises(n.NVMLError_NotSupported):
        n.nvmlDeviceGetMigMode(h)


@pytest.mark.parametrize("profile", list_profiles())
def test_every_profile_walks_cleanly(use_profile: Init, profile: str) -> None:
    """Every getter pynvml offers either answers or raises an NVMLError; nothing crashes."""
    n = use_profile(profile)
    try:
        n.nvmlInit()
    except n.NVMLError:
        return
    getters = [
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetBrand",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetBoardPartNumber",
        "nvmlDeviceGetInforomImageVersion",
        "nvmlDeviceGetDisplayMode",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetNumGpuCores",
        "nvmlDeviceGetMemoryBusWidth",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetVirtualizationMode",
        "nvmlDeviceGetSupportedEventTypes",
    ]
    for index in range(n.nvmlDeviceGetCount()):
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
        except n.NVMLError_GpuIsLost:
            continue
        for name in getters:
            with contextlib.suppress(n.NVMLError):
                getattr(n, name)(handle)


def test_library_exports_every_pynvml_function(mock_library: Path) -> None:
    """A missing symbol would surface as NVMLError_FunctionNotFound instead of NVML's own answer."""
    source = Path(pynvml.__file__).read_text(encoding="utf-8")
    names = set(re.findall(r'_nvmlGetFunctionPointer\("(nvml\w+)"\)', source))
    lib = ctypes.CDLL(str(mock_library))
    missing = sorted(name for name in names if not hasattr(lib, name))
    assert not missing
