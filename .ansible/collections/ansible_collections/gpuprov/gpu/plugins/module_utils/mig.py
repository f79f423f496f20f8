# Copyright: gpuprov contributors
# Apache-2.0
"""Assert and apply a mig-parted style MIG layout through NVML (pynvml), GPU by GPU.

The engine of the ``gpuprov.gpu.mig_layout`` Ansible module. After a reboot (a GPU keeps its MIG mode but
loses every GPU and compute instance) the boot unit ``gpuprov-mig.service`` re-creates the instances with the
host's own ``nvidia-smi mig``, from the per-GPU ``create`` list the plan reports
(:func:`~miglayout.creation_order`, the order this engine creates them in too).

Layout (the fleet file's ``mig.layouts.<name>``): a list of entries
``{devices: "all" | [index, ...], mig_enabled: bool, mig_devices: {"1g.10gb": 7, ...}}``; a later entry
wins for a GPU both name. GPUs no entry names are left alone. Each declared GPU instance gets one compute
instance spanning it (what ``nvidia-smi mig -cgi ... -C`` and mig-parted create).

The plan compares, per GPU: MIG mode (current and pending, from ``nvmlDeviceGetMigMode``) and the GPU
instance profile counts (``nvmlDeviceGetGpuInstances`` for every profile the GPU offers; names from
``nvmlDeviceGetGpuInstanceProfileInfo`` v2 without the "MIG " prefix). Errors are raised as
:class:`MigError` with an operator-facing message; nothing here prints or exits except :func:`main`.

Must stay importable on Python 3.8 (Ubuntu 20.04 targets); pynvml is passed in, not imported.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_holders import command_name, open_files
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import creation_order

#: GPU clients that hold the GPU and must be stopped around a MIG mode change (systemd unit names).
GPU_CLIENTS = (
    "nvidia-persistenced.service",
    "nvidia-fabricmanager.service",
    "nvidia-dcgm.service",
    "dcgm-exporter.service",
)


class MigError(Exception):
    """A layout that cannot be applied (not MIG-capable, GPU in use, unknown profile, NVML failure)."""


def resolve(entries: list[dict[str, Any]], count: int) -> dict[int, dict[str, Any]]:
    """Map GPU index -> ``{"enabled": bool, "devices": {profile: count}}`` for the GPUs the layout names.

    Raises MigError for an index past ``count`` or a malformed entry.
    """
    wanted: dict[int, dict[str, Any]] = {}
    for number, entry in enumerate(entries or []):
        devices = entry.get("devices", "all")
        if devices == "all":
            indexes = list(range(count))
        elif isinstance(devices, list) and all(isinstance(i, int) for i in devices):
            indexes = list(devices)
        else:
            raise MigError(f"layout entry {number}: devices must be 'all' or a list of GPU indexes, got {devices!r}")
        for index in indexes:
            if not 0 <= index < count:
                raise MigError(f"layout entry {number}: GPU {index} does not exist (this host has {count} GPUs)")
            enabled = bool(entry.get("mig_enabled", True))
            mig_devices = {str(k): int(v) for k, v in (entry.get("mig_devices") or {}).items()} if enabled else {}
            wanted[index] = {"enabled": enabled, "devices": mig_devices}
    return wanted


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _err(nv: Any, exc: Exception) -> str:
    value = getattr(exc, "value", None)
    for attr in dir(nv):
        if attr.startswith("NVML_ERROR_") and getattr(nv, attr) == value:
            return attr
    return f"NVML_ERROR_CODE_{value}"


class Gpu:
    """One physical GPU: its MIG mode, profile table and instances as NVML reports them."""

    def __init__(self, nv: Any, index: int) -> None:
        self.nv = nv
        self.index = index
        self.handle = nv.nvmlDeviceGetHandleByIndex(index)
        self.name = _text(nv.nvmlDeviceGetName(self.handle))
        self.uuid = _text(nv.nvmlDeviceGetUUID(self.handle))
        try:
            self.minor: int | None = int(nv.nvmlDeviceGetMinorNumber(self.handle))
        except nv.NVMLError:
            self.minor = None
        try:
            current, pending = nv.nvmlDeviceGetMigMode(self.handle)
            self.capable = True
            self.current: bool | None = bool(current)
            self.pending: bool | None = bool(pending)
        except nv.NVMLError as exc:
            if _err(nv, exc) not in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise
            self.capable, self.current, self.pending = False, None, None

    def profiles(self) -> dict[str, Any]:
        """Profile name ("1g.10gb") -> pynvml v2 profile info, for every GPU instance profile the GPU offers."""
        nv = self.nv
        out: dict[str, Any] = {}
        for index in range(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18))):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(self.handle, index)
            except nv.NVMLError:
                continue
            name = _text(info.name)
            out[name[4:] if name.startswith("MIG ") else name] = info
        return out

    def instances(self) -> dict[str, list[Any]]:
        """Profile name -> GPU instance handles that exist now (empty outside MIG mode)."""
        import ctypes

        nv = self.nv
        if not self.current:
            return {}
        out: dict[str, list[Any]] = {}
        for name, info in self.profiles().items():
            handles = (nv.c_nvmlGpuInstance_t * max(1, int(info.instanceCount)))()
            count = ctypes.c_uint(0)
            nv.nvmlDeviceGetGpuInstances(self.handle, info.id, handles, ctypes.byref(count))
            if count.value:
                out[name] = [handles[i] for i in range(count.value)]
        return out

    def compute_instances(self, gi: Any) -> list[Any]:
        """Compute instance handles of one GPU instance, every CI profile."""
        import ctypes

        nv = self.nv
        found: list[Any] = []
        for profile in range(int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9))):
            handles = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            try:
                nv.nvmlGpuInstanceGetComputeInstances(gi, profile, handles, ctypes.byref(count))
            except nv.NVMLError:
                continue
            found.extend(handles[i] for i in range(count.value))
        return found


def holders(minor: int | None, proc_root: str = "/proc", dev_dir: str = "/dev") -> list[str]:
    """What holds GPU ``<dev_dir>/nvidia<minor>``: ``nvidia_drm`` when loaded, and each process with it open.

    Open files are matched by device and inode (``os.stat`` through ``/proc/<pid>/fd``), so a file of the
    same name in another mount namespace is not the GPU. Returns human-readable entries
    (``"nvidia_drm kernel module (modeset)"``, ``"pid 4242 (python3)"``).
    """
    found: list[str] = []
    try:
        with open(os.path.join(proc_root, "modules"), encoding="utf-8") as handle:
            if any(line.split(" ", 1)[0] == "nvidia_drm" for line in handle):
                found.append("nvidia_drm kernel module (modeset)")
    except OSError:
        pass
    if minor is None:
        return found
    try:
        node = os.stat(os.path.join(dev_dir, f"nvidia{minor}"))
    except OSError:
        return found
    for pid, fds in open_files(proc_root, exclude={os.getpid()}):
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (node.st_dev, node.st_ino):
                found.append(f"pid {pid} ({command_name(proc_root, pid)})")
                break
    return found


def _counts(instances: dict[str, list[Any]]) -> dict[str, int]:
    return {name: len(handles) for name, handles in sorted(instances.items()) if handles}


def plan_gpu(gpu: Gpu, want: dict[str, Any]) -> dict[str, Any]:
    """Compare one GPU with its declared state; return the report entry with ``actions`` (empty: matches)."""
    entry: dict[str, Any] = {
        "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "mig_capable": gpu.capable,
        "mig_current": gpu.current, "mig_pending": gpu.pending, "declared": want, "instances": {},
        "actions": [], "state": "ok", "create": creation_order(want["devices"]) if want["enabled"] else [],
    }
    if not gpu.capable:
        if want["enabled"]:
            raise MigError(f"GPU {gpu.index} ({gpu.name}, {gpu.uuid}) is not MIG-capable: NVML answers "
                           "NOT_SUPPORTED for its MIG mode; remove mig.layout for this host or name other GPUs")
        return entry
    entry["instances"] = _counts(gpu.instances())
    if gpu.current != want["enabled"] or gpu.pending != want["enabled"]:
        entry["actions"].append(f"set MIG mode {'enabled' if want['enabled'] else 'disabled'}")
        entry["state"] = "MIG mode off" if want["enabled"] else "MIG mode on"
        if entry["instances"]:
            entry["actions"].append(f"destroy instances {entry['instances']}")
    if want["enabled"] and entry["instances"] != dict(sorted(want["devices"].items())):
        if gpu.current and entry["state"] == "ok":
            entry["state"] = ("MIG on but no instances" if not entry["instances"]
                              else "instances differ from the declared layout")
        if entry["instances"] and not any(a.startswith("destroy") for a in entry["actions"]):
            entry["actions"].append(f"destroy instances {entry['instances']}")
        if want["devices"]:
            entry["actions"].append(f"create instances {dict(sorted(want['devices'].items()))}")
    return entry


def apply_gpu(gpu: Gpu, want: dict[str, Any], proc_root: str = "/proc") -> dict[str, Any]:
    """Bring one GPU to its declared state (mode, then instances); return ``{"reboot_required": bool}``.

    Raises MigError when something holds the GPU during a mode change, a profile is unknown to the GPU, or
    NVML refuses a step.
    """
    nv = gpu.nv
    result = {"reboot_required": False}
    if not gpu.capable:
        return result
    blocker = preflight_gpu(gpu, want, proc_root)
    if blocker:
        raise MigError(blocker)
    if gpu.current:
        _destroy_all(gpu)
    if gpu.current != want["enabled"] or gpu.pending != want["enabled"]:
        try:
            status = nv.nvmlDeviceSetMigMode(gpu.handle, 1 if want["enabled"] else 0)
        except nv.NVMLError as exc:
            raise MigError(f"GPU {gpu.index} ({gpu.uuid}): setting MIG mode failed: {_err(nv, exc)}") from exc
        gpu.current, gpu.pending = (bool(v) for v in nv.nvmlDeviceGetMigMode(gpu.handle))
        if status != nv.NVML_SUCCESS or gpu.current != want["enabled"]:
            result["reboot_required"] = True  # pending until a GPU reset or reboot
            return result
    if want["enabled"] and want["devices"]:
        _create(gpu, want["devices"])
    return result


def preflight_gpu(gpu: Gpu, want: dict[str, Any], proc_root: str = "/proc") -> str | None:
    """Why :func:`apply_gpu` would fail on ``gpu`` before changing it, or None: a holder of the GPU where its MIG
    mode must change, or a profile the GPU does not offer (known only where MIG is on already)."""
    if not gpu.capable:
        return None
    held = holders(gpu.minor, proc_root) if gpu.current != want["enabled"] else []
    if held:
        return (f"GPU {gpu.index} ({gpu.uuid}): cannot change MIG mode while the GPU is held by {', '.join(held)}; "
                "stop them (nvidia_drm: 'systemctl isolate multi-user.target && modprobe -r nvidia_drm', or "
                "blacklist it) and run again")
    if gpu.current and want["enabled"]:
        offered = gpu.profiles()
        unknown = sorted(set(want["devices"]) - set(offered))
        if unknown:
            return _unknown_profiles(gpu, unknown, offered)
    return None


def _unknown_profiles(gpu: Gpu, unknown: list[str], offered: dict[str, Any]) -> str:
    return f"GPU {gpu.index} ({gpu.name}) has no MIG profile {', '.join(unknown)}; it offers {', '.join(offered)}"


def _destroy_all(gpu: Gpu) -> None:
    nv = gpu.nv
    for handles in gpu.instances().values():
        for gi in handles:
            try:
                for ci in gpu.compute_instances(gi):
                    nv.nvmlComputeInstanceDestroy(ci)
                nv.nvmlGpuInstanceDestroy(gi)
            except nv.NVMLError as exc:
                raise MigError(f"GPU {gpu.index} ({gpu.uuid}): destroying a MIG instance failed: {_err(nv, exc)} "
                               "(is a process still using it?)") from exc


def _create(gpu: Gpu, devices: dict[str, int]) -> None:
    nv = gpu.nv
    offered = gpu.profiles()
    unknown = sorted(set(devices) - set(offered))
    if unknown:
        raise MigError(_unknown_profiles(gpu, unknown, offered))
    for name in creation_order(devices):
        info = offered[name]
        try:
            gi = nv.nvmlDeviceCreateGpuInstance(gpu.handle, info.id)
            ci_profile = _full_ci_profile(nv, gi, int(info.sliceCount))
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        except nv.NVMLError as exc:
            raise MigError(f"GPU {gpu.index} ({gpu.name}): creating {name} failed: {_err(nv, exc)}; the layout "
                           f"{devices} may not fit this GPU") from exc


def _full_ci_profile(nv: Any, gi: Any, slices: int) -> int:
    """The compute instance profile id that spans the whole GPU instance."""
    for profile in range(int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9))):
        try:
            info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, profile, getattr(nv, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
        except nv.NVMLError:
            continue
        if int(info.sliceCount) == slices:
            return int(info.id)
    raise MigError(f"no compute instance profile spans a {slices}-slice GPU instance")


def run(nv: Any, entries: list[dict[str, Any]], *, apply: bool, proc_root: str = "/proc") -> dict[str, Any]:
    """Plan (and with ``apply`` carry out) a layout on every GPU; NVML is initialised and shut down here.

    Returns ``{"changed": bool, "drift": bool (the same; survives changed_when), "reboot_required": bool,
    "mode_change": bool, "gpus": [entry, ...]}`` where each entry is
    :func:`plan_gpu`'s report (``actions`` empty when the GPU matches) taken before applying, plus
    ``after`` (instance counts after applying) when ``apply``. Raises MigError (NVML not usable,
    GPU not MIG-capable, GPU held, profile unknown).
    """
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise MigError(f"NVML is not usable: {_err(nv, exc)} ({exc}); is the NVIDIA driver loaded?") from exc
    try:
        count = int(nv.nvmlDeviceGetCount())
        wanted = resolve(entries, count)
        gpus = {index: Gpu(nv, index) for index in sorted(wanted)}
        report = [plan_gpu(gpus[index], wanted[index]) for index in sorted(wanted)]
        changed = any(entry["actions"] for entry in report)
        reboot = False
        if apply and changed:
            # every GPU checked before any is changed: a host is never left half converted
            blocked = [b for e in report if e["actions"] and (b := preflight_gpu(gpus[e["index"]], wanted[e["index"]],
                                                                                  proc_root))]
            if blocked:
                raise MigError(f"no GPU was changed: {'; '.join(blocked)}")
            for entry in report:
                if entry["actions"]:
                    gpu = gpus[entry["index"]]
                    reboot = apply_gpu(gpu, wanted[gpu.index], proc_root)["reboot_required"] or reboot
                    entry["after"] = _counts(gpu.instances())
        return {"changed": changed, "drift": changed, "reboot_required": reboot, "gpus": report,
                "mode_change": any(a.startswith("set MIG mode") for e in report for a in e["actions"])}
    except nv.NVMLError as exc:
        raise MigError(f"NVML call failed: {_err(nv, exc)} ({exc})") from exc
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
