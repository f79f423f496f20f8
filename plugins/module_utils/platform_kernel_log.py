# Copyright: gpuprov contributors
# Apache-2.0
"""What platform_info reads of the kernel log: the NVIDIA driver's lines that mean firmware or hardware trouble
(Xid, GPU fallen off the bus, RmInitAdapter failed, invalid PCI I/O region), with the bus id, from a file or
``journalctl -k -b``. Pure Python 3.8, no Ansible."""


from __future__ import annotations

import re

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import read_file, run_command

MAX_LOG_EVENTS = 200

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.([0-7]))?\): (\d+)")
_BUS = r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_FALLEN = re.compile(r"NVRM:.*?GPU " + _BUS + r".*fallen off the bus", re.IGNORECASE)
_RMINIT = re.compile(r"NVRM: GPU " + _BUS + r": (?:RmInitAdapter failed|rm_init_adapter failed)", re.IGNORECASE)
_INVALID = re.compile(r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid", re.IGNORECASE)
_ANY_BUS = re.compile(_BUS)

def scan_kernel_log(text):
    """NVIDIA driver events from kernel log text: kind xid | fallen_off_bus | rm_init_failed | invalid_region."""
    events = []
    seen = set()
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if "NVRM" not in line:
            continue
        event = None
        xid = _XID.search(line)
        if xid:
            bus = norm_bus("{}.{}".format(xid.group(1), xid.group(2) or "0"))
            event = {"kind": "xid", "bus_id": bus, "xid": int(xid.group(3))}
            if "fallen off the bus" in line.lower():
                event["fallen_off_bus"] = True
        elif fallen := _FALLEN.search(line):
            event = {"kind": "fallen_off_bus", "bus_id": norm_bus(fallen.group(1)), "xid": None}
        elif rm_init := _RMINIT.search(line):
            event = {"kind": "rm_init_failed", "bus_id": norm_bus(rm_init.group(1)), "xid": None}
        elif _INVALID.search(line):
            # the bus id follows on one of the next lines ("BAR1 is 0M @ 0x0 (PCI:0000:01:00.0)")
            match = _ANY_BUS.search(" ".join([line, *lines[number + 1 : number + 4]]))
            event = {"kind": "invalid_region", "bus_id": norm_bus(match.group(1)) if match else None, "xid": None}
        if event is None:
            continue
        key = (event["kind"], event["bus_id"], event["xid"])
        if key in seen:
            continue
        seen.add(key)
        event["line"] = line.strip()[:300]
        events.append(event)
        if len(events) >= MAX_LOG_EVENTS:
            break
    return events


def kernel_log(path, commands):
    """``{source, available, events}`` from the file ``path``, else (with ``commands``) from journalctl."""
    if path:
        text = read_file(path)
        if text is None:
            return {"source": path, "available": False, "events": []}
        return {"source": path, "available": True, "events": scan_kernel_log(text)}
    if commands:
        rc, out = run_command(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"])
        if rc == 0:
            return {"source": "journalctl -k -b", "available": True, "events": scan_kernel_log(out)}
    return {"source": None, "available": False, "events": []}
