"""The lab fleet for real: ``gpuprov lab up`` brings up a Debian 12 host and the Ubuntu 20.04 stand-in,
reached with the generated key and strict host-key checking; systemd runs as PID 1; the installed
kernel has an initramfs and nouveau; ``lab status`` exits 0, then 3 once a host is stopped; ``lab up``
restarts it; ``lab down`` removes everything.

Needs Docker and root (the base images are built on demand, a few minutes the first time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.lab]

GPUPROV = str(Path(sys.executable).parent / "gpuprov")


def gpuprov(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUPROV, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False, timeout=900)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[dict[str, Any]]:
    """A two-host lab under a private state dir; yields {cwd, env, fleet (parsed fleet file)}."""
    work = tmp_path_factory.mktemp("lab")
    env = dict(os.environ, GPUPROV_STATE_DIR=str(work / "state"), NO_COLOR="1", COLUMNS="200")
    gpuprov("lab", "down", env=env, cwd=work)
    up = gpuprov("lab", "up", "--hosts", "2", env=env, cwd=work)
    assert up.returncode == 0, up.stdout + up.stderr
    fleet = yaml.safe_load((work / "inventory" / "lab.yml").read_text())
    try:
        yield {"cwd": work, "env": env, "fleet": fleet}
    finally:
        gpuprov("lab", "down", "--purge", env=env, cwd=work)


def ssh(fleet: dict[str, Any], host: str, command: str, known_hosts: str | None = None) -> str:
    """Run ``command`` on lab ``host`` as in the fleet file, with strict host-key checking; return stdout."""
    spec = fleet["hosts"][host]
    argv = [
        "ssh", "-F", "none", "-i", fleet["ssh"]["key"], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts or fleet['ssh']['known_hosts']}",
        "-p", str(spec["port"]), f"{fleet['ssh']['user']}@{spec['address']}", command,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, f"{host}: {command}: {proc.stderr}"
    return proc.stdout


def os_release(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key: value.strip('"') for key, value in pairs}


def test_fleet_file_shape(lab: dict[str, Any]) -> None:
    fleet = lab["fleet"]
    assert fleet["version"] == 1 and fleet["name"] == "lab"
    assert fleet["ssh"]["user"] == "admin" and fleet["ssh"]["become"] is True
    assert {h: spec["settings"]["os"] for h, spec in fleet["hosts"].items()} == {
        "lab-debian12-1": "debian12",
        "lab-ubuntu2004-2": "ubuntu2004",
    }
    assert all(spec["address"] == "127.0.0.1" for spec in fleet["hosts"].values())
    lab_dir = Path(lab["env"]["GPUPROV_STATE_DIR"]) / "lab"
    assert (lab_dir.stat().st_mode & 0o777) == 0o700


def test_os_release_per_host(lab: dict[str, Any]) -> None:
    fleet = lab["fleet"]
    debian = os_release(ssh(fleet, "lab-debian12-1", "cat /etc/os-release"))
    assert (debian["ID"], debian["VERSION_ID"]) == ("debian", "12")
    ubuntu = os_release(ssh(fleet, "lab-ubuntu2004-2", "cat /etc/os-release"))
    assert (ubuntu["ID"], ubuntu["VERSION_ID"], ubuntu["VERSION_CODENAME"]) == ("ubuntu", "20.04", "focal")
    assert "bullseye" in ssh(fleet, "lab-ubuntu2004-2", "cat /etc/gpuprov-standin")
    assert "DISTRIB_RELEASE=20.04" in ssh(fleet, "lab-ubuntu2004-2", "cat /etc/lsb-release")


@pytest.mark.parametrize("host", ["lab-debian12-1", "lab-ubuntu2004-2"])
def test_systemd_kernel_and_sudo(lab: dict[str, Any], host: str) -> None:
    fleet = lab["fleet"]
    assert ssh(fleet, host, "cat /proc/1/comm").strip() == "systemd"
    # is-system-running exits 1 when degraded: read its output, not its status
    assert ssh(fleet, host, "systemctl is-system-running || true").strip() in {"running", "degraded"}
    assert ssh(fleet, host, "ls /boot/initrd.img-*").strip()
    assert "nouveau.ko" in ssh(fleet, host, "ls /lib/modules/*/kernel/drivers/gpu/drm/nouveau/nouveau.ko*")
    assert ssh(fleet, host, "sudo -n id -u").strip() == "0"
    assert ssh(fleet, host, "systemctl is-active ssh").strip() == "active"


def test_host_key_checking_is_on(lab: dict[str, Any], tmp_path: Path) -> None:
    """With an empty known_hosts the same ssh command is refused: the check really happens."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(AssertionError, match="Host key verification failed"):
        ssh(lab["fleet"], "lab-debian12-1", "true", known_hosts=str(empty))


def test_status_then_stop_then_up_again(lab: dict[str, Any]) -> None:
    cwd, env = lab["cwd"], lab["env"]
    ok = gpuprov("lab", "status", env=env, cwd=cwd)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "gpuprov-lab-1" in ok.stdout and "gpuprov-lab-2" in ok.stdout
    subprocess.run(["docker", "stop", "-t", "2", "gpuprov-lab-2"], check=True, capture_output=True)
    down = gpuprov("lab", "status", env=env, cwd=cwd)
    assert down.returncode == 3, down.stdout + down.stderr
    assert "exited" in down.stdout
    again = gpuprov("lab", "up", "--hosts", "2", env=env, cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr
    fleet = yaml.safe_load((cwd / "inventory" / "lab.yml").read_text())
    assert fleet["hosts"] == lab["fleet"]["hosts"]  # same hosts, same ports
    assert gpuprov("lab", "status", env=env, cwd=cwd).returncode == 0


def test_down_removes_containers(lab: dict[str, Any]) -> None:
    cwd, env = lab["cwd"], lab["env"]
    gone = gpuprov("lab", "down", env=env, cwd=cwd)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    names = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=org.gpuprov.lab", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert names == []
    assert gpuprov("lab", "status", env=env, cwd=cwd).returncode == 3
