# Copyright: gpuprov contributors
# Apache-2.0
"""NVIDIA's names for the packages of one driver branch: the one copy of the rule.

The nvidia_driver role installs the set by these names (through the ``nvidia_driver_packages`` filter),
``gpuprov bundle`` fetches them for air-gapped sites and the drift report looks for them on a host. The names
are those of NVIDIA's CUDA repository, which Ubuntu's archive shares (docs.nvidia.com/datacenter/tesla/
driver-installation-guide, "Ubuntu"): ``nvidia-driver-<branch>`` is the meta package, ``nvidia-dkms-<branch>``
the kernel module's source DKMS builds, and the userland is ``libnvidia-compute-<branch>``, ``nvidia-utils-
<branch>`` and ``nvidia-compute-utils-<branch>``. Flavour suffixes: the meta and DKMS packages take ``-open``
(NVIDIA's open kernel modules) or ``-server`` (Ubuntu's server builds); the userland takes only ``-server``.
Fabric Manager is ``nvidia-fabricmanager-<branch>`` for every flavour.
"""

from __future__ import annotations

from typing import Any

#: Flavours the driver comes in (``driver.flavour`` once ``auto`` is resolved).
FLAVOURS = ("proprietary", "open", "server")


def driver_packages(branch: Any, flavour: Any = "proprietary") -> dict[str, Any]:
    """Package names of driver ``branch`` (``"570"``) in ``flavour`` (:data:`FLAVOURS`; ``auto`` and unknown
    values name the proprietary set).

    Returns:
        ``{"meta": str, "dkms": str, "userland": [str, str, str], "fabric_manager": str}``, e.g. for 570 open:
        ``nvidia-driver-570-open``, ``nvidia-dkms-570-open``, ``[libnvidia-compute-570, nvidia-utils-570,
        nvidia-compute-utils-570]``, ``nvidia-fabricmanager-570``.
    """
    kernel_suffix = {"open": "-open", "server": "-server"}.get(str(flavour), "")
    userland_suffix = "-server" if str(flavour) == "server" else ""
    return {
        "meta": f"nvidia-driver-{branch}{kernel_suffix}",
        "dkms": f"nvidia-dkms-{branch}{kernel_suffix}",
        "userland": [f"{name}-{branch}{userland_suffix}"
                     for name in ("libnvidia-compute", "nvidia-utils", "nvidia-compute-utils")],
        "fabric_manager": f"nvidia-fabricmanager-{branch}",
    }


def driver_package_set(branch: Any, flavour: Any = "proprietary", fabric_manager: bool = False) -> list[str]:
    """The set the role installs, pins and holds together, in install order: meta, DKMS, userland, and Fabric
    Manager when ``fabric_manager``."""
    names = driver_packages(branch, flavour)
    return [names["meta"], names["dkms"], *names["userland"], *([names["fabric_manager"]] if fabric_manager else [])]
