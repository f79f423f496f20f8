"""Method ubuntu-drivers of the nvidia_driver role on a fresh Ubuntu 24.04 stand-in host, with Canonical's precompiled
modules: check reports drift and changes nothing, apply converges through ``ubuntu-drivers install --gpgpu``, the
module is there for every installed kernel without a compiler, the set is pinned and held, a second apply changes
nothing.

One plain ``gpuprov-lab-ubuntu2404`` container (no DKMS image: the method needs no compiler), served the stand-in of
Ubuntu's archive the lab serves that host (``gpuprov.lab.standin.ubuntu_archive``: its GA and HWE kernels, the
``-server`` sets, the stand-in ubuntu-drivers and the precompiled module packages). The Debian kernel the image boots
is removed and the archive's two kernels installed, as on an Ubuntu host. The DKMS fallback is the decision logic's
(tests/unit/roles/test_ubuntu_drivers_plan.py) and DKMS itself method distro's test (test_driver_distro.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpuprov.lab.standin.catalogue import LAB_BRANCHES
from gpuprov.lab.standin.ubuntu_archive import archive_for, archive_packages, server_revision
from gpuprov.lab.standin.ubuntu_drivers import UBUNTU_DRIVERS_LOG
from gpuprov.runner import RunResult
from tests.integration.kernel_lab import SYSTEMD_RUN, LabHost, exec_ok, install_repository, run, wait_booted

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ARCHIVE = archive_for("ubuntu2404")
assert ARCHIVE is not None
KERNELS = tuple(f"{line.abi}-generic" for line in ARCHIVE.kernels)  # 6.8.0-87-generic (GA), 6.14.0-35-generic (HWE)
VERSION = LAB_BRANCHES["580"]
PACKAGE_VERSION = f"{VERSION}{server_revision(ARCHIVE.release)}"
SET = ("nvidia-headless-no-dkms-580-server", "libnvidia-compute-580-server", "nvidia-utils-580-server",
       "nvidia-compute-utils-580-server")
MODULES = tuple(f"linux-modules-nvidia-580-server-{k}" for k in KERNELS)
# What `--check` must leave as it is: dpkg's database and selections, apt's configuration.
SNAPSHOT = "md5sum /var/lib/dpkg/status; apt-mark showhold; find /etc/apt -printf '%p %s\\n' | sort"


class Host(LabHost):
    """The container, the kernel treated as running and a state dir."""

    def play(self, check: bool = False) -> RunResult:
        extravars = {"nvidia_driver_running_kernel": KERNELS[0], "gpuprov_driver_method": "ubuntu-drivers",
                     "gpuprov_driver_branch": "580", "gpuprov_driver_flavour": "proprietary",
                     "nvidia_driver_fabric_manager": "disabled"}
        return run(self.container, "nvidia_driver.yml", self.state, extravars, check=check)



@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[Host]:
    import docker

    tmp = tmp_path_factory.mktemp("ubuntu-drivers")
    container = docker.from_env().containers.run(lab_images["ubuntu2404"],
                                                 name=f"gpuprov-ubuntu-drivers-{uuid.uuid4().hex[:8]}", **SYSTEMD_RUN)
    try:
        wait_booted(container)
        debian_kernel = exec_ok(container, "ls /boot | sed -n 's/^vmlinuz-//p' | sort | tail -n1").split()[-1]
        install_repository(container, list(archive_packages("ubuntu2404", debian_kernel)), tmp / "repo")
        # an Ubuntu host's kernels: the archive's GA and HWE lines, not the Debian kernel the image boots
        exec_ok(container, (
            "export DEBIAN_FRONTEND=noninteractive; apt-get purge -y -qq linux-image-amd64 "
            f"linux-image-{debian_kernel} >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "
            f"linux-image-generic {ARCHIVE.hwe_meta.replace('linux-', 'linux-image-')} >/dev/null 2>&1"))
        yield Host(container, tmp / "state")
    finally:
        container.remove(force=True)


def test_fresh_host_check_apply_and_second_apply(host: Host) -> None:
    assert sorted(host.sh("ls /boot | sed -n 's/^vmlinuz-//p'").split()) == sorted(KERNELS)
    before = host.sh(SNAPSHOT)

    check = host.play(check=True)
    assert check.status == "successful", host.failures(check)
    assert check.hosts[host.name].changed > 0  # drift: nothing installed yet
    assert host.sh(SNAPSHOT) == before
    assert not [n for n in host.versions() if "nvidia" in n]

    first = host.play()
    assert first.status == "successful", host.failures(first)
    installed = host.versions()
    assert {n: installed.get(n) for n in SET} == dict.fromkeys(SET, PACKAGE_VERSION)
    # Canonical's precompiled modules for every installed kernel, no DKMS and no compiler on the host
    for kernel, package in zip(KERNELS, MODULES, strict=True):
        assert package in installed
        assert host.sh(f"modinfo -k {kernel} -F version nvidia").strip() == VERSION
        assert "/kernel/nvidia-580srv/" in host.sh(f"modinfo -k {kernel} -F filename nvidia")
    assert not [n for n in installed if n.startswith("nvidia-dkms-") or n in ("dkms", "gcc", "make", "libc6-dev")]
    # through ubuntu-drivers, with the branch named
    assert "install --gpgpu nvidia:580-server:" in host.sh(f"cat {UBUNTU_DRIVERS_LOG}")
    # pinned and held: the set at its version, each kernel's module package beside it
    assert set(SET) | set(MODULES) <= set(host.sh("apt-mark showhold").split())
    prefs = host.sh("cat /etc/apt/preferences.d/gpuprov-nvidia-driver")
    assert f"Package: {SET[0]}\nPin: version {PACKAGE_VERSION}\nPin-Priority: 1001" in prefs
    host.sh("systemctl is-active nvidia-persistenced")

    again = host.play()
    assert again.status == "successful", host.failures(again)
    assert again.hosts[host.name].changed == 0
