"""``gpuprov verify FILE`` and ``gpuprov check FILE --json`` on a lab host (for the lead: needs the lab images).

The test starts its own container from the lab image (the shared gpuprov-lab-N hosts belong to ``gpuprov lab``),
installs the mock NVML with the h200x2 profile (real nvidia-smi runs against it) and runs the verify role over
SSH. What the lab cannot provide - a CUDA toolkit, torch with CUDA, Docker with the NVIDIA runtime, DCGM - must be
a skip with its reason, never a pass; what the mock NVML provides (model, count, versions, persistence, P2P
status) must pass. The drift report must name the components the fresh host lacks.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.lab]

LAB_CANNOT = {"cuda_sample", "nccl_allreduce", "container", "dcgm_diag"}


@pytest.fixture(scope="module")
def lab_fleet(lab_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """One debian12 lab container of this test's own with the h200x2 mock NVML, and a fleet file naming it."""
    import docker

    from gpuprov.lab import containers, hardware
    from gpuprov.lab.fleetfile import write_fleet_file
    from gpuprov.lab.ports import allocate_ports
    from gpuprov.lab.state import LabHost

    work = tmp_path_factory.mktemp("verify-lab")
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    client = docker.from_env()
    port = allocate_ports(1, port_range=(42400, 42600))[0]  # away from gpuprov lab's and doctor's ranges
    name = f"gpuprov-verify-{uuid.uuid4().hex[:8]}"
    container = containers._create(client, name, "verify-1", "debian12", port, lab_images["debian12"],
                                   lab_member=False)  # not the lab's: `lab down` in another test leaves it
    try:
        host_keys = containers._wait_booted(container, 90)
        containers._authorize(container, (work / "id_ed25519.pub").read_text().strip())
        known = work / "known_hosts"
        known.write_text("".join(f"[127.0.0.1]:{port} {line}\n" for line in host_keys.splitlines() if line.strip()))
        hardware.install(container, "debian12", "h200x2")  # mock NVML + Debian's real nvidia-smi, as lab up does
        fleet = write_fleet_file(work / "fleet.yml", [LabHost(name, "verify-1", "debian12", port)], key, known)
        yield container, fleet
    finally:
        container.remove(force=True)


def test_verify_on_lab_host_skips_only_what_the_lab_lacks(lab_fleet: tuple[Any, Path], tmp_path: Path) -> None:
    from gpuprov.verify import verify

    container, fleet = lab_fleet
    result = verify(fleet)
    assert not result.failed, result.failed
    ((_host, report),) = result.reports.items()
    steps = {s["name"]: s for s in report["steps"]}
    failing = sorted(n for n, s in steps.items() if s["status"] == "fail")
    assert failing == [], {n: steps[n]["reason"] for n in failing}
    for name in LAB_CANNOT:
        assert steps[name]["status"] == "skip" and steps[name]["reason"], steps[name]
    for name in ("gpus", "nvidia_smi", "driver_version", "persistence", "p2p"):
        assert steps[name]["status"] == "pass", steps[name]
    assert steps["gpus"]["evidence"]["count"] == 2
    assert result.exit_code == 0
    rc, out = container.exec_run(["cat", "/var/lib/gpuprov/verify.json"])
    assert rc == 0
    assert json.loads(out)["steps"] == report["steps"]


def test_verify_cli_exit_code_follows_a_failed_step(lab_fleet: tuple[Any, Path], tmp_path: Path) -> None:
    """Expecting 8 GPUs where the mock has 2 fails the gpus step: exit 1, not 3 (the host did not fail)."""
    from gpuprov.cli.__main__ import main

    _container, fleet = lab_fleet
    out = tmp_path / "verify.json"
    assert main(["verify", str(fleet), "--json", str(out), "-e", "verify_expected_gpu_count=8"]) == 1
    data = json.loads(out.read_text())
    (report,) = data["hosts"].values()
    assert [s["name"] for s in report["steps"] if s["status"] == "fail"] == ["gpus"]


def test_check_json_reports_drift_on_a_fresh_host(lab_fleet: tuple[Any, Path], tmp_path: Path) -> None:
    from gpuprov.drift_report import fleet_drift

    _container, fleet = lab_fleet
    report = fleet_drift(fleet)
    assert not report.failed, report.failed
    (components,) = report.hosts.values()
    assert set(components) == {"kernel", "driver", "fabric_manager", "cuda", "cudnn", "nccl", "container_toolkit",
                               "runtime_config", "mig", "upgrade"}
    assert components["upgrade"]["in_sync"]  # no gpuprov upgrade was left unfinished here
    assert not components["driver"]["in_sync"]  # no nvidia-driver-<branch> installed on a fresh host
    assert components["driver"]["installed"]["nvml_driver_version"] == "580.159.04"  # the mock's reading
