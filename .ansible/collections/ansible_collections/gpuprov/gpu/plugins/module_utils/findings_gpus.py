# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules on the GPUs themselves: count and model against the fleet file, and GPUs lost or reporting
hardware errors (NVML, Xids and fallen-off-the-bus lines in the kernel log, GPUs NVML does not list). Pure
Python 3.8, no Ansible; :func:`~findings.evaluate` calls :func:`check_inventory` and :func:`check_lost`."""


from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import model_matches, norm_bus, usable_gpus
from ansible_collections.gpuprov.gpu.plugins.module_utils.xid import NEEDS_ADMIN, classify, mnemonic

FIX_HARDWARE = (
    "reboot or power-cycle, then check power delivery, cooling, seating and system BIOS; this is not "
    "a driver install problem"
)


def check_inventory(out, gpus, s):
    """gpu_count_mismatch and gpu_model_mismatch findings, when NVML is available."""
    if not (gpus or {}).get("available"):
        return
    want_count, want_model = s.get("expected_gpu_count"), s.get("expected_gpu_model")
    count = (gpus or {}).get("count")
    if isinstance(want_count, int) and isinstance(count, int) and count not in (0, want_count):
        out.add(
            "gpu_count_mismatch",
            "fail",
            "gpus",
            "NVML finds %d GPU(s), the fleet file expects %d" % (count, want_count),
            "fix gpus.count in the fleet file, or find the missing GPU (seating, power)",
        )
    if want_model:
        for gpu in usable_gpus(gpus):
            if gpu.get("name") and not model_matches(want_model, gpu.get("name")):
                bus = norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index"))
                out.add(
                    "gpu_model_mismatch",
                    "fail",
                    bus,
                    "GPU {} is {}, the fleet file expects {}".format(bus, gpu.get("name"), want_model),
                    "fix gpus.model in the fleet file or put this host in a group with the right model",
                )


def check_lost(out, platform, gpus, previous):
    """One hardware finding per bus id, merging NVML lost GPUs, hardware Xids, fallen-off-the-bus lines and
    GPUs on the PCI bus that NVML does not list."""
    uuids = {norm_bus(g.get("pci_bus_id_sysfs")): g.get("uuid") for g in previous or [] if g.get("uuid")}
    uuids.update(
        {norm_bus(g.get("pci_bus_id_sysfs")): g.get("uuid") for g in (gpus or {}).get("gpus") or [] if g.get("uuid")}
    )
    per_bus: dict[str, dict[str, Any]] = {}

    def note(bus, lost, text):
        entry = per_bus.setdefault(bus, {"lost": False, "evidence": []})
        entry["lost"] = entry["lost"] or lost
        if text not in entry["evidence"]:
            entry["evidence"].append(text)

    for gpu in (gpus or {}).get("gpus") or []:
        if gpu.get("lost"):
            note(
                norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index")),
                True,
                "NVML: GPU {} {}".format(gpu.get("index"), gpu.get("error_name")),
            )
    for event in (platform.get("kernel_log") or {}).get("events") or []:
        bus = event.get("bus_id") or "gpu"
        # an Xid whose class in NVIDIA's catalogue (module_utils/xid.py) needs a reset, a reboot or the vendor
        if event.get("kind") == "xid" and classify(event.get("xid"), event.get("line") or "") in NEEDS_ADMIN:
            note(bus, event["xid"] == 79, "kernel log: Xid %d (%s)" % (event["xid"], mnemonic(event["xid"])))
        elif event.get("kind") == "fallen_off_bus":
            note(bus, True, "kernel log: GPU has fallen off the bus")
    functions = (platform.get("pci") or {}).get("gpu_functions") or []
    known = {norm_bus(g.get("pci_bus_id_sysfs")) for g in (gpus or {}).get("gpus") or []}
    if (gpus or {}).get("available") and (gpus or {}).get("count"):
        for bus in functions:
            if bus not in known:
                note(bus, True, "on the PCI bus but not in NVML's %d GPU(s)" % gpus["count"])
    for bus in sorted(per_bus, key=str):
        entry = per_bus[bus]
        what = "lost (fell off the bus)" if entry["lost"] else "reported a hardware error"
        out.add(
            "gpu_lost" if entry["lost"] else "gpu_hardware_xid",
            "fail",
            bus,
            "GPU {} (uuid {}) {} - hardware fault: {}".format(
                bus, uuids.get(bus) or "unknown", what, "; ".join(entry["evidence"])
            ),
            f"GPU {bus}: {FIX_HARDWARE}",
        )

