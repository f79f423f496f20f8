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

#: Where the packages come from: NVIDIA's CUDA repository (method cuda-repo), Ubuntu's archive and Debian's
#: (method distro).
SOURCES = ("nvidia", "ubuntu", "debian")

#: The flavours each source packages (Debian has no ``-server`` build).
SOURCE_FLAVOURS = {"nvidia": FLAVOURS, "ubuntu": FLAVOURS, "debian": ("proprietary", "open")}


def driver_packages(branch: Any, flavour: Any = "proprietary", source: str = "nvidia") -> dict[str, Any]:
    """Package names of driver ``branch`` (``"570"``) in ``flavour`` (:data:`FLAVOURS`; ``auto`` and unknown
    values name the proprietary set) from ``source`` (:data:`SOURCES`).

    Returns:
        ``{"meta": str, "dkms": str, "userland": [str, ...], "fabric_manager": str | None,
        "precompiled_prefix": str | None}``, e.g. for 570 open from ``nvidia``: ``nvidia-driver-570-open``,
        ``nvidia-dkms-570-open``, ``[libnvidia-compute-570, nvidia-utils-570, nvidia-compute-utils-570]``,
        ``nvidia-fabricmanager-570``, None. From ``ubuntu`` every name takes ``-server`` (the kernel parts
        ``-server-open`` for open), Fabric Manager is None (not packaged at the driver's version) and
        ``precompiled_prefix`` begins the names of Canonical's precompiled modules, one per kernel flavour
        (``linux-modules-nvidia-570-server-open-``). From ``debian`` the names carry no branch: ``nvidia-driver`` with
        ``nvidia-kernel-dkms`` (``nvidia-open-kernel-dkms``), installed at a version of the branch.

    Raises:
        ValueError: ``source`` outside :data:`SOURCES`.
    """
    flavour = str(flavour)
    if source == "debian":
        return {"meta": "nvidia-driver",
                "dkms": "nvidia-open-kernel-dkms" if flavour == "open" else "nvidia-kernel-dkms",
                "userland": ["firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1"],
                "fabric_manager": None, "precompiled_prefix": None}
    if source == "ubuntu":
        kernel_suffix = "-server-open" if flavour == "open" else "-server"
        userland_suffix = "-server"
    elif source == "nvidia":
        kernel_suffix = {"open": "-open", "server": "-server"}.get(flavour, "")
        userland_suffix = "-server" if flavour == "server" else ""
    else:
        raise ValueError(f"driver package source {source!r} is not one of {', '.join(SOURCES)}")
    return {
        "meta": f"nvidia-driver-{branch}{kernel_suffix}",
        "dkms": f"nvidia-dkms-{branch}{kernel_suffix}",
        "userland": [f"{name}-{branch}{userland_suffix}"
                     for name in ("libnvidia-compute", "nvidia-utils", "nvidia-compute-utils")],
        "fabric_manager": f"nvidia-fabricmanager-{branch}" if source == "nvidia" else None,
        "precompiled_prefix": f"linux-modules-nvidia-{branch}{kernel_suffix}-" if source == "ubuntu" else None,
    }


def driver_package_set(branch: Any, flavour: Any = "proprietary", fabric_manager: bool = False,
                       source: str = "nvidia") -> list[str]:
    """The set the role installs, pins and holds together, in install order: meta, DKMS, userland, and Fabric
    Manager when ``fabric_manager`` (and ``source`` packages it)."""
    names = driver_packages(branch, flavour, source)
    manager = [names["fabric_manager"]] if fabric_manager and names["fabric_manager"] else []
    return [names["meta"], names["dkms"], *names["userland"], *manager]


def installed_forms(branch: Any, flavour: Any = None) -> dict[str, tuple[str, ...]]:
    """Every package name under which the driver of ``branch`` in ``flavour`` (``None`` or ``auto``: any) may be
    installed, by part: the names :func:`driver_packages` gives for every source.

    Returns:
        ``{"meta": names, "kernel": names, "kernel_prefixes": prefixes, "unbranched_meta": names,
        "unbranched_kernel": names}``: ``meta`` and ``kernel`` are exact names; ``kernel_prefixes`` begin the names
        of Canonical's precompiled modules (one per kernel flavour); the unbranched names (Debian's) are installed
        at a version of the branch.
    """
    flavours = [str(flavour)] if str(flavour) in FLAVOURS else list(FLAVOURS)

    def names(sources: tuple[str, ...], part: str) -> tuple[str, ...]:
        found = {driver_packages(branch, f, s)[part] for s in sources for f in flavours if f in SOURCE_FLAVOURS[s]}
        return tuple(sorted(name for name in found if name))

    return {
        "meta": names(("nvidia", "ubuntu"), "meta"),
        "kernel": names(("nvidia", "ubuntu"), "dkms"),
        "kernel_prefixes": names(("ubuntu",), "precompiled_prefix"),
        "unbranched_meta": names(("debian",), "meta"),
        "unbranched_kernel": names(("debian",), "dkms"),
    }
