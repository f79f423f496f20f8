# Copyright: gpuprov contributors
# Apache-2.0
"""What platform_info reads of the firmware: the boot mode (UEFI, legacy BIOS, or cannot tell in a VM) and the
Secure Boot state (the EFI variable, else ``mokutil --sb-state``). Pure Python 3.8, no Ansible."""


from __future__ import annotations

import os

from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import read_file, run_command

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def boot_mode(sysfs_root, proc_root):
    """uefi | legacy | unknown, with the evidence."""
    efi = os.path.join(sysfs_root, "firmware", "efi")
    if os.path.isdir(efi):
        return {"mode": "uefi", "evidence": f"{efi} exists"}
    cpuinfo = read_file(os.path.join(proc_root, "cpuinfo")) or ""
    flags: set[str] = set()
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
    data = read_file(var, binary=True)
    if data:
        # efivarfs: 4 bytes of attributes, then the value (one byte, 1 = on).
        return {"enabled": data[-1:] == b"\x01", "source": "efivars", "evidence": f"{var} = {data[-1]}"}
    if mokutil:
        rc, out = run_command(["mokutil", "--sb-state"])
        text = out.strip().splitlines()[0] if out.strip() else ""
        if rc is not None and "enabled" in text.lower():
            return {"enabled": True, "source": "mokutil", "evidence": f"mokutil --sb-state: {text}"}
        if rc is not None and "disabled" in text.lower():
            return {"enabled": False, "source": "mokutil", "evidence": f"mokutil --sb-state: {text}"}
    return {"enabled": None, "source": None, "evidence": f"no readable {SECURE_BOOT_VAR} and no mokutil answer"}
