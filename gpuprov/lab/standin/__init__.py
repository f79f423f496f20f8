"""Stand-in apt packages and a signed local apt repository for tests.

Tests cannot reach Ubuntu's archive or NVIDIA's repository, so they install tiny packages built here
from declarative specs (:class:`PackageSpec`) with ``dpkg-deb --build``, indexed with
``dpkg-scanpackages`` and signed with a throwaway GPG key made at test time (never committed).
:mod:`gpuprov.lab.standin.catalogue` holds the specs the lab uses: Ubuntu kernel images, headers and metas
for a fake kernel, and ``nvidia-dkms-<branch>`` carrying a tiny real DKMS module.
"""

from __future__ import annotations

from gpuprov.lab.standin.deb import FileSpec, PackageSpec, build_deb
from gpuprov.lab.standin.repo import Repository, build_repository

__all__ = ["FileSpec", "PackageSpec", "Repository", "build_deb", "build_repository"]
