"""Acceptance: a newer kernel gets its nvidia module from the driver role; a re-run changes nothing.

A debian12 lab container gets dkms, gcc, make and the real headers of its kernel. The driver role
installs the stand-in nvidia-dkms-535 (a tiny real DKMS module) from a signed local repository, and DKMS
really compiles it. Then a newer kernel is installed (stand-in linux-image/linux-headers-6.1.0-99-amd64
whose /lib/modules/<k>/build points at the real headers, and which, like a kernel installed while DKMS
hooks are broken, leaves no module behind): it becomes the default boot kernel, so the next reboot would
lose the GPUs. The role must build the module for it; a second run reports changed=0 in the stats. Every run
leaves the pending reboot for the admin (the recap's "needs" and ``--json``), naming the kernel the next boot
starts and that its module is built.
With kernel.hold (nvidia_driver_kernel_hold) the first run holds the kernel meta linux-image-amd64 and records it;
the admin lifts the hold and upgrades the meta to a version that brings the new kernel; the second run builds the
module and holds the meta again; a run with the hold off releases gpuprov's hold and removes its record.
A container shares the host kernel: loading the module and booting the new kernel are out of reach.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprov.lab.standin.catalogue import driver_packages, kernel_headers, kernel_image, meta
from gpuprov.recap import summary
from tests.integration.kernel_lab import dkms_container, exec_ok, install_repository, run, task_results

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NEW = "6.1.0-99-amd64"
BUILD_TASK = "dkms_build | Build the DKMS modules for each kernel that lacks them"
RECORD = "/var/lib/gpuprov/kernel-hold.json"
SELECTION = "dpkg-query -W -f '${db:Status-Abbrev}' linux-image-amd64"


def test_new_kernel_gets_its_module(tmp_path: Path, lab_images: dict[str, str]) -> None:
    with dkms_container(lab_images["debian12"], "upgrade") as (container, kernel):
        host = container.name
        specs = [*driver_packages("535", "535.183.01", flavours=("",)), kernel_image(NEW, "6.1.999-1"),
                 kernel_headers(NEW, "6.1.999-1", f"/usr/src/linux-headers-{kernel}"),
                 meta("linux-image-amd64", "6.1.999-1", (f"linux-image-{NEW}",))]
        repo_vars = install_repository(container, specs, tmp_path / "repo")
        extravars = {"nvidia_driver_branch": "535", "nvidia_driver_running_kernel": kernel,
                     "nvidia_driver_kernel_hold": True, **repo_vars}

        first = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert first.status == "successful", first.hosts[host].failures
        exec_ok(container, f"test -f /lib/modules/{kernel}/updates/dkms/nvidia.ko")
        assert exec_ok(container, SELECTION).startswith("hi")
        assert json.loads(exec_ok(container, f"cat {RECORD}")) == {"held": ["linux-image-amd64"]}

        # the admin's upgrade: the hold lifted, the kernel meta upgraded to one that brings a newer kernel, and its
        # headers; no module built for it
        exec_ok(container, f"apt-mark unhold linux-image-amd64 >/dev/null && DEBIAN_FRONTEND=noninteractive "
                           f"apt-get install -y -qq linux-image-amd64 linux-headers-{NEW} >/dev/null")
        exec_ok(container, f"test -e /boot/vmlinuz-{NEW} && {SELECTION} | grep -q '^ii'")
        exec_ok(container, f"test ! -e /lib/modules/{NEW}/updates/dkms/nvidia.ko")

        second = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert second.status == "successful", second.hosts[host].failures
        assert second.hosts[host].changed > 0
        (need,) = second.hosts[host].needs
        assert (need["kind"], need["role"], need["subject"], need["module_built"]) == (
            "reboot", "nvidia_driver", NEW, True), need
        assert f"reboot into kernel {NEW} (running {kernel})" in need["detail"], need
        assert summary(second, fleet=Path("f"), playbook="nvidia_driver", check=False,
                       exit_code=0)["hosts"][host]["needs"] == [need]
        built = [r for r in task_results(second, BUILD_TASK) if r.get("changed") and "cmd" in r]
        assert [r["cmd"][-1] for r in built] == [NEW], built
        exec_ok(container, f"modinfo -k {NEW} -F filename nvidia | grep -q /updates/dkms/nvidia.ko")
        assert f"nvidia/535.183.01, {NEW}, x86_64: installed" in exec_ok(container, "dkms status")
        # held, so an apt upgrade cannot move the driver
        assert "hold" in exec_ok(container, "dpkg --get-selections nvidia-dkms-535")
        # and the kernel meta held again, once the new kernel has its module
        assert exec_ok(container, SELECTION).startswith("hi")

        third = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert third.status == "successful"
        assert third.hosts[host].changed == 0
        assert third.hosts[host].needs == [need]  # still pending: nothing rebooted

        # kernel.hold off: gpuprov's own hold is released and its record removed
        released = run(container, "nvidia_driver.yml", tmp_path / "state",
                       {**extravars, "nvidia_driver_kernel_hold": False})
        assert released.status == "successful", released.hosts[host].failures
        assert exec_ok(container, SELECTION).startswith("ii")
        exec_ok(container, f"test ! -e {RECORD}")
