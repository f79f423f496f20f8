"""The stand-in of Ubuntu's own archive that each Ubuntu stand-in lab host is served: what the roles install from it.

A lab host dressed as Ubuntu is Debian underneath (:mod:`gpuprov.lab.imagespecs`), so its apt sources reach
Debian's archive, not Ubuntu's. What the roles install from Ubuntu's archive by Ubuntu's names comes from this
stand-in instead (:data:`ARCHIVES`, one per release):

* kernel lines, each image + headers + the three metas (:func:`~gpuprov.lab.standin.catalogue.ubuntu_kernel`):
  20.04's HWE line (``linux-generic-hwe-20.04``, 5.15); 22.04's GA (``linux-generic``, 5.15) and HWE
  (``linux-generic-hwe-22.04``, 6.8, as 22.04.5 ships); 24.04's GA (``linux-generic``, 6.8) and HWE
  (``linux-generic-hwe-24.04``, 6.14, as 24.04.3 ships; 24.04.2's was 6.11). The kernels are placeholders
  whose headers link to the host's real Debian headers, so DKMS really builds for them. The ABI numbers are
  of the shape Ubuntu uses, not a particular Ubuntu upload;
* from 22.04 on, the restricted component's server driver sets, ``nvidia-driver-<branch>-server`` and
  ``-server-open`` with their DKMS and ``-server`` userland packages, for every lab driver branch at Ubuntu's
  revision (``580.65.06-0ubuntu0.24.04.1``): the set the nvidia_driver role's method distro installs
  (roles/nvidia_driver/vars/Ubuntu.yml). Fabric Manager and ``cuda-drivers`` are not in Ubuntu's archive at
  the driver's version and are left out. The 20.04 stand-in's archive carries its HWE line only, as before;
* from 22.04 on too, what the nvidia_driver role's method ubuntu-drivers installs
  (:mod:`gpuprov.lab.standin.ubuntu_drivers`): ``ubuntu-drivers-common`` with a stand-in ``ubuntu-drivers``, the
  headless sets of every server branch, and Canonical's precompiled modules for each of the archive's kernels,
  ``linux-modules-nvidia-<branch>-server[-open]-<kernel>``, with the metas of the kernel flavours.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin.catalogue import LAB_BRANCHES, driver_packages, ubuntu_kernel
from gpuprov.lab.standin.deb import StandinPackage
from gpuprov.lab.standin.ubuntu_drivers import headless_packages, precompiled_modules, ubuntu_drivers_common


@dataclass(frozen=True)
class KernelLine:
    """One Ubuntu kernel line: ``abi`` (``6.8.0-87``, flavour ``generic``), the metas' ``suffix``
    (``generic-hwe-22.04`` for linux-generic-hwe-22.04) and their package ``version``."""

    abi: str
    suffix: str
    version: str


@dataclass(frozen=True)
class UbuntuArchive:
    """What the stand-in archive of one Ubuntu ``release`` ("22.04") carries: ``kernels`` (GA first) and the
    driver branches of its ``-server`` sets (``server_branches``, empty for none)."""

    os_name: str
    release: str
    kernels: tuple[KernelLine, ...]
    server_branches: tuple[str, ...] = ()

    @property
    def directory(self) -> str:
        """The repository's directory under the lab's served root (``ubuntu2204-archive``)."""
        return f"{self.os_name}-archive"

    @property
    def hwe_meta(self) -> str:
        """The HWE kernel meta package (``linux-generic-hwe-22.04``)."""
        return f"linux-generic-hwe-{self.release}"


ARCHIVES: dict[str, UbuntuArchive] = {
    a.os_name: a for a in (
        UbuntuArchive("ubuntu2004", "20.04", (
            KernelLine("5.15.0-105", "generic-hwe-20.04", "5.15.0.105.112~20.04.1"),
        )),
        UbuntuArchive("ubuntu2204", "22.04", (
            KernelLine("5.15.0-160", "generic", "5.15.0.160.160"),
            KernelLine("6.8.0-87", "generic-hwe-22.04", "6.8.0.87.87~22.04.1"),
        ), tuple(LAB_BRANCHES)),
        UbuntuArchive("ubuntu2404", "24.04", (
            KernelLine("6.8.0-87", "generic", "6.8.0.87.88"),
            KernelLine("6.14.0-35", "generic-hwe-24.04", "6.14.0.35.35~24.04.1"),
        ), tuple(LAB_BRANCHES)),
    )
}  # fmt: skip


def archive_for(os_name: str) -> UbuntuArchive | None:
    """The :class:`UbuntuArchive` of lab OS ``os_name``, or None for an OS that is what it says (debian12)."""
    return ARCHIVES.get(os_name)


def server_revision(release: str) -> str:
    """Ubuntu's Debian revision of an archive driver build for ``release``: ``-0ubuntu0.22.04.1``."""
    return f"-0ubuntu0.{release}.1"


#: The stand-in ubuntu-drivers-common's version (noble's shape).
UBUNTU_DRIVERS_COMMON_VERSION = "1:0.9.7.6ubuntu3.1"


def archive_packages(os_name: str, debian_kernel: str) -> list[StandinPackage]:
    """The stand-in archive of ``os_name``: its kernel lines and its ``-server`` driver sets (module docstring).

    The kernels' headers link to the real Debian headers of ``debian_kernel`` (the host's own kernel, e.g.
    ``6.12.57+deb13-amd64``) and depend on their package, so DKMS really compiles for them.

    Raises:
        ConfigError: ``os_name`` has no Ubuntu archive (it is not an Ubuntu stand-in).
    """
    archive = archive_for(os_name)
    if archive is None:
        raise ConfigError(f"lab OS {os_name} is not an Ubuntu stand-in: it has no stand-in Ubuntu archive")
    real = f"linux-headers-{debian_kernel}"
    specs: list[StandinPackage] = []
    for line in archive.kernels:
        specs += ubuntu_kernel(line.abi, "generic", line.suffix, line.version, f"/usr/src/{real}", (real,),
                               hooks=True)
    for branch in archive.server_branches:
        version, revision = LAB_BRANCHES[branch], server_revision(archive.release)
        specs += [s for s in driver_packages(branch, version, revision, flavours=("-server", "-server-open"))
                  if not s.name.startswith(("nvidia-fabricmanager-", "cuda-drivers-"))]
        for kernel_suffix in ("-server", "-server-open"):
            specs += headless_packages(branch, kernel_suffix, f"{version}{revision}")
            for line in archive.kernels:
                specs += precompiled_modules(branch, version, kernel_suffix, f"{line.abi}-generic", line.suffix,
                                             line.version)
    if archive.server_branches:
        specs.append(ubuntu_drivers_common(UBUNTU_DRIVERS_COMMON_VERSION))
    return specs
