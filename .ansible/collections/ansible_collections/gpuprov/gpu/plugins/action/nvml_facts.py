# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``gpuprov.gpu.nvml_facts``: ship the controller's pynvml to the host, run the module,
clean up (plugin_utils/pynvml_transfer.py). The module only reads, so it runs unchanged in check mode and
never reports a change."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.pynvml_transfer import PynvmlModuleAction


class ActionModule(PynvmlModuleAction):
    """``nvml_facts`` with the controller's pynvml; ``changed`` is always false."""

    MODULE = "gpuprov.gpu.nvml_facts"
    _VALID_ARGS = frozenset(("sysfs_root", "proc_root"))

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """The module's result (facts), ``changed: false``."""
        result = super().run(tmp, task_vars)
        result["changed"] = False
        return result
