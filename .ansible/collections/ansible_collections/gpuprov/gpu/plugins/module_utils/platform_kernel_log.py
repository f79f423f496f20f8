# Copyright: gpuprov contributors
# Apache-2.0
"""What platform_info reads of the kernel log: the NVIDIA driver's lines that mean firmware or hardware trouble
(Xid, NVSwitch SXid, GPU fallen off the bus, RmInitAdapter failed, invalid PCI I/O region), with the bus id, from
a file, ``journalctl -k -b`` or ``/dev/kmsg``. Pure Python 3.8, no Ansible."""


from __future__ import annotations

import errno
import os
import re
import subprocess
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import read_file
from ansible_collections.gpuprov.gpu.plugins.module_utils.xid import classify, classify_sxid

MAX_LOG_EVENTS = 200

#: A number the driver prints (a code, a pid): ASCII digits only (``\d`` also takes other scripts' digits), at most
#: 10 (a longer run is no number the driver prints, and int() refuses more than 4300 digits).
_NUMBER = r"([0-9]{1,10})(?![0-9])"
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.([0-7]))?\): " + _NUMBER)
#: "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ..." (the event's first line; the
#: "Severity N Engine instance" and "Data {...}" lines after it repeat the code and are not counted again)
_SXID = re.compile(r"(nvidia-nvswitch[0-9]+): SXid \(PCI:([0-9a-fA-F:.]+)\): " + _NUMBER + r", (Fatal|Non-fatal)\b",
                   re.IGNORECASE)
_PID = re.compile(r"\bpid=" + _NUMBER)
_NAME = re.compile(r"\bname=([^,\s]+)")
_BUS = r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_FALLEN = re.compile(r"NVRM:.*?GPU " + _BUS + r".*fallen off the bus", re.IGNORECASE)
_RMINIT = re.compile(r"NVRM: GPU " + _BUS + r": (?:RmInitAdapter failed|rm_init_adapter failed)", re.IGNORECASE)
_INVALID = re.compile(r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid", re.IGNORECASE)
_ANY_BUS = re.compile(_BUS)

#: journalctl's stderr when it shows the user only their own journal (no kernel messages).
_JOURNAL_DENIED = re.compile(r"not seeing messages from other users|insufficient permissions|permission denied",
                             re.IGNORECASE)


def _event(line, lines, number):
    """The event one kernel-log line reports, or None."""
    sxid = _SXID.search(line) if "SXid" in line else None
    if sxid:
        fatal = sxid.group(4).lower() == "fatal"
        return {"kind": "sxid", "bus_id": norm_bus(sxid.group(2)), "device": sxid.group(1), "xid": None,
                "sxid": int(sxid.group(3)), "fatal": fatal, "class": classify_sxid(fatal)}
    if "NVRM" not in line:
        return None
    xid = _XID.search(line)
    if xid:
        code = int(xid.group(3))
        event = {"kind": "xid", "bus_id": norm_bus("{}.{}".format(xid.group(1), xid.group(2) or "0")), "xid": code,
                 "class": classify(code, line)}
        if "fallen off the bus" in line.lower():
            event["fallen_off_bus"] = True
        return event
    fallen = _FALLEN.search(line)
    if fallen:
        return {"kind": "fallen_off_bus", "bus_id": norm_bus(fallen.group(1)), "xid": None}
    rm_init = _RMINIT.search(line)
    if rm_init:
        return {"kind": "rm_init_failed", "bus_id": norm_bus(rm_init.group(1)), "xid": None}
    if _INVALID.search(line):
        # the bus id follows on one of the next lines ("BAR1 is 0M @ 0x0 (PCI:0000:01:00.0)")
        match = _ANY_BUS.search(" ".join([line, *lines[number + 1 : number + 4]]))
        return {"kind": "invalid_region", "bus_id": norm_bus(match.group(1)) if match else None, "xid": None}
    return None


def scan_kernel_log(text):
    """NVIDIA driver events from kernel log text, one per (kind, bus id, code, class) in order of first
    appearance: ``{kind (xid | sxid | fallen_off_bus | rm_init_failed | invalid_region), bus_id, xid, count,
    line (the first), last_line}``; Xid events add ``class`` (module_utils/xid.py) and ``pids``/``names`` of the
    processes the driver named (up to 5 each); SXid events add ``sxid``, ``device``, ``fatal`` and ``class``."""
    events: dict[tuple[Any, ...], dict[str, Any]] = {}
    lines = text.splitlines()
    for number, line in enumerate(lines):
        event = _event(line, lines, number)
        if event is None:
            continue
        key = (event["kind"], event["bus_id"], event["xid"], event.get("sxid"), event.get("class"))
        text_line = line.strip()[:300]
        entry = events.get(key)
        if entry is None:
            if len(events) >= MAX_LOG_EVENTS:
                continue
            entry = events[key] = dict(event, count=0, line=text_line)
            if event["kind"] == "xid":
                entry.update(pids=[], names=[])
        entry["count"] += 1
        entry["last_line"] = text_line
        pid, name = _PID.search(line), _NAME.search(line)
        if pid and "pids" in entry and int(pid.group(1)) not in entry["pids"] and len(entry["pids"]) < 5:
            entry["pids"].append(int(pid.group(1)))
        if name and "names" in entry and name.group(1) not in entry["names"] and len(entry["names"]) < 5:
            entry["names"].append(name.group(1))
    return list(events.values())


def read_kmsg(path="/dev/kmsg"):
    """(text, error) of the kernel ring buffer read through ``path`` without blocking (records' message parts,
    one per line); text is None and error says why when it cannot be read (kernel.dmesg_restrict=1 needs root
    or CAP_SYSLOG)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "permission denied (kernel.dmesg_restrict: needs root or CAP_SYSLOG)" if exc.errno in (
            errno.EPERM, errno.EACCES) else (exc.strerror or str(exc))
        return None, why
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:  # no more records
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading: go on with the next
                    continue
                return None, exc.strerror or str(exc)
            if not chunk:  # a plain file (tests) ends
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    out = []
    for record in b"".join(chunks).decode("utf-8", "replace").splitlines():
        if record.startswith(" "):  # a record's key=value continuation lines
            continue
        out.append(record.split(";", 1)[1] if ";" in record else record)
    return "\n".join(out), None


def _journal():
    """(text, error) of ``journalctl -k -b``; error when it is missing, fails or shows no kernel messages."""
    try:
        proc = subprocess.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "journalctl: %s" % exc
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0 or _JOURNAL_DENIED.search(err):
        first = (err.strip().splitlines() or ["rc %d" % proc.returncode])[0]
        return None, "journalctl -k: %s (run as root or in group adm or systemd-journal)" % first
    return proc.stdout.decode("utf-8", "replace"), None


def kernel_log(path, commands, kmsg_path="/dev/kmsg"):
    """``{source, available, events, error}`` from the file ``path``, else (with ``commands``) from
    ``journalctl -k -b`` and, where that cannot show the kernel's messages, from ``kmsg_path``. ``error`` says why
    nothing could be read (None when something was)."""
    if path:
        text = read_file(path)
        if text is None:
            return {"source": path, "available": False, "events": [], "error": "%s: cannot be read" % path}
        return {"source": path, "available": True, "events": scan_kernel_log(text), "error": None}
    if not commands:
        return {"source": None, "available": False, "events": [], "error": None}
    text, journal_error = _journal()
    if text is not None:
        return {"source": "journalctl -k -b", "available": True, "events": scan_kernel_log(text), "error": None}
    text, kmsg_error = read_kmsg(kmsg_path)
    if text is not None:
        return {"source": kmsg_path, "available": True, "events": scan_kernel_log(text), "error": None}
    return {"source": None, "available": False, "events": [],
            "error": "%s; %s: %s" % (journal_error, kmsg_path, kmsg_error)}
