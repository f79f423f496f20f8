#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only report of the platform under the GPUs: firmware, IOMMU/ACS, BARs, RAM, disks, kernel log."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: platform_info
short_description: Report firmware, IOMMU, PCIe ACS, GPU BARs, RAM, disks and GPU kernel-log events
description:
  - Reads and changes nothing. Every path is under O(sysfs_root) or O(proc_root), so tests point the
    module at fake trees; the kernel log comes from O(kernel_log_path) or C(journalctl -k -b).
  - Boot mode from C(<sysfs_root>/firmware/efi) - C(uefi), C(legacy) (bare metal without it) or
    C(unknown) (a virtual machine, C(hypervisor) CPU flag, where the platform may hide EFI).
  - Secure Boot from the C(SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c) EFI variable (last byte)
    and, on the real root only, C(mokutil --sb-state) when installed.
  - IOMMU from C(<sysfs_root>/kernel/iommu_groups), C(<sysfs_root>/class/iommu), the GPU's
    C(iommu_group/type) and C(<proc_root>/cmdline) (intel_iommu, amd_iommu, iommu=pt, iommu.passthrough).
  - PCIe bridges upstream of every NVIDIA GPU and their ACS control bits, from config space (sysfs
    C(config), needs root) or C(lspci -vvv) output.
  - BAR0/BAR1 of every NVIDIA display function from its C(resource) file.
  - RAM from C(<proc_root>/meminfo); block devices, NVMe or rotational, from C(<sysfs_root>/block).
  - Kernel log lines of the NVIDIA driver that mean firmware or hardware trouble - RmInitAdapter failed,
    invalid PCI I/O region, Xid, GPU fallen off the bus - with the bus id.
options:
  sysfs_root:
    description: Root of the sysfs tree.
    type: path
    default: /sys
  proc_root:
    description: Root of the procfs tree (cmdline, meminfo, cpuinfo).
    type: path
    default: /proc
  kernel_log_path:
    description: File with kernel log lines to scan instead of C(journalctl -k -b) (e.g. a fixture).
    type: path
  lspci_path:
    description: File with C(lspci -vvv -D) output to read ACS from instead of running lspci.
    type: path
  use_commands:
    description:
      - Run C(mokutil), C(lspci) and C(journalctl) when installed. Null runs them only when
        O(sysfs_root) is C(/sys), so a fake tree is never mixed with the real machine.
    type: bool
  daemons:
    description:
      - Also report C(daemons), the NVIDIA daemons running (by process name, under O(proc_root)). Off by
        default, as this is state of the moment, not of the platform, and bios_check's report must not
        change between two runs on an unchanged host.
    type: bool
    default: false
  services:
    description:
      - Also report C(services), the state of the stack's systemd units (gpuprov_health.SERVICE_PATTERNS), or
        null where systemd is not the init. Off by default, for the same reason as O(daemons).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Read the platform
  platform_info:
    sysfs_root: /sys
  register: __bios_check_platform
  check_mode: false
"""

RETURN = r"""
platform:
  description: The platform report; keys boot, secure_boot, iommu, pci, ram, disks, kernel_log, and with
    O(daemons) daemons (the NVIDIA daemons running, by process name), with O(services) services
    ({unit: {type, enabled, active, sub, result}}, or null without systemd).
  returned: always
  type: dict
"""

import os
import re
import struct
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.health import running_daemons, service_states

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
NVIDIA = "0x10de"
GIB = 1024**3
BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# ACS control register bits (PCIe base spec 7.7.8.3) in lspci's order.
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
ACS_CAP_ID = 0x000D
MAX_LOG_EVENTS = 200

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.([0-7]))?\): (\d+)")
_BUS = r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_FALLEN = re.compile(r"NVRM:.*?GPU " + _BUS + r".*fallen off the bus", re.IGNORECASE)
_RMINIT = re.compile(r"NVRM: GPU " + _BUS + r": (?:RmInitAdapter failed|rm_init_adapter failed)", re.IGNORECASE)
_INVALID = re.compile(r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid", re.IGNORECASE)
_ANY_BUS = re.compile(_BUS)


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read() if binary else handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _run(argv):
    """(rc, stdout) of a command; (None, '') when it is not installed or cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def boot_mode(sysfs_root, proc_root):
    """uefi | legacy | unknown, with the evidence."""
    efi = os.path.join(sysfs_root, "firmware", "efi")
    if os.path.isdir(efi):
        return {"mode": "uefi", "evidence": f"{efi} exists"}
    cpuinfo = _read(os.path.join(proc_root, "cpuinfo")) or ""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    if "hypervisor" in flags:
        return {
            "mode": "unknown",
            "evidence": f"no {efi} and the CPU reports a hypervisor: a virtual machine may hide its firmware",
        }
    if not cpuinfo:
        return {"mode": "unknown", "evidence": f"no {efi} and no readable cpuinfo"}
    return {"mode": "legacy", "evidence": f"no {efi} on bare metal: legacy BIOS / CSM boot"}


def secure_boot(sysfs_root, mokutil):
    """enabled true/false/None (cannot tell), with source and evidence."""
    var = os.path.join(sysfs_root, "firmware", "efi", "efivars", SECURE_BOOT_VAR)
    data = _read(var, binary=True)
    if data:
        # efivarfs: 4 bytes of attributes, then the value (one byte, 1 = on).
        return {"enabled": data[-1:] == b"\x01", "source": "efivars", "evidence": f"{var} = {data[-1]}"}
    if mokutil:
        rc, out = _run(["mokutil", "--sb-state"])
        text = out.strip().splitlines()[0] if out.strip() else ""
        if rc is not None and "enabled" in text.lower():
            return {"enabled": True, "source": "mokutil", "evidence": f"mokutil --sb-state: {text}"}
        if rc is not None and "disabled" in text.lower():
            return {"enabled": False, "source": "mokutil", "evidence": f"mokutil --sb-state: {text}"}
    return {"enabled": None, "source": None, "evidence": f"no readable {SECURE_BOOT_VAR} and no mokutil answer"}


def _cmdline_iommu(cmdline):
    out = {}
    for word in cmdline.split():
        key, _sep, value = word.partition("=")
        if key in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough"):
            out[key] = value
    return out


def iommu(sysfs_root, proc_root, gpu_group_types):
    """IOMMU mode: passthrough | translated | off, from cmdline, groups and the GPUs' group types."""
    cmdline = _read(os.path.join(proc_root, "cmdline")) or ""
    args = _cmdline_iommu(cmdline)
    groups = _listdir(os.path.join(sysfs_root, "kernel", "iommu_groups")) or []
    units = _listdir(os.path.join(sysfs_root, "class", "iommu")) or []
    types = sorted({t for t in gpu_group_types if t})
    if types:
        mode = "passthrough" if all(t == "identity" for t in types) else "translated"
        source = "GPU iommu_group/type: {}".format(", ".join(types))
    elif args.get("iommu") == "pt" or args.get("iommu.passthrough") in ("1", "on", "y"):
        mode, source = "passthrough", "kernel command line"
    elif args.get("intel_iommu") == "off" or args.get("amd_iommu") == "off" or (not groups and not units):
        mode, source = "off", "no IOMMU groups" if not groups else "kernel command line"
    else:
        mode, source = "translated", "IOMMU groups without iommu=pt"
    return {"mode": mode, "source": source, "cmdline_args": args, "groups": len(groups), "units": units}


def _acs_from_config(config):
    """ACS control bits from a config space dump (needs the extended space: 4096 bytes), or None."""
    if not config or len(config) < 0x104:
        return None
    offset = 0x100
    seen = set()
    while 0x100 <= offset < len(config) - 4 and offset not in seen:
        seen.add(offset)
        header = struct.unpack_from("<I", config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return []
        if header & 0xFFFF == ACS_CAP_ID:
            if offset + 8 > len(config):
                return None
            ctl = struct.unpack_from("<H", config, offset + 6)[0]
            return [name for bit, name in enumerate(ACS_BITS) if ctl & (1 << bit)]
        offset = (header >> 20) & 0xFFC
    return []


def parse_lspci(text):
    """bus id -> list of ACS control bits set ('ReqRedir', ...) from ``lspci -vvv -D`` output."""
    out = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = norm_bus(line.split(" ", 1)[0])
        elif current and "ACSCtl:" in line:
            flags = line.split("ACSCtl:", 1)[1].split()
            out[current] = [f[:-1] for f in flags if f.endswith("+") and f[:-1] in ACS_BITS]
    return out


#: IORESOURCE_MEM_64 (include/linux/ioport.h): the resource is a 64-bit memory BAR.
IORESOURCE_MEM_64 = 0x00100000


def nvidia_bar1_index(bars):
    """Resource index of NVIDIA's "BAR1" (the framebuffer aperture): the memory BAR after BAR0.

    A 64-bit BAR takes two BAR registers, so when BAR0 is 64-bit (data-centre GPUs such as H100/H200:
    seen on the real H200 host, whose sysfs resource file shows 16 MiB at index 0, nothing at 1 and the
    256 GiB aperture at 2) BAR1 is at index 2; when BAR0 is 32-bit it is at index 1.
    """
    bar0 = next((b for b in bars if b["index"] == 0), None)
    return 2 if bar0 and bar0["flags"] & IORESOURCE_MEM_64 else 1


def _resource(path):
    """BAR list from a sysfs resource file: [{index, start, size, flags}]."""
    text = _read(path)
    bars = []
    if text is None:
        return None
    for index, line in enumerate(text.splitlines()[:6]):
        parts = line.split()
        if len(parts) < 3:
            continue
        start, end, flags = (int(p, 16) for p in parts[:3])
        size = end - start + 1 if (start or end) and end >= start else 0
        bars.append({"index": index, "start": start, "size": size, "flags": flags})
    return bars


def pci(sysfs_root, lspci_text):
    """NVIDIA functions with BARs, driver and upstream bridges (with ACS), and the GPUs' IOMMU group types."""
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    entries = _listdir(devices_dir)
    lspci_acs = parse_lspci(lspci_text) if lspci_text else {}
    functions = []
    bridges = {}
    group_types = []
    for name in entries or []:
        base = os.path.join(devices_dir, name)
        if (_read(os.path.join(base, "vendor")) or "").lower() != NVIDIA:
            continue
        pci_class = (_read(os.path.join(base, "class")) or "").lower()
        is_gpu = pci_class.startswith("0x03")
        driver_link = os.path.join(base, "driver")
        entry = {
            "bus_id": norm_bus(name),
            "device": (_read(os.path.join(base, "device")) or "").lower(),
            "class": pci_class,
            "is_gpu": is_gpu,
            "driver": os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None,
            "bars": None,
            "bar1": None,
            "upstream": [],
        }
        if is_gpu:
            bars = _resource(os.path.join(base, "resource"))
            entry["bars"] = bars
            if bars is not None:
                bar1 = next((b for b in bars if b["index"] == nvidia_bar1_index(bars)), None)
                entry["bar1"] = {
                    "assigned": bool(bar1 and bar1["size"]),
                    "start": bar1["start"] if bar1 else 0,
                    "size_bytes": bar1["size"] if bar1 else 0,
                    "above_4g": bool(bar1 and bar1["size"] and bar1["start"] >= 4 * GIB),
                }
            group_types.append(_read(os.path.join(base, "iommu_group", "type")))
            real = os.path.realpath(base)
            parent = os.path.dirname(real)
            while BDF.match(os.path.basename(parent)):
                bdf = norm_bus(os.path.basename(parent))
                entry["upstream"].append(bdf)
                if bdf not in bridges:
                    acs = _acs_from_config(_read(os.path.join(parent, "config"), binary=True))
                    source = "config space"
                    if acs is None and bdf in lspci_acs:
                        acs, source = lspci_acs[bdf], "lspci"
                    bridges[bdf] = {
                        "bus_id": bdf,
                        "acs_ctl": acs,
                        "source": source if acs is not None else None,
                        "class": (_read(os.path.join(parent, "class")) or "").lower(),
                        "gpus": [],
                    }
                bridges[bdf]["gpus"].append(entry["bus_id"])
                parent = os.path.dirname(parent)
        functions.append(entry)
    return {
        "readable": entries is not None,
        "nvidia_functions": functions,
        "gpu_functions": [f["bus_id"] for f in functions if f["is_gpu"]],
        "bridges": [bridges[k] for k in sorted(bridges)],
        "nvidia_module_loaded": os.path.isdir(os.path.join(sysfs_root, "module", "nvidia")),
    }, group_types


def ram(proc_root):
    text = _read(os.path.join(proc_root, "meminfo")) or ""
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return {"total_bytes": int(match.group(1)) * 1024 if match else None}


def disks(sysfs_root):
    out = []
    for name in _listdir(os.path.join(sysfs_root, "block")) or []:
        if name.startswith(("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")):
            continue
        base = os.path.join(sysfs_root, "block", name)
        rotational = _read(os.path.join(base, "queue", "rotational"))
        sectors = _read(os.path.join(base, "size"))
        out.append(
            {
                "name": name,
                "nvme": name.startswith("nvme"),
                "rotational": rotational == "1" if rotational in ("0", "1") else None,
                "removable": _read(os.path.join(base, "removable")) == "1",
                "size_bytes": int(sectors) * 512 if sectors and sectors.isdigit() else None,
            }
        )
    return out


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
        elif _FALLEN.search(line):
            event = {"kind": "fallen_off_bus", "bus_id": norm_bus(_FALLEN.search(line).group(1)), "xid": None}
        elif _RMINIT.search(line):
            event = {"kind": "rm_init_failed", "bus_id": norm_bus(_RMINIT.search(line).group(1)), "xid": None}
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
    if path:
        text = _read(path)
        if text is None:
            return {"source": path, "available": False, "events": []}
        return {"source": path, "available": True, "events": scan_kernel_log(text)}
    if commands:
        rc, out = _run(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"])
        if rc == 0:
            return {"source": "journalctl -k -b", "available": True, "events": scan_kernel_log(out)}
    return {"source": None, "available": False, "events": []}


def collect(sysfs_root="/sys", proc_root="/proc", kernel_log_path=None, lspci_path=None, use_commands=None,
            daemons=False, services=False):
    """The whole report; pure except for the optional commands, so tests call it on fake trees."""
    commands = use_commands if use_commands is not None else os.path.realpath(sysfs_root) == "/sys"
    lspci_text = _read(lspci_path) if lspci_path else None
    if lspci_text is None and commands:
        rc, out = _run(["lspci", "-vvv", "-D", "-nn"])
        lspci_text = out if rc == 0 else None
    pci_report, group_types = pci(sysfs_root, lspci_text)
    report = {
        "boot": boot_mode(sysfs_root, proc_root),
        "secure_boot": secure_boot(sysfs_root, commands),
        "iommu": iommu(sysfs_root, proc_root, group_types),
        "pci": pci_report,
        "ram": ram(proc_root),
        "disks": disks(sysfs_root),
        "kernel_log": kernel_log(kernel_log_path, commands),
    }
    if daemons:
        report["daemons"] = running_daemons(proc_root)
    if services:
        report["services"] = service_states(_run) if commands else None
    return report


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
            "kernel_log_path": {"type": "path"},
            "lspci_path": {"type": "path"},
            "use_commands": {"type": "bool"},
            "daemons": {"type": "bool", "default": False},
            "services": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    platform = collect(
        params["sysfs_root"],
        params["proc_root"],
        params["kernel_log_path"],
        params["lspci_path"],
        params["use_commands"],
        params["daemons"],
        params["services"],
    )
    module.exit_json(changed=False, platform=platform)


if __name__ == "__main__":
    main()
