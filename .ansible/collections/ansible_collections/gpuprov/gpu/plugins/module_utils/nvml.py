# Copyright: gpuprov contributors
# Apache-2.0
"""The one NVML facts collector of gpuprov, written against pynvml's API (nvidia-ml-py).

Used by the ``nvml_facts`` Ansible module on target hosts and by ``gpuprov facts`` on the local machine
(:mod:`gpuprov.facts` imports this very file), so both report the same shape from the same code.

This file reads the system-wide values and runs the per-GPU readers, which are split by what they read:
``nvml_device`` (PCI ids, identity, memory, modes, PCIe and power, live values) and ``nvml_links`` (NUMA,
CPU affinity, NVLink, fabric), on top of ``nvml_reader`` (the calls and the error policy below) and
``nvml_values`` (unit and enum conversions).

:func:`collect` takes the pynvml *module* as an argument instead of importing it: the module runs on hosts
where pynvml is not installed (the action plugin ships the controller's copy), and the unit tests pass a
fake object that answers from the recorded fixture ``tests/data/nvml-h200x2/nvml.json``.

Error policy, per NVML call:

* ``NVML_ERROR_NOT_SUPPORTED`` / ``NVML_ERROR_FUNCTION_NOT_FOUND`` (an older driver lacks the symbol):
  the field is ``None``; nothing else is recorded.
* ``NVML_ERROR_GPU_IS_LOST`` / ``NVML_ERROR_RESET_REQUIRED``: the GPU is *lost* (Xid 79, fallen off the bus): its
  ``error_name``/``error`` are set, ``lost`` is true, and no further query is made for it; the other GPUs
  are still reported.
* any other NVML error: the field is ``None`` and ``errors[<field>]`` names the error.
* ``nvmlInit`` failing (driver not loaded, library missing, NVML/RM version mismatch after an upgrade):
  ``available`` is false with ``error_name`` and ``error``; :func:`collect` never raises an NVML error.

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_device import (
    read_identity,
    read_live,
    read_memory,
    read_modes,
    read_pci,
    read_pcie_and_power,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_links import read_fabric, read_topology
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_reader import GpuReader, error_name, error_reason
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml_values import cuda_version_text, text

#: Bump when the fact shape changes incompatibly.
FACTS_VERSION = 1


def _lost_bus_id(index: int, proc_root: str) -> str | None:
    """Best guess at the bus id of a GPU whose handle NVML refuses: NVML enumerates GPUs in PCI bus order,
    as the driver lists them under ``/proc/driver/nvidia/gpus/``. None when that directory is missing."""
    try:
        entries = sorted(path.name for path in (Path(proc_root) / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return None
    return entries[index].lower() if index < len(entries) else None


def collect_gpu(nv: Any, index: int, cpu_words: int = 1, proc_root: str = "/proc") -> dict[str, Any]:
    """Return the facts of GPU ``index`` (see :func:`collect` for the shape)."""
    gpu = GpuReader(nv, index)
    try:
        gpu.handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        gpu.record("handle", exc)
        if not gpu.entry["lost"]:
            gpu.entry.update(lost=True, error_name=error_name(nv, exc), error=error_reason(exc) + " (handle)")
    # A lost GPU still gets every key (None), so consumers see one shape.
    read_pci(gpu)  # first: the bus id is what an operator needs when the GPU is lost
    gpu.entry["pci_bus_id_source"] = "nvml" if gpu.entry["pci_bus_id"] else None
    if gpu.handle is None:
        guess = _lost_bus_id(index, proc_root)
        gpu.entry.update(pci_bus_id_sysfs=guess, pci_bus_id_source="procfs" if guess else None)
    read_identity(gpu)
    memory = read_memory(gpu)
    read_modes(gpu)
    read_pcie_and_power(gpu)
    read_topology(gpu, cpu_words)
    read_fabric(gpu)
    read_live(gpu, memory)
    gpu.entry["errors"] = gpu.errors
    return gpu.entry


def kernel_module_version(sysfs_root: str = "/sys") -> str | None:
    """Version of the loaded ``nvidia`` kernel module (``/sys/module/nvidia/version``), or None."""
    try:
        return (Path(sysfs_root) / "module" / "nvidia" / "version").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _system(nv: Any, facts: dict[str, Any]) -> None:
    def read(func_name: str) -> Any:
        func = getattr(nv, func_name, None)
        if func is None:
            return None
        try:
            return func()
        except nv.NVMLError:
            return None

    driver = read("nvmlSystemGetDriverVersion")
    nvml = read("nvmlSystemGetNVMLVersion")
    cuda = read("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = read("nvmlSystemGetCudaDriverVersion")
    facts.update(
        driver_version=None if driver is None else text(driver),
        nvml_version=None if nvml is None else text(nvml),
        cuda_driver_version=cuda_version_text(cuda),
        cuda_driver_version_int=cuda,
    )


def _cuda_arch_bin(gpus: list[dict[str, Any]]) -> str | None:
    found = {str(cc) for cc in (gpu.get("compute_capability") for gpu in gpus) if cc is not None}
    if not found:
        return None
    return ",".join(sorted(found, key=lambda cc: tuple(int(part) for part in cc.split("."))))


def collect(nv: Any, sysfs_root: str = "/sys", proc_root: str = "/proc") -> dict[str, Any]:
    """Initialise NVML through ``nv`` (the pynvml module), read every GPU and shut NVML down again.

    Returns the ``gpuprov_gpus`` fact (units in the key names: ``_bytes``, ``_w`` watts, ``_c`` degrees C)::

        available: bool            # False when nvmlInit or nvmlDeviceGetCount failed
        error_name / error: str    # NVML_ERROR_* name and reason when not available, else None
        facts_version: int
        kernel_module_version: str # /sys/module/nvidia/version, None when not loaded
        driver_version, nvml_version: str        # "580.159.04", "13.580.159.04"
        cuda_driver_version: str, cuda_driver_version_int: int   # "13.0", 13000
        count: int                 # GPUs NVML enumerates
        cuda_arch_bin: str         # unique compute capabilities, comma-joined ("9.0"), None without GPUs
        nvswitch_present: bool     # any GPU's active NVLink ends at an NVSwitch; None when unknown
        lost_gpus: list[int]       # indices of GPUs whose entry has lost true
        gpus: list of dict, per index: index, lost, error_name, error, name, uuid, serial, minor_number,
            pci_bus_id ("00000000:00:06.0"), pci_bus_id_sysfs ("0000:00:06.0"), pci_bus_id_source
            ("nvml"; "procfs" when NVML refused the handle and the bus id is the driver's n-th GPU), pci_device_id,
            pci_subsystem_id ("0x233510de"), compute_capability ("9.0"), architecture ("hopper"),
            memory_total_bytes, bar1_total_bytes, persistence_mode,
            mig {current, pending, max_devices}, ecc {current, pending, uncorrected_volatile,
            corrected_volatile, uncorrected_aggregate, corrected_aggregate, retired_pages_pending,
            remapped_rows {correctable, uncorrectable, pending, failure}},
            pcie {gen_current, gen_max (what the link trained to / can train to in this slot),
            gen_gpu_max (the GPU's own maximum), width_current, width_max},
            power_limit_w, power_default_limit_w, enforced_power_limit_w, numa_node, cpu_affinity,
            nvlink {links [{link, active, version ("4.0"), remote_device_type}], active_links, nvswitch_present},
            fabric {state (not_started|in_progress|completed), status (NVML_SUCCESS or NVML_ERROR_*)} or None,
            errors {field: NVML_ERROR_*}, live {temperature_c, power_draw_w, utilization_gpu_pct,
            utilization_memory_pct, performance_state, memory_used_bytes, bar1_used_bytes}

    ``sysfs_root`` / ``proc_root`` let tests point the two file reads at a fake tree.
    """
    facts: dict[str, Any] = {
        "available": False,
        "error_name": None,
        "error": None,
        "facts_version": FACTS_VERSION,
        "kernel_module_version": kernel_module_version(sysfs_root),
        "driver_version": None,
        "nvml_version": None,
        "cuda_driver_version": None,
        "cuda_driver_version_int": None,
        "count": 0,
        "cuda_arch_bin": None,
        "nvswitch_present": None,
        "lost_gpus": [],
        "gpus": [],
    }
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        facts.update(error_name=error_name(nv, exc), error=error_reason(exc))
        return facts
    try:
        _system(nv, facts)
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            facts.update(error_name=error_name(nv, exc), error=error_reason(exc) + " (nvmlDeviceGetCount)")
            return facts
        cpu_words = max(1, ((os.cpu_count() or 1) + 63) // 64)
        gpus = [collect_gpu(nv, index, cpu_words, proc_root) for index in range(count)]
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
    switch_flags = {gpu.get("nvlink", {}).get("nvswitch_present") for gpu in gpus} - {None}
    facts.update(
        available=True,
        count=count,
        gpus=gpus,
        cuda_arch_bin=_cuda_arch_bin(gpus),
        nvswitch_present=(True in switch_flags) if switch_flags else None,
        lost_gpus=[gpu["index"] for gpu in gpus if gpu["lost"]],
    )
    return facts
