#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only report of GPU PCI functions, the kernel driver bound to each, and loaded GPU modules."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_pci_info
short_description: Report NVIDIA PCI functions, their bound driver and the GPU kernel modules loaded
description:
  - Reads C(<sysfs_root>/bus/pci/devices/*) and C(<sysfs_root>/module/*) and changes nothing.
  - Lists every PCI function of the given vendors (NVIDIA by default) with its bus id, class,
    device id and the kernel driver bound to it (none when unbound).
  - Reports which of the given kernel modules are loaded, from C(<sysfs_root>/module/<name>).
  - The sysfs root is a parameter so tests can point it at a fake tree.
options:
  sysfs_root:
    description: Root of the sysfs tree to read.
    type: path
    default: /sys
  vendor_ids:
    description: PCI vendor ids to report, as in the sysfs C(vendor) attribute.
    type: list
    elements: str
    default: ["0x10de"]
  modules:
    description: Kernel modules whose loaded state is reported.
    type: list
    elements: str
    default: [nouveau, nova_core, nova_drm, nvidia, nvidia_drm, nvidia_modeset, nvidia_uvm, vfio_pci]
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Read GPU PCI bindings
  gpu_pci_info:
    sysfs_root: /sys
  register: __role_gpu_pci
  check_mode: false
"""

RETURN = r"""
devices:
  description: One entry per PCI function of the given vendors, sorted by bus id.
  returned: always
  type: list
  elements: dict
  sample:
    - bus_id: "0000:17:00.0"
      vendor: "0x10de"
      device: "0x20b0"
      class: "0x030200"
      is_gpu: true
      driver: nouveau
modules:
  description: For each module in O(modules), whether C(<sysfs_root>/module/<name>) exists.
  returned: always
  type: dict
  sample: {nouveau: true, nvidia: false}
loaded_modules:
  description: The names from O(modules) that are loaded.
  returned: always
  type: list
  elements: str
bindings:
  description: Map of bus id to bound driver (null when unbound), GPUs (display class) only.
  returned: always
  type: dict
  sample: {"0000:17:00.0": nouveau}
pci_readable:
  description: Whether C(<sysfs_root>/bus/pci/devices) could be listed.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import link_basename, read_attr


def collect(sysfs_root, vendor_ids, modules):
    """Build the report from a sysfs tree; pure function so tests can call it on a fake tree."""
    vendors = {vendor.lower() for vendor in vendor_ids}
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    devices = []
    try:
        entries = sorted(os.listdir(devices_dir))
        pci_readable = True
    except OSError:
        entries = []
        pci_readable = False
    for bus_id in entries:
        base = os.path.join(devices_dir, bus_id)
        vendor = (read_attr(os.path.join(base, "vendor")) or "").lower()
        if vendor not in vendors:
            continue
        pci_class = (read_attr(os.path.join(base, "class")) or "").lower()
        devices.append(
            {
                "bus_id": bus_id,
                "vendor": vendor,
                "device": (read_attr(os.path.join(base, "device")) or "").lower(),
                "class": pci_class,
                # 0x03xxxx: display controller (VGA 0x0300, 3D 0x0302); NVSwitch and audio are not GPUs.
                "is_gpu": pci_class.startswith("0x03"),
                "driver": link_basename(os.path.join(base, "driver")),
            }
        )
    module_state = {name: os.path.isdir(os.path.join(sysfs_root, "module", name)) for name in modules}
    return {
        "devices": devices,
        "modules": module_state,
        "loaded_modules": [name for name in modules if module_state[name]],
        "bindings": {dev["bus_id"]: dev["driver"] for dev in devices if dev["is_gpu"]},
        "pci_readable": pci_readable,
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "vendor_ids": {"type": "list", "elements": "str", "default": ["0x10de"]},
            "modules": {
                "type": "list",
                "elements": "str",
                "default": [
                    "nouveau",
                    "nova_core",
                    "nova_drm",
                    "nvidia",
                    "nvidia_drm",
                    "nvidia_modeset",
                    "nvidia_uvm",
                    "vfio_pci",
                ],
            },
        },
        supports_check_mode=True,
    )
    result = collect(module.params["sysfs_root"], module.params["vendor_ids"], module.params["modules"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
