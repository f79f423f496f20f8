"""The nvidia_driver_packages filter: the role's package names come from the collection's one rule, and a
branch or flavour the rule does not know fails instead of naming packages that do not exist."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.nvidia_driver import FilterModule
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_packages, installed_forms

FILTER = FilterModule().filters()["nvidia_driver_packages"]


@pytest.mark.parametrize("flavour", ["proprietary", "open", "server", "auto"])
def test_names_are_the_rules(flavour: str) -> None:
    assert FILTER("580", flavour) == driver_packages("580", flavour)


def test_server_takes_the_server_userland() -> None:
    assert FILTER("570", "server") == {
        "meta": "nvidia-driver-570-server", "dkms": "nvidia-dkms-570-server",
        "userland": ["libnvidia-compute-570-server", "nvidia-utils-570-server", "nvidia-compute-utils-570-server"],
        "fabric_manager": "nvidia-fabricmanager-570", "precompiled_prefix": None, "pinning": None}


@pytest.mark.parametrize(("flavour", "kernel"), [("proprietary", "-server"), ("server", "-server"),
                                                 ("auto", "-server"), ("open", "-server-open")])
def test_ubuntu_archive_names_are_its_server_builds(flavour: str, kernel: str) -> None:
    """Method distro on Ubuntu installs the archive's -server builds: every flavour's userland is -server, the
    kernel parts -server-open for open; the archive packages no Fabric Manager at the driver's version."""
    names = FILTER("535", flavour, source="ubuntu")
    assert names == {
        "meta": f"nvidia-driver-535{kernel}", "dkms": f"nvidia-dkms-535{kernel}",
        "userland": ["libnvidia-compute-535-server", "nvidia-utils-535-server", "nvidia-compute-utils-535-server"],
        "fabric_manager": None, "precompiled_prefix": f"linux-modules-nvidia-535{kernel}-", "pinning": None}


@pytest.mark.parametrize(("flavour", "kernel"), [("proprietary", "nvidia-kernel-dkms"),
                                                 ("open", "nvidia-open-kernel-dkms")])
def test_debian_names_carry_no_branch(flavour: str, kernel: str) -> None:
    for branch in ("535", "", None):
        names = FILTER(branch, flavour, source="debian")
        assert (names["meta"], names["dkms"], names["fabric_manager"]) == ("nvidia-driver", kernel, None)
        assert "libnvidia-ml1" in names["userland"] and "nvidia-smi" in names["userland"]


def test_installed_forms_are_every_sources_names() -> None:
    """The drift report's reading of a host: each name the role installs, from every source, is a form of the
    branch, and no other branch's."""
    forms = installed_forms("580", None)
    for source in ("nvidia", "ubuntu"):
        for flavour in ("proprietary", "open", "server"):
            names = FILTER("580", flavour, source=source)
            assert names["meta"] in forms["meta"] and names["dkms"] in forms["kernel"]
    assert forms["kernel_prefixes"] == ("linux-modules-nvidia-580-server-", "linux-modules-nvidia-580-server-open-")
    assert forms["unbranched_meta"] == ("nvidia-driver",)
    assert set(forms["unbranched_kernel"]) == {"nvidia-kernel-dkms", "nvidia-open-kernel-dkms"}
    assert not any("570" in name for part in forms.values() for name in part)
    server = installed_forms("580", "server")
    assert server["meta"] == ("nvidia-driver-580-server", "nvidia-headless-580-server",
                              "nvidia-headless-no-dkms-580-server") and server["unbranched_kernel"] == ()


@pytest.mark.parametrize(("branch", "flavour", "message"), [
    ("", "open", "branch '' is not a driver branch"),
    (None, "open", "branch None is not a driver branch"),
    ("580", "Open", "flavour 'Open' is not one of proprietary, open, server, auto"),
    ("580", None, "flavour None is not one of"),
])
def test_an_unknown_branch_or_flavour_fails(branch: str, flavour: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        FILTER(branch, flavour)


def test_an_unknown_source_fails() -> None:
    with pytest.raises(AnsibleFilterError, match="source 'redhat' is not one of nvidia, ubuntu, debian"):
        FILTER("580", "open", source="redhat")


@pytest.mark.parametrize(("flavour", "meta", "dkms"), [("open", "nvidia-open", "nvidia-dkms-open"),
                                                       ("proprietary", "cuda-drivers", "nvidia-dkms"),
                                                       ("auto", "cuda-drivers", "nvidia-dkms")])
@pytest.mark.parametrize("branch", ["590", "595", "610", "620"])
def test_nvidia_names_from_590_carry_no_branch(branch: str, flavour: str, meta: str, dkms: str) -> None:
    """From R590 NVIDIA's repository drops the branch from the names and chooses it by its pinning package."""
    assert FILTER(branch, flavour) == {
        "meta": meta, "dkms": dkms, "userland": ["libnvidia-compute", "nvidia-utils", "nvidia-compute-utils"],
        "fabric_manager": "nvidia-fabricmanager", "precompiled_prefix": None,
        "pinning": f"nvidia-driver-pinning-{branch}"}


@pytest.mark.parametrize(("flavour", "meta", "dkms"), [("open", "nvidia-driver-580-open", "nvidia-dkms-580-open"),
                                                       ("proprietary", "nvidia-driver-580", "nvidia-dkms-580")])
def test_nvidia_names_of_580_keep_the_branch(flavour: str, meta: str, dkms: str) -> None:
    names = FILTER("580", flavour)
    assert (names["meta"], names["dkms"], names["pinning"]) == (meta, dkms, None)
    assert names["userland"] == ["libnvidia-compute-580", "nvidia-utils-580", "nvidia-compute-utils-580"]
    assert names["fabric_manager"] == "nvidia-fabricmanager-580"


def test_ubuntu_archive_keeps_the_branch_from_590() -> None:
    """Ubuntu's own archive (method distro) keeps branched names for the new branches."""
    names = FILTER("595", "open", source="ubuntu")
    assert (names["meta"], names["dkms"], names["pinning"]) == (
        "nvidia-driver-595-server-open", "nvidia-dkms-595-server-open", None)
    assert names["precompiled_prefix"] == "linux-modules-nvidia-595-server-open-"


def test_nvidia_packages_no_server_flavour_from_590() -> None:
    with pytest.raises(AnsibleFilterError, match="packages no server flavour of driver branch 595"):
        FILTER("595", "server")


def test_installed_forms_from_590_are_read_by_version() -> None:
    """A host on R595 from NVIDIA's repository carries unbranched names (read at a 595.* version); Ubuntu's
    archive's names keep the branch, and the server flavour is Ubuntu's only."""
    forms = installed_forms("595", None)
    assert set(forms["unbranched_meta"]) == {"nvidia-open", "cuda-drivers", "nvidia-driver"}
    assert set(forms["unbranched_kernel"]) == {"nvidia-dkms-open", "nvidia-dkms", "nvidia-kernel-dkms",
                                               "nvidia-open-kernel-dkms"}
    assert set(forms["meta"]) == {f"nvidia-{part}-595{suffix}" for suffix in ("-server", "-server-open")
                                  for part in ("driver", "headless", "headless-no-dkms")}
    opened = installed_forms("595", "open")
    assert set(opened["unbranched_meta"]) == {"nvidia-open", "nvidia-driver"}
    assert "nvidia-dkms-open" in opened["unbranched_kernel"] and "nvidia-dkms" not in opened["unbranched_kernel"]
    assert installed_forms("595", "server")["unbranched_meta"] == ()
