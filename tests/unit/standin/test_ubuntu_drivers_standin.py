"""The stand-ins method ubuntu-drivers installs from the Ubuntu stand-in archives: ubuntu-drivers-common, the headless
sets, and Canonical's precompiled modules for each of the archive's kernels, whose module reports the driver version."""

from __future__ import annotations

import struct

import pytest

from gpuprov.lab.standin.catalogue import LAB_BRANCHES
from gpuprov.lab.standin.deb import BinaryPackage, spec_of
from gpuprov.lab.standin.ubuntu_archive import archive_for, archive_packages
from gpuprov.lab.standin.ubuntu_drivers import module_object

KERNEL = "6.12.57+deb13-amd64"


def _modinfo(elf: bytes) -> dict[str, str]:
    """The ``.modinfo`` strings of an ELF-64 object, read through its section headers as kmod does."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]
    for name, _kind, _flags, _addr, offset, size, *_ in sections:
        if elf[names_at + name:].split(b"\0", 1)[0] == b".modinfo":
            return dict(item.split("=", 1) for item in elf[offset:offset + size].decode().split("\0") if item)
    raise AssertionError("no .modinfo section")


def test_module_object_carries_its_modinfo() -> None:
    info = {"version": "580.65.06", "name": "nvidia", "vermagic": "6.8.0-87-generic SMP mod_unload "}
    assert _modinfo(module_object(info)) == info


@pytest.mark.parametrize("os_name", ["ubuntu2204", "ubuntu2404"])
def test_every_kernel_has_a_precompiled_module_of_every_server_branch(os_name: str) -> None:
    archive = archive_for(os_name)
    assert archive is not None
    packages = {spec_of(p).name: p for p in archive_packages(os_name, KERNEL)}
    for branch, version in LAB_BRANCHES.items():
        for suffix, directory in (("-server", f"nvidia-{branch}srv"), ("-server-open", f"nvidia-{branch}srv-open")):
            for line in archive.kernels:
                kernel = f"{line.abi}-generic"
                package = packages[f"linux-modules-nvidia-{branch}{suffix}-{kernel}"]
                assert isinstance(package, BinaryPackage)
                [(path, elf)] = package.binaries.items()
                assert path == f"/lib/modules/{kernel}/kernel/{directory}/nvidia.ko"
                assert _modinfo(elf)["version"] == version
                meta = spec_of(packages[f"linux-modules-nvidia-{branch}{suffix}-{line.suffix}"])
                assert meta.depends == (f"{spec_of(package).name} (= {line.version})",)
            no_dkms = spec_of(packages[f"nvidia-headless-no-dkms-{branch}{suffix}"])
            assert not [d for d in no_dkms.depends if "dkms" in d]
            assert f"nvidia-dkms-{branch}{suffix}" in " ".join(spec_of(packages[f"nvidia-headless-{branch}{suffix}"])
                                                                .depends)
    assert "/usr/bin/ubuntu-drivers" in spec_of(packages["ubuntu-drivers-common"]).files


def test_the_20_04_archive_has_no_ubuntu_drivers_stand_ins() -> None:
    names = {spec_of(p).name for p in archive_packages("ubuntu2004", KERNEL)}
    assert not [n for n in names if n.startswith(("linux-modules-nvidia-", "ubuntu-drivers", "nvidia-headless"))]

