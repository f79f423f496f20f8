# Copyright: gpuprov contributors
# Apache-2.0
"""What platform_info reads of the PCI side of the GPUs: every NVIDIA function with its BARs and driver, the
bridges upstream of each GPU with their ACS control bits (config space, else ``lspci -vvv``), and the IOMMU mode
(kernel command line, IOMMU groups, the GPUs' group types). Pure Python 3.8, no Ansible."""


from __future__ import annotations

import os
import re
import struct

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import list_dir, read_file

NVIDIA = "0x10de"
GIB = 1024**3
BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# ACS control register bits (PCIe base spec 7.7.8.3) in lspci's order.
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
ACS_CAP_ID = 0x000D


def _cmdline_iommu(cmdline):
    out = {}
    for word in cmdline.split():
        key, _sep, value = word.partition("=")
        if key in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough"):
            out[key] = value
    return out


def iommu(sysfs_root, proc_root, gpu_group_types):
    """IOMMU mode: passthrough | translated | off, from cmdline, groups and the GPUs' group types."""
    cmdline = read_file(os.path.join(proc_root, "cmdline")) or ""
    args = _cmdline_iommu(cmdline)
    groups = list_dir(os.path.join(sysfs_root, "kernel", "iommu_groups")) or []
    units = list_dir(os.path.join(sysfs_root, "class", "iommu")) or []
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


def read_resources(path):
    """BAR list from a sysfs resource file: [{index, start, size, flags}]."""
    text = read_file(path)
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
    entries = list_dir(devices_dir)
    lspci_acs = parse_lspci(lspci_text) if lspci_text else {}
    functions = []
    bridges = {}
    group_types = []
    for name in entries or []:
        base = os.path.join(devices_dir, name)
        if (read_file(os.path.join(base, "vendor")) or "").lower() != NVIDIA:
            continue
        pci_class = (read_file(os.path.join(base, "class")) or "").lower()
        is_gpu = pci_class.startswith("0x03")
        driver_link = os.path.join(base, "driver")
        entry = {
            "bus_id": norm_bus(name),
            "device": (read_file(os.path.join(base, "device")) or "").lower(),
            "class": pci_class,
            "is_gpu": is_gpu,
            "driver": os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None,
            "bars": None,
            "bar1": None,
            "upstream": [],
        }
        if is_gpu:
            bars = read_resources(os.path.join(base, "resource"))
            entry["bars"] = bars
            if bars is not None:
                bar1 = next((b for b in bars if b["index"] == nvidia_bar1_index(bars)), None)
                entry["bar1"] = {
                    "assigned": bool(bar1 and bar1["size"]),
                    "start": bar1["start"] if bar1 else 0,
                    "size_bytes": bar1["size"] if bar1 else 0,
                    "above_4g": bool(bar1 and bar1["size"] and bar1["start"] >= 4 * GIB),
                }
            group_types.append(read_file(os.path.join(base, "iommu_group", "type")))
            real = os.path.realpath(base)
            parent = os.path.dirname(real)
            while BDF.match(os.path.basename(parent)):
                bdf = norm_bus(os.path.basename(parent))
                entry["upstream"].append(bdf)
                if bdf not in bridges:
                    acs = _acs_from_config(read_file(os.path.join(parent, "config"), binary=True))
                    source = "config space"
                    if acs is None and bdf in lspci_acs:
                        acs, source = lspci_acs[bdf], "lspci"
                    bridges[bdf] = {
                        "bus_id": bdf,
                        "acs_ctl": acs,
                        "source": source if acs is not None else None,
                        "class": (read_file(os.path.join(parent, "class")) or "").lower(),
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
