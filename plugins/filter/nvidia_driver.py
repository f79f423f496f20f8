# Copyright: gpuprov contributors
# Apache-2.0
"""Filters naming NVIDIA's driver packages (``plugins/plugin_utils/driver_packages.py`` holds the rule)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import FLAVOURS, driver_packages


def nvidia_driver_packages(branch: Any, flavour: Any = "proprietary") -> dict[str, Any]:
    """``nvidia_driver_branch | gpuprov.gpu.nvidia_driver_packages(nvidia_driver_flavour)`` -> ``{meta, dkms,
    userland, fabric_manager}`` (package names; userland a list of three).

    Raises:
        AnsibleFilterError: an empty branch, or a flavour outside FLAVOURS and ``auto``.
    """
    if branch is None or not str(branch).strip():
        raise AnsibleFilterError(f"nvidia_driver_packages: branch {branch!r} is not a driver branch (e.g. '580')")
    if str(flavour) not in (*FLAVOURS, "auto"):
        raise AnsibleFilterError(f"nvidia_driver_packages: flavour {flavour!r} is not one of "
                                 f"{', '.join((*FLAVOURS, 'auto'))}")
    return driver_packages(str(branch).strip(), flavour)


class FilterModule:
    """nvidia_driver_packages (gpuprov.gpu.nvidia_driver_packages in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_packages": nvidia_driver_packages}
