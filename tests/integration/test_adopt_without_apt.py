"""Adopting a host as it is (issue 9 item 1): no python3-apt, no systemd as PID 1, check mode.

The real H200 host (tests/data/real-h200/check-site.txt) has neither python3-apt nor systemd as PID 1, and
the site's check run failed in hwe_kernel, where ansible.builtin.apt tried to install python3-apt. Here a
debian12 lab container runs `sleep` as PID 1 with python3-apt purged, and bios_check, nouveau and hwe_kernel
run through gpuprov.runner over the docker connection:

1. a change is needed (the image's kernel has no headers): hwe_kernel fails with "python3-apt is missing:
   install it ... or ...", naming the package, and installs nothing (python3-apt neither);
2. the state is met (stand-in headers installed and the kernel packages held with dpkg alone): the three
   roles in check mode finish without a failure, hwe_kernel changes nothing and says why it skipped apt,
   bios_check (the real H200 pair's mock NVML and fixture tree) says why it did not read the journal, and
   nouveau, which needs a reboot (a GPU bound to nouveau in a fake sysfs) that is allowed, says why it
   cannot reboot.

The driver and CUDA roles on the same kind of host (the real one's state: its driver is loaded but came
without packages, CUDA 13.0 is installed as NVIDIA's debs in parts, without the cuda-toolkit-13-0 meta):

3. nothing of CUDA 13.0 installed: cuda fails with "python3-apt is missing: install it ...", naming
   cuda-toolkit-13-0, and nvidia_driver adopts the loaded 580 open driver (its version line read from a
   file standing in for /proc/driver/nvidia/version), skipping repository, install, DKMS and services with
   the reason, and looks for its daemons as processes;
4. cuda-nvcc-13-0, cuda-cudart-13-0 and its config package installed with dpkg alone (gpuprov.lab.standin
   specs): applying both roles succeeds (cuda writes its environment files; nothing is installed), and the
   check-mode run after it reports both roles in sync (changed 0) with the reasons stated.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.lab.standin import build_deb
from gpuprov.lab.standin.catalogue import kernel_headers, meta
from gpuprov.lab.standin.deb import spec_of
from gpuprov.lab.standin.toolkit import cuda_toolkit
from gpuprov.rolevars import with_role_variables
from gpuprov.runner import RunRequest, RunResult, new_run_dir, run_playbook
from tests.integration.kernel_lab import container_inventory, exec_ok, task_results

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FAKESYS = "/opt/gpuprov-fakesys"

# A GPU bound to nouveau with the module loaded (the shape molecule/nouveau/prepare.yml builds).
FAKESYS_SCRIPT = f"""
set -e
d=/opt/gpuprov-fakesys/bus/pci/devices/0000:17:00.0
mkdir -p "$d" {FAKESYS}/bus/pci/drivers/nouveau {FAKESYS}/module/nouveau
echo 0x10de > "$d/vendor"; echo 0x2335 > "$d/device"; echo 0x030200 > "$d/class"
ln -s ../../../../bus/pci/drivers/nouveau "$d/driver"
"""


def _put(container: Any, files: dict[str, bytes]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    container.put_archive("/", buffer.getvalue())


@pytest.fixture
def bare_host(lab_images: dict[str, str]) -> Iterator[tuple[Any, str]]:
    """A debian12 lab container with `sleep` as PID 1 and python3-apt purged; yields it and its kernel."""
    import docker

    client = docker.from_env()
    container = client.containers.run(lab_images["debian12"], command=["sleep", "infinity"], detach=True,
                                      name=f"gpuprov-hwe-adopt-{uuid.uuid4().hex[:8]}")
    try:
        exec_ok(container, "dpkg --purge --force-depends python3-apt >/dev/null")
        exec_ok(container, "! /usr/bin/python3 -c 'import apt' 2>/dev/null")
        kernel = exec_ok(container, "ls /boot | sed -n 's/^vmlinuz-//p'").split()[0]
        yield container, kernel
    finally:
        container.remove(force=True)


def _run(container: Any, tmp: Path, playbooks: list[str], extravars: dict[str, str], check: bool) -> RunResult:
    run_dir = new_run_dir(tmp / "state", "adopt")
    inventory = container_inventory(run_dir, container)
    playbook = run_dir / "adopt.yml"
    playbook.write_text(yaml.safe_dump([{"name": f"Import {p}", "ansible.builtin.import_playbook": str(
        ROOT / "playbooks" / p)} for p in playbooks]), encoding="utf-8")
    request = RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir,
                         check=check, extravars=with_role_variables(extravars))
    return run_playbook(request)


def _messages(result: RunResult, task: str) -> str:
    return " ".join(str(r.get("msg", "")) for r in task_results(result, task))


def _seed_in_sync(container: Any, kernel: str, tmp: Path) -> None:
    """Install stand-in headers for the kernel and its image meta with dpkg alone, hold the kernel packages,
    and give bios_check the real H200 pair's mock NVML and fixture tree and nouveau a GPU bound to it."""
    version = exec_ok(container, f"dpkg-query -W -f '${{Version}}' linux-image-{kernel}").strip()
    debs = [build_deb(spec, tmp / "debs") for spec in (
        kernel_headers(kernel, version), meta("linux-headers-amd64", version, (f"linux-headers-{kernel}",)))]
    _put(container, {f"/tmp/debs/{deb.name}": deb.read_bytes() for deb in debs})
    hold = "sed -n 's/^ii *\\(.*\\)/\\1 hold/p' | dpkg --set-selections"
    exec_ok(container, "dpkg -i /tmp/debs/*.deb >/dev/null && dpkg-query -W -f '${db:Status-Abbrev}${Package}\\n' "
                       f"'linux-image-*' 'linux-headers-*' | {hold}")
    fixture = tmp / "bios.tar"
    subprocess.run([sys.executable, str(ROOT / "molecule" / "bios_check" / "make_fixture.py"), "h200x2",
                    str(fixture)], check=True, cwd=ROOT)
    container.put_archive("/", fixture.read_bytes())
    exec_ok(container, "ldconfig")
    exec_ok(container, FAKESYS_SCRIPT)


def test_adopt_three_roles_without_python_apt_or_systemd(bare_host: tuple[Any, str], tmp_path: Path) -> None:
    container, kernel = bare_host
    host = container.name

    # 1. headers must be installed and apt cannot: a clear failure, nothing installed
    needed = _run(container, tmp_path, ["hwe_kernel.yml"], {}, check=True)
    assert needed.failed_hosts == [host]
    message = " ".join(f["msg"] for f in needed.hosts[host].failures)
    assert message.startswith("python3-apt is missing: install it")
    assert f"linux-headers-{kernel}" in message
    assert "linux-headers-amd64" in message
    assert " or install " in message
    exec_ok(container, f"! dpkg -s python3-apt >/dev/null 2>&1 && ! dpkg -s linux-headers-{kernel} >/dev/null 2>&1")

    # 2. everything hwe_kernel wants is there: the three roles pass check mode with reasons for each skip
    _seed_in_sync(container, kernel, tmp_path)
    extravars = {"bios_check_sysfs_root": "/opt/gpuprov-bios/sys", "bios_check_proc_root": "/opt/gpuprov-bios/proc",
                 "gpuprov_gpus_model": "H200", "gpuprov_gpus_count": "2", "gpuprov_psu_watts": "3000",
                 "nouveau_sysfs_root": FAKESYS, "nouveau_reboot_ok": "true"}
    result = _run(container, tmp_path, ["bios_check.yml", "nouveau.yml", "hwe_kernel.yml"], extravars, check=True)
    assert result.status == "successful", result.hosts[host].failures
    roles = result.hosts[host].roles
    assert set(roles) == {"bios_check", "nouveau", "hwe_kernel"}
    assert roles["hwe_kernel"].changed == 0
    assert roles["bios_check"].changed == 1  # its report would be written (drift); check mode wrote nothing
    exec_ok(container, "test ! -e /var/lib/gpuprov/bios_check.json")
    assert roles["nouveau"].changed > 0  # its blacklist is not on this host yet: drift, reported

    skipped_apt = _messages(result, "install | Skip the apt tasks, python3-apt is missing and nothing needs installing")
    assert "python3-apt is missing" in skipped_apt
    assert f"every installed kernel ({kernel}) has its headers" in skipped_apt
    journal = _messages(result, "Say why the kernel log is not scanned")
    assert "the service manager is sleep, not systemd" in journal
    reboot = _messages(result, "reboot_required | Report that the reboot is skipped, the service manager cannot reboot")
    assert "Reboot required and allowed, but skipped: the service manager is sleep" in reboot
    # nothing was installed behind the roles' back, and check mode wrote nothing
    exec_ok(container, "! dpkg -s python3-apt >/dev/null 2>&1")
    exec_ok(container, "test ! -e /etc/modprobe.d/gpuprov-nouveau.conf && test ! -e /var/lib/gpuprov/bios_check.json")

    # 3. a system without kmod's /etc/modprobe.d (the real H200 host: its kernel is managed outside it) loads no
    # modules itself: nouveau says so and changes nothing, in check mode and for real
    exec_ok(container, "mv /etc/modprobe.d /etc/modprobe.d.away")
    for check in (True, False):
        bare = _run(container, tmp_path, ["nouveau.yml"], extravars, check=check)
        assert bare.status == "successful", bare.hosts[host].failures
        assert bare.hosts[host].changed == 0
        said = _messages(bare, "Say why nouveau is left alone")
        assert "/etc/modprobe.d does not exist, so kmod is not installed" in said
    exec_ok(container, "test ! -e /etc/modprobe.d")


# The real H200 host's first line of /proc/driver/nvidia/version (tests/data/real-h200/env.txt).
PROC_VERSION = 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n'


def test_adopt_driver_and_cuda_without_python_apt_or_systemd(bare_host: tuple[Any, str], tmp_path: Path) -> None:
    container, _kernel = bare_host
    host = container.name
    fixture = tmp_path / "bios.tar"
    subprocess.run([sys.executable, str(ROOT / "molecule" / "bios_check" / "make_fixture.py"), "h200x2",
                    str(fixture)], check=True, cwd=ROOT)
    container.put_archive("/", fixture.read_bytes())
    exec_ok(container, "ldconfig")
    _put(container, {"/opt/gpuprov-proc/driver-version": PROC_VERSION.encode()})
    extravars = {"gpuprov_driver_branch": "580", "gpuprov_driver_flavour": "open", "gpuprov_cuda_version": "13.0",
                 "__nvidia_driver_proc_version_file": "/opt/gpuprov-proc/driver-version"}
    playbooks = ["nvidia_driver.yml", "cuda.yml"]

    # 3. CUDA 13.0 is not installed and apt cannot install it: a clear failure in cuda, nothing installed
    needed = _run(container, tmp_path, playbooks, extravars, check=True)
    assert needed.failed_hosts == [host]
    assert needed.hosts[host].roles["nvidia_driver"].changed == 0
    failures = needed.hosts[host].failures
    assert [f["role"] for f in failures] == ["cuda"], failures
    assert failures[0]["msg"].startswith("python3-apt is missing: install it")
    assert "cuda-toolkit-13-0" in failures[0]["msg"]
    adopted = _messages(needed, "adopt | Say why the apt tasks are skipped")
    assert "Adopted the loaded driver 580.159.04 (open kernel module, branch 580)" in adopted
    services = _messages(needed, "unmanaged | Say why the driver services are not managed")
    assert "the driver was adopted as it is" in services
    assert "nvidia-persistenced not running" in services
    assert "nv-fabricmanager not running" in services  # the fixture's GPUs sit on NVSwitches
    exec_ok(container, "! dpkg -s python3-apt >/dev/null 2>&1 && ! dpkg -s cuda-nvcc-13-0 >/dev/null 2>&1")
    exec_ok(container, "test ! -e /etc/apt/sources.list.d/cuda-gpuprov.sources && test ! -e /var/lib/gpuprov/keys")

    # 4. CUDA 13.0 in parts, as on the real host (no cuda-toolkit-13-0 meta), installed with dpkg alone
    parts = [p for p in cuda_toolkit("13.0") if spec_of(p).name != "cuda-toolkit-13-0"]
    debs = [build_deb(p, tmp_path / "cuda-debs") for p in parts]
    assert len(debs) == 3
    _put(container, {f"/tmp/cuda-debs/{deb.name}": deb.read_bytes() for deb in debs})
    exec_ok(container, "dpkg -i /tmp/cuda-debs/*.deb >/dev/null")

    applied = _run(container, tmp_path, playbooks, extravars, check=False)
    assert applied.status == "successful", applied.hosts[host].failures
    exec_ok(container, "test -s /etc/profile.d/cuda.sh && readlink -f /usr/local/cuda | grep -qx /usr/local/cuda-13.0")

    result = _run(container, tmp_path, playbooks, extravars, check=True)
    assert result.status == "successful", result.hosts[host].failures
    roles = result.hosts[host].roles
    assert roles["nvidia_driver"].changed == 0
    assert roles["cuda"].changed == 0
    skipped = _messages(result, "no_apt | Say why apt is not run for the toolkits")
    assert "python3-apt is missing" in skipped
    assert "CUDA 13.0 in parts (cuda-nvcc-13-0" in skipped
    repo = _messages(result, "packages | Say why the CUDA repository is not configured")
    assert "python3-apt is missing" in repo
    exec_ok(container, "! dpkg -s python3-apt >/dev/null 2>&1 && ! dpkg -s cuda-toolkit-13-0 >/dev/null 2>&1")
