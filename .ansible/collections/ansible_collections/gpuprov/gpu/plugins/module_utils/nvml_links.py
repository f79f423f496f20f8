# Copyright: gpuprov contributors
# Apache-2.0
"""What the NVML collector (module_utils/nvml.py) reads of how one GPU is connected: NUMA node and CPU affinity,
its NVLink links and their remote ends, and its registration with the NVSwitch fabric.

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

import ctypes

from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_reader import LOST_ERRORS, GpuReader, error_name
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_values import cpu_ids, nvlink_version_text

#: ``nvmlDeviceGetNvLinkRemoteDeviceType`` values (``NVML_NVLINK_DEVICE_TYPE_*``).
NVLINK_DEVICE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 255: "unknown"}

#: ``nvmlGpuFabricState_t`` values (``NVML_GPU_FABRIC_STATE_*``): a GPU's registration with the NVSwitch fabric
#: that Fabric Manager (or the NVLink switch system's NVSwitch firmware) performs; Hopper and later report it.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


def read_topology(gpu: GpuReader, cpu_words: int) -> None:
    """``numa_node``, ``cpu_affinity`` (CPU ids) and ``nvlink {links, active_links, nvswitch_present}``."""
    nv = gpu.nv
    affinity = gpu.call("cpu_affinity", "nvmlDeviceGetCpuAffinity", cpu_words)
    gpu.entry.update(
        numa_node=gpu.call("numa_node", "nvmlDeviceGetNumaNodeId"),
        cpu_affinity=None if affinity is None else cpu_ids(affinity),
    )
    links = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        if gpu.entry["lost"]:
            break
        try:
            state = nv.nvmlDeviceGetNvLinkState(gpu.handle, link)
        except nv.NVMLError as exc:
            # Links past the GPU's count answer INVALID_ARGUMENT; PCIe-only boards NOT_SUPPORTED.
            if error_name(nv, exc) in LOST_ERRORS:
                gpu.record("nvlink", exc)
            continue
        remote = gpu.call("nvlink.remote_device_type", "nvmlDeviceGetNvLinkRemoteDeviceType", link) if state else None
        links.append(
            {
                "link": link,
                "active": bool(state),
                "version": nvlink_version_text(nv, gpu.call("nvlink.version", "nvmlDeviceGetNvLinkVersion", link))
                if state
                else None,
                "remote_device_type": None if remote is None else NVLINK_DEVICE_TYPES.get(remote, str(remote)),
            }
        )
    remote_types = {entry["remote_device_type"] for entry in links if entry["active"]}
    gpu.entry["nvlink"] = {
        "links": links,
        "active_links": sum(1 for entry in links if entry["active"]),
        # None when no active link told its remote type (no NVLink, or the driver does not say).
        "nvswitch_present": ("switch" in remote_types) if remote_types - {None} else None,
    }


def read_fabric(gpu: GpuReader) -> None:
    """``fabric {state, status}``: ``state`` from :data:`FABRIC_STATES`, ``status`` the NVML result of the
    registration (``NVML_SUCCESS`` or an ``NVML_ERROR_*`` name); None when the GPU or driver does not report it."""
    nv = gpu.nv
    struct = getattr(nv, "c_nvmlGpuFabricInfo_t", None)
    if struct is None:  # a pynvml older than the fabric API
        gpu.entry["fabric"] = None
        return
    info = struct()
    done = gpu.call("fabric", "nvmlDeviceGetGpuFabricInfo", ctypes.byref(info))
    state = None if done is None else FABRIC_STATES.get(int(info.state), str(info.state))
    if state in (None, "not_supported"):
        gpu.entry["fabric"] = None
        return
    status = int(info.status)
    name = "NVML_SUCCESS" if status == 0 else next(
        (attr for attr in dir(nv) if attr.startswith("NVML_ERROR_") and getattr(nv, attr) == status),
        f"NVML_ERROR_CODE_{status}")
    gpu.entry["fabric"] = {"state": state, "status": name}
