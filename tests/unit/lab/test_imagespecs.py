"""The lab OSes' image specs and the os-release / lsb-release files a stand-in is dressed in (no Docker)."""

from __future__ import annotations

import shlex

import pytest

from gpuprov.lab import hardware
from gpuprov.lab.imagespecs import SPECS, StandIn, lsb_release, os_release, spec_for


def _fields(text: str) -> dict[str, str]:
    """KEY=value lines as os-release(5) defines them (shell quoting), comments skipped."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: shlex.split(value)[0] if value else "" for key, value in pairs}


@pytest.mark.parametrize(("os_name", "suite", "release", "codename"), [
    ("ubuntu2004", "bullseye", "20.04", "focal"),
    ("ubuntu2204", "bookworm", "22.04", "jammy"),
    ("ubuntu2404", "trixie", "24.04", "noble"),
])  # fmt: skip
def test_each_ubuntu_stand_in_is_a_debian_suite_dressed_as_its_release(
    os_name: str, suite: str, release: str, codename: str
) -> None:
    spec = spec_for(os_name)
    assert spec.suite == suite and spec.standin is not None
    fields = _fields(os_release(spec.standin))
    # what Ansible's distribution facts read: Ubuntu, the release, the code name
    assert (fields["ID"], fields["ID_LIKE"], fields["VERSION_ID"], fields["VERSION_CODENAME"]) == (
        "ubuntu", "debian", release, codename)
    assert fields["UBUNTU_CODENAME"] == codename and fields["NAME"] == "Ubuntu"
    assert fields["PRETTY_NAME"].startswith(f"Ubuntu {release}.") and fields["PRETTY_NAME"].endswith(" LTS")
    assert os_release(spec.standin).startswith("# gpuprov lab STAND-IN, not Ubuntu")
    assert _fields(lsb_release(spec.standin)) == {
        "DISTRIB_ID": "Ubuntu", "DISTRIB_RELEASE": release, "DISTRIB_CODENAME": codename,
        "DISTRIB_DESCRIPTION": fields["PRETTY_NAME"]}
    # the label and /etc/gpuprov-standin say what it really is
    assert f"Ubuntu {release} ({codename})" in spec.standin_note and f"({suite})" in spec.standin_note


@pytest.mark.parametrize("os_name", [name for name, spec in SPECS.items() if spec.standin])
def test_a_stand_ins_glibc_is_no_older_than_its_releases(os_name: str) -> None:
    """Binaries built for the Ubuntu release (NVIDIA's, the toolkits') need at least its glibc."""
    standin = spec_for(os_name).standin
    assert standin is not None
    mine, theirs = (tuple(int(part) for part in v.split(".")) for v in standin.glibc)
    assert mine >= theirs


def test_apt_sources_are_where_each_release_keeps_them() -> None:
    files = {name: (spec.sources_format, spec.sources_file) for name, spec in SPECS.items()}
    assert files == {
        "debian12": ("deb822", "/etc/apt/sources.list.d/debian.sources"),
        "ubuntu2004": ("one-line", "/etc/apt/sources.list"),
        "ubuntu2204": ("one-line", "/etc/apt/sources.list"),
        "ubuntu2404": ("deb822", "/etc/apt/sources.list.d/ubuntu.sources"),
    }
    assert SPECS["ubuntu2404"].components == ("main", "contrib", "non-free", "non-free-firmware")


def test_debian12_is_no_stand_in() -> None:
    assert SPECS["debian12"].standin is None and SPECS["debian12"].standin_note == ""


def test_every_lab_os_has_an_nvidia_smi_its_glibc_runs() -> None:
    assert set(hardware.NVIDIA_SMI_FOR_OS) == set(SPECS)


def test_the_note_names_both_glibcs() -> None:
    note = StandIn("24.04", "24.04.3", "noble", "Noble Numbat", "Debian 13 (trixie)", ("2.41", "2.39")).note
    assert note.startswith("gpuprov lab stand-in for Ubuntu 24.04 (noble): this is a Debian 13 (trixie) userland")
    assert "(glibc 2.41; noble has 2.39)" in note
