"""The stand-in of NVIDIA's R590+ packages: the unbranched names the collection's rule installs, a pinning
package keeping them on their branch, and no way to hold a branched set beside them."""

from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_package_set, driver_packages

from gpuprov.lab.standin.catalogue import driver_packages as branched_packages
from gpuprov.lab.standin.unbranched import LAB_UNBRANCHED, lab_unbranched_packages, unbranched_driver_packages


def test_the_stand_in_ships_the_names_the_role_installs() -> None:
    specs = {s.name: s for s in unbranched_driver_packages("595", "595.71.05", "-1")}
    wanted = [*driver_package_set("595", "open", fabric_manager=True), driver_packages("595", "open")["pinning"]]
    assert sorted(specs) == sorted(wanted)
    assert {s.version for s in specs.values()} == {"595.71.05-1"}
    assert specs["nvidia-open"].depends == tuple(f"{n} (= 595.71.05-1)" for n in (
        "nvidia-dkms-open", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils"))
    assert "/usr/src/nvidia-595.71.05/dkms.conf" in specs["nvidia-dkms-open"].files


def test_the_pinning_package_keeps_the_unbranched_names_on_its_branch() -> None:
    pinning = {s.name: s for s in unbranched_driver_packages("595", "595.71.05")}["nvidia-driver-pinning-595"]
    (path, content), = pinning.files.items()
    assert path == "/etc/apt/preferences.d/nvidia-driver-pinning-595"
    lines = content.content.splitlines()
    assert "Pin: version 595.*" in lines and "Pin-Priority: 1000" in lines
    assert set(next(line for line in lines if line.startswith("Package: ")).split()[1:]) == set(
        driver_package_set("595", "open", fabric_manager=True))
    assert pinning.conflicts == ("nvidia-driver-pinning",) == pinning.provides


def test_a_branched_set_and_an_unbranched_one_conflict() -> None:
    """Each unbranched name is the virtual name its branched package provides and conflicts with, so apt removes
    one set to install the other (the role purges the other branch first)."""
    branched = {s.name: s for s in branched_packages("580", "580.65.06", "-1", flavours=("-open",))}
    unbranched = {s.name: s for s in unbranched_driver_packages("595", "595.71.05", "-1")}
    for old, new in (("libnvidia-compute-580", "libnvidia-compute"), ("nvidia-utils-580", "nvidia-utils"),
                     ("nvidia-compute-utils-580", "nvidia-compute-utils"),
                     ("nvidia-fabricmanager-580", "nvidia-fabricmanager")):
        assert new in branched[old].conflicts, old
    for old, new in (("nvidia-dkms-580-open", "nvidia-dkms-open"), ("nvidia-driver-580-open", "nvidia-open")):
        assert set(branched[old].conflicts) & set(unbranched[new].provides), old


def test_the_lab_serves_r595_only_where_nvidia_publishes_it() -> None:
    assert lab_unbranched_packages("ubuntu2004") == []
    debian = {s.name: s.version for s in lab_unbranched_packages("debian12")}
    ubuntu = {s.name: s.version for s in lab_unbranched_packages("ubuntu2404")}
    assert debian["nvidia-open"] == f"{LAB_UNBRANCHED['595']}-1"
    assert ubuntu["nvidia-open"] == f"{LAB_UNBRANCHED['595']}-0ubuntu1"
