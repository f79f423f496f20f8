"""kernel_dkms_info: `dkms status` formats of several DKMS versions, package split, problems."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.gpuprov.gpu.plugins.modules import kernel_dkms_info


@pytest.fixture(scope="module")
def info() -> ModuleType:
    return kernel_dkms_info


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # DKMS 2.2-2.7 (Ubuntu 18.04/20.04 early): comma-separated name and version
        ("nvidia, 535.183.01, 5.15.0-105-generic, x86_64: installed",
         ("nvidia", "535.183.01", "5.15.0-105-generic", "x86_64", "installed", "")),
        # DKMS 2.8+ / 3.x: name/version
        ("nvidia/535.183.01, 5.15.0-119-generic, x86_64: installed",
         ("nvidia", "535.183.01", "5.15.0-119-generic", "x86_64", "installed", "")),
        ("nvidia/535.183.01: added", ("nvidia", "535.183.01", None, None, "added", "")),
        ("nvidia, 535.183.01: added", ("nvidia", "535.183.01", None, None, "added", "")),
        ("nvidia/535.183.01, 6.1.0-50-amd64, x86_64: built", ("nvidia", "535.183.01", "6.1.0-50-amd64", "x86_64",
                                                              "built", "")),
        # trailing notes
        ("nvidia/550.54.15, 6.8.0-45-generic, x86_64: installed (WARNING! Diff between built and installed module!)",
         ("nvidia", "550.54.15", "6.8.0-45-generic", "x86_64", "installed",
          "(WARNING! Diff between built and installed module!)")),
        ("nvidia/535, 4.18.0-513.el8.x86_64, x86_64: installed-weak from 4.18.0-477.el8.x86_64",
         ("nvidia", "535", "4.18.0-513.el8.x86_64", "x86_64", "installed-weak", "from 4.18.0-477.el8.x86_64")),
        ("nvidia-fs/2.17.5, 5.15.0-105-generic, x86_64: installed (original_module exists)",
         ("nvidia-fs", "2.17.5", "5.15.0-105-generic", "x86_64", "installed", "(original_module exists)")),
    ],
)
def test_parse_dkms_status_formats(info: ModuleType, line: str, expected: tuple[object, ...]) -> None:
    (entry,) = info.parse_dkms_status(line + "\n")
    assert tuple(entry[k] for k in ("module", "version", "kernel", "arch", "state", "note")) == expected


def test_parse_dkms_status_skips_noise(info: ModuleType) -> None:
    text = "Error! Could not locate dkms.conf file.\nFile: /var/lib/dkms/x/1/source/dkms.conf does not exist.\n\n"
    assert info.parse_dkms_status(text) == []


def test_split_packages_and_headers_meta_drift(info: ModuleType) -> None:
    packages = [
        "linux-image-5.4.0-190-generic", "linux-image-5.15.0-105-generic", "linux-image-unsigned-5.15.0-1060-aws",
        "linux-headers-5.15.0-119-generic", "linux-headers-5.15.0-119", "linux-headers-6.1.0-50-common",
        "linux-headers-generic-hwe-20.04", "linux-headers-generic", "linux-image-generic", "linux-image-aws",
    ]
    images, image_metas, headers, headers_metas = info.split_packages(packages)
    assert sorted(images) == ["5.15.0-105-generic", "5.15.0-1060-aws", "5.4.0-190-generic"]
    assert headers == ["5.15.0-119-generic"]  # the arch-independent halves are not kernels
    assert image_metas == ["linux-image-aws", "linux-image-generic"]
    assert info.headers_metas_without_image(image_metas, headers_metas) == ["linux-headers-generic-hwe-20.04"]


def _tree(root: Path, kernels: dict[str, bool], module_for: list[str]) -> dict[str, object]:
    for k, headers in kernels.items():
        (root / "lib/modules" / k).mkdir(parents=True)
        (root / "boot").mkdir(exist_ok=True)
        (root / "boot" / f"vmlinuz-{k}").write_text("")
        if headers:
            (root / "usr/src" / f"linux-headers-{k}").mkdir(parents=True)
            (root / "lib/modules" / k / "build").symlink_to(root / "usr/src" / f"linux-headers-{k}")
    for k in module_for:
        (root / "lib/modules" / k / "updates/dkms").mkdir(parents=True)
        (root / "lib/modules" / k / "updates/dkms/nvidia.ko").write_text("")
    return {"modules_dir": str(root / "lib/modules"), "boot_dir": str(root / "boot"),
            "src_dir": str(root / "usr/src"), "modules": ["nvidia"]}


def test_headers_for_another_kernel_matrix_and_problem_message(info: ModuleType, tmp_path: Path) -> None:
    params = _tree(tmp_path, {"5.4.0-190-generic": True, "5.15.0-105-generic": False}, ["5.4.0-190-generic"])
    entries = info.parse_dkms_status(
        "nvidia/535.183.01, 5.15.0-119-generic, x86_64: installed\n"
        "nvidia/535.183.01, 5.4.0-190-generic, x86_64: installed\n"
    )
    versions = {"nvidia": ["535.183.01"]}

    def modinfo(kernel: str, name: str) -> tuple[str | None, str]:
        return f"/lib/modules/{kernel}/updates/dkms/{name}.ko", ""

    rows = [info.kernel_entry(k, params, entries, versions, modinfo)
            for k in ("5.4.0-190-generic", "5.15.0-105-generic")]
    rows[1]["running"] = True
    assert rows[0]["headers_present"] and rows[0]["modules"]["nvidia"]["ok"]
    mod = rows[1]["modules"]["nvidia"]
    assert not rows[1]["headers_present"]
    assert (mod["dkms_state"], mod["file"], mod["ok"]) == ("added", False, False)
    assert info.problems_of(rows, ["5.15.0-119-generic"]) == [
        "no nvidia module for 5.15.0-105-generic (running): linux-headers-5.15.0-105-generic not installed; "
        "installed headers are for 5.15.0-119-generic"
    ]


def test_module_file_without_modinfo_is_not_ok(info: ModuleType, tmp_path: Path) -> None:
    params = _tree(tmp_path, {"6.1.0-50-amd64": True}, ["6.1.0-50-amd64"])
    entries = info.parse_dkms_status("nvidia/535.183.01, 6.1.0-50-amd64, x86_64: installed\n")
    row = info.kernel_entry("6.1.0-50-amd64", params, entries, {"nvidia": ["535.183.01"]}, lambda k, n: (None, ""))
    assert row["modules"]["nvidia"]["file"] is True
    assert row["modules"]["nvidia"]["ok"] is False


def test_problem_for_the_next_boot_kernel_names_the_running_kernel(info: ModuleType, tmp_path: Path) -> None:
    """A kernel installed by an upgrade, booted next, without a module: the message names both kernels."""
    params = _tree(tmp_path, {"5.15.0-105-generic": True, "5.15.0-119-generic": True}, ["5.15.0-105-generic"])
    entries = info.parse_dkms_status("nvidia/535.183.01, 5.15.0-105-generic, x86_64: installed\n")
    rows = [info.kernel_entry(k, params, entries, {"nvidia": ["535.183.01"]}, lambda k, n: (f"/x/{n}.ko", ""))
            for k in ("5.15.0-105-generic", "5.15.0-119-generic")]
    rows[0]["running"] = True
    rows[1].update(default=True, pending=True)
    assert info.problems_of(rows, ["5.15.0-105-generic", "5.15.0-119-generic"], "5.15.0-105-generic") == [
        "no nvidia module for 5.15.0-119-generic (default, pending; running 5.15.0-105-generic): DKMS state added "
        "for nvidia/535.183.01, module file absent"
    ]


def test_packaged_module_counts_only_when_asked(info: ModuleType, tmp_path: Path) -> None:
    """Canonical's precompiled module (kernel/nvidia-580srv/nvidia.ko, no DKMS entry) is present with ``packaged``;
    without it the kernel still lacks a module, and a DKMS-built one never counts as packaged."""
    params = _tree(tmp_path, {"6.8.0-87-generic": False}, [])

    def modinfo(kernel: str, name: str) -> tuple[str | None, str]:
        return f"/lib/modules/{kernel}/kernel/nvidia-580srv/{name}.ko", "Canonical Ltd. Kernel Module Signing"

    dkms_only = info.kernel_entry("6.8.0-87-generic", params, [], {}, modinfo)["modules"]["nvidia"]
    assert (dkms_only["ok"], dkms_only["dkms_state"], dkms_only["modinfo"]) == (False, "absent", False)
    mod = info.kernel_entry("6.8.0-87-generic", {**params, "packaged": True}, [], {}, modinfo)["modules"]["nvidia"]
    assert (mod["ok"], mod["dkms_state"], mod["file"]) == (True, "packaged", True)
    assert mod["signer"] == "Canonical Ltd. Kernel Module Signing"
    built = info.kernel_entry("6.8.0-87-generic", {**params, "packaged": True}, [], {},
                              lambda k, n: (f"/lib/modules/{k}/updates/dkms/{n}.ko", ""))["modules"]["nvidia"]
    assert built["ok"] is False
