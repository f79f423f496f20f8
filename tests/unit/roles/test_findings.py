"""bios_check rules (module_utils/findings.py and its findings_*.py groups) on the mock NVML profiles' facts,
fake platform trees and the real 2x H200 capture (tests/data/real-h200/facts.json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import platform_report
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import model_matches

from tests.bios_check_fixtures import (
    A100X8_BUS,
    H200X2_BUS,
    LOG_INVALID_REGION,
    LOG_RMINIT,
    LOG_XID79,
    MIB,
    Gpu,
    Tree,
    build_tree,
    healthy_h200,
)

ROOT = Path(__file__).resolve().parents[3]
COLLECT = "import json, pynvml; from gpuprov.facts import collect_with; print(json.dumps(collect_with(pynvml)))"
H200 = {"expected_gpu_model": "H200", "expected_gpu_count": 2}
A100 = {"expected_gpu_model": "A100-SXM4-80GB", "expected_gpu_count": 8}


@pytest.fixture(scope="module")
def mock_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    from gpuprov.lab.mocknvml import build_library

    out = tmp_path_factory.mktemp("mocknvml")
    build_library(out)
    return out


@pytest.fixture(scope="module")
def profile_facts(mock_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """profile name -> the gpuprov_gpus fact the collector reads from the mock NVML (cached per module)."""
    from gpuprov.lab.mocknvml import mock_environment

    cache: dict[str, dict[str, Any]] = {}

    def get(profile: str) -> dict[str, Any]:
        if profile not in cache:
            env = mock_environment(mock_lib, profile, tmp_path_factory.mktemp(profile))
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / ".collections")])  # this checkout's collection
            proc = subprocess.run(
                [sys.executable, "-c", COLLECT], env=env, capture_output=True, text=True, check=True, timeout=120
            )
            cache[profile] = json.loads(proc.stdout)
        return cache[profile]

    return get


def platform(rules_mod: ModuleType, tmp_path: Path, tree: Tree) -> dict[str, Any]:

    info = platform_report
    build_tree(tmp_path, tree)
    result: dict[str, Any] = info.collect(
        str(tmp_path / "sys"), str(tmp_path / "proc"), str(tmp_path / "kernel.log"), None, False
    )
    return result


def ids(findings: list[dict[str, Any]], severity: str | None = None) -> list[tuple[str, str]]:
    return [(f["id"], f["subject"]) for f in findings if severity is None or f["severity"] == severity]


def a100_tree(**kw: Any) -> Tree:
    tree = Tree(gpus=[Gpu(bus, bar1_size=128 * 1024 * MIB) for bus in A100X8_BUS])
    for key, value in kw.items():
        setattr(tree, key, value)
    return tree


def test_real_h200_has_no_fail_and_cannot_tell_boot_mode(findings_rules: ModuleType, tmp_path: Path) -> None:
    facts = json.loads((ROOT / "tests" / "data" / "real-h200" / "facts.json").read_text())
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, healthy_h200()), facts, H200)
    assert ids(found, "fail") == []
    assert ids(found, "warn") == []
    unknown = [f for f in found if f["id"] == "boot_mode_unknown"]
    assert unknown and unknown[0]["severity"] == "info"
    assert "cannot tell" in unknown[0]["evidence"]


@pytest.mark.parametrize("profile", ["h200x2", "pcie-idle-downclock"])
def test_healthy_profiles_pass(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path, profile: str) -> None:
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, healthy_h200()), profile_facts(profile), H200)
    assert ids(found, "fail") == []
    assert not [f for f in found if f["id"].startswith("pcie")]


def test_pcie_downtrained_fails_with_fix(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    found = findings_rules.evaluate(
        platform(findings_rules, tmp_path, a100_tree()), profile_facts("pcie-downtrained"), A100
    )
    assert ids(found, "fail") == [("pcie_link_degraded", "0000:47:00.0")]
    finding = found[0]
    assert "Gen3 x4" in finding["evidence"]
    assert "reseat the card" in finding["fix"]
    assert "x16 Gen4 slot" in finding["fix"]


def _link(facts: Any, index: int, gen: int, width: int) -> Any:
    """``facts`` with GPU ``index``'s negotiated (maximum and current) link set to Gen``gen`` x``width``."""
    facts = json.loads(json.dumps(facts))
    pcie = facts["gpus"][index]["pcie"]
    pcie.update(gen_max=gen, gen_current=gen, width_max=width, width_current=width)
    return facts


def test_a_link_the_board_is_built_for_is_declared_not_degraded(findings_rules: ModuleType,
                                                                 profile_facts: Any) -> None:
    """Four cards on a board that splits 16 lanes into x8 slots, and a Gen5 GPU in a Gen4 server: degraded unless
    the fleet file declares the slot (bios_check.pcie_width / pcie_gen); a link below the declared one still
    fails."""
    facts = profile_facts("h200x2")
    gen = facts["gpus"][0]["pcie"]["gen_gpu_max"]
    x8 = _link(facts, 0, gen, 8)
    assert ids(findings_rules.evaluate({}, x8, H200), "fail") == [("pcie_link_degraded", H200X2_BUS[0])]
    assert ids(findings_rules.evaluate({}, x8, {**H200, "pcie_width": 8}), "fail") == []
    x4 = findings_rules.evaluate({}, _link(facts, 0, gen, 4), {**H200, "pcie_width": 8})
    assert ids(x4, "fail") == [("pcie_link_degraded", H200X2_BUS[0])]
    assert f"expected at Gen{gen} x8" in x4[0]["evidence"] and f"an x8 Gen{gen} slot" in x4[0]["fix"]

    older = _link(facts, 1, gen - 1, 16)
    assert ids(findings_rules.evaluate({}, older, H200), "fail") == [("pcie_link_degraded", H200X2_BUS[1])]
    assert ids(findings_rules.evaluate({}, older, {**H200, "pcie_gen": gen - 1}), "fail") == []
    # a cap above what the GPU can do changes nothing
    assert ids(findings_rules.evaluate({}, older, {**H200, "pcie_gen": gen + 1}), "fail") == [
        ("pcie_link_degraded", H200X2_BUS[1])]


def test_current_link_below_max_under_load_warns(findings_rules: ModuleType, profile_facts: Any) -> None:
    facts = json.loads(json.dumps(profile_facts("pcie-idle-downclock")))
    facts["gpus"][0]["live"]["utilization_gpu_pct"] = 90
    found = findings_rules.evaluate({}, facts, H200)
    assert ids(found, "warn") == [("pcie_link_low_under_load", "0000:00:06.0")]


def test_above4g_off_fails_naming_bus_ids(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    found = findings_rules.evaluate(
        platform(findings_rules, tmp_path, healthy_h200()), profile_facts("above4g-off"), H200
    )
    assert ids(found, "fail") == [("bar1_too_small", bus) for bus in H200X2_BUS]
    assert all("Above 4G Decoding" in f["fix"] and f["subject"] in f["fix"] for f in found if f["severity"] == "fail")


def test_no_devices_with_rminit_log(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    tree = healthy_h200(kernel_log=LOG_RMINIT + LOG_INVALID_REGION)
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, tree), profile_facts("no-devices"), H200)
    fails = ids(found, "fail")
    assert ("gpus_not_initialised", "0000:00:06.0") in fails
    assert ("gpus_not_initialised", "0000:00:07.0") in fails
    assert ("rm_init_failed", "0000:00:06.0") in fails
    assert ("pci_region_invalid", "0000:00:07.0") in fails
    assert ("gpu_count_mismatch", "gpus") not in fails  # zero GPUs is the firmware fault, not a count typo
    assert all("Above 4G Decoding" in f["fix"] for f in found if f["severity"] == "fail")


@pytest.mark.parametrize(
    ("gpu", "fid"),
    [
        (Gpu("0000:00:06.0", bar1_size=0), "bar1_unassigned"),
        (Gpu("0000:00:06.0", bar1_start=0xE0000000, bar1_size=256 * MIB), "bar1_below_4g"),
    ],
)
def test_sysfs_bar1_faults(findings_rules: ModuleType, tmp_path: Path, gpu: Gpu, fid: str) -> None:
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, Tree(gpus=[gpu])), {}, H200)
    assert ids(found, "fail") == [(fid, "0000:00:06.0")]
    assert "GPU 0000:00:06.0: enable Above 4G Decoding" in found[0]["fix"]


def test_xid79_is_one_hardware_fault_per_bus(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    facts = json.loads(json.dumps(profile_facts("xid79")))
    facts["gpus"][1]["pci_bus_id_sysfs"] = "0000:3b:00.0"  # what the procfs guess gives on a host
    tree = a100_tree(kernel_log=LOG_XID79)
    tree.gpus[1].bus_id = "0000:3b:00.0"
    previous = [{"pci_bus_id_sysfs": "0000:3B:00.0", "uuid": "GPU-lost-one"}]
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, tree), facts, A100, previous)
    assert ids(found, "fail") == [("gpu_lost", "0000:3b:00.0")]
    finding = found[0]
    assert "GPU-lost-one" in finding["evidence"]
    assert "NVML" in finding["evidence"] and "Xid 79" in finding["evidence"]
    assert "this is not a driver install problem" in finding["fix"]
    assert "reboot or power-cycle" in finding["fix"]


def test_log_only_forms_and_other_hardware_xids(findings_rules: ModuleType, profile_facts: Any) -> None:
    events = [
        {"kind": "fallen_off_bus", "bus_id": "0000:b3:00.0", "xid": None},
        {"kind": "xid", "bus_id": "0000:18:00.0", "xid": 48},
        {"kind": "xid", "bus_id": "0000:18:00.0", "xid": 95},
        {"kind": "xid", "bus_id": "0000:19:00.0", "xid": 13},
    ]
    found = findings_rules.evaluate({"kernel_log": {"events": events}}, {}, {})
    assert ids(found, "fail") == [("gpu_hardware_xid", "0000:18:00.0"), ("gpu_lost", "0000:b3:00.0")]


def test_gpu_vanished_from_nvml(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    tree = healthy_h200()
    tree.gpus.append(Gpu("0000:00:08.0"))
    found = findings_rules.evaluate(platform(findings_rules, tmp_path, tree), profile_facts("h200x2"), H200)
    assert ("gpu_lost", "0000:00:08.0") in ids(found, "fail")


def test_secure_boot_plan(findings_rules: ModuleType, tmp_path: Path) -> None:
    p = platform(findings_rules, tmp_path, healthy_h200(efi=True, secure_boot=1))
    plan = {"os_distribution": "Ubuntu", "driver_method": "cuda-repo"}
    found = findings_rules.evaluate(p, {}, plan)
    assert ids(found, "fail") == [("secure_boot_unsigned_modules", "firmware")]
    assert "enroll a MOK key" in found[0]["fix"]
    assert "disable Secure Boot" in found[0]["fix"]
    for ok in ({**plan, "signing_key_set": True}, {**plan, "driver_method": "ubuntu-drivers"}):
        assert ids(findings_rules.evaluate(p, {}, ok), "fail") == []
    # Debian's and Ubuntu's distro packages build the module with DKMS: unsigned, as for the other methods
    for distro in ({"os_distribution": "Debian", "driver_method": "distro"},
                   {"os_distribution": "Ubuntu", "driver_method": "distro"}):  # fmt: skip
        assert ids(findings_rules.evaluate(p, {}, distro), "fail") == [("secure_boot_unsigned_modules", "firmware")]


def test_iommu_and_acs_warn_unless_vfio(findings_rules: ModuleType, tmp_path: Path) -> None:
    bridges = ["0000:02:00.0", "0000:03:08.0"]
    tree = Tree(
        gpus=[Gpu("0000:04:00.0", bridges=bridges), Gpu("0000:05:00.0", bridges=bridges)],
        cmdline="ro intel_iommu=on",
        iommu_groups=20,
        bridge_acs={"0000:03:08.0": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]},
    )
    p = platform(findings_rules, tmp_path, tree)
    found = findings_rules.evaluate(p, {}, {})
    assert ids(found, "warn") == [("acs_redirect", "0000:03:08.0"), ("iommu_translating", "iommu")]
    assert "iommu=pt" in next(f for f in found if f["id"] == "iommu_translating")["fix"]
    assert ids(findings_rules.evaluate(p, {}, {"vfio_hypervisor": True}), "warn") == []
    assert ids(findings_rules.evaluate(p, {}, {"severity": {"acs_redirect": "fail"}}), "fail") == [
        ("acs_redirect", "0000:03:08.0")
    ]


def test_capacity(findings_rules: ModuleType, profile_facts: Any, tmp_path: Path) -> None:
    p = platform(findings_rules, tmp_path, healthy_h200(mem_kb=32_000_000, disks={"sda": True, "nvme0n1": False}))
    facts = profile_facts("h200x2")
    found = findings_rules.evaluate(p, facts, {**H200, "psu_watts": 2400})
    assert ids(found, "warn") == [("disk_rotational", "sda"), ("ram_low", "ram")]
    assert ids(found, "fail") == [("psu_headroom", "psu")]  # 2x700 + 700 W needs 2625 W
    assert ids(findings_rules.evaluate(p, facts, {**H200, "psu_watts": 2700}), "fail") == []


def test_count_and_model_mismatch(findings_rules: ModuleType, profile_facts: Any) -> None:
    found = findings_rules.evaluate(
        {}, profile_facts("h200x2"), {"expected_gpu_model": "A100-SXM4-80GB", "expected_gpu_count": 4}
    )
    assert ids(found, "fail") == [("gpu_count_mismatch", "gpus")] + [("gpu_model_mismatch", b) for b in H200X2_BUS]


@pytest.mark.parametrize(
    ("want", "have", "ok"),
    [
        ("H200", "NVIDIA H200", True),
        ("H200", "NVIDIA H200 NVL", True),
        ("RTX-3090", "NVIDIA GeForce RTX 3090", True),
        ("V100-SXM2-32GB", "Tesla V100-SXM2-32GB", True),
        ("H100-PCIe", "NVIDIA H200", False),
        ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", True),  # what an H100 SXM5 reports (a real H100 VM)
        ("H100-PCIe", "NVIDIA H100 PCIe", True),
        ("H100-NVL", "NVIDIA H100 NVL", True),
        ("A100-PCIe-80GB", "NVIDIA A100 80GB PCIe", True),
        ("V100-PCIe", "Tesla V100-PCIE-32GB", True),
        ("GH200", "NVIDIA GH200 480GB", True),
        ("RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", True),
        ("RTX-PRO-6000-Blackwell-Server", "NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
        ("RTX-PRO-6000-Blackwell", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", True),
        ("RTX-PRO-6000-Blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition", False),
        ("A10", "NVIDIA A100-SXM4-80GB", False),
        ("L40", "NVIDIA L40S", False),
        ("L4", "NVIDIA L40S", False),
        ("H20", "NVIDIA H200", False),
        ("H100-SXM5-80GB", "NVIDIA H100 PCIe", False),
    ],
)
def test_model_matching(want: str, have: str, ok: bool) -> None:
    assert model_matches(want, have) is ok


def test_fail_message_lists_each_finding_and_fix(findings_rules: ModuleType, profile_facts: Any) -> None:
    found = findings_rules.evaluate({}, profile_facts("above4g-off"), H200)
    bad = findings_rules.failing(found, ["fail"])
    text = findings_rules.fail_message(bad, ["fail"])
    assert text.count("\n    fix: ") == 2
    assert "0000:00:06.0" in text and "0000:00:07.0" in text
    assert findings_rules.failing(found, ["fail", "info"]) != bad


def test_real_h200_host_has_no_failing_finding(findings_rules: ModuleType) -> None:
    """The platform bios_check read on the real H200 VM (tests/data/real-h200) with that host's NVML facts."""

    real = Path(__file__).resolve().parents[2] / "data" / "real-h200"
    platform = json.loads((real / "bios_check-report.json").read_text())["platform"]
    gpus = json.loads((real / "facts.json").read_text())
    settings = {"expected_gpu_model": "H200", "expected_gpu_count": 2}
    failing = [f for f in findings_rules.evaluate(platform, gpus, settings) if f["severity"] == "fail"]
    assert failing == []


def test_psu_unknown_says_the_gpus_draw_only_when_nvml_gives_their_limits(
    findings_rules: ModuleType, profile_facts: Any, tmp_path: Path
) -> None:
    p = platform(findings_rules, tmp_path, healthy_h200())
    with_nvml = [f for f in findings_rules.evaluate(p, profile_facts("h200x2"), H200) if f["id"] == "psu_unknown"]
    assert "GPUs draw up to 1400 W" in with_nvml[0]["evidence"]  # 2 x 700 W (the mock NVML's H200 limits)
    without = [f for f in findings_rules.evaluate(p, {"available": False}, H200) if f["id"] == "psu_unknown"]
    assert without[0]["evidence"] == "psu_watts is not set in the fleet file (and NVML gives no GPU power limit)"
