# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``gpuprov.gpu.bios_probe``: ship the controller's pynvml to the host, run the module, clean up
(plugin_utils/pynvml_transfer.py). ``changed`` is the module's: whether the report was (or would be) written."""

from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.pynvml_transfer import PynvmlModuleAction


class ActionModule(PynvmlModuleAction):
    """``bios_probe`` with the controller's pynvml."""

    MODULE = "gpuprov.gpu.bios_probe"
    _VALID_ARGS = frozenset(("sysfs_root", "proc_root", "kernel_log_path", "lspci_path", "kernel_log_unavailable",
                             "report_path", "owner", "group", "settings", "existing_findings", "fail_on"))
