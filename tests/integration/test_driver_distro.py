"""Method distro of the nvidia_driver role: Debian 12's own non-free driver packages, and Ubuntu's -server set.

One debian12 lab container (systemd, dkms, gcc, make, its kernel's headers) whose apt sources are reset to
what the Debian 12 installer writes (main and non-free-firmware), pointed at this machine's Debian mirror
(``gpuprov.lab.mirrors.read_mirrors``; the role's ``nvidia_driver_distro_repo_url``). The check-mode tests
resolve against the real Debian archive and assert the plan and that the host is untouched; the real install
(Debian's nvidia-kernel-dkms builds the real module, minutes) runs only with GPUPROV_REAL_ARCHIVE=1.
The Ubuntu path runs on the ubuntu2004 stand-in with a signed stand-in of the archive's
nvidia-driver-535-server set (``gpuprov.lab.standin.catalogue.driver_packages``) as its enabled source.
Outcomes come from the run's stats and events and from the host (dpkg, apt-mark, apt's files).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprov.lab.mirrors import read_mirrors
from gpuprov.lab.standin.catalogue import driver_packages
from gpuprov.runner import RunResult
from tests.integration.kernel_lab import LabHost, dkms_container, exec_ok, install_repository, run, task_results

pytestmark = [pytest.mark.lab, pytest.mark.slow]

#: nvidia-graphics-drivers in bookworm non-free (Debian 12.12 onwards); every package of the set shares it.
DEBIAN_VERSION = "535.261.03-1"
SET = ("nvidia-driver", "nvidia-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1")
SOURCE = "/etc/apt/sources.list.d/gpuprov-nvidia-distro.sources"
PLAN_TASK = "distro | Report the plan check mode resolved against the archive"
# What `--check` must leave as it is: apt's configuration and lists, dpkg's database and selections.
SNAPSHOT = ("find /etc/apt /var/lib/apt/lists /etc/dkms -printf '%p %s %T@\\n' 2>/dev/null | sort; "
            "md5sum /var/lib/dpkg/status; apt-mark showhold")


class Host(LabHost):
    """The shared container, its kernel, the mirror and a state dir."""

    def __init__(self, container: Any, kernel: str, mirror: str, state: Path) -> None:
        super().__init__(container, state)
        self.kernel, self.mirror = kernel, mirror

    def play(self, check: bool = False, **extra: Any) -> RunResult:
        # nvidia_driver_distro_repo_url left at its default: the archive the container's own sources name (the
        # machine's mirror)
        extravars = {"nvidia_driver_running_kernel": self.kernel, "gpuprov_driver_method": "distro",
                     "gpuprov_driver_branch": "535", **extra}
        return run(self.container, "nvidia_driver.yml", self.state, extravars, check=check)



@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("distro")
    mirror = read_mirrors().debian
    with dkms_container(lab_images["debian12"], "distro") as (container, kernel):
        # the Debian 12 installer's sources: main and non-free-firmware of the archive, no contrib or non-free
        exec_ok(container, (
            f"rm -f /etc/apt/sources.list.d/*.list && printf 'Types: deb\\nURIs: {mirror}\\n"
            "Suites: bookworm bookworm-updates\\nComponents: main non-free-firmware\\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' > /etc/apt/sources.list.d/debian.sources"
            " && apt-get update -qq"))
        yield Host(container, kernel, mirror, tmp / "state")


def _plan(result: RunResult) -> str:
    messages = [str(r.get("msg", "")) for r in task_results(result, PLAN_TASK)]
    assert len(messages) == 1, messages
    return messages[0]


def test_check_mode_plans_debian_535_set_and_leaves_the_host_untouched(host: Host) -> None:
    before = host.sh(SNAPSHOT)
    assert not [n for n in host.versions() if "nvidia" in n or n == "libcuda1"]
    result = host.play(check=True)
    assert result.status == "successful", host.failures(result)
    assert result.hosts[host.name].changed > 0
    plan = _plan(result)
    # the set, each at Debian's exact version, and what apt resolved against the archive for it
    for name in SET:
        assert f"{name}={DEBIAN_VERSION}" in plan, plan
        assert f"{name} {DEBIAN_VERSION}" in plan.split("apt plans:")[1], plan
    assert "nvidia-persistenced" in plan
    # only the components the host's sources lack, in the role's own file
    assert f"Would add contrib, non-free of {host.mirror} ({SOURCE}," in plan, plan
    # untouched: no source file, same apt lists and configuration, no package, no hold
    assert host.sh(SNAPSHOT) == before
    host.sh(f"test ! -e {SOURCE}")
    assert not [n for n in host.versions() if "nvidia" in n or n == "libcuda1"]
    assert host.sh("apt-mark showhold").strip() == ""


def test_check_mode_open_flavour_maps_to_debian_open_kernel_dkms(host: Host) -> None:
    result = host.play(check=True, gpuprov_driver_flavour="open")
    assert result.status == "successful", host.failures(result)
    plan = _plan(result)
    assert f"nvidia-open-kernel-dkms={DEBIAN_VERSION}" in plan and "nvidia-kernel-dkms=" not in plan, plan


def test_branch_debian_does_not_ship_fails_naming_branch_and_debian_version(host: Host) -> None:
    before = host.sh(SNAPSHOT)
    result = host.play(gpuprov_driver_branch="550")
    assert result.failed_hosts == [host.name]
    message = host.failures(result)
    assert "driver.branch 550" in message and DEBIAN_VERSION in message and "Nothing was changed" in message, message
    assert host.sh(SNAPSHOT) == before


def test_fabric_manager_host_is_refused_debian_packages_none(host: Host) -> None:
    result = host.play(gpuprov_gpus_nvswitch="true")
    assert result.failed_hosts == [host.name]
    assert "does not package it" in host.failures(result)
    host.sh(f"test ! -e {SOURCE}")


@pytest.mark.skipif(os.environ.get("GPUPROV_REAL_ARCHIVE") != "1",
                    reason="installs Debian's real driver set and builds its DKMS module (several minutes, "
                           "downloads ~400 MB from the Debian mirror); set GPUPROV_REAL_ARCHIVE=1 to run it")
def test_real_install_converges_holds_debian_set_and_second_run_changes_nothing(host: Host) -> None:
    # no GPU in a container: nvidia-persistenced cannot start there
    first = host.play(nvidia_driver_persistenced="false")
    assert first.status == "successful", host.failures(first)
    assert first.hosts[host.name].changed > 0
    installed = host.versions()
    assert {n: installed.get(n) for n in SET} == dict.fromkeys(SET, DEBIAN_VERSION)
    assert set(SET) <= set(host.sh("apt-mark showhold").split())
    source = host.sh(f"cat {SOURCE}")
    assert f"URIs: {host.mirror}/" in source and "Components: contrib non-free\n" in source, source
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in source
    for name in SET:
        policy = host.sh(f"apt-cache policy {name}")
        assert f"*** {DEBIAN_VERSION} 1001" in policy, policy  # installed and pinned
    assert "nvidia-current" in host.sh("dkms status")
    again = host.play(nvidia_driver_persistenced="false")
    assert again.status == "successful", host.failures(again)
    assert again.hosts[host.name].changed == 0


UBUNTU_VERSION = "535.183.01-0ubuntu0.20.04.1"
UBUNTU_SET = ("nvidia-driver-535-server", "nvidia-dkms-535-server", "libnvidia-compute-535-server",
              "nvidia-utils-535-server", "nvidia-compute-utils-535-server")


@pytest.fixture(scope="module")
def ubuntu(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("distro-ubuntu")
    specs = driver_packages("535", "535.183.01", "-0ubuntu0.20.04.1", flavours=("-server",))
    with dkms_container(lab_images["ubuntu2004"], "distro-ubuntu") as (container, kernel):
        # the stand-in of the archive's -server builds, enabled the way Ubuntu enables restricted
        install_repository(container, specs, tmp / "repo")
        yield Host(container, kernel, "", tmp / "state")


def test_ubuntu_check_mode_plans_server_set_and_leaves_the_host_untouched(ubuntu: Host) -> None:
    before = ubuntu.sh(SNAPSHOT)
    result = ubuntu.play(check=True, gpuprov_driver_branch="535")
    assert result.status == "successful", ubuntu.failures(result)
    plan = _plan(result)
    for name in UBUNTU_SET:
        assert f"{name}={UBUNTU_VERSION}" in plan and f"{name} {UBUNTU_VERSION}" in plan, plan
    assert "Would add" not in plan  # Ubuntu's sources are the host's own
    assert ubuntu.sh(SNAPSHOT) == before
    assert not [n for n in ubuntu.versions() if "nvidia" in n]


def test_ubuntu_branch_auto_is_refused_naming_driver_branch(ubuntu: Host) -> None:
    result = ubuntu.play(gpuprov_driver_branch="auto")
    assert result.failed_hosts == [ubuntu.name]
    assert "driver.branch auto" in ubuntu.failures(result)


@pytest.mark.skipif(os.environ.get("GPUPROV_DISTRO_CONVERGE") != "1",
                    reason="converges the stand-in -server set twice with a DKMS build (about 5 minutes on a "
                           "loaded 2-core machine); set GPUPROV_DISTRO_CONVERGE=1 to run it")
def test_ubuntu_converges_server_set_held_and_second_run_changes_nothing(ubuntu: Host) -> None:
    first = ubuntu.play(gpuprov_driver_branch="535")
    assert first.status == "successful", ubuntu.failures(first)
    installed = ubuntu.versions()
    assert {n: installed.get(n) for n in UBUNTU_SET} == dict.fromkeys(UBUNTU_SET, UBUNTU_VERSION)
    assert set(UBUNTU_SET) <= set(ubuntu.sh("apt-mark showhold").split())
    ubuntu.sh(f"modinfo -k {ubuntu.kernel} -F version nvidia | grep -qx 535.183.01")
    ubuntu.sh("systemctl is-active nvidia-persistenced")
    ubuntu.sh(f"test ! -e {SOURCE}")
    again = ubuntu.play(gpuprov_driver_branch="535")
    assert again.status == "successful", ubuntu.failures(again)
    assert again.hosts[ubuntu.name].changed == 0
