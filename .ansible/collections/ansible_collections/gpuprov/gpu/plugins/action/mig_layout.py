# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``gpuprov.gpu.mig_layout``: ship the controller's pynvml to the host, run the module,
clean up (plugin_utils/pynvml_transfer.py)."""

from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.pynvml_transfer import PynvmlModuleAction


class ActionModule(PynvmlModuleAction):
    """``mig_layout`` with the controller's pynvml."""

    MODULE = "gpuprov.gpu.mig_layout"
    _VALID_ARGS = frozenset(("entries", "allow_destroy", "proc_root"))
