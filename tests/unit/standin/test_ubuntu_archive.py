"""The stand-in Ubuntu archives each Ubuntu stand-in lab host is served, and the apt source naming them."""

from __future__ import annotations

import pytest
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_packages as nvidia_names

from gpuprov.exceptions import ConfigError
from gpuprov.lab.imagespecs import SPECS
from gpuprov.lab.repo import archive_source
from gpuprov.lab.standin.catalogue import LAB_BRANCHES
from gpuprov.lab.standin.deb import spec_of
from gpuprov.lab.standin.ubuntu_archive import archive_for, archive_packages

KERNEL = "6.12.57+deb13-amd64"


def _by_name(os_name: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {spec_of(p).name: (spec_of(p).version, spec_of(p).depends) for p in archive_packages(os_name, KERNEL)}


def test_every_ubuntu_stand_in_has_an_archive_and_debian12_none() -> None:
    assert {name for name, spec in SPECS.items() if spec.standin} == {
        name for name in SPECS if archive_for(name) is not None}
    with pytest.raises(ConfigError, match="not an Ubuntu stand-in"):
        archive_packages("debian12", KERNEL)


@pytest.mark.parametrize(("os_name", "ga", "hwe"), [
    ("ubuntu2204", "5.15.0-160-generic", "6.8.0-87-generic"),
    ("ubuntu2404", "6.8.0-87-generic", "6.14.0-35-generic"),
])  # fmt: skip
def test_ga_and_hwe_kernel_lines_as_ubuntu_ships_them(os_name: str, ga: str, hwe: str) -> None:
    packages = _by_name(os_name)
    release = SPECS[os_name].standin.release  # type: ignore[union-attr]
    meta = f"linux-generic-hwe-{release}"
    assert packages[meta][1] == (f"linux-image-generic-hwe-{release}", f"linux-headers-generic-hwe-{release}")
    assert packages[f"linux-image-generic-hwe-{release}"][1] == (f"linux-image-{hwe}",)
    assert packages["linux-image-generic"][1] == (f"linux-image-{ga}",)
    assert packages[meta][0].endswith(f"~{release}.1")  # an HWE meta's version names its release
    # the headers are real: they link to the host's Debian headers and pull their package
    assert packages[f"linux-headers-{hwe}"][1] == (f"linux-headers-{KERNEL}",)


@pytest.mark.parametrize("os_name", ["ubuntu2204", "ubuntu2404"])
def test_server_driver_sets_by_the_names_method_distro_installs(os_name: str) -> None:
    packages = _by_name(os_name)
    release = SPECS[os_name].standin.release  # type: ignore[union-attr]
    for branch, version in LAB_BRANCHES.items():
        for flavour in ("server", "open"):
            names = nvidia_names(branch, flavour, source="ubuntu")
            for name in (names["meta"], names["dkms"], *names["userland"]):
                assert packages[name][0] == f"{version}-0ubuntu0.{release}.1", name
    # not in Ubuntu's archive at the driver's version
    assert not [n for n in packages if n.startswith(("nvidia-fabricmanager-", "cuda-drivers"))]


def test_the_20_04_archive_keeps_its_hwe_line_only() -> None:
    assert sorted(_by_name("ubuntu2004")) == sorted([
        "linux-generic-hwe-20.04", "linux-image-generic-hwe-20.04", "linux-headers-generic-hwe-20.04",
        "linux-image-5.15.0-105-generic", "linux-headers-5.15.0-105-generic"])


def test_the_archive_source_names_the_stand_in_and_its_repository() -> None:
    source = archive_source("ubuntu2404")
    assert source.startswith("# gpuprov lab: stand-in for the Ubuntu 24.04 archive (this host is Debian 13 (trixie)")
    assert "URIs: http://127.0.0.1:8471/ubuntu2404-archive/\n" in source
    with pytest.raises(ConfigError, match="debian12 is not an Ubuntu stand-in"):
        archive_source("debian12")
