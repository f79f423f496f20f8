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

From branch 590 NVIDIA's repository drops the branch from the names (NVIDIA Driver Installation Guide, "Recent
Updates", "Ubuntu 590 and later packages": https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/):
``libnvidia-compute-580`` becomes ``libnvidia-compute``, ``nvidia-dkms-580-open`` ``nvidia-dkms-open``, and the
metas are ``nvidia-open`` (open modules) and ``cuda-drivers`` (proprietary). The branch is chosen by installing
``nvidia-driver-pinning-<branch>`` first (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
version-locking.html), and the packages are installed at a version of the branch. NVIDIA packages no ``-server``
flavour under the new names. Ubuntu's archive keeps the branch in its names for these branches too.
"""

from __future__ import annotations

import re
from typing import Any

#: Flavours the driver comes in (``driver.flavour`` once ``auto`` is resolved).
FLAVOURS = ("proprietary", "open", "server")

#: Where the packages come from: NVIDIA's CUDA repository (method cuda-repo), Ubuntu's archive and Debian's
#: (method distro).
SOURCES = ("nvidia", "ubuntu", "debian")

#: The flavours each source packages (Debian has no ``-server`` build; NVIDIA none from :data:`UNBRANCHED_FROM`).
SOURCE_FLAVOURS = {"nvidia": FLAVOURS, "ubuntu": FLAVOURS, "debian": ("proprietary", "open")}

#: The first branch NVIDIA's repository names without the branch (chosen by its pinning package instead).
UNBRANCHED_FROM = 590


def branch_in_names(branch: Any, source: str = "nvidia") -> bool:
    """Whether the package names of ``branch`` from ``source`` carry the branch: Debian's never, NVIDIA's below
    :data:`UNBRANCHED_FROM`, Ubuntu's always. Unbranched packages are told apart by their version (``595.*``)."""
    if source == "debian":
        return False
    return source != "nvidia" or not str(branch).isdigit() or int(branch) < UNBRANCHED_FROM


def source_flavours(branch: Any, source: str) -> tuple[str, ...]:
    """The flavours ``source`` packages for ``branch`` (:data:`SOURCE_FLAVOURS`, less ``server`` where NVIDIA's
    names carry no branch)."""
    if source == "nvidia" and not branch_in_names(branch, source):
        return ("proprietary", "open")
    return SOURCE_FLAVOURS[source]


def driver_packages(branch: Any, flavour: Any = "proprietary", source: str = "nvidia") -> dict[str, Any]:
    """Package names of driver ``branch`` (``"570"``) in ``flavour`` (:data:`FLAVOURS`; ``auto`` and unknown
    values name the proprietary set) from ``source`` (:data:`SOURCES`).

    Returns:
        ``{"meta": str, "dkms": str, "userland": [str, ...], "fabric_manager": str | None,
        "precompiled_prefix": str | None, "pinning": str | None}``, e.g. for 570 open from ``nvidia``:
        ``nvidia-driver-570-open``,
        ``nvidia-dkms-570-open``, ``[libnvidia-compute-570, nvidia-utils-570, nvidia-compute-utils-570]``,
        ``nvidia-fabricmanager-570``, None. From ``ubuntu`` every name takes ``-server`` (the kernel parts
        ``-server-open`` for open), Fabric Manager is None (not packaged at the driver's version) and
        ``precompiled_prefix`` begins the names of Canonical's precompiled modules, one per kernel flavour
        (``linux-modules-nvidia-570-server-open-``). From ``debian`` the names carry no branch: ``nvidia-driver`` with
        ``nvidia-kernel-dkms`` (``nvidia-open-kernel-dkms``), installed at a version of the branch. From
        ``nvidia`` for 590 and later (:data:`UNBRANCHED_FROM`): ``nvidia-open`` (open) or ``cuda-drivers``
        (proprietary), ``nvidia-dkms-open`` or ``nvidia-dkms``, ``[libnvidia-compute, nvidia-utils,
        nvidia-compute-utils]``, ``nvidia-fabricmanager``, installed at a version of the branch after ``pinning``,
        ``nvidia-driver-pinning-<branch>`` (None for the branched names, which need no pinning package).

    Raises:
        ValueError: ``source`` outside :data:`SOURCES`; flavour ``server`` from ``nvidia`` for 590 and later
            (NVIDIA packages none).
    """
    flavour = str(flavour)
    if source == "debian":
        return {"meta": "nvidia-driver",
                "dkms": "nvidia-open-kernel-dkms" if flavour == "open" else "nvidia-kernel-dkms",
                "userland": ["firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1"],
                "fabric_manager": None, "precompiled_prefix": None, "pinning": None}
    if source == "nvidia" and not branch_in_names(branch, source):
        if flavour == "server":
            raise ValueError(f"NVIDIA's repository packages no server flavour of driver branch {branch} (from "
                             f"{UNBRANCHED_FROM} only open and proprietary): use flavour open or proprietary, or "
                             "method distro for Ubuntu's -server builds")
        return {"meta": "nvidia-open" if flavour == "open" else "cuda-drivers",
                "dkms": "nvidia-dkms-open" if flavour == "open" else "nvidia-dkms",
                "userland": ["libnvidia-compute", "nvidia-utils", "nvidia-compute-utils"],
                "fabric_manager": "nvidia-fabricmanager", "precompiled_prefix": None,
                "pinning": f"nvidia-driver-pinning-{branch}"}
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
        "pinning": None,
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
        of Canonical's precompiled modules (one per kernel flavour); the unbranched names (Debian's, and NVIDIA's
        from 590: :func:`branch_in_names`) are installed at a version of the branch.
    """
    wanted = [str(flavour)] if str(flavour) in FLAVOURS else list(FLAVOURS)

    def names(part: str, branched: bool) -> tuple[str, ...]:
        found = {driver_packages(branch, f, s)[part] for s in SOURCES if branch_in_names(branch, s) == branched
                 for f in wanted if f in source_flavours(branch, s)}
        return tuple(sorted(name for name in found if name))

    return {
        "meta": names("meta", True),
        "kernel": names("dkms", True),
        "kernel_prefixes": names("precompiled_prefix", True),
        "unbranched_meta": names("meta", False),
        "unbranched_kernel": names("dkms", False),
    }


#: A branched driver-family package: ``<part>-<branch>[-open|-server|-server-open]`` (the parts NVIDIA's and Ubuntu's
#: driver metas pull in besides the set: GL, decode, encode, cfg1, kernel-common, kernel-source, X driver ...).
_BRANCHED = re.compile(
    r"^(?P<part>nvidia-(?:driver|dkms|utils|compute-utils|kernel-common|kernel-source|headless|headless-no-dkms"
    r"|fabricmanager|fabricmanager-dev|driver-pinning)|libnvidia-[a-z0-9-]+?|xserver-xorg-video-nvidia|cuda-drivers)"
    r"-(?P<branch>[0-9]+)(?P<suffix>-server-open|-open|-server)?$")

#: The parts whose name carries the kernel module's flavour (``-open``); the others carry only ``-server``.
_KERNEL_PARTS = frozenset({"nvidia-driver", "nvidia-dkms", "nvidia-kernel-source", "nvidia-headless",
                           "nvidia-headless-no-dkms"})

#: The parts packaged once per branch for every flavour.
_UNFLAVOURED_PARTS = frozenset({"nvidia-fabricmanager", "nvidia-fabricmanager-dev", "cuda-drivers"})


def foreign_packages(names: Any, branch: Any, flavour: Any = "proprietary", source: str = "nvidia") -> list[str]:
    """The driver-family packages among installed ``names`` that belong to another branch or flavour than the
    set :func:`driver_packages` names for ``branch``, ``flavour`` and ``source``: their removal is a branch change.

    A package of the branch in the flavour's suffix is not foreign even when the set does not name it (the meta's
    own dependencies: ``libnvidia-gl-580``, ``nvidia-kernel-common-580``, ...). Where the set's names carry no
    branch (Debian's, NVIDIA's from 590), every branched family package is foreign.

    Returns:
        The foreign names, sorted.
    """
    branch = str(branch)
    wanted = driver_packages(branch, flavour, source)
    meta, userland = wanted["meta"], wanted["userland"][0]
    branched = meta.startswith(f"nvidia-driver-{branch}")
    kernel_suffix = meta.removeprefix(f"nvidia-driver-{branch}") if branched else None
    userland_suffix = userland.removeprefix(f"libnvidia-compute-{branch}") if branched else None
    foreign = []
    for name in names:
        match = _BRANCHED.match(str(name))
        if match is None:
            continue
        part, suffix = match["part"], match["suffix"] or ""
        if part == "nvidia-driver-pinning":
            if match["branch"] != branch:
                foreign.append(str(name))
        elif match["branch"] != branch or not branched:
            foreign.append(str(name))
        elif part in _UNFLAVOURED_PARTS:
            continue
        elif suffix != (kernel_suffix if part in _KERNEL_PARTS else userland_suffix):
            foreign.append(str(name))
    return sorted(foreign)
