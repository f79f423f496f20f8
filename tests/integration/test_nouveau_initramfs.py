"""A stale initramfs in the lab: the blacklist is on disk but the initramfs images still load nouveau.

A systemd container from the debian12 lab image gets a second installed kernel (a copy of the image's
kernel entry under another version, with its own image), a blacklist newer than both images and a
package-shipped NVIDIA option file, then playbooks/nouveau.yml runs through ansible-runner's Python API
over the community.docker.docker connection. Outcomes are read from runner stats and events, never from
stdout. A container shares the host kernel, so loading nouveau and rebooting stay out of reach; the
reboot decision is driven by a fake sysfs tree instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kernel_lab import exec_ok, plain_runner_env

ROOT = Path(__file__).resolve().parents[2]
CONF = "/etc/modprobe.d/gpuprov-nouveau.conf"
REBUILD_TASK = "rebuild | Rebuild the initramfs of each stale kernel"
FAKESYS = "/opt/gpuprov-fakesys"

pytestmark = [pytest.mark.lab, pytest.mark.slow]

SEED = r"""
set -eu
k=$(ls /boot | sed -n 's/^vmlinuz-//p' | sort | head -n1)
k2="$k-labcopy"
cp -a "/lib/modules/$k" "/lib/modules/$k2"
for f in vmlinuz config System.map; do cp -p "/boot/$f-$k" "/boot/$f-$k2"; done
update-initramfs -c -k "$k2" >/dev/null 2>&1
touch -d 2024-04-20T08:00:00 "/boot/initrd.img-$k" "/boot/initrd.img-$k2"
printf 'blacklist nouveau\noptions nouveau modeset=0\n' > /etc/modprobe.d/blacklist-nouveau.conf
printf 'options nvidia-drm modeset=1\n' > /lib/modprobe.d/nvidia-graphics-drivers-lab.conf
d=FAKESYS/bus/pci/devices/0000:17:00.0
mkdir -p "$d" FAKESYS/bus/pci/drivers/nouveau FAKESYS/module/nouveau
echo 0x10de > "$d/vendor"; echo 0x20b0 > "$d/device"; echo 0x030200 > "$d/class"
ln -s ../../../../bus/pci/drivers/nouveau "$d/driver"
echo "$k $k2"
""".replace("FAKESYS", FAKESYS)


@pytest.fixture
def stale_host(lab_images: dict[str, str]) -> Iterator[tuple[Any, list[str]]]:
    """A running debian12 lab container with the blacklist on disk and stale images; yields it with its two
    kernel versions."""
    import docker

    client = docker.from_env()
    container = client.containers.run(
        lab_images["debian12"],
        command="/lib/systemd/systemd",
        name=f"gpuprov-nouveau-initramfs-{uuid.uuid4().hex[:8]}",
        detach=True,
        cap_add=["SYS_ADMIN", "NET_ADMIN"],
        security_opt=["seccomp=unconfined"],
        tmpfs={"/run": "", "/run/lock": ""},
        volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
    )
    try:
        kernels = exec_ok(container, SEED).splitlines()[-1].split()
        yield container, kernels
    finally:
        container.remove(force=True)


def _run(tmp_path: Path, container: Any, label: str, **kwargs: Any) -> Any:
    import ansible_runner

    inventory = {
        "all": {
            "children": {
                "gpuprov": {
                    "hosts": {
                        container.name: {
                            "ansible_connection": "community.docker.docker",
                            "ansible_python_interpreter": "/usr/bin/python3",
                        }
                    }
                }
            }
        }
    }
    private = tmp_path / label
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(ROOT / "playbooks"),
        playbook="nouveau.yml",
        inventory=inventory,
        envvars=plain_runner_env(),
        quiet=True,
        **kwargs,
    )
    assert runner.status == "successful", f"{label}: status {runner.status}, rc {runner.rc}"
    return runner


def _changed(runner: Any, host: str) -> int:
    return int((runner.stats or {}).get("changed", {}).get(host, 0))


def _rebuilt_kernels(runner: Any) -> list[str]:
    """Kernel versions whose rebuild loop item reported changed, from runner_item_on_ok events."""
    rebuilt = []
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_item_on_ok" and data.get("task") == REBUILD_TASK:
            res = data.get("res", {})
            if res.get("changed"):
                rebuilt.append(res["item"]["version"])
    return sorted(rebuilt)


def _task_results(runner: Any, task: str) -> list[dict[str, Any]]:
    return [
        e["event_data"]["res"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e.get("event_data", {}).get("task") == task
    ]


def _image_sums(container: Any, kernels: list[str]) -> str:
    return exec_ok(container, "sha256sum " + " ".join(f"/boot/initrd.img-{k}" for k in kernels))


def test_stale_images_are_rebuilt_from_content(tmp_path: Path, stale_host: tuple[Any, list[str]]) -> None:
    container, kernels = stale_host
    host = container.name
    assert len(kernels) == 2

    # check mode on the fresh host: drift reported, nothing written
    before = _image_sums(container, kernels)
    check = _run(tmp_path, container, "check", cmdline="--check")
    assert _changed(check, host) > 0
    assert _image_sums(container, kernels) == before
    assert exec_ok(container, f"test ! -e {CONF} && echo absent").strip() == "absent"

    # first run: every installed kernel's image lacks the blacklist, so every one is rebuilt
    first = _run(tmp_path, container, "first")
    assert _changed(first, host) > 0
    assert _rebuilt_kernels(first) == sorted(kernels)

    # second run: nothing stale, nothing changed
    second = _run(tmp_path, container, "second")
    assert _changed(second, host) == 0
    assert _rebuilt_kernels(second) == []

    # one image made stale by hand (rebuilt while the blacklist is away): exactly that one is rebuilt
    stale = kernels[1]
    exec_ok(
        container,
        f"mv {CONF} /root/held.conf && update-initramfs -u -k {stale} >/dev/null 2>&1 && mv /root/held.conf {CONF}",
    )
    third = _run(tmp_path, container, "third")
    assert _rebuilt_kernels(third) == [stale]
    assert _changed(_run(tmp_path, container, "fourth"), host) == 0


def test_gpu_bound_to_nouveau_requires_a_reboot(tmp_path: Path, stale_host: tuple[Any, list[str]]) -> None:
    container, _kernels = stale_host
    runner = _run(tmp_path, container, "fakesys", extravars={"nouveau_sysfs_root": FAKESYS, "nouveau_reboot_ok": False})
    facts = _task_results(runner, "reboot | Set whether a reboot is required")
    assert facts, "the reboot decision task did not run"
    assert facts[0]["ansible_facts"]["nouveau_reboot_required"] is True
    messages = [r["msg"] for r in _task_results(runner, "reboot_required | Report that a reboot is required")]
    assert len(messages) == 1
    assert "nouveau" in messages[0]
    assert "0000:17:00.0" in messages[0]
    # not rebooted: the reboot task was skipped
    assert not _task_results(runner, "reboot_required | Reboot so the GPUs come up without nouveau")

    # with reboots allowed the role would reboot (check mode: ansible.builtin.reboot reports, never acts;
    # a real reboot cannot happen in a container that shares the host kernel)
    allowed = _run(
        tmp_path,
        container,
        "fakesys-reboot-ok",
        cmdline="--check",
        extravars={"nouveau_sysfs_root": FAKESYS, "nouveau_reboot_ok": True},
    )
    reboots = _task_results(allowed, "reboot_required | Reboot so the GPUs come up without nouveau")
    assert len(reboots) == 1
    assert reboots[0]["changed"] is True
    assert not _task_results(allowed, "reboot_required | Report that a reboot is required")
