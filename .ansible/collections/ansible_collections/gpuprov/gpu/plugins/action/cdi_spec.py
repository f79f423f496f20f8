# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``gpuprov.gpu.cdi_spec``: ship the controller's pynvml to the host, run the module, clean up
(plugin_utils/pynvml_transfer.py)."""

from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.pynvml_transfer import PynvmlModuleAction


class ActionModule(PynvmlModuleAction):
    """``cdi_spec`` with the controller's pynvml."""

    MODULE = "gpuprov.gpu.cdi_spec"
    _VALID_ARGS = frozenset(("path", "method", "refresh_unit", "record", "follow_record", "ctk"))
