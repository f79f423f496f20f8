"""module_utils/kernels: kernel listing, module lookup, sysfs reads."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def test_version_key_orders_kernels_naturally(kernels_utils: ModuleType) -> None:
    versions = ["5.15.0-119-generic", "5.4.0-190-generic", "6.1.0-28-amd64", "5.15.0-9-generic"]
    assert sorted(versions, key=kernels_utils.version_key) == [
        "5.4.0-190-generic",
        "5.15.0-9-generic",
        "5.15.0-119-generic",
        "6.1.0-28-amd64",
    ]


def test_installed_kernels_need_modules_and_vmlinuz(tmp_path: Path, kernels_utils: ModuleType) -> None:
    modules, boot = tmp_path / "lib" / "modules", tmp_path / "boot"
    for version in ("5.4.0-190-generic", "5.15.0-119-generic", "6.8.0-1-leftover"):
        (modules / version).mkdir(parents=True)
    boot.mkdir()
    (boot / "vmlinuz-5.4.0-190-generic").touch()
    (boot / "vmlinuz-5.15.0-119-generic").touch()
    (boot / "vmlinuz-7.0.0-no-modules").touch()
    assert kernels_utils.installed_kernels(str(modules), str(boot)) == ["5.4.0-190-generic", "5.15.0-119-generic"]


def test_installed_kernels_without_modules_dir(tmp_path: Path, kernels_utils: ModuleType) -> None:
    assert kernels_utils.installed_kernels(str(tmp_path / "none"), str(tmp_path)) == []


def test_find_modules_normalises_names_and_suffixes(tmp_path: Path, kernels_utils: ModuleType) -> None:
    drm = tmp_path / "kernel" / "drivers" / "gpu"
    (drm / "drm" / "nouveau").mkdir(parents=True)
    (drm / "nova-core").mkdir(parents=True)
    (drm / "drm" / "nouveau" / "nouveau.ko.xz").touch()
    (drm / "nova-core" / "nova-core.ko.zst").touch()
    (tmp_path / "kernel" / "nova_drm.txt").touch()
    found = kernels_utils.find_modules(str(tmp_path), ["nouveau", "nova_core", "nova_drm"])
    assert found == {"nouveau": True, "nova_core": True, "nova_drm": False}


def test_find_modules_missing_tree(tmp_path: Path, kernels_utils: ModuleType) -> None:
    assert kernels_utils.find_modules(str(tmp_path / "x"), ["nouveau"]) == {"nouveau": False}


def test_read_attr_and_link_basename(tmp_path: Path, kernels_utils: ModuleType) -> None:
    (tmp_path / "vendor").write_text("0x10de\n")
    (tmp_path / "driver").symlink_to("../../drivers/nouveau")
    assert kernels_utils.read_attr(str(tmp_path / "vendor")) == "0x10de"
    assert kernels_utils.read_attr(str(tmp_path / "absent")) is None
    assert kernels_utils.link_basename(str(tmp_path / "driver")) == "nouveau"
    assert kernels_utils.link_basename(str(tmp_path / "vendor")) is None
