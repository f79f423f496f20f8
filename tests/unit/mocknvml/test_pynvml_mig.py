"""MIG in the mock NVML as pynvml sees it: mode current/pending, the profile tables, GPU and compute instance
life cycle, state shared across processes through the state file, a reboot (instances gone, mode kept), and
NOT_SUPPORTED on boards without MIG."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

Init = Callable[[str | Path], ModuleType]


@pytest.fixture(autouse=True)
def _boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_MOCK_NVML_BOOT_ID", "boot-1")
    monkeypatch.delenv("GPUPROV_MOCK_NVML_STATE", raising=False)


def _profiles(n: ModuleType, handle: Any) -> dict[str, tuple[int, int, int, int, int]]:
    """name -> (profile id, instances, slices, SMs, memory MiB) for every GPU instance profile offered."""
    out = {}
    for index in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except n.NVMLError_NotSupported:
            continue
        out[info.name] = (info.id, info.instanceCount, info.sliceCount, info.multiprocessorCount, info.memorySizeMB)
    return out


def _gis(n: ModuleType, handle: Any, profile_id: int) -> list[Any]:
    handles = (n.c_nvmlGpuInstance_t * 8)()
    count = ctypes.c_uint()
    n.nvmlDeviceGetGpuInstances(handle, profile_id, handles, ctypes.byref(count))
    return [handles[i] for i in range(count.value)]


def _enable(n: ModuleType, handle: Any) -> None:
    assert n.nvmlDeviceSetMigMode(handle, n.NVML_DEVICE_MIG_ENABLE) == n.NVML_SUCCESS


def test_a100_40gb_table_from_the_mig_user_guide(nvml: Init) -> None:
    n = nvml("a100x8-40gb")
    handle = n.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(n.NVMLError_NotSupported):  # profiles are reported in MIG mode only
        n.nvmlDeviceGetGpuInstanceProfileInfo(handle, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    _enable(n, handle)
    assert _profiles(n, handle) == {
        "MIG 1g.5gb": (19, 7, 1, 14, 4864),
        "MIG 2g.10gb": (14, 3, 2, 28, 9856),
        "MIG 3g.20gb": (9, 2, 3, 42, 19968),
        "MIG 4g.20gb": (5, 1, 4, 56, 19968),
        "MIG 7g.40gb": (0, 1, 7, 98, 40192),
        "MIG 1g.5gb+me": (20, 1, 1, 14, 4864),
        "MIG 1g.10gb": (15, 4, 1, 14, 9856),
    }
    v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(handle, n.NVML_GPU_INSTANCE_PROFILE_7_SLICE, version=1)
    assert (v1.id, v1.sliceCount, v1.memorySizeMB) == (0, 7, 40192)


@pytest.mark.parametrize(
    ("profile", "names"),
    [
        ("a100x8-nvswitch", ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"]),
        ("h200x2", ["1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"]),
    ],
)
def test_profile_names_per_board(nvml: Init, profile: str, names: list[str]) -> None:
    n = nvml(profile)
    handle = n.nvmlDeviceGetHandleByIndex(0)
    _enable(n, handle)
    assert list(_profiles(n, handle)) == [f"MIG {name}" for name in names]
    assert n.nvmlDeviceGetMaxMigDeviceCount(handle) == 7


@pytest.mark.parametrize("profile", ["v100x4", "rtx3090x4"])
def test_boards_without_mig_answer_not_supported(nvml: Init, profile: str) -> None:
    n = nvml(profile)
    handle = n.nvmlDeviceGetHandleByIndex(0)
    for call, args in (
        (n.nvmlDeviceGetMigMode, ()),
        (n.nvmlDeviceSetMigMode, (1,)),
        (n.nvmlDeviceGetGpuInstanceProfileInfo, (0,)),
        (n.nvmlDeviceCreateGpuInstance, (19,)),
    ):
        with pytest.raises(n.NVMLError_NotSupported):
            call(handle, *args)
    assert n.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


def test_mode_change_applies_at_once_and_persists_in_the_state_file(
    nvml: Init, use_profile: Init, tmp_path: Path
) -> None:
    n = nvml("a100x8-nvswitch")
    handle = n.nvmlDeviceGetHandleByIndex(2)
    assert n.nvmlDeviceGetMigMode(handle) == [0, 0]
    assert n.nvmlDeviceGetMaxMigDeviceCount(handle) == 7  # the profile's value outside MIG mode
    assert not (tmp_path / "mock-nvml.state").exists()  # reading writes nothing
    _enable(n, handle)
    assert n.nvmlDeviceGetMigMode(handle) == [1, 1]
    n.nvmlShutdown()
    state = (tmp_path / "mock-nvml.state").read_text(encoding="utf-8")
    assert "gpu.2.mig=1 1" in state
    assert "boot=boot-1" in state
    n.nvmlInit()
    assert n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(2)) == [1, 1]
    assert n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(3)) == [0, 0]


def test_instances_life_cycle(nvml: Init) -> None:
    n = nvml("a100x8-nvswitch")
    handle = n.nvmlDeviceGetHandleByIndex(0)
    _enable(n, handle)
    big = n.nvmlDeviceCreateGpuInstance(handle, 9)  # 3g.40gb
    assert n.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 9) == 1
    info = n.nvmlGpuInstanceGetInfo(big)
    assert (info.profileId, info.placement.start, info.placement.size) == (9, 4, 4)
    with pytest.raises(n.NVMLError_InsufficientResources):
        n.nvmlDeviceCreateGpuInstance(handle, 0)  # 7g.80gb no longer fits
    ci_info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(big, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0)
    assert (ci_info.id, ci_info.sliceCount, ci_info.instanceCount, ci_info.name) == (2, 3, 1, "MIG 3g.40gb")
    small = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(big, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
    assert (small.instanceCount, small.multiprocessorCount, small.name) == (3, 14, "MIG 1c.3g.40gb")
    with pytest.raises(n.NVMLError_NotSupported):
        n.nvmlGpuInstanceGetComputeInstanceProfileInfo(big, n.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0)
    ci = n.nvmlGpuInstanceCreateComputeInstance(big, 2)
    ci_read = n.nvmlComputeInstanceGetInfo(ci)
    assert (ci_read.id, ci_read.profileId, ci_read.placement.start, ci_read.placement.size) == (0, 2, 0, 3)
    with pytest.raises(n.NVMLError_InUse):
        n.nvmlGpuInstanceDestroy(big)  # compute instances first
    with pytest.raises(n.NVMLError_InUse):
        n.nvmlDeviceSetMigMode(handle, 0)  # not under existing instances
    n.nvmlComputeInstanceDestroy(ci)
    n.nvmlGpuInstanceDestroy(big)
    assert _gis(n, handle, 9) == []
    sevens = [n.nvmlDeviceCreateGpuInstance(handle, 19) for _ in range(7)]
    assert sorted(n.nvmlGpuInstanceGetInfo(gi).placement.start for gi in sevens) == list(range(7))
    with pytest.raises(n.NVMLError_InsufficientResources):
        n.nvmlDeviceCreateGpuInstance(handle, 19)
    assert len(_gis(n, handle, 19)) == 7


def test_instances_are_gpu_state_other_processes_see(nvml: Init, tmp_path: Path) -> None:
    n = nvml("a100x8-nvswitch")
    handle = n.nvmlDeviceGetHandleByIndex(5)
    _enable(n, handle)
    gi = n.nvmlDeviceCreateGpuInstance(handle, 14)
    n.nvmlGpuInstanceCreateComputeInstance(gi, 1)
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "lib")], capture_output=True, text=True,
                           check=False)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["mig=[1,", "1]", "2g.20gb=1", "ci=1"]


# Another process (with its own copy of the library) reads GPU 5's instances.
CHILD = r"""
import ctypes, glob, os, sys
import pynvml as n
n.nvmlLib = ctypes.CDLL(glob.glob(os.path.join(os.environ["MOCK_LIB_DIR"], "libnvidia-ml.so.1"))[0])
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(5)
arr = (n.c_nvmlGpuInstance_t * 3)(); cnt = ctypes.c_uint()
n.nvmlDeviceGetGpuInstances(h, 14, arr, ctypes.byref(cnt))
carr = (n.c_nvmlComputeInstance_t * 2)(); ccnt = ctypes.c_uint()
n.nvmlGpuInstanceGetComputeInstances(arr[0], 1, carr, ctypes.byref(ccnt))
print("mig=" + str(n.nvmlDeviceGetMigMode(h)), "2g.20gb=%d" % cnt.value, "ci=%d" % ccnt.value)
"""


@pytest.fixture(autouse=True)
def _lib_dir(mock_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCK_LIB_DIR", str(mock_library.parent))


def test_reboot_clears_instances_and_applies_the_pending_mode(
    nvml: Init, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = nvml("a100x8-nvswitch")
    handle = n.nvmlDeviceGetHandleByIndex(0)
    _enable(n, handle)
    for _ in range(7):
        n.nvmlGpuInstanceCreateComputeInstance(n.nvmlDeviceGetGpuInstanceById(
            handle, n.nvmlGpuInstanceGetInfo(n.nvmlDeviceCreateGpuInstance(handle, 19)).id), 0)
    # GPU 1's change is left pending: something holds /dev/nvidia1
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia1").write_text("", encoding="utf-8")
    monkeypatch.setenv("GPUPROV_MOCK_NVML_DEV_DIR", str(dev))
    with (dev / "nvidia1").open(encoding="utf-8") as held:
        holder = subprocess.Popen(["sleep", "30"], stdin=held)
    try:
        gpu1 = n.nvmlDeviceGetHandleByIndex(1)
        assert n.nvmlDeviceSetMigMode(gpu1, 1) == n.NVML_ERROR_IN_USE
        assert n.nvmlDeviceGetMigMode(gpu1) == [0, 1]
        with pytest.raises(n.NVMLError_NotSupported):
            n.nvmlDeviceCreateGpuInstance(gpu1, 19)  # not in MIG mode yet
    finally:
        holder.kill()
        holder.wait()
    n.nvmlShutdown()
    monkeypatch.setenv("GPUPROV_MOCK_NVML_BOOT_ID", "boot-2")
    n.nvmlInit()
    handle = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetMigMode(handle) == [1, 1]  # the mode survives the reboot
    assert _gis(n, handle, 19) == []  # the instances do not
    assert n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(1)) == [1, 1]  # pending applied at boot
    assert "boot=boot-2" in (tmp_path / "mock-nvml.state").read_text(encoding="utf-8")


def test_state_of_a_replaced_gpu_is_ignored(nvml: Init, tmp_path: Path) -> None:
    n = nvml("a100x8-nvswitch")
    _enable(n, n.nvmlDeviceGetHandleByIndex(0))
    n.nvmlShutdown()
    state = tmp_path / "mock-nvml.state"
    text = state.read_text(encoding="utf-8").replace("GPU-00000000-0000-4000-8000-0000000a1000", "GPU-old")
    state.write_text(text, encoding="utf-8")
    n.nvmlInit()
    assert n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(0)) == [0, 0]


def test_state_file_path_from_the_environment(nvml: Init, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "elsewhere" / "gpu.state"
    state.parent.mkdir()
    monkeypatch.setenv("GPUPROV_MOCK_NVML_STATE", str(state))
    n = nvml("h200x2")
    _enable(n, n.nvmlDeviceGetHandleByIndex(1))
    assert "gpu.1.mig=1 1" in state.read_text(encoding="utf-8")
    assert not (tmp_path / "mock-nvml.state").exists()


def test_unwritable_state_is_no_permission(nvml: Init, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_MOCK_NVML_STATE", str(tmp_path / "missing-dir" / "gpu.state"))
    n = nvml("a100x8-nvswitch")
    handle = n.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(n.NVMLError_NoPermission):
        n.nvmlDeviceSetMigMode(handle, 1)
    assert n.nvmlDeviceGetMigMode(handle) == [0, 0]
