"""In the lab: headers for a different kernel than the running one, and no module for it.

A debian12 lab container (dkms, gcc, make and real headers for its Debian kernel) gets Ubuntu-named
stand-in packages from a signed local repository: linux-image-5.15.0-105-generic (the "running" kernel,
given to the role through nvidia_driver_running_kernel because a container runs the host's kernel), a
headers-only meta linux-headers-generic-hwe-20.04 that pulled linux-headers-5.15.0-119-generic for a
kernel whose image is not installed, and nvidia-dkms-535 whose postinst built the module for every kernel
with headers - not for 5.15.0-105-generic. Stand-in headers link to the real Debian headers so DKMS
really compiles. Outcomes come from ansible-runner stats and events. Loading the module is out of reach.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.lab.standin.catalogue import driver_packages, kernel_headers, kernel_image, meta
from tests.integration.kernel_lab import dkms_container, exec_ok, install_repository, run

pytestmark = [pytest.mark.lab, pytest.mark.slow]

RUNNING = "5.15.0-105-generic"
AHEAD = "5.15.0-119-generic"
VERSION = "5.15.0.119.129~20.04.1"


def _specs(real_headers: str, with_running_headers: bool) -> list:  # type: ignore[type-arg]
    specs = [
        *driver_packages("535", "535.183.01", flavours=("",)),
        kernel_image(RUNNING, "5.15.0.105.112~20.04.1"),
        kernel_headers(AHEAD, VERSION, real_headers),
        meta("linux-headers-generic-hwe-20.04", VERSION, (f"linux-headers-{AHEAD}",)),
    ]
    if with_running_headers:
        specs.append(kernel_headers(RUNNING, "5.15.0.105.112~20.04.1", real_headers))
    return specs


def _failures(result: object, host: str) -> str:
    return " ".join(f["msg"] for f in result.hosts[host].failures)  # type: ignore[attr-defined]


def test_headers_for_the_running_kernel_are_installed(tmp_path: Path, lab_images: dict[str, str]) -> None:
    with dkms_container(lab_images["debian12"], "kernel-headers") as (container, kernel):
        host = container.name
        real = f"/usr/src/linux-headers-{kernel}"
        repo_vars = install_repository(container, _specs(real, with_running_headers=False), tmp_path / "repo1")
        exec_ok(container, "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                           f"linux-image-{RUNNING} linux-headers-generic-hwe-20.04 nvidia-dkms-535 >/dev/null")
        exec_ok(container, f"dkms install nvidia/535.183.01 -k {AHEAD} >/dev/null")
        status = exec_ok(container, "dkms status")
        assert f"{AHEAD}, x86_64: installed" in status
        assert RUNNING not in status
        extravars = {"nvidia_driver_branch": "535", "nvidia_driver_running_kernel": RUNNING, **repo_vars}

        # the headers package is not available: check and apply fail, naming kernel and package
        check = run(container, "nvidia_driver.yml", tmp_path / "state", extravars, check=True)
        assert check.failed_hosts == [host]
        apply = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert apply.failed_hosts == [host]
        for result in (check, apply):
            message = _failures(result, host)
            assert RUNNING in message
            assert f"linux-headers-{RUNNING}" in message
            assert AHEAD in message  # "installed headers are for ..."
        exec_ok(container, f"test ! -e /lib/modules/{RUNNING}/updates/dkms/nvidia.ko")

        # the archive carries the headers now: check reports drift without writing, apply repairs
        assert install_repository(container, _specs(real, with_running_headers=True), tmp_path / "repo2") == repo_vars
        check = run(container, "nvidia_driver.yml", tmp_path / "state", extravars, check=True)
        assert check.status == "successful", _failures(check, host)
        assert check.hosts[host].changed > 0
        exec_ok(container, f"test ! -e /usr/src/linux-headers-{RUNNING}")

        apply = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert apply.status == "successful", _failures(apply, host)
        assert apply.hosts[host].changed > 0
        exec_ok(container, f"dpkg -s linux-headers-{RUNNING} >/dev/null")
        exec_ok(container, f"modinfo -k {RUNNING} -F filename nvidia | grep -q /updates/dkms/nvidia.ko")
        assert f"nvidia/535.183.01, {RUNNING}, x86_64: installed" in exec_ok(container, "dkms status")
        # the headers-only meta was not "fixed" by installing the image meta it drifts ahead of
        exec_ok(container, "! dpkg -s linux-image-generic-hwe-20.04 >/dev/null 2>&1")

        again = run(container, "nvidia_driver.yml", tmp_path / "state", extravars)
        assert again.status == "successful"
        assert again.hosts[host].changed == 0
