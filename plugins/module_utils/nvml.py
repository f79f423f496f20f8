# Copyright: gpuprov contributors
# Apache-2.0
"""The one NVML facts collector of gpuprov, written against pynvml's API (nvidia-ml-py).

Used by the ``nvml_facts`` Ansible module on target hosts and by ``gpuprov facts`` on the local machine
(:mod:`gpuprov.facts` loads this very file), so both report the same shape from the same code.

:func:`collect` takes the pynvml *module* as an argument instead of importing it: the module runs on hosts
where pynvml is not installed (the action plugin ships the controller's copy), and the unit tests pass a
fake object that answers from the recorded fixture ``tests/data/nvml-h200x2/nvml.json``.

Error policy, per NVML call:

* ``NVML_ERROR_NOT_SUPPORTED`` / ``NVML_ERROR_FUNCTION_NOT_FOUND`` (an older driver lacks the symbol):
  the field is ``None``; nothing else is recorded.
* ``NVML_ERROR_GPU_IS_LOST`` / ``NVML_ERROR_RESET_REQUIRED``: the GPU is *lost* (Xid 79, case B21): its
  ``error_name``/``error`` are set, ``lost`` is true, and no further query is made for it; the other GPUs
  are still reported.
* any other NVML error: the field is ``None`` and ``errors[<field>]`` names the error.
* ``nvmlInit`` failing (driver not loaded, library missing, NVML/RM version mismatch of case B09):
  ``available`` is false with ``error_name`` and ``error``; :func:`collect` never raises an NVML error.

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from pathlib import Path
from typing import Any

#: Bump when the fact shape changes incompatibly.
FACTS_VERSION = 1

#: Calls answering these errors just have no value on this GPU or driver.
QUIET_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")

#: Errors after which a GPU is unusable until a reset or reboot; no more queries are made for it.
LOST_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")

#: ``nvmlDeviceGetNvLinkRemoteDeviceType`` values (``NVML_NVLINK_DEVICE_TYPE_*``).
NVLINK_DEVICE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 255: "unknown"}

#: ``nvmlGpuFabricState_t`` values (``NVML_GPU_FABRIC_STATE_*``): a GPU's registration with the NVSwitch fabric
#: that Fabric Manager (or the NVLink switch system's NVSwitch firmware) performs; Hopper and later report it.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}

#: Fields of a GPU entry that change while it runs; parity comparisons ignore the whole ``live`` key.
LIVE_KEY = "live"


def error_name(nv: Any, exc: BaseException) -> str:
    """Return the ``NVML_ERROR_*`` name of a pynvml error (``NVML_ERROR_CODE_<n>`` for an unknown code)."""
    value = getattr(exc, "value", None)
    # The error's own module is pynvml even when ``nv`` is a stand-in without a full dir().
    for source in (nv, sys.modules.get(type(exc).__module__)):
        for attr in dir(source) if source is not None else ():
            if attr.startswith("NVML_ERROR_") and getattr(source, attr) == value:
                return attr
    return f"NVML_ERROR_CODE_{value}"


def error_reason(exc: BaseException) -> str:
    """Return pynvml's text for an error ("Driver Not Loaded"), never raising."""
    try:
        return str(exc)
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        return repr(exc)


def text(value: Any) -> str:
    """Decode a bytes value that older pynvml releases return; pass str through."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def sysfs_bus_id(bus_id: str | None) -> str | None:
    """``00000000:00:06.0`` (NVML, 8-digit domain) -> ``0000:00:06.0`` (sysfs/lspci, lower case)."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.partition(":")
    if not rest:
        return bus_id.lower()
    return f"{int(domain, 16):04x}:{rest}".lower()


def cuda_version_text(value: int | None) -> str | None:
    """``13000`` -> ``"13.0"``; ``12040`` -> ``"12.4"`` (NVML's 1000*major + 10*minor encoding)."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def architecture_name(nv: Any, value: int | None) -> str | None:
    """``9`` -> ``"hopper"`` from pynvml's ``NVML_DEVICE_ARCH_*`` constants; unknown codes as text."""
    if value is None:
        return None
    for attr in dir(nv):
        if attr.startswith("NVML_DEVICE_ARCH_") and getattr(nv, attr) == value:
            return attr[len("NVML_DEVICE_ARCH_") :].lower()
    return str(value)


def nvlink_version_text(nv: Any, value: int | None) -> str | None:
    """NVML's NVLink version enum -> text: ``6`` (``NVML_NVLINK_VERSION_4_0``) -> ``"4.0"``; 0 (invalid) -> None."""
    if not value:
        return None
    for attr in dir(nv):
        if (
            attr.startswith("NVML_NVLINK_VERSION_")
            and attr != "NVML_NVLINK_VERSION_INVALID"
            and getattr(nv, attr) == value
        ):
            return attr[len("NVML_NVLINK_VERSION_") :].replace("_", ".")
    return str(value)


def cpu_ids(mask_words: Any) -> list[int]:
    """Expand NVML's CPU affinity bitmask (a sequence of 64-bit words, word 0 = CPUs 0-63) to CPU ids."""
    out = []
    for word_index, raw in enumerate(mask_words):
        word = int(raw)
        for bit in range(64):
            if word >> bit & 1:
                out.append(word_index * 64 + bit)
    return out


def milliwatts_to_watts(value: int | None) -> float | None:
    """NVML reports power in mW; facts carry W (``700000`` -> ``700.0``)."""
    return None if value is None else round(value / 1000.0, 3)


class _Gpu:
    """Reads one GPU's values, applying the error policy of this module."""

    def __init__(self, nv: Any, index: int) -> None:
        self.nv = nv
        self.handle: Any = None
        self.entry: dict[str, Any] = {"index": index, "lost": False, "error_name": None, "error": None}
        self.errors: dict[str, str] = {}

    def call(self, field: str, func_name: str, *args: Any) -> Any:
        """Call ``nv.<func_name>(handle, *args)``; return None for errors as described in the module doc."""
        if self.entry["lost"]:
            return None
        func = getattr(self.nv, func_name, None)
        if func is None:  # pynvml older than this collector
            return None
        try:
            return func(self.handle, *args)
        except self.nv.NVMLError as exc:
            self.record(field, exc)
            return None

    def record(self, field: str, exc: BaseException) -> None:
        """Apply the error policy to an NVML error raised while reading ``field``."""
        name = error_name(self.nv, exc)
        if name in QUIET_ERRORS:
            return
        if name in LOST_ERRORS:
            self.entry.update(lost=True, error_name=name, error=f"{error_reason(exc)} (while reading {field})")
            return
        self.errors[field] = name


def _field(struct: Any, name: str) -> Any:
    """Read a member of a pynvml ctypes structure, or None when the structure itself is missing."""
    return None if struct is None else getattr(struct, name, None)


def _pair(value: Any) -> tuple[Any, Any]:
    """Split a (current, pending) pair that NVML returns as a list; (None, None) when missing."""
    if value is None:
        return None, None
    return value[0], value[1]


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _pci(gpu: _Gpu) -> None:
    pci = gpu.call("pci", "nvmlDeviceGetPciInfo")
    bus_id = _field(pci, "busId")
    bus_id = text(bus_id) if bus_id is not None else None
    device_id = _field(pci, "pciDeviceId")
    subsystem_id = _field(pci, "pciSubSystemId")
    gpu.entry.update(
        pci_bus_id=bus_id,
        pci_bus_id_sysfs=sysfs_bus_id(bus_id),
        pci_device_id=None if device_id is None else f"0x{device_id:08x}",
        pci_subsystem_id=None if subsystem_id is None else f"0x{subsystem_id:08x}",
    )


def _identity(gpu: _Gpu) -> None:
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


def _memory(gpu: _Gpu) -> dict[str, Any]:
    memory = gpu.call("memory_total_bytes", "nvmlDeviceGetMemoryInfo")
    bar1 = gpu.call("bar1_total_bytes", "nvmlDeviceGetBAR1MemoryInfo")
    gpu.entry.update(memory_total_bytes=_field(memory, "total"), bar1_total_bytes=_field(bar1, "bar1Total"))
    return {"memory_used_bytes": _field(memory, "used"), "bar1_used_bytes": _field(bar1, "bar1Used")}


def _modes(gpu: _Gpu) -> None:
    nv = gpu.nv
    mig_current, mig_pending = _pair(gpu.call("mig", "nvmlDeviceGetMigMode"))
    ecc_current, ecc_pending = _pair(gpu.call("ecc", "nvmlDeviceGetEccMode"))
    ecc: dict[str, Any] = {"current": _flag(ecc_current), "pending": _flag(ecc_pending)}
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
    ecc["retired_pages_pending"] = _flag(pending)
    rows = gpu.call("ecc.remapped_rows", "nvmlDeviceGetRemappedRows")
    ecc["remapped_rows"] = (
        None
        if rows is None
        else {"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
    )
    gpu.entry.update(
        persistence_mode=_flag(gpu.call("persistence_mode", "nvmlDeviceGetPersistenceMode")),
        mig={
            "current": _flag(mig_current),
            "pending": _flag(mig_pending),
            "max_devices": gpu.call("mig.max_devices", "nvmlDeviceGetMaxMigDeviceCount"),
        },
        ecc=ecc,
    )


def _pcie_and_power(gpu: _Gpu) -> None:
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


def _topology(gpu: _Gpu, cpu_words: int) -> None:
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


def _fabric(gpu: _Gpu) -> None:
    """``fabric {state, status}``: ``state`` from :data:`FABRIC_STATES`, ``status`` the NVML result of the
    registration (``NVML_SUCCESS`` or an ``NVML_ERROR_*`` name); None when the GPU or driver does not report it."""
    nv = gpu.nv
    struct = getattr(nv, "c_nvmlGpuFabricInfo_t", None)
    info = struct() if struct is not None else None
    done = gpu.call("fabric", "nvmlDeviceGetGpuFabricInfo", ctypes.byref(info)) if info is not None else None
    state = None if done is None else FABRIC_STATES.get(int(info.state), str(info.state))
    if state in (None, "not_supported"):
        gpu.entry["fabric"] = None
        return
    status = int(info.status)
    name = "NVML_SUCCESS" if status == 0 else next(
        (attr for attr in dir(nv) if attr.startswith("NVML_ERROR_") and getattr(nv, attr) == status),
        f"NVML_ERROR_CODE_{status}")
    gpu.entry["fabric"] = {"state": state, "status": name}


def _live(gpu: _Gpu, memory: dict[str, Any]) -> None:
    nv = gpu.nv
    utilization = gpu.call("live.utilization", "nvmlDeviceGetUtilizationRates")
    sensor = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
    gpu.entry[LIVE_KEY] = {
        "temperature_c": gpu.call("live.temperature_c", "nvmlDeviceGetTemperature", sensor),
        "power_draw_w": milliwatts_to_watts(gpu.call("live.power_draw_w", "nvmlDeviceGetPowerUsage")),
        "utilization_gpu_pct": _field(utilization, "gpu"),
        "utilization_memory_pct": _field(utilization, "memory"),
        "performance_state": gpu.call("live.performance_state", "nvmlDeviceGetPerformanceState"),
        "memory_used_bytes": memory["memory_used_bytes"],
        "bar1_used_bytes": memory["bar1_used_bytes"],
    }


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
    gpu = _Gpu(nv, index)
    try:
        gpu.handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        gpu.record("handle", exc)
        if not gpu.entry["lost"]:
            gpu.entry.update(lost=True, error_name=error_name(nv, exc), error=error_reason(exc) + " (handle)")
    # A lost GPU still gets every key (None), so consumers see one shape.
    _pci(gpu)  # first: the bus id is what an operator needs when the GPU is lost
    gpu.entry["pci_bus_id_source"] = "nvml" if gpu.entry["pci_bus_id"] else None
    if gpu.handle is None:
        guess = _lost_bus_id(index, proc_root)
        gpu.entry.update(pci_bus_id_sysfs=guess, pci_bus_id_source="procfs" if guess else None)
    _identity(gpu)
    memory = _memory(gpu)
    _modes(gpu)
    _pcie_and_power(gpu)
    _topology(gpu, cpu_words)
    _fabric(gpu)
    _live(gpu, memory)
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
    found = {gpu.get("compute_capability") for gpu in gpus} - {None}
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
