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

The nvidia_driver role's method ``distro`` installs the distribution's own names instead: Ubuntu's archive
``nvidia-driver-<branch>-server[-open]`` (and Canonical's precompiled ``linux-modules-nvidia-<branch>-server
[-open]-<flavour>`` in place of DKMS), Debian's ``nvidia-driver`` with ``nvidia-kernel-dkms`` or
``nvidia-open-kernel-dkms`` at the branch's version. :func:`installed_forms` lists every name a host running the
branch may carry, so a reader of the host's packages finds the driver whichever way it came.
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


#: Name suffixes of each flavour in NVIDIA's repository and in Ubuntu's archive (method distro: ``-server``).
_SUFFIXES = {"open": ("-open", "-server-open"), "proprietary": ("", "-server"), "server": ("-server",)}


def installed_forms(branch: Any, flavour: Any = None) -> dict[str, tuple[str, ...]]:
    """Every package name under which the driver of ``branch`` in ``flavour`` (``None`` or ``auto``: any) may be
    installed, by part.

    Returns:
        ``{"meta": names, "kernel": names, "kernel_prefixes": prefixes, "unbranched_meta": names,
        "unbranched_kernel": names}``: ``meta`` and ``kernel`` are exact names; ``kernel_prefixes`` begin the names
        of Canonical's precompiled modules (one per kernel flavour); the unbranched names (Debian's) are installed
        at a version of the branch.
    """
    flavours = [str(flavour)] if str(flavour) in _SUFFIXES else list(_SUFFIXES)
    suffixes = sorted({suffix for name in flavours for suffix in _SUFFIXES[name]})
    kernel_debian = {"open": ("nvidia-open-kernel-dkms",), "proprietary": ("nvidia-kernel-dkms",), "server": ()}
    return {
        "meta": tuple(f"nvidia-driver-{branch}{suffix}" for suffix in suffixes),
        "kernel": tuple(f"nvidia-dkms-{branch}{suffix}" for suffix in suffixes),
        "kernel_prefixes": tuple(f"linux-modules-nvidia-{branch}{suffix}-" for suffix in suffixes
                                 if suffix.startswith("-server")),
        "unbranched_meta": () if flavours == ["server"] else ("nvidia-driver",),
        "unbranched_kernel": tuple(name for f in flavours for name in kernel_debian[f]),
    }
