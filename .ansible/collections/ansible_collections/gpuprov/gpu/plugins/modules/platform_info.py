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
    module at fake trees; the kernel log comes from O(kernel_log_path), or C(journalctl -k -b) and, where
    that shows no kernel messages, C(/dev/kmsg).
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
  - The reading is done by C(module_utils/platform_report.py) and the C(platform_*.py) files it uses (firmware,
    PCI, capacity, kernel log), which gpuprov doctor also runs on the controller.
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
      - Also report C(services), the state of the stack's systemd units (C(SERVICE_PATTERNS) in
        C(module_utils/health.py)), or null where systemd is not the init. Off by default, for the same reason
        as O(daemons).
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
  description: The platform report; keys boot, secure_boot, iommu, pci, ram, disks, kernel_log
    (C(source), C(available), C(error), C(events) - Xid and SXid events with their count and the class of
    NVIDIA's Xid catalogue, module_utils/xid.py), and with
    O(daemons) daemons (the NVIDIA daemons running, by process name), with O(services) services
    (per unit C(type), C(enabled), C(active), C(sub) and C(result); null without systemd).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_report import collect


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
