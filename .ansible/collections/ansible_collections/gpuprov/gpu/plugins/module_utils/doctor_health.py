# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules on the GPU health events of the kernel log: Xid events per GPU and class, NVSwitch SXid
events per switch, classified after NVIDIA's Xid catalogue (module_utils/xid.py), and a kernel log doctor could
not read. Pure Python 3.8, no Ansible, no I/O; :func:`~doctor.diagnose` calls :func:`check_kernel_log_events`."""


from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_gpus import gpu_label
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.xid import action, mnemonic, severity


def _gpus_by_bus(facts):
    return {norm_bus(g.get("pci_bus_id_sysfs")): g for g in (facts.get("nvml") or {}).get("gpus") or []
            if g.get("pci_bus_id_sysfs")}


def _xid_text(event):
    name = mnemonic(event["xid"]) or "not in the catalogue"
    who = ""
    if event.get("pids"):
        who = " (pid %s%s)" % (", ".join(str(p) for p in event["pids"]),
                               ", " + ", ".join(event["names"]) if event.get("names") else "")
    return "Xid %d %s x%d%s" % (event["xid"], name, event.get("count") or 1, who)


def check_kernel_log_events(facts, out):
    """xid_<class> per GPU and class, sxid_<class> per NVSwitch and class, kernel_log_unreadable."""
    log = (facts.get("platform") or {}).get("kernel_log") or {}
    if log.get("error") and not log.get("available"):
        out.add(
            "kernel_log_unreadable",
            "info",
            "kernel log",
            "Xid and SXid events could not be read: %s" % log["error"],
            "run gpuprov doctor as root, or as a member of group adm or systemd-journal (journalctl -k)",
        )
    by_bus = _gpus_by_bus(facts)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for event in log.get("events") or []:
        if event.get("kind") not in ("xid", "sxid") or not event.get("class"):
            continue
        groups.setdefault((event["kind"], event.get("bus_id") or "unknown", event["class"]), []).append(event)
    for (kind, bus, klass), events in sorted(groups.items()):
        if kind == "sxid":
            device = events[0].get("device") or "NVSwitch"
            evidence = "%s (%s): %s; last: %s" % (
                device, bus, ", ".join("SXid %d %s x%d" % (e["sxid"], "Fatal" if e.get("fatal") else "Non-fatal",
                                                           e.get("count") or 1) for e in events),
                events[-1].get("last_line") or events[-1].get("line"))
            out.add("sxid_" + klass, severity(klass), bus, evidence, action(klass))
            continue
        gpu = by_bus.get(bus) or {}
        label = gpu_label(gpu) if gpu else "GPU %s (not listed by NVML)" % bus
        evidence = "%s%s: %s; last: %s" % (
            label, " uuid %s" % gpu["uuid"] if gpu.get("uuid") else "", ", ".join(_xid_text(e) for e in events),
            events[-1].get("last_line") or events[-1].get("line"))
        # the follow-up is the catalogue's for the first code; the others of a group share its class
        out.add("xid_" + klass, severity(klass), bus, evidence, action(klass, events[0]["xid"], gpu.get("index")))
