"""Secure Boot, ACS/IOMMU, lost GPUs, large-BAR faults (docs/field-failures.md) and the PCIe profiles:
playbooks/bios_check.yml (and site.yml for Secure Boot) in a debian12
lab container through ansible-runner's Python API, with the mock NVML profile installed in the container and
sysfs/procfs/kernel-log fixture trees copied in (tests/bios_check_fixtures.py). Outcomes come from the runner's
stats and events and from the report file, never from stdout.

Not simulated: real firmware settings, a real PCIe link or Xid, journalctl on the host kernel (the container
shares it), config-space ACS of real bridges; each is replaced by the fixture the module reads the same way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprov.rolevars import with_role_variables
from tests.bios_check_fixtures import (
    A100X8_BUS,
    H200X2_BUS,
    LOG_RMINIT,
    LOG_XID79,
    Gpu,
    Tree,
    build_tree,
    healthy_h200,
    tar_bytes,
)
from tests.integration.kernel_lab import exec_ok, plain_runner_env

ROOT = Path(__file__).resolve().parents[2]
FIX = "/opt/gpuprov-bios"
REPORT = "/var/lib/gpuprov/bios_check.json"
ASSERT_TASK = "Fail the host on findings of a failing severity"
PROBE_TASK = "Read the host, evaluate the findings and write the report"
GIB = 1024**3

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab_host(lab_images: dict[str, str]) -> Iterator[Any]:
    """One running debian12 lab container shared by the cases (each case replaces NVML profile and fixtures)."""
    import docker

    client = docker.from_env()
    container = client.containers.run(
        lab_images["debian12"],
        command="/lib/systemd/systemd",
        name=f"gpuprov-bios-{uuid.uuid4().hex[:8]}",
        detach=True,
        cap_add=["SYS_ADMIN", "NET_ADMIN"],
        security_opt=["seccomp=unconfined"],
        tmpfs={"/run": "", "/run/lock": ""},
        volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
    )
    try:
        yield container
    finally:
        container.remove(force=True)


def _prepare(container: Any, tmp_path: Path, profile: str, tree: Tree) -> None:
    """Install the mock NVML ``profile`` and the fixture tree; remove the previous report."""
    from gpuprov.lab.mocknvml import install

    root = tmp_path / "rootfs"
    install(root, profile)
    assert container.put_archive("/", tar_bytes(root, "."))
    build_tree(tmp_path / "fixture", tree)
    exec_ok(container, f"rm -rf {FIX} {REPORT} && mkdir -p /opt && ldconfig")
    assert container.put_archive("/opt", tar_bytes(tmp_path / "fixture", Path(FIX).name))


def _run(
    tmp_path: Path,
    container: Any,
    label: str,
    playbook: str = "bios_check.yml",
    extravars: dict[str, Any] | None = None,
    check: bool = False,
) -> Any:
    import ansible_runner

    (tmp_path / label).mkdir()
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
    variables = with_role_variables({
        "bios_check_sysfs_root": f"{FIX}/sys",
        "bios_check_proc_root": f"{FIX}/proc",
        "bios_check_kernel_log_path": f"{FIX}/kernel.log",
        **(extravars or {}),
    })
    return ansible_runner.run(
        private_data_dir=str(tmp_path / label),
        project_dir=str(ROOT / "playbooks"),
        playbook=playbook,
        inventory=inventory,
        extravars=variables,
        cmdline="--check" if check else None,
        envvars=plain_runner_env(),
        quiet=True,
    )


def _stat(runner: Any, key: str, host: str) -> int:
    return int((runner.stats or {}).get(key, {}).get(host, 0))


def _findings(runner: Any) -> list[dict[str, Any]]:
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == PROBE_TASK:
            facts = data["res"]["ansible_facts"]
            assert facts["gpuprov_findings"] == [dict(f, role="bios_check") for f in facts["bios_check_findings"]]
            result: list[dict[str, Any]] = facts["bios_check_findings"]
            return result
    raise AssertionError("the findings task did not run")


def _failure_msg(runner: Any) -> str:
    msgs = [
        e["event_data"]["res"].get("msg", "")
        for e in runner.events
        if e.get("event") == "runner_on_failed" and e["event_data"].get("task") == ASSERT_TASK
    ]
    assert len(msgs) == 1, "the final assert did not fail the host"
    return str(msgs[0])


def _fails(findings: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["id"], f["subject"]) for f in findings if f["severity"] == "fail"]


def _report(container: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(exec_ok(container, f"cat {REPORT}"))
    return result


H200 = {"gpuprov_gpus_model": "H200", "gpuprov_gpus_count": 2}
A100 = {"gpuprov_gpus_model": "A100-SXM4-80GB", "gpuprov_gpus_count": 8}


def test_h200x2_passes_records_bar1_and_is_idempotent(tmp_path: Path, lab_host: Any) -> None:
    _prepare(lab_host, tmp_path, "h200x2", healthy_h200())
    check = _run(tmp_path, lab_host, "check", extravars=H200, check=True)
    assert check.status == "successful"
    assert _stat(check, "changed", lab_host.name) == 1  # under --check the report would be written, and is not
    exec_ok(lab_host, f"test ! -e {REPORT}")
    first = _run(tmp_path, lab_host, "first", extravars=H200)
    assert first.status == "successful"
    assert _fails(_findings(first)) == []
    report = _report(lab_host)
    assert [(g["pci_bus_id_sysfs"], g["bar1_total_bytes"]) for g in report["gpus"]] == [
        (bus, 256 * GIB) for bus in H200X2_BUS
    ]
    assert report["platform"]["boot"]["mode"] == "unknown"
    assert exec_ok(lab_host, f"stat -c %a {REPORT}").strip() == "644"
    second = _run(tmp_path, lab_host, "second", extravars=H200)
    assert second.status == "successful"
    assert _stat(second, "changed", lab_host.name) == 0


def test_pcie_idle_downclock_passes(tmp_path: Path, lab_host: Any) -> None:
    _prepare(lab_host, tmp_path, "pcie-idle-downclock", healthy_h200())
    runner = _run(tmp_path, lab_host, "idle", extravars=H200)
    assert runner.status == "successful"
    assert not [f for f in _findings(runner) if f["id"].startswith("pcie")]


def test_pcie_downtrained_fails_with_fix(tmp_path: Path, lab_host: Any) -> None:
    _prepare(lab_host, tmp_path, "pcie-downtrained", Tree(gpus=[Gpu(b, bar1_size=128 * GIB) for b in A100X8_BUS]))
    runner = _run(tmp_path, lab_host, "downtrained", extravars=A100)
    assert runner.status == "failed"
    assert _stat(runner, "failures", lab_host.name) == 1
    assert _fails(_findings(runner)) == [("pcie_link_degraded", "0000:47:00.0")]
    msg = _failure_msg(runner)
    assert "pcie_link_degraded 0000:47:00.0" in msg and "reseat the card" in msg
    assert _report(lab_host)["failed"] is True


@pytest.mark.parametrize(
    ("profile", "tree", "expected"),
    [
        ("above4g-off", healthy_h200(), [("bar1_too_small", b) for b in H200X2_BUS]),
        (
            "no-devices",
            healthy_h200(kernel_log=LOG_RMINIT),
            [("gpus_not_initialised", b) for b in H200X2_BUS] + [("rm_init_failed", H200X2_BUS[0])],
        ),
        (
            "h200x2",
            Tree(gpus=[Gpu(H200X2_BUS[0], bar1_size=0), Gpu(H200X2_BUS[1])]),
            [("bar1_unassigned", H200X2_BUS[0])],
        ),
    ],
    ids=["above4g-off", "no-devices", "empty-bar1"],
)
def test_large_bar_firmware_fault(
    tmp_path: Path, lab_host: Any, profile: str, tree: Tree, expected: list[tuple[str, str]]
) -> None:
    _prepare(lab_host, tmp_path, profile, tree)
    runner = _run(tmp_path, lab_host, profile, extravars=H200)
    assert runner.status == "failed"
    assert sorted(_fails(_findings(runner))) == sorted(expected)
    msg = _failure_msg(runner)
    for _fid, bus in expected:
        assert f"GPU {bus}: " in msg
    assert "enable Above 4G Decoding" in msg


def test_xid79_is_a_hardware_fault(tmp_path: Path, lab_host: Any) -> None:
    buses = [b if i != 1 else "0000:3b:00.0" for i, b in enumerate(A100X8_BUS)]
    tree = Tree(gpus=[Gpu(b, bar1_size=128 * GIB) for b in buses], kernel_log=LOG_XID79, proc_gpus=buses)
    _prepare(lab_host, tmp_path, "xid79", tree)
    runner = _run(tmp_path, lab_host, "xid79", extravars=A100)
    assert runner.status == "failed"
    assert _fails(_findings(runner)) == [("gpu_lost", "0000:3b:00.0")]  # NVML and both log lines: one report
    msg = _failure_msg(runner)
    assert "hardware fault" in msg and "this is not a driver install problem" in msg


def test_acs_and_iommu_warn(tmp_path: Path, lab_host: Any) -> None:
    bridges = {
        "0000:03:08.0": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
        "0000:03:10.0": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
    }
    tree = healthy_h200(cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on", iommu_groups=16, bridge_acs=bridges)
    tree.gpus[0].bridges = ["0000:02:00.0", "0000:03:08.0"]
    tree.gpus[1].bridges = ["0000:02:00.0", "0000:03:10.0"]
    _prepare(lab_host, tmp_path, "h200x2", tree)
    runner = _run(tmp_path, lab_host, "acs-iommu", extravars=H200)
    assert runner.status == "successful"  # warn does not fail by default
    warns = [(f["id"], f["subject"]) for f in _findings(runner) if f["severity"] == "warn"]
    assert warns == [("acs_redirect", "0000:03:08.0"), ("acs_redirect", "0000:03:10.0"), ("iommu_translating", "iommu")]
    strict = _run(tmp_path, lab_host, "acs-iommu-strict", extravars={**H200, "bios_check_fail_on": ["fail", "warn"]})
    assert strict.status == "failed"
    assert "iommu=pt" in _failure_msg(strict)


def test_secure_boot_without_signing_plan_stops_before_install(tmp_path: Path, lab_host: Any) -> None:
    _prepare(lab_host, tmp_path, "driver-not-loaded", healthy_h200(efi=True, secure_boot=1, driver_loaded=False))
    plan = {"gpuprov_driver_method": "cuda-repo"}
    runner = _run(tmp_path, lab_host, "secure-boot", playbook="site.yml", extravars=plan)
    assert runner.status == "failed"
    assert _fails(_findings(runner)) == [("secure_boot_unsigned_modules", "firmware")]
    assert "enroll a MOK key" in _failure_msg(runner)
    assert _stat(runner, "changed", lab_host.name) == 1  # the report only
    later = [
        e
        for e in runner.events
        if e.get("event", "").startswith("runner_on_")
        and e["event_data"].get("role") not in (None, "bios_check")
    ]
    assert later == [], "a role after bios_check ran on the failed host"
    signed = _run(
        tmp_path,
        lab_host,
        "secure-boot-key",
        extravars={**plan, "gpuprov_secure_boot_mok_key": "/etc/k.priv", "gpuprov_secure_boot_mok_cert": "/etc/k.der"},
    )
    assert signed.status == "successful"
    assert not any("/etc/k.priv" in json.dumps(e.get("event_data", {}).get("res", {})) for e in signed.events)
