"""The ubuntu_drivers_plan filter: method ubuntu-drivers takes Canonical's precompiled modules only when the archive
has them for every installed kernel, DKMS otherwise, and names what is pinned and held at which version."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.nvidia_driver import FilterModule

PLAN = FilterModule().filters()["ubuntu_drivers_plan"]
GA, HWE = "6.8.0-87-generic", "6.14.0-35-generic"
METAS = ["linux-image-generic", "linux-image-generic-hwe-24.04"]
USERLAND = ["libnvidia-compute-580-server", "nvidia-utils-580-server", "nvidia-compute-utils-580-server"]


def _archive(kernel_suffix: str, *kernels: str) -> list[str]:
    """What an archive offers: the precompiled module of each of ``kernels`` and the metas of both flavours."""
    prefix = f"linux-modules-nvidia-580{kernel_suffix}-"
    return [prefix + k for k in kernels] + [prefix + "generic", prefix + "generic-hwe-24.04", "nvidia-dkms-580-server"]


def test_every_kernel_precompiled_takes_the_signed_modules_and_no_dkms() -> None:
    plan = PLAN("580", "server", [GA, HWE], METAS, _archive("-server", GA, HWE))
    assert plan == {
        "driver": "nvidia:580-server", "precompiled": True, "meta": "nvidia-headless-no-dkms-580-server",
        "set": ["nvidia-headless-no-dkms-580-server", *USERLAND],
        "kernel_packages": [f"linux-modules-nvidia-580-server-{HWE}", f"linux-modules-nvidia-580-server-{GA}"],
        "module_metas": ["linux-modules-nvidia-580-server-generic",
                         "linux-modules-nvidia-580-server-generic-hwe-24.04"],
        "missing": []}


def test_one_kernel_without_a_precompiled_build_falls_back_to_dkms_naming_it() -> None:
    plan = PLAN("580", "server", [GA, HWE, "6.12.57+deb13-amd64"], [*METAS, "linux-image-amd64"],
                _archive("-server", GA, HWE))
    assert plan["precompiled"] is False
    assert plan["missing"] == ["6.12.57+deb13-amd64"]
    assert plan["meta"] == "nvidia-headless-580-server"
    assert plan["set"] == ["nvidia-headless-580-server", "nvidia-dkms-580-server", *USERLAND]
    assert plan["kernel_packages"] == [] and plan["module_metas"] == []


def test_open_flavour_takes_the_server_open_kernel_parts_and_server_userland() -> None:
    plan = PLAN("535", "open", [GA], ["linux-image-generic"], [f"linux-modules-nvidia-535-server-open-{GA}"])
    assert plan["driver"] == "nvidia:535-server-open"
    assert plan["set"] == ["nvidia-headless-no-dkms-535-server-open", "libnvidia-compute-535-server",
                           "nvidia-utils-535-server", "nvidia-compute-utils-535-server"]
    assert plan["kernel_packages"] == [f"linux-modules-nvidia-535-server-open-{GA}"]
    # the archive offers no module meta for generic here: none is asked for
    assert plan["module_metas"] == []


def test_the_proprietary_modules_do_not_count_for_the_open_flavour() -> None:
    plan = PLAN("580", "open", [GA], ["linux-image-generic"], _archive("-server", GA))
    assert plan["precompiled"] is False and plan["missing"] == [GA]
    assert plan["set"][:2] == ["nvidia-headless-580-server-open", "nvidia-dkms-580-server-open"]


def test_no_kernel_known_means_dkms() -> None:
    plan = PLAN("580", "server", [], [], _archive("-server", GA))
    assert plan["precompiled"] is False and plan["kernel_packages"] == []


@pytest.mark.parametrize(("branch", "flavour"), [("", "server"), ("580", "turbo")])
def test_bad_branch_or_flavour_fails_like_the_package_names(branch: str, flavour: str) -> None:
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_packages"):
        PLAN(branch, flavour, [GA], METAS, [])


def test_another_branchs_precompiled_modules_are_a_branch_change() -> None:
    """Moving a precompiled host from 535 to 580: the old branch's per-kernel modules and their metas are foreign
    (the kernel would have two nvidia modules), the new branch's and another kernel's of the same branch are not."""
    foreign = FilterModule().filters()["nvidia_driver_foreign"]
    installed = [f"linux-modules-nvidia-535-server-{GA}", "linux-modules-nvidia-535-server-generic",
                 f"linux-objects-nvidia-535-server-{GA}", f"linux-modules-nvidia-580-server-{GA}",
                 f"linux-modules-nvidia-580-server-{HWE}", "linux-modules-nvidia-580-server-open-generic",
                 "nvidia-headless-no-dkms-535-server", "nvidia-headless-no-dkms-580-server", f"linux-image-{GA}"]
    assert foreign(installed, "580", "server", "ubuntu") == [
        f"linux-modules-nvidia-535-server-{GA}", "linux-modules-nvidia-535-server-generic",
        "linux-modules-nvidia-580-server-open-generic", f"linux-objects-nvidia-535-server-{GA}",
        "nvidia-headless-no-dkms-535-server"]
