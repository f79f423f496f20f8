# Copyright: gpuprov contributors
# Apache-2.0
"""Filters naming NVIDIA's driver packages (``plugins/plugin_utils/driver_packages.py`` holds the rule)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_packages


def nvidia_driver_packages(branch: Any, flavour: Any = "proprietary") -> dict[str, Any]:
    """``nvidia_driver_branch | gpuprov.gpu.nvidia_driver_packages(nvidia_driver_flavour)`` -> ``{meta, dkms,
    userland, fabric_manager}`` (package names; userland a list of three)."""
    return driver_packages(branch, flavour)


class FilterModule:
    """nvidia_driver_packages (gpuprov.gpu.nvidia_driver_packages in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_packages": nvidia_driver_packages}
