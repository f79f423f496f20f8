# Copyright: gpuprov contributors
# Apache-2.0
"""Filters naming NVIDIA's driver packages (``plugins/plugin_utils/driver_packages.py`` holds the rule)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import (
    FLAVOURS,
    SOURCES,
    driver_packages,
    foreign_packages,
)


def nvidia_driver_packages(branch: Any, flavour: Any = "proprietary", source: Any = "nvidia") -> dict[str, Any]:
    """``nvidia_driver_branch | gpuprov.gpu.nvidia_driver_packages(nvidia_driver_flavour[, source])`` -> ``{meta,
    dkms, userland, fabric_manager, precompiled_prefix, pinning}`` (package names; userland a list; the last three
    None where ``source`` has none). ``source``: ``nvidia`` (the CUDA repository), ``ubuntu`` or ``debian`` (the
    archives).

    Raises:
        AnsibleFilterError: an empty branch (except for ``debian``, whose names carry none), a flavour outside
            FLAVOURS and ``auto``, a source outside SOURCES, or a flavour the source does not package for the
            branch (``server`` from ``nvidia`` for 590 and later).
    """
    if str(source) not in SOURCES:
        raise AnsibleFilterError(f"nvidia_driver_packages: source {source!r} is not one of {', '.join(SOURCES)}")
    if str(source) != "debian" and (branch is None or not str(branch).strip()):
        raise AnsibleFilterError(f"nvidia_driver_packages: branch {branch!r} is not a driver branch (e.g. '580')")
    if str(flavour) not in (*FLAVOURS, "auto"):
        raise AnsibleFilterError(f"nvidia_driver_packages: flavour {flavour!r} is not one of "
                                 f"{', '.join((*FLAVOURS, 'auto'))}")
    try:
        return driver_packages(str(branch).strip(), flavour, str(source))
    except ValueError as exc:
        raise AnsibleFilterError(f"nvidia_driver_packages: {exc}") from exc


def nvidia_driver_foreign(names: Any, branch: Any, flavour: Any = "proprietary", source: Any = "nvidia") -> list[str]:
    """``installed_names | gpuprov.gpu.nvidia_driver_foreign(nvidia_driver_branch, nvidia_driver_flavour[, source])``
    -> the installed driver-family packages of another branch or flavour (sorted), whose removal is a branch change;
    the branch's own packages the meta pulls in (``libnvidia-gl-580``, ...) are not among them.

    Raises:
        AnsibleFilterError: as :func:`nvidia_driver_packages` for the branch, flavour and source.
    """
    nvidia_driver_packages(branch, flavour, source)  # the same checks and errors
    return foreign_packages(list(names), str(branch).strip(), flavour, str(source))


class FilterModule:
    """nvidia_driver_packages and nvidia_driver_foreign (gpuprov.gpu.<name> in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_packages": nvidia_driver_packages, "nvidia_driver_foreign": nvidia_driver_foreign}
