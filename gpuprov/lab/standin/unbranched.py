"""NVIDIA's driver packages from branch 590 as its CUDA repository names them: without the branch.

From R590 NVIDIA's Ubuntu packages drop the branch from their names (``libnvidia-compute-580`` became
``libnvidia-compute``, ``nvidia-dkms-580-open`` ``nvidia-dkms-open``; the open modules' meta is ``nvidia-open``), and
a branch is chosen by installing its pinning package, ``nvidia-driver-pinning-<branch>``, before the driver (NVIDIA
Driver Installation Guide, "Recent Updates": https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/).
Several branches' releases then sit in one repository under the same names, and only the version tells them apart.

:func:`unbranched_driver_packages` builds one release of the open flavour that way, with the shapes of
:mod:`gpuprov.lab.standin.catalogue` (the tiny real DKMS module, the userland's version file, the daemons). The
unbranched names are the virtual names the branched packages provide and conflict with, so a branched set and
an unbranched one never coexist and apt must remove one to install the other. The pinning package ships an apt
preferences file that keeps the unbranched names on its branch; NVIDIA's own file is not copied.
"""

from __future__ import annotations

from gpuprov.lab.standin.catalogue import (
    DEBIAN_REVISION,
    UBUNTU_REVISION,
    fabric_manager_package,
    nvidia_dkms,
    userland_packages,
)
from gpuprov.lab.standin.deb import FileSpec, PackageSpec

#: The unbranched names a pinning package keeps on its branch.
PINNED = ("nvidia-open", "nvidia-dkms-open", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils",
          "nvidia-fabricmanager")

PINNING = """\
# gpuprov stand-in for NVIDIA's {name}: the unbranched driver packages stay on branch {branch}.
Package: {packages}
Pin: version {branch}.*
Pin-Priority: 1000
"""


def pinning_package(branch: str, pv: str) -> PackageSpec:
    """``nvidia-driver-pinning-<branch>`` at ``pv``: /etc/apt/preferences.d/nvidia-driver-pinning-<branch>,
    pinning :data:`PINNED` to ``<branch>.*``; pinning packages of different branches conflict (one branch)."""
    name = f"nvidia-driver-pinning-{branch}"
    return PackageSpec(
        name=name, version=pv, architecture="all", provides=("nvidia-driver-pinning",),
        conflicts=("nvidia-driver-pinning",), replaces=("nvidia-driver-pinning",),
        description=f"gpuprov stand-in NVIDIA driver pinning package, branch {branch}",
        files={f"/etc/apt/preferences.d/{name}": FileSpec(
            PINNING.format(name=name, branch=branch, packages=" ".join(PINNED)))},
    )


def unbranched_driver_packages(branch: str, version: str, revision: str = UBUNTU_REVISION) -> list[PackageSpec]:
    """One release of branch ``branch`` (590 or later), open flavour, as NVIDIA's repository names it.

    ``unbranched_driver_packages("595", "595.71.05", "-1")`` gives, at package version ``595.71.05-1``:
    nvidia-open (the meta, depending on its siblings at exactly its version), nvidia-dkms-open (a DKMS module
    named nvidia at 595.71.05), libnvidia-compute, nvidia-utils, nvidia-compute-utils, nvidia-fabricmanager and
    nvidia-driver-pinning-595.
    """
    pv = f"{version}{revision}"
    userland = ("libnvidia-compute", "nvidia-utils", "nvidia-compute-utils")
    specs = userland_packages(userland, f"{branch} (unbranched)", version, pv)
    specs.append(nvidia_dkms(branch, version, pv, "nvidia-dkms-open"))
    specs.append(PackageSpec(
        name="nvidia-open", version=pv, architecture="amd64",
        depends=tuple(f"{name} (= {pv})" for name in ("nvidia-dkms-open", *userland)),
        provides=("nvidia-driver-binary",), conflicts=("nvidia-driver-binary",),
        description=f"gpuprov stand-in NVIDIA driver metapackage, open kernel modules ({branch})",
    ))
    specs.append(fabric_manager_package("nvidia-fabricmanager", f"{branch} (unbranched)", version, pv))
    specs.append(pinning_package(branch, pv))
    return specs


#: R590+ branches the lab's stand-in CUDA repository offers under NVIDIA's unbranched names, with a release of
#: each; only for the lab OSes NVIDIA publishes them for (not Ubuntu 20.04: the matrix's OS rows).
LAB_UNBRANCHED = {"595": "595.71.05"}
LAB_UNBRANCHED_OSES = ("debian12", "ubuntu2204", "ubuntu2404")


def lab_unbranched_packages(os_name: str) -> list[PackageSpec]:
    """The :data:`LAB_UNBRANCHED` releases for ``os_name`` (none where NVIDIA publishes no R590+), with NVIDIA's
    revision for the OS (``-1`` on Debian, ``-0ubuntu1`` on Ubuntu)."""
    if os_name not in LAB_UNBRANCHED_OSES:
        return []
    revision = DEBIAN_REVISION if os_name.startswith("debian") else UBUNTU_REVISION
    return [spec for branch, version in LAB_UNBRANCHED.items()
            for spec in unbranched_driver_packages(branch, version, revision)]
