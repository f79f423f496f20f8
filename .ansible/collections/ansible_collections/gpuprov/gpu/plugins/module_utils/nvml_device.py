# Copyright: gpuprov contributors
# Apache-2.0
"""What the NVML collector (module_utils/nvml.py) reads of one GPU, one function per part of its entry: PCI ids,
identity, memory and BAR1, modes (persistence, MIG, ECC), PCIe link and power limits, and the ``live`` values
(temperature, power draw, utilisation) that change while it runs. Each takes a :class:`~nvml_reader.GpuReader`
and fills its ``entry``.

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_reader import GpuReader, flag, split_pair, struct_field
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_values import (
    architecture_name,
    milliwatts_to_watts,
    sysfs_bus_id,
    text,
)

#: Fields of a GPU entry that change while it runs; parity comparisons ignore the whole ``live`` key.
LIVE_KEY = "live"


def read_pci(gpu: GpuReader) -> None:
    """``pci_bus_id`` (NVML's form), ``pci_bus_id_sysfs``, ``pci_device_id`` and ``pci_subsystem_id``."""
    pci = gpu.call("pci", "nvmlDeviceGetPciInfo")
    bus_id = struct_field(pci, "busId")
    bus_id = text(bus_id) if bus_id is not None else None
    device_id = struct_field(pci, "pciDeviceId")
    subsystem_id = struct_field(pci, "pciSubSystemId")
    gpu.entry.update(
        pci_bus_id=bus_id,
        pci_bus_id_sysfs=sysfs_bus_id(bus_id),
        pci_device_id=None if device_id is None else f"0x{device_id:08x}",
        pci_subsystem_id=None if subsystem_id is None else f"0x{subsystem_id:08x}",
    )


def read_identity(gpu: GpuReader) -> None:
    """``name``, ``uuid``, ``serial``, ``minor_number``, ``compute_capability`` and ``architecture``."""
    nv = gpu.nv
    name = gpu.call("name", "nvmlDeviceGetName")
    uuid = gpu.call("uuid", "nvmlDeviceGetUUID")
    serial = gpu.call("serial", "nvmlDeviceGetSerial")
    capability = gpu.call("compute_capability", "nvmlDeviceGetCudaComputeCapability")
    gpu.entry.update(
        name=None if name is None else text(name),
        uuid=None if uuid is None else text(uuid),
        serial=None if serial is None else text(serial),
        minor_number=gpu.call("minor_number", "nvmlDeviceGetMinorNumber"),
        compute_capability=None if capability is None else f"{capability[0]}.{capability[1]}",
        architecture=architecture_name(nv, gpu.call("architecture", "nvmlDeviceGetArchitecture")),
    )


def read_memory(gpu: GpuReader) -> dict[str, Any]:
    """``memory_total_bytes`` and ``bar1_total_bytes``; returns the used amounts for :func:`read_live`."""
    memory = gpu.call("memory_total_bytes", "nvmlDeviceGetMemoryInfo")
    bar1 = gpu.call("bar1_total_bytes", "nvmlDeviceGetBAR1MemoryInfo")
    gpu.entry.update(memory_total_bytes=struct_field(memory, "total"), bar1_total_bytes=struct_field(bar1, "bar1Total"))
    return {"memory_used_bytes": struct_field(memory, "used"), "bar1_used_bytes": struct_field(bar1, "bar1Used")}


def read_modes(gpu: GpuReader) -> None:
    """``persistence_mode``, ``mig {current, pending, max_devices}`` and ``ecc`` (modes, counters, retired pages,
    remapped rows)."""
    nv = gpu.nv
    mig_current, mig_pending = split_pair(gpu.call("mig", "nvmlDeviceGetMigMode"))
    ecc_current, ecc_pending = split_pair(gpu.call("ecc", "nvmlDeviceGetEccMode"))
    ecc: dict[str, Any] = {"current": flag(ecc_current), "pending": flag(ecc_pending)}
    counters = (
        ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
    )
    scopes = (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC"))
    for kind, kind_const in counters:
        for scope, scope_const in scopes:
            key = f"{kind}_{scope}"
            ecc[key] = (
                gpu.call("ecc." + key, "nvmlDeviceGetTotalEccErrors", getattr(nv, kind_const), getattr(nv, scope_const))
                if ecc_current
                else None
            )
    pending = gpu.call("ecc.retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
    ecc["retired_pages_pending"] = flag(pending)
    rows = gpu.call("ecc.remapped_rows", "nvmlDeviceGetRemappedRows")
    ecc["remapped_rows"] = (
        None
        if rows is None
        else {"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
    )
    gpu.entry.update(
        persistence_mode=flag(gpu.call("persistence_mode", "nvmlDeviceGetPersistenceMode")),
        mig={
            "current": flag(mig_current),
            "pending": flag(mig_pending),
            "max_devices": gpu.call("mig.max_devices", "nvmlDeviceGetMaxMigDeviceCount"),
        },
        ecc=ecc,
    )


def read_pcie_and_power(gpu: GpuReader) -> None:
    """``pcie {gen_*, width_*}`` and the power limits in W."""
    gpu.entry["pcie"] = {
        "gen_current": gpu.call("pcie.gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
        "gen_max": gpu.call("pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        "gen_gpu_max": gpu.call("pcie.gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
        "width_current": gpu.call("pcie.width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        "width_max": gpu.call("pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    }
    gpu.entry.update(
        power_limit_w=milliwatts_to_watts(gpu.call("power_limit_w", "nvmlDeviceGetPowerManagementLimit")),
        power_default_limit_w=milliwatts_to_watts(
            gpu.call("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")
        ),
        enforced_power_limit_w=milliwatts_to_watts(
            gpu.call("enforced_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        ),
    )


def read_live(gpu: GpuReader, memory: dict[str, Any]) -> None:
    """The ``live`` values, which change while the GPU runs (parity comparisons ignore them)."""
    nv = gpu.nv
    utilization = gpu.call("live.utilization", "nvmlDeviceGetUtilizationRates")
    sensor = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
    gpu.entry[LIVE_KEY] = {
        "temperature_c": gpu.call("live.temperature_c", "nvmlDeviceGetTemperature", sensor),
        "power_draw_w": milliwatts_to_watts(gpu.call("live.power_draw_w", "nvmlDeviceGetPowerUsage")),
        "utilization_gpu_pct": struct_field(utilization, "gpu"),
        "utilization_memory_pct": struct_field(utilization, "memory"),
        "performance_state": gpu.call("live.performance_state", "nvmlDeviceGetPerformanceState"),
        "memory_used_bytes": memory["memory_used_bytes"],
        "bar1_used_bytes": memory["bar1_used_bytes"],
    }
