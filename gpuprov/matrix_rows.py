"""The row types of the NVIDIA compatibility matrix (:mod:`gpuprov.matrix` builds them from ``matrix.yml``).

One frozen dataclass per kind of row: CUDA toolkit, cuDNN release and build, NCCL release, GPU model, driver
branch and OS; each carries the NVIDIA page it comes from (``source``) and whether it was checked against it
(``verified``). Versions are strings (``"550.54.14"``, ``"12.4"``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

OpenModules = Literal["unsupported", "supported", "required"]


@dataclass(frozen=True)
class CudaRelease:
    """A CUDA toolkit: the Linux driver it shipped with (``driver``) and that driver's ``branch``."""

    version: str
    driver: str
    branch: str
    verified: bool
    source: str


@dataclass(frozen=True)
class CudnnBuild:
    """One cuDNN build: CUDA major, supported CUDA minors (``"12.4"``) and minimum Linux driver."""

    cuda_major: int
    cuda: tuple[str, ...]
    min_driver: str


@dataclass(frozen=True)
class CudnnRelease:
    """A cuDNN release and its builds, newest CUDA major first."""

    version: str
    builds: tuple[CudnnBuild, ...]
    verified: bool
    source: str


@dataclass(frozen=True)
class NcclRelease:
    """An NCCL release and the CUDA versions its packages are built for."""

    version: str
    cuda: tuple[str, ...]
    verified: bool
    source: str

    @property
    def cuda_majors(self) -> frozenset[int]:
        """CUDA majors this release has a build for."""
        return frozenset(int(v.split(".")[0]) for v in self.cuda)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: architecture, driver/CUDA range, open-module policy, MIG and NVSwitch capability."""

    model: str
    architecture: str
    compute_capability: str
    segment: str
    min_branch: str
    max_branch: str | None
    min_cuda: str
    max_cuda: str | None
    open_modules: OpenModules
    mig: bool
    nvswitch_capable: bool
    tdp_watts: int
    verified: bool
    source: str
    #: the fields checked against NVIDIA's pages (all of them when ``verified``)
    checked: tuple[str, ...] = ()
    #: the host CPU architecture (``x86_64``; ``aarch64`` for the Grace superchips)
    host_arch: str = "x86_64"


#: Host CPU architectures a GPU row may name; gpuprov installs NVIDIA's x86_64 packages only.
HOST_ARCHES = ("x86_64", "aarch64")


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")

#: How the driver branch kinds read in messages (NVIDIA's terms).
BRANCH_KIND_NAMES = {"ltsb": "long-term support branch", "production": "production branch",
                     "feature": "new feature branch"}


@dataclass(frozen=True)
class DriverBranch:
    """A driver branch, its kind (``ltsb``, ``production`` or ``feature``) and the month NVIDIA ends its support
    (``eol``, ``"YYYY-MM"``, or ``None`` where no date is published)."""

    branch: str
    kind: str
    verified: bool
    source: str
    eol: str | None = None

    def ended(self, today: dt.date) -> bool:
        """Whether support ended before ``today``: the branch gets fixes through its end-of-life month."""
        if self.eol is None:
            return False
        year, month = (int(part) for part in self.eol.split("-"))
        return (today.year, today.month) > (year, month)

    def eol_text(self) -> str:
        """``"June 2026"`` (``eol`` as NVIDIA's table writes it), or ``"no published date"``."""
        if self.eol is None:
            return "no published date"
        year, month = self.eol.split("-")
        return f"{_MONTHS[int(month) - 1]} {year}"


@dataclass(frozen=True)
class OsEntry:
    """What NVIDIA's repository carries for one OS and which methods can install Fabric Manager."""

    name: str
    family: str
    cuda_repo_branches: tuple[str, ...]
    cuda_first: str
    cuda_last: str
    distro_branches: tuple[str, ...] | None
    fabric_manager: tuple[str, ...]
    verified: bool
    source: str
