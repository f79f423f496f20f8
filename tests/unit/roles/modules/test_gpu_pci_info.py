"""gpu_pci_info: NVIDIA PCI functions, bound drivers and loaded modules from a fake sysfs."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from ansible.module_utils.testing import patch_module_args


def _device(root: Path, bus_id: str, vendor: str, device: str, pci_class: str, driver: str | None) -> None:
    base = root / "bus" / "pci" / "devices" / bus_id
    base.mkdir(parents=True)
    (base / "vendor").write_text(vendor + "\n")
    (base / "device").write_text(device + "\n")
    (base / "class").write_text(pci_class + "\n")
    if driver:
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (base / "driver").symlink_to(f"../../../../bus/pci/drivers/{driver}")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    _device(tmp_path, "0000:17:00.0", "0x10de", "0x20b0", "0x030200", "nouveau")
    _device(tmp_path, "0000:17:00.1", "0x10de", "0x1aef", "0x040300", "snd_hda_intel")
    _device(tmp_path, "0000:65:00.0", "0x10DE", "0x2335", "0x030200", None)
    _device(tmp_path, "0000:00:1f.0", "0x8086", "0x1234", "0x060100", "lpc_ich")
    (tmp_path / "module" / "nouveau").mkdir(parents=True)
    return tmp_path


def test_collect_reports_nvidia_functions_and_bindings(sysfs: Path, gpu_pci_info: ModuleType) -> None:
    report = gpu_pci_info.collect(str(sysfs), ["0x10de"], ["nouveau", "nova_core", "nvidia"])
    assert [d["bus_id"] for d in report["devices"]] == ["0000:17:00.0", "0000:17:00.1", "0000:65:00.0"]
    first = report["devices"][0]
    assert first == {
        "bus_id": "0000:17:00.0",
        "vendor": "0x10de",
        "device": "0x20b0",
        "class": "0x030200",
        "is_gpu": True,
        "driver": "nouveau",
    }
    assert report["devices"][1]["is_gpu"] is False
    assert report["bindings"] == {"0000:17:00.0": "nouveau", "0000:65:00.0": None}
    assert report["modules"] == {"nouveau": True, "nova_core": False, "nvidia": False}
    assert report["loaded_modules"] == ["nouveau"]
    assert report["pci_readable"] is True


def test_collect_without_pci_tree(tmp_path: Path, gpu_pci_info: ModuleType) -> None:
    report = gpu_pci_info.collect(str(tmp_path), ["0x10de"], ["nouveau"])
    assert report["devices"] == []
    assert report["pci_readable"] is False
    assert report["loaded_modules"] == []


def test_module_runs_read_only_in_check_mode(
    sysfs: Path, gpu_pci_info: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with patch_module_args({"sysfs_root": str(sysfs), "_ansible_check_mode": True}), pytest.raises(SystemExit):
        gpu_pci_info.main()
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False
    assert result["bindings"]["0000:17:00.0"] == "nouveau"
    assert "nouveau" in result["loaded_modules"]
