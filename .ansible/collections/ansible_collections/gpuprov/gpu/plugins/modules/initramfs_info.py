#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only report of installed kernels, their initramfs images and what those images carry."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: initramfs_info
short_description: Report which installed kernels' initramfs images lack the current content of given files
description:
  - Lists the installed kernels (C(<modules_dir>/<k>) with a C(<boot_dir>/vmlinuz-<k>)), not only the
    running one, and the initramfs image each one boots with.
  - The image is the one a boot entry references (C(grub.cfg) or Boot Loader Spec entries) when one
    does, else the generator's default name (C(initrd.img-<k>) for initramfs-tools,
    C(initramfs-<k>.img) then C(initrd.img-<k>) for dracut).
  - For each image it reports, for every tracked file, whether the image contains it and whether the
    content (sha256) equals the file on disk; a tracked file absent from disk must be absent from the
    image. An image that differs in any tracked file, is missing or cannot be read is stale.
  - Tracked files are O(files) plus every C(*.conf) file under O(scan_dirs) whose non-comment lines
    mention one of O(scan_patterns).
  - Only command-line tools exist to read images - C(unmkinitramfs) (initramfs-tools, splits
    concatenated early microcode archives into C(early*/) and C(main/)) or C(lsinitrd) (dracut) - so
    the module runs them into a private temporary directory and changes nothing on the host.
  - Unified kernel images (C(EFI/Linux/*.efi)) are reported with a warning; their embedded initrd is
    not inspected.
options:
  files:
    description: Absolute paths that every image must carry with the content they have on disk.
    type: list
    elements: path
    default: []
  scan_dirs:
    description: Directories whose C(*.conf) files are tracked when they mention a pattern.
    type: list
    elements: path
    default: [/etc/modprobe.d, /usr/lib/modprobe.d, /lib/modprobe.d]
  scan_patterns:
    description: Substrings that make a scanned file reach early boot (matched on non-comment lines).
    type: list
    elements: str
    default: [nouveau, nova_core, nova_drm, nvidia, NVreg_]
  modules:
    description: Kernel modules looked for on disk per kernel and inside each image.
    type: list
    elements: str
    default: [nouveau, nova_core, nova_drm]
  kernels:
    description: Inspect only these installed kernel versions (all when empty).
    type: list
    elements: str
    default: []
  inspect_images:
    description: Unpack and compare the images. When false only kernels, images and on-disk modules are listed.
    type: bool
    default: true
  generator:
    description: Initramfs generator; V(auto) picks initramfs-tools when C(update-initramfs) exists, else dracut.
    type: str
    choices: [auto, initramfs-tools, dracut]
    default: auto
  boot_dir:
    description: Directory holding the kernels and images.
    type: path
    default: /boot
  modules_dir:
    description: Directory holding one module tree per installed kernel.
    type: path
    default: /lib/modules
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Find initramfs images that lack the blacklist
  initramfs_info:
    files: [/etc/modprobe.d/gpuprov-nouveau.conf]
  register: __role_initramfs
  check_mode: false
"""

RETURN = r"""
generator:
  description: The generator in use (initramfs-tools, dracut or none).
  returned: always
  type: str
kernel_versions:
  description: Installed kernel versions, oldest first (only those in O(kernels) when it is set).
  returned: always
  type: list
  elements: str
stale_kernels:
  description: Versions whose image is stale (empty when O(inspect_images) is false).
  returned: always
  type: list
  elements: str
kernels:
  description: One entry per installed kernel.
  returned: always
  type: list
  elements: dict
  sample:
    - version: 6.1.0-28-amd64
      image: /boot/initrd.img-6.1.0-28-amd64
      image_exists: true
      image_source: default
      rebuild_argv: [update-initramfs, -u, -k, 6.1.0-28-amd64]
      modules_on_disk: {nouveau: true, nova_core: false, nova_drm: false}
      modules_in_image: {nouveau: true, nova_core: false, nova_drm: false}
      files:
        - {path: /etc/modprobe.d/gpuprov-nouveau.conf, on_disk: true, in_image: false, matches: false}
      stale: true
      reasons: ["/boot/initrd.img-6.1.0-28-amd64 lacks /etc/modprobe.d/gpuprov-nouveau.conf"]
tracked_files:
  description: The files compared, with why each is tracked and its sha256 on disk (null when absent).
  returned: always
  type: list
  elements: dict
modules_on_disk:
  description: For each name in O(modules), whether any installed kernel ships it.
  returned: always
  type: dict
unified_images:
  description: Unified kernel images found; their embedded initrd is not inspected.
  returned: always
  type: list
  elements: str
running_kernel:
  description: The running kernel release (in a container, the host's).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.initramfs_boot import kernel_entries, unified_images
from ansible_collections.gpuprov.gpu.plugins.module_utils.initramfs_files import inspect_kernels, tracked_files
from ansible_collections.gpuprov.gpu.plugins.module_utils.initramfs_image import ImageReader
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import installed_kernels


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "scan_dirs": {
                "type": "list",
                "elements": "path",
                "default": ["/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d"],
            },
            "scan_patterns": {
                "type": "list",
                "elements": "str",
                "default": ["nouveau", "nova_core", "nova_drm", "nvidia", "NVreg_"],
            },
            "modules": {"type": "list", "elements": "str", "default": ["nouveau", "nova_core", "nova_drm"]},
            "kernels": {"type": "list", "elements": "str", "default": []},
            "inspect_images": {"type": "bool", "default": True},
            "generator": {"type": "str", "default": "auto", "choices": ["auto", "initramfs-tools", "dracut"]},
            "boot_dir": {"type": "path", "default": "/boot"},
            "modules_dir": {"type": "path", "default": "/lib/modules"},
        },
        supports_check_mode=True,
    )
    params = module.params
    generator = params["generator"]
    if generator == "auto":
        if module.get_bin_path("update-initramfs"):
            generator = "initramfs-tools"
        elif module.get_bin_path("dracut"):
            generator = "dracut"
        else:
            generator = "none"
    for not_abs in [p for p in params["files"] if not os.path.isabs(p)]:
        module.fail_json(msg=f"files must be absolute paths: {not_abs}")

    versions = installed_kernels(params["modules_dir"], params["boot_dir"])
    if params["kernels"]:
        versions = [v for v in versions if v in params["kernels"]]
    tracked = tracked_files(params["files"], params["scan_dirs"], params["scan_patterns"])
    kernels = kernel_entries(generator, params["boot_dir"], params["modules_dir"], versions, params["modules"])
    if params["inspect_images"] and kernels:
        if generator == "none":
            module.fail_json(msg="No initramfs generator found (neither update-initramfs nor dracut is installed)")
        inspect_kernels(ImageReader(module, generator), kernels, tracked, params["modules"])

    unified = unified_images(params["boot_dir"])
    for path in unified:
        module.warn(f"Unified kernel image {path} found; its embedded initrd is not inspected")

    modules_any = {name: any(k["modules_on_disk"][name] for k in kernels) for name in params["modules"]}
    module.exit_json(
        changed=False,
        generator=generator,
        kernel_versions=versions,
        stale_kernels=[k["version"] for k in kernels if k["stale"]],
        kernels=kernels,
        tracked_files=tracked,
        modules_on_disk=modules_any,
        unified_images=unified,
        running_kernel=os.uname().release,
    )


if __name__ == "__main__":
    main()
