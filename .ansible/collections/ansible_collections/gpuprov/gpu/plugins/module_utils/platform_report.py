# Copyright: gpuprov contributors
# Apache-2.0
"""platform_info's report: the platform under the GPUs, put together from the parts that read it
(``platform_firmware``, ``platform_pci``, ``platform_capacity``, ``platform_kernel_log``) and, when asked, the
NVIDIA daemons running and the stack's systemd units (module_utils/health.py). Pure Python 3.8, no Ansible, so
``gpuprov doctor`` calls :func:`collect` locally and tests call it on fake trees."""


from __future__ import annotations

import os
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.health import running_daemons, service_states
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_capacity import disks, ram
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_firmware import boot_mode, secure_boot
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_kernel_log import kernel_log
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_pci import iommu, pci
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_read import read_file, run_command


def collect(sysfs_root: str = "/sys", proc_root: str = "/proc", kernel_log_path: str | None = None,
            lspci_path: str | None = None, use_commands: bool | None = None, daemons: bool = False,
            services: bool = False) -> dict[str, Any]:
    """The whole report; pure except for the optional commands, so tests call it on fake trees."""
    commands = use_commands if use_commands is not None else os.path.realpath(sysfs_root) == "/sys"
    lspci_text = read_file(lspci_path) if lspci_path else None
    if lspci_text is None and commands:
        rc, out = run_command(["lspci", "-vvv", "-D", "-nn"])
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
        report["services"] = service_states(run_command) if commands else None
    return report
