"""platform_info's reading code (module_utils/platform_*.py) on fake sysfs/procfs trees and kernel-log fixtures
(tests/bios_check_fixtures.py)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import platform_pci

from tests.bios_check_fixtures import (
    GIB,
    LOG_FALLEN_NO_XID,
    LOG_INVALID_REGION,
    LOG_RMINIT,
    LOG_XID79,
    MIB,
    Gpu,
    Tree,
    build_tree,
    healthy_h200,
)


def collect(mod: ModuleType, root: Path, **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = mod.collect(
        str(root / "sys"), str(root / "proc"), str(root / "kernel.log"), kwargs.get("lspci"), False
    )
    return result


def test_healthy_h200_vm(platform_info: ModuleType, tmp_path: Path) -> None:
    p = collect(platform_info, build_tree(tmp_path, healthy_h200()))
    assert p["boot"]["mode"] == "unknown"
    assert p["secure_boot"]["enabled"] is None
    assert p["pci"]["gpu_functions"] == ["0000:00:06.0", "0000:00:07.0"]
    bar1 = p["pci"]["nvidia_functions"][0]["bar1"]
    assert bar1 == {"assigned": True, "start": 0x38000000000, "size_bytes": 256 * GIB, "above_4g": True}
    assert p["pci"]["nvidia_module_loaded"] is True
    assert p["ram"]["total_bytes"] == 263_000_000 * 1024
    assert p["disks"] == [
        {"name": "nvme0n1", "nvme": True, "rotational": False, "removable": False, "size_bytes": 3750748848 * 512}
    ]
    assert p["kernel_log"]["available"] is True
    assert p["kernel_log"]["events"] == []


def test_bare_metal_without_efi_is_legacy(platform_info: ModuleType, tmp_path: Path) -> None:
    p = collect(platform_info, build_tree(tmp_path, healthy_h200(hypervisor=False)))
    assert p["boot"]["mode"] == "legacy"


def test_missing_sysfs_cannot_tell_and_does_not_crash(platform_info: ModuleType, tmp_path: Path) -> None:
    p = platform_info.collect(str(tmp_path / "nope"), str(tmp_path / "nope"), None, None, False)
    assert p["boot"]["mode"] == "unknown"
    assert p["pci"]["readable"] is False
    assert p["kernel_log"]["available"] is False
    assert p["ram"]["total_bytes"] is None


@pytest.mark.parametrize(("value", "enabled"), [(1, True), (0, False)])
def test_secure_boot_variable(platform_info: ModuleType, tmp_path: Path, value: int, enabled: bool) -> None:
    p = collect(platform_info, build_tree(tmp_path, healthy_h200(efi=True, secure_boot=value)))
    assert p["boot"]["mode"] == "uefi"
    assert p["secure_boot"]["enabled"] is enabled
    assert p["secure_boot"]["source"] == "efivars"


def test_efi_without_variable_cannot_tell(platform_info: ModuleType, tmp_path: Path) -> None:
    p = collect(platform_info, build_tree(tmp_path, healthy_h200(efi=True)))
    assert p["secure_boot"]["enabled"] is None


@pytest.mark.parametrize(
    ("cmdline", "groups", "gtype", "mode"),
    [
        ("ro intel_iommu=on", 12, None, "translated"),
        ("ro amd_iommu=on iommu=pt", 12, None, "passthrough"),
        ("ro", 12, "DMA-FQ", "translated"),
        ("ro", 12, "identity", "passthrough"),
        ("ro intel_iommu=off", 0, None, "off"),
    ],
)
def test_iommu_mode(
    platform_info: ModuleType, tmp_path: Path, cmdline: str, groups: int, gtype: str | None, mode: str
) -> None:
    p = collect(
        platform_info, build_tree(tmp_path, healthy_h200(cmdline=cmdline, iommu_groups=groups, iommu_type=gtype))
    )
    assert p["iommu"]["mode"] == mode
    assert p["iommu"]["groups"] == groups


def test_empty_bar1_is_unassigned(platform_info: ModuleType, tmp_path: Path) -> None:
    tree = Tree(gpus=[Gpu("0000:01:00.0", bar1_size=0)])
    bar1 = collect(platform_info, build_tree(tmp_path, tree))["pci"]["nvidia_functions"][0]["bar1"]
    assert bar1["assigned"] is False
    assert bar1["size_bytes"] == 0


def test_256m_bar1_below_4g(platform_info: ModuleType, tmp_path: Path) -> None:
    tree = Tree(gpus=[Gpu("0000:01:00.0", bar1_start=0xE0000000, bar1_size=256 * MIB)])
    bar1 = collect(platform_info, build_tree(tmp_path, tree))["pci"]["nvidia_functions"][0]["bar1"]
    assert bar1 == {"assigned": True, "start": 0xE0000000, "size_bytes": 256 * MIB, "above_4g": False}


def test_rotational_disks(platform_info: ModuleType, tmp_path: Path) -> None:
    p = collect(
        platform_info, build_tree(tmp_path, healthy_h200(disks={"nvme0n1": False, "sda": True, "loop0": False}))
    )
    assert [(d["name"], d["nvme"], d["rotational"]) for d in p["disks"]] == [
        ("nvme0n1", True, False),
        ("sda", False, True),
    ]


def test_acs_bridges_upstream_from_config_space(platform_info: ModuleType, tmp_path: Path) -> None:
    bridges = ["0000:00:01.0", "0000:02:00.0", "0000:03:08.0"]
    tree = Tree(
        gpus=[Gpu("0000:04:00.0", bridges=bridges), Gpu("0000:05:00.0", bridges=[*bridges[:2], "0000:03:10.0"])],
        bridge_acs={
            "0000:03:08.0": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
            "0000:03:10.0": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
        },
    )
    p = collect(platform_info, build_tree(tmp_path, tree))
    by_bus = {b["bus_id"]: b for b in p["pci"]["bridges"]}
    assert set(by_bus) == {"0000:00:01.0", "0000:02:00.0", "0000:03:08.0", "0000:03:10.0"}
    assert by_bus["0000:03:08.0"]["acs_ctl"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert by_bus["0000:03:08.0"]["gpus"] == ["0000:04:00.0"]
    assert by_bus["0000:00:01.0"]["acs_ctl"] == []
    assert by_bus["0000:00:01.0"]["gpus"] == ["0000:04:00.0", "0000:05:00.0"]


def test_acs_from_lspci_when_config_space_is_short(platform_info: ModuleType, tmp_path: Path) -> None:
    tree = Tree(gpus=[Gpu("0000:04:00.0", bridges=["0000:03:08.0"])])
    build_tree(tmp_path, tree)
    config = next((tmp_path / "sys" / "devices").rglob("0000:03:08.0/config"))
    config.write_bytes(config.read_bytes()[:64])  # unprivileged read: header only
    lspci = tmp_path / "lspci.txt"
    lspci.write_text(
        "0000:03:08.0 PCI bridge [0604]: PLX Technology PEX 8747\n"
        "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+\n"
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
    )
    p = collect(platform_info, tmp_path, lspci=str(lspci))
    bridge = p["pci"]["bridges"][0]
    assert bridge["acs_ctl"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert bridge["source"] == "lspci"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (LOG_RMINIT, [("rm_init_failed", "0000:00:06.0", None)]),
        (LOG_INVALID_REGION, [("invalid_region", "0000:00:07.0", None)]),
        (LOG_XID79, [("xid", "0000:3b:00.0", 79), ("fallen_off_bus", "0000:3b:00.0", None)]),
        (LOG_FALLEN_NO_XID, [("fallen_off_bus", "0000:b3:00.0", None)]),
        (
            [
                "kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE (double bit error) ECC Error",
                "kernel: usb 1-1: new device",
            ],
            [("xid", "0000:18:00.0", 48)],
        ),
    ],
)
def test_kernel_log_events(
    platform_info: ModuleType, tmp_path: Path, lines: list[str], expected: list[tuple[str, str, int | None]]
) -> None:
    p = collect(platform_info, build_tree(tmp_path, healthy_h200(kernel_log=lines)))
    assert [(e["kind"], e["bus_id"], e["xid"]) for e in p["kernel_log"]["events"]] == expected


# The sysfs resource file of a real H200 (device host, 2026-11-30): BAR0 is a 64-bit BAR, so it takes
# register slots 0 and 1 and the 256 GiB framebuffer aperture ("BAR1") sits at resource index 2.
REAL_H200_RESOURCE = "\n".join([
    "0x0000104040000000 0x0000104040ffffff 0x000000000014220c",
    "0x0000000000000000 0x0000000000000000 0x0000000000000000",
    "0x0000100000000000 0x0000103fffffffff 0x000000000014220c",
    "0x0000000000000000 0x0000000000000000 0x0000000000000000",
    "0x000010403e000000 0x000010403fffffff 0x000000000014220c",
    "0x0000000000000000 0x0000000000000000 0x0000000000000000",
]) + "\n"


def test_bar1_of_a_gpu_with_64_bit_bar0(tmp_path: Path) -> None:
    """Regression: on the real H200 host the BAR1 aperture was misread as unmapped (slot 1 is BAR0's upper half)."""
    resource = tmp_path / "resource"
    resource.write_text(REAL_H200_RESOURCE, encoding="utf-8")
    bars = platform_pci.read_resources(str(resource))
    assert platform_pci.nvidia_bar1_index(bars) == 2
    bar1 = next(b for b in bars if b["index"] == 2)
    assert bar1["size"] == 256 * 1024**3
    assert bar1["start"] >= 4 * 1024**3


def test_daemons_only_when_asked(platform_info: ModuleType, tmp_path: Path) -> None:
    """The running NVIDIA daemons are reported only on request (doctor asks): bios_check's report holds the
    platform alone, so it does not change between two runs of an unchanged host when a daemon has started."""
    root = build_tree(tmp_path, healthy_h200(daemons=["nvidia-persistenced", "nv-fabricmanager", "sshd"]))
    assert "daemons" not in collect(platform_info, root)
    asked = platform_info.collect(str(root / "sys"), str(root / "proc"), str(root / "kernel.log"), None, False,
                                  daemons=True)
    assert asked["daemons"] == ["nv-fabricmanager", "nvidia-persistenced"]
