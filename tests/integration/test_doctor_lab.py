"""``gpuprov doctor FILE`` on a lab host: the doctor play runs the existing modules over SSH (ansible-runner) and the
rules apply on the controller to the registered results.

The test starts its own container from the lab image (the shared gpuprov-lab-N hosts belong to ``gpuprov lab``),
installs the mock NVML with a fault profile and copies a fixture sysfs/procfs/kernel-log tree in; the play's
``gpuprov_doctor_*_root`` variables point platform_info and gpu_pci_info at it (a container shares the machine's
real /sys, which has no GPU). Not simulated: a real driver, kernel log or fuser holder.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bios_check_fixtures import build_tree, healthy_h200, tar_bytes

pytestmark = [pytest.mark.lab]

FIX = "/opt/gpuprov-doctor"


@pytest.fixture(scope="module")
def lab_fleet(lab_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """One debian12 lab container of this test's own, reachable over SSH, and a fleet file naming it."""
    import docker

    from gpuprov.lab import containers
    from gpuprov.lab.fleetfile import write_fleet_file
    from gpuprov.lab.ports import allocate_ports
    from gpuprov.lab.state import LabHost

    work = tmp_path_factory.mktemp("doctor-lab")
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    client = docker.from_env()
    port = allocate_ports(1, port_range=(42200, 42400))[0]  # away from gpuprov lab's own range
    name = f"gpuprov-doctor-{uuid.uuid4().hex[:8]}"
    container = containers._create(client, name, "doctor-1", "debian12", port, lab_images["debian12"],
                                   lab_member=False)  # not the lab's: `lab down` in another test leaves it
    try:
        host_keys = containers._wait_booted(container, 90)
        containers._authorize(container, (work / "id_ed25519.pub").read_text().strip())
        known = work / "known_hosts"
        known.write_text("".join(f"[127.0.0.1]:{port} {line}\n" for line in host_keys.splitlines() if line.strip()))
        fleet = write_fleet_file(work / "fleet.yml", [LabHost(name, "doctor-1", "debian12", port)], key, known)
        yield container, fleet
    finally:
        container.remove(force=True)


def _prepare(container: Any, tmp_path: Path, profile: str) -> None:
    from gpuprov.lab.mocknvml import install

    root = tmp_path / "rootfs"
    install(root, profile)
    assert container.put_archive("/", tar_bytes(root, "."))
    build_tree(tmp_path / "fixture", healthy_h200())
    container.exec_run(["sh", "-c", f"rm -rf {FIX} && mkdir -p /opt && ldconfig"])
    assert container.put_archive("/opt", tar_bytes(tmp_path / "fixture", Path(FIX).name))


VARS = {
    "gpuprov_doctor_sysfs_root": f"{FIX}/sys",
    "gpuprov_doctor_proc_root": f"{FIX}/proc",
    "gpuprov_doctor_kernel_log_path": f"{FIX}/kernel.log",
}


@pytest.mark.parametrize(("profile", "expected"), [("persistence-off", ["persistence_off"]), ("h200x2", [])])
def test_doctor_file_on_lab_host(profile: str, expected: list[str], lab_fleet: tuple[Any, Path],
                                 tmp_path: Path) -> None:
    from gpuprov.doctor import fleet_doctor

    container, fleet = lab_fleet
    _prepare(container, tmp_path, profile)
    result = fleet_doctor(fleet, window_s=1, samples=2, extravars=VARS)
    assert result.failed == {}
    facts = result.facts["doctor-1"]
    assert facts["nvml"]["available"] and facts["samples"]["gpus"]["0"] == [0, 0]
    assert facts["pci"]["bindings"] == {} or facts["pci"]["pci_readable"]
    assert [d["id"] for d in result.diagnoses["doctor-1"]] == expected
    if expected:
        assert result.diagnoses["doctor-1"][0]["action"] == ["nvidia-smi", "-pm", "1"]
