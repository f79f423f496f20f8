"""In a container: MIG instances are gone after a reboot, only the MIG mode survives; the mig role's boot unit
re-creates the layout.

A systemd container from the debian12 lab image carries the mock NVML with the a100x8-nvswitch profile
(8x A100-SXM4-80GB, MIG off) and a stand-in ``nvidia-persistenced.service`` that holds ``/dev/nvidia0`` open,
as the real daemon holds the GPU. playbooks/mig.yml runs through gpuprov.runner (ansible-runner over the
docker connection); outcomes are read from runner stats and events, and the GPUs are read back
through NVML (pynvml) inside the container.

The reboot is a container restart: the mock keeps MIG mode and instances in a state file tagged with the boot
(kernel boot id + PID 1's start time), so the restarted container boots with MIG on and no instances, exactly
what a real A100 shows after a reboot. A real GPU reset and a real reboot are out of a container's reach.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprov.runner import RunRequest, RunResult, new_run_dir, run_playbook
from tests.integration.kernel_lab import container_inventory, exec_ok, task_results, wait_booted
from tests.integration.mig_host import PROBE_DIR, mig_host_files

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STATE = "/etc/gpuprov/mock-nvml.state"
LAYOUTS = {
    "all-1g.10gb": [{"devices": "all", "mig_enabled": True, "mig_devices": {"1g.10gb": 7}}],
}

# A stand-in for the persistence daemon: a unit that keeps /dev/nvidia0 open while it runs.
PERSISTENCED = """[Unit]
Description=stand-in nvidia-persistenced (holds /dev/nvidia0 open)
[Service]
ExecStart=/bin/sleep infinity
StandardInput=file:/dev/nvidia0
[Install]
WantedBy=multi-user.target
"""

# Every GPU's MIG mode and GPU instance profile counts, read with plain pynvml calls.
PROBE = r"""
import ctypes, json, sys
sys.path.insert(0, "PROBE_DIR")
import pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    cur, pend = n.nvmlDeviceGetMigMode(h)
    gis = {}
    for p in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT) if cur else ():
        try:
            info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
        except n.NVMLError:
            continue
        arr = (n.c_nvmlGpuInstance_t * 8)(); cnt = ctypes.c_uint()
        n.nvmlDeviceGetGpuInstances(h, info.id, arr, ctypes.byref(cnt))
        if cnt.value:
            gis[info.name] = cnt.value
    out.append([cur, pend, gis])
n.nvmlShutdown()
print(json.dumps(out))
""".replace("PROBE_DIR", PROBE_DIR)


@pytest.fixture(scope="module")
def host(lab_images: dict[str, str]) -> Iterator[Any]:
    """The container, booted, with the mock NVML and the stand-in persistence daemon running."""
    import docker

    client = docker.from_env()
    container = client.containers.run(
        lab_images["debian12"], command="/lib/systemd/systemd", name=f"gpuprov-mig-reboot-{uuid.uuid4().hex[:8]}",
        detach=True, cap_add=["SYS_ADMIN", "NET_ADMIN"], security_opt=["seccomp=unconfined"],
        tmpfs={"/run": "", "/run/lock": ""}, volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
    )
    try:
        wait_booted(container)
        with tempfile.TemporaryDirectory(prefix="gpuprov-mig-") as tmp:
            mig_host_files(Path(tmp), "a100x8-nvswitch")
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                for child in sorted(Path(tmp).iterdir()):
                    tar.add(str(child), arcname=child.name)
            assert container.put_archive("/", buffer.getvalue())
        exec_ok(container, "ldconfig && cat > /etc/systemd/system/nvidia-persistenced.service <<'EOF'\n"
                f"{PERSISTENCED}EOF\n"
                # /dev is a fresh tmpfs at every container start: systemd-tmpfiles creates the node at boot
                "echo 'f /dev/nvidia0 0644 root root -' > /etc/tmpfiles.d/gpuprov-mig-test.conf && "
                "touch /dev/nvidia0 && systemctl daemon-reload && systemctl enable --now nvidia-persistenced")
        yield container
    finally:
        container.remove(force=True)


def _run(container: Any, tmp: Path, *, check: bool = False) -> RunResult:
    run_dir = new_run_dir(tmp / "state", "mig")
    inventory = container_inventory(run_dir, container, mig_layout="all-1g.10gb", mig_layouts=LAYOUTS)
    return run_playbook(RunRequest(inventory=inventory, playbook=ROOT / "playbooks" / "mig.yml",
                                   run_dir=run_dir, check=check))


def _gpus(container: Any) -> list[list[Any]]:
    return json.loads(exec_ok(container, f"python3 -c '{PROBE}'"))


def _show(container: Any, unit: str, prop: str) -> str:
    return exec_ok(container, f"systemctl show -p {prop} --value {unit}").strip()


def test_layout_applied_then_recreated_by_the_boot_unit_after_a_reboot(host: Any, tmp_path: Path) -> None:
    daemon_pid = _show(host, "nvidia-persistenced", "MainPID")
    first = _run(host, tmp_path)
    assert first.failed_hosts == [], first.hosts
    assert first.hosts[host.name].changed > 0
    # the persistence daemon held /dev/nvidia0: the role stopped it around the mode change and started it again
    assert _show(host, "nvidia-persistenced", "ActiveState") == "active"
    assert _show(host, "nvidia-persistenced", "MainPID") != daemon_pid
    stopped = task_results(first, "Layout | Stop the GPU clients for the MIG mode change")
    assert [e["item"] for e in stopped if "item" in e] == [
        "nvidia-persistenced.service"]
    declared = [[1, 1, {"MIG 1g.10gb": 7}]] * 8
    assert _gpus(host) == declared

    boot_before = exec_ok(host, f"sed -n 's/^boot=//p' {STATE}").strip()
    host.restart()  # the reboot
    wait_booted(host)
    assert _show(host, "gpuprov-mig.service", "ActiveState") == "active"
    assert _show(host, "gpuprov-mig.service", "Result") == "success"
    journal = exec_ok(host, "journalctl -b -u gpuprov-mig.service --no-pager -o cat")
    # lost at boot, then re-created by nvidia-smi: seven GPU instances with one compute instance each, per GPU
    assert journal.count("Successfully created GPU instance") == 56, journal
    assert journal.count("Successfully created compute instance") == 56, journal
    assert exec_ok(host, f"sed -n 's/^boot=//p' {STATE}").strip() != boot_before
    assert _gpus(host) == declared
    # ordered before the GPU clients: the layout existed before the persistence daemon started
    done = int(_show(host, "gpuprov-mig.service", "ExecMainExitTimestampMonotonic"))
    started = int(_show(host, "nvidia-persistenced", "ExecMainStartTimestampMonotonic"))
    assert 0 < done <= started

    # gpuprov check after the reboot: no drift (the idempotence of a second apply is molecule/mig's)
    after_boot = _run(host, tmp_path, check=True)
    assert after_boot.failed_hosts == []
    assert after_boot.hosts[host.name].changed == 0


def test_instances_lost_without_the_unit_are_drift(host: Any, tmp_path: Path) -> None:
    exec_ok(host, f"sed -i '/^gpu\\.[0-9]*\\.\\(gi\\|ci\\)=/d' {STATE}")  # what a boot without the unit leaves
    assert _gpus(host) == [[1, 1, {}]] * 8
    check = _run(host, tmp_path, check=True)
    assert check.failed_hosts == []
    assert check.hosts[host.name].changed > 0
    plan = task_results(check, "Layout | Apply the layout")[0]
    assert {gpu["state"] for gpu in plan["gpus"]} == {"MIG on but no instances"}
    assert _gpus(host) == [[1, 1, {}]] * 8  # check mode changed nothing


def test_refused_on_gpus_without_mig(host: Any, tmp_path: Path) -> None:
    exec_ok(host, f"cp /etc/gpuprov/mock-nvml.d/v100x4.conf /etc/gpuprov/mock-nvml.conf && rm -f {STATE}")
    result = _run(host, tmp_path)
    assert result.failed_hosts == [host.name]
    message = " ".join(f["msg"] for f in result.hosts[host.name].failures)
    assert "GPU 0 (Tesla V100-SXM2-32GB" in message
    assert "is not MIG-capable" in message
    assert exec_ok(host, f"test -e {STATE} && echo yes || echo no").strip() == "no"
