# Copyright: gpuprov contributors
# Apache-2.0
"""What platform_info reads of the host's capacity: RAM (``meminfo``) and block devices, NVMe or rotational
(``/sys/block``). Pure Python 3.8, no Ansible."""


from __future__ import annotations

import os
import re

from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import list_dir, read_file


def ram(proc_root):
    """``{total_bytes}`` from MemTotal, None when unreadable."""
    text = read_file(os.path.join(proc_root, "meminfo")) or ""
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return {"total_bytes": int(match.group(1)) * 1024 if match else None}


def disks(sysfs_root):
    """Block devices other than loop, RAM, device-mapper, RAID, optical, floppy and network ones."""
    out = []
    for name in list_dir(os.path.join(sysfs_root, "block")) or []:
        if name.startswith(("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")):
            continue
        base = os.path.join(sysfs_root, "block", name)
        rotational = read_file(os.path.join(base, "queue", "rotational"))
        sectors = read_file(os.path.join(base, "size"))
        out.append(
            {
                "name": name,
                "nvme": name.startswith("nvme"),
                "rotational": rotational == "1" if rotational in ("0", "1") else None,
                "removable": read_file(os.path.join(base, "removable")) == "1",
                "size_bytes": int(sectors) * 512 if sectors and sectors.isdigit() else None,
            }
        )
    return out
