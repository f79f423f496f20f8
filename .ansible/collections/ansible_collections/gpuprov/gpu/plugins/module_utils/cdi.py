# Copyright: gpuprov contributors
# Apache-2.0
"""When the NVIDIA CDI specification must be regenerated: the device names NVML implies, the names
``nvidia-ctk cdi list`` reports, and the fingerprint of what a generation depended on.

The engine of the ``gpuprov.gpu.cdi_spec`` Ansible module (the one place the container_toolkit and mig roles
regenerate the spec from). A spec is current when

* it exists and ``nvidia-ctk cdi list`` names exactly the devices NVML implies (:func:`expected_names`): each
  GPU by index (``0``) and by UUID (``GPU-...``), each MIG device as ``<gpu index>:<MIG index>`` (one per compute
  instance), each MIG device by UUID (``MIG-...``) where NVML gives MIG device handles (real drivers do; the lab's
  mock NVML does not, and then MIG UUID names are not compared), and ``all``. MIG UUIDs change whenever the
  instances are re-created (after every reboot), so they are what goes stale first;
* and the fingerprint recorded at the last generation (:func:`fingerprint`: driver version as NVML reports it,
  toolkit version as ``nvidia-ctk --version`` prints it, the expected names) equals the current one. A driver
  or toolkit change leaves the device names alone but changes the libraries and hooks the spec mounts.

Pure functions apart from :func:`nvml_state` (pynvml passed in, as in ``mig.py``). Must stay importable on
Python 3.8 (Ubuntu 20.04 targets).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.mig import Gpu

#: The CDI kind nvidia-ctk generates devices under (CDI's vendor/class).
KIND = "nvidia.com/gpu"
_LISTED = re.compile(r"^" + re.escape(KIND) + r"=(\S+)\s*$")
_COMPARED = re.compile(r"^(all|\d+|\d+:\d+|GPU-[0-9A-Za-z-]+)$")
_MIG_UUID = re.compile(r"^MIG-[0-9A-Za-z/-]+$")
_TOOLKIT_VERSION = re.compile(r"version\s+v?(\d+\.\d+\.\d+\S*)", re.I)


#: First releases whose configuration has a CDI switch: Docker 25.0 (daemon.json features.cdi) and
#: containerd 1.7.0 (the CRI plugin's enable_cdi); from Docker's and containerd's release notes.
CDI_MIN_VERSIONS = {"docker": (25, 0), "containerd": (1, 7)}
_ENGINE_VERSION = re.compile(r"(?:version|containerd\S*)\s+v?(\d+)\.(\d+)(?:\.\d+)?")


class CdiError(Exception):
    """NVML could not be read; the message names the NVML error."""


def parse_cdi_list(text: str) -> list[str]:
    """Device names (``0``, ``GPU-...``, ``0:1``, ``all``) of kind nvidia.com/gpu in ``nvidia-ctk cdi list``
    output (stdout and stderr together; log lines such as ``Found 9 CDI devices`` are skipped), in order."""
    names = []
    for line in text.splitlines():
        match = _LISTED.match(line.strip())
        if match:
            names.append(match.group(1))
    return names


def toolkit_version(text: str) -> str | None:
    """``1.17.8`` from ``nvidia-ctk --version`` output (``NVIDIA Container Toolkit CLI version 1.17.8``);
    None when no version is found."""
    match = _TOOLKIT_VERSION.search(text)
    return match.group(1) if match else None


def engine_cdi_state(engine: str, version_output: str, rc: int = 0) -> str:
    """``"enabled"`` when ``engine`` (``docker`` or ``containerd``) is new enough for CDI according to its
    ``dockerd --version`` / ``containerd --version`` output, else why not (one sentence naming the version)."""
    floor = CDI_MIN_VERSIONS[engine]
    match = _ENGINE_VERSION.search(version_output) if rc == 0 else None
    if not match:
        return "%s --version gave no version (%s)" % (
            "dockerd" if engine == "docker" else engine, version_output.strip()[-200:] or "rc %s" % rc)
    found = (int(match.group(1)), int(match.group(2)))
    if found < floor:
        return "%s %d.%d has no CDI support (%d.%d or later)" % (engine, found[0], found[1], floor[0], floor[1])
    return "enabled"


def expected_names(gpus: list[dict[str, Any]]) -> list[str]:
    """The compared device names for ``gpus`` (``[{"index": int, "uuid": str, "mig_devices": int,
    "mig_uuids": [str, ...] or None}, ...]``; ``mig_uuids`` optional), sorted, ``all`` included."""
    names = {"all"}
    for gpu in gpus:
        names.update((str(gpu["index"]), str(gpu["uuid"])))
        names.update("%d:%d" % (gpu["index"], mig) for mig in range(int(gpu["mig_devices"])))
        names.update(gpu.get("mig_uuids") or [])
    return sorted(names)


def compared(names: list[str], mig_uuids: bool = False) -> list[str]:
    """The names of ``names`` that :func:`expected_names` can predict, sorted: MIG UUID names only with
    ``mig_uuids`` (NVML gave them)."""
    return sorted({name for name in names if _COMPARED.match(name) or (mig_uuids and _MIG_UUID.match(name))})


def fingerprint(driver_version: str, toolkit: str, names: list[str]) -> str:
    """SHA-256 hex digest of what a generation depends on: the driver and toolkit versions and the names."""
    data = json.dumps({"driver_version": driver_version, "toolkit_version": toolkit, "devices": sorted(names)},
                      sort_keys=True)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def stale_reason(current: dict[str, Any], listed: list[str] | None, record: dict[str, Any] | None) -> str:
    """Why the spec must be regenerated; "" when it is current.

    ``current``: ``{"fingerprint", "driver_version", "toolkit_version", "devices"}`` now; ``listed``: the names
    ``nvidia-ctk cdi list`` gave (None: no spec file); ``record``: what the last generation recorded (the
    same keys as ``current``; None: no record).
    """
    if listed is None:
        return "there is no CDI specification yet"
    have = compared(listed, any(_MIG_UUID.match(name) for name in current["devices"]))
    if have != current["devices"]:
        missing = sorted(set(current["devices"]) - set(have))
        stale = sorted(set(have) - set(current["devices"]))
        return "the specification's devices differ from NVML's (missing: %s; no longer present: %s)" % (
            ", ".join(missing) or "none", ", ".join(stale) or "none")
    if not record:
        return "no generation was recorded for this specification (gpuprov did not write it)"
    for key, what in (("driver_version", "driver"), ("toolkit_version", "NVIDIA Container Toolkit")):
        if record.get(key) != current[key]:
            return "the %s changed from %s to %s since the specification was generated" % (
                what, record.get(key), current[key])
    if record.get("fingerprint") != current["fingerprint"]:
        return "the recorded fingerprint differs from the current one"
    return ""


def _mig_uuids(nv: Any, handle: Any, count: int) -> list[str] | None:
    """UUIDs of a GPU's ``count`` MIG devices through MIG device handles; None where NVML gives none (a driver
    or library without MIG device handles, the lab's mock) or not all of them."""
    not_found = getattr(nv, "NVML_ERROR_NOT_FOUND", 6)
    uuids = []
    try:
        for slot in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == not_found:
                    continue
                return None
            uuid = nv.nvmlDeviceGetUUID(mig)
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
    except nv.NVMLError:
        return None
    return uuids if len(uuids) == count else None


def nvml_state(nv: Any) -> dict[str, Any]:
    """``{"driver_version": str, "gpus": [{"index", "uuid", "mig_devices", "mig_uuids"}, ...]}`` read through
    pynvml ``nv`` (initialised and shut down here). MIG devices are the compute instances of each GPU in MIG mode.

    Raises:
        CdiError: NVML cannot be initialised (driver not loaded, driver/library version mismatch after an
            upgrade that waits for a reboot) or a query failed.
    """
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise CdiError("NVML is not usable (%s)" % exc) from exc
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(int(nv.nvmlDeviceGetCount())):
            gpu = Gpu(nv, index)
            mig = sum(len(gpu.compute_instances(gi)) for gis in gpu.instances().values() for gi in gis)
            gpus.append({"index": index, "uuid": gpu.uuid, "mig_devices": mig,
                         "mig_uuids": _mig_uuids(nv, gpu.handle, mig) if mig else None})
        return {"driver_version": driver.decode() if isinstance(driver, bytes) else str(driver), "gpus": gpus}
    except nv.NVMLError as exc:
        raise CdiError("an NVML query failed (%s)" % exc) from exc
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
