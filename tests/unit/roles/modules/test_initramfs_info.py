"""initramfs_info and its module_utils (initramfs_files, _boot, _image): tracked files, image lookup, content
comparison, stale kernels.

The end-to-end tests put a stand-in `unmkinitramfs` on PATH that "unpacks" an image by copying the
directory `<image>.d`, so the module runs its real code path without root or a kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from types import ModuleType

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuprov.gpu.plugins.module_utils import initramfs_boot, initramfs_files, initramfs_image

BLACKLIST = b"# Ansible managed\nblacklist nouveau\noptions nouveau modeset=0\n"


def test_tracked_files_scan_mentions_on_non_comment_lines(tmp_path: Path) -> None:
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    etc.mkdir()
    lib.mkdir()
    (etc / "gpuprov-nouveau.conf").write_bytes(BLACKLIST)
    (etc / "commented.conf").write_text("# nouveau was here\noptions snd index=1\n")
    (etc / "nvreg.conf").write_text("options nvidia NVreg_PreserveVideoMemoryAllocations=1\n")
    (etc / "nouveau.conf.bak").write_text("blacklist nouveau\n")
    (lib / "nvidia-drm.conf").write_text("options nvidia-drm modeset=1\n")
    (tmp_path / "usrlib").symlink_to("lib")  # merged /usr: the same directory twice
    tracked = initramfs_files.tracked_files(
        [str(etc / "gpuprov-nouveau.conf")],
        [str(etc), str(tmp_path / "usrlib"), str(lib)],
        ["nouveau", "nova_core", "nvidia", "NVreg_"],
    )
    assert [Path(t["path"]).name for t in tracked] == ["gpuprov-nouveau.conf", "nvreg.conf", "nvidia-drm.conf"]
    assert tracked[0]["reason"] == "requested"
    assert tracked[0]["sha256"] == hashlib.sha256(BLACKLIST).hexdigest()
    assert tracked[1]["reason"] == "mentions nvidia"


def test_tracked_file_absent_on_disk_has_no_hash(tmp_path: Path) -> None:
    tracked = initramfs_files.tracked_files([str(tmp_path / "gone.conf")], [], [])
    assert tracked == [{"path": str(tmp_path / "gone.conf"), "reason": "requested", "sha256": None}]


def test_resolve_in_root_keeps_absolute_links_inside(tmp_path: Path) -> None:
    root = tmp_path / "img"
    (root / "usr" / "lib" / "modprobe.d").mkdir(parents=True)
    (root / "usr" / "lib" / "modprobe.d" / "a.conf").write_text("x")
    (root / "lib").symlink_to("/usr/lib")  # absolute: must resolve inside the image, not on the host
    assert initramfs_image.resolve_in_root(str(root), "lib/modprobe.d/a.conf") == str(
        root / "usr" / "lib" / "modprobe.d" / "a.conf"
    )
    assert initramfs_image.resolve_in_root(str(root), "etc/passwd") is None
    (root / "loop").symlink_to("loop")
    assert initramfs_image.resolve_in_root(str(root), "loop/x") is None


def test_unpacked_roots_prefers_main_archive(tmp_path: Path) -> None:
    assert initramfs_image.unpacked_roots(str(tmp_path)) == [str(tmp_path)]
    for sub in ("main", "early", "early2"):
        (tmp_path / sub).mkdir()
    assert initramfs_image.unpacked_roots(str(tmp_path)) == [
        str(tmp_path / "main"),
        str(tmp_path / "early"),
        str(tmp_path / "early2"),
    ]


def test_candidate_paths_cover_merged_usr() -> None:
    paths = initramfs_image.candidate_paths("/usr/lib/modprobe.d/x.conf")
    assert "usr/lib/modprobe.d/x.conf" in paths
    assert "lib/modprobe.d/x.conf" in paths


def test_boot_entry_images_from_grub_and_bls(tmp_path: Path) -> None:
    (tmp_path / "grub").mkdir()
    (tmp_path / "grub" / "grub.cfg").write_text(
        "menuentry 'Ubuntu' {\n"
        "  linux /boot/vmlinuz-5.15.0-119-generic root=UUID=x ro\n"
        "  initrd /boot/intel-ucode.img /boot/initrd.img-5.15.0-119-generic\n"
        "}\n"
    )
    (tmp_path / "loader" / "entries").mkdir(parents=True)
    (tmp_path / "loader" / "entries" / "a.conf").write_text(
        "title x\nlinux /vmlinuz-6.8.0-1\ninitrd /initramfs-6.8.0-1.img\n"
    )
    refs = initramfs_boot.boot_entry_images(str(tmp_path))
    assert refs == {
        "5.15.0-119-generic": [str(tmp_path / "initrd.img-5.15.0-119-generic")],
        "6.8.0-1": [str(tmp_path / "initramfs-6.8.0-1.img")],
    }


def test_choose_image_and_rebuild_command(tmp_path: Path) -> None:
    boot = str(tmp_path)
    (tmp_path / "initrd.img-5.4.0-190-generic").touch()
    (tmp_path / "initramfs-6.8.0-1.img").touch()
    image, source = initramfs_boot.choose_image("initramfs-tools", boot, "5.4.0-190-generic", {})
    assert (image, source) == (str(tmp_path / "initrd.img-5.4.0-190-generic"), "default")
    assert initramfs_boot.rebuild_argv("initramfs-tools", boot, "5.4.0-190-generic", image) == [
        "update-initramfs",
        "-u",
        "-k",
        "5.4.0-190-generic",
    ]
    missing, _ = initramfs_boot.choose_image("initramfs-tools", boot, "5.15.0-119-generic", {})
    assert initramfs_boot.rebuild_argv("initramfs-tools", boot, "5.15.0-119-generic", missing)[1] == "-c"
    # the boot entry names another file than update-initramfs writes: build exactly that file
    refs = {"6.8.0-1": [str(tmp_path / "initramfs-6.8.0-1.img")]}
    image, source = initramfs_boot.choose_image("initramfs-tools", boot, "6.8.0-1", refs)
    assert source == "boot entry"
    assert initramfs_boot.rebuild_argv("initramfs-tools", boot, "6.8.0-1", image) == [
        "mkinitramfs",
        "-o",
        image,
        "6.8.0-1",
    ]
    image, _ = initramfs_boot.choose_image("dracut", boot, "6.8.0-1", {})
    assert initramfs_boot.rebuild_argv("dracut", boot, "6.8.0-1", image) == ["dracut", "--force", image, "6.8.0-1"]


def test_parse_lsinitrd_listing() -> None:
    output = (
        "Image: /boot/initramfs-6.8.0-1.img: 30M\n"
        "========================================================================\n"
        "Early CPIO image\n"
        "drwxr-xr-x   3 root     root            0 Jan  1 00:00 .\n"
        "-rw-r--r--   1 root     root       123456 Jan  1 00:00 kernel/x86/microcode/GenuineIntel.bin\n"
        "Version: dracut-059\n"
        "-rw-r--r--   1 root     root           55 Jan  1 00:00 etc/modprobe.d/gpuprov-nouveau.conf\n"
        "lrwxrwxrwx   1 root     root            7 Jan  1 00:00 lib -> usr/lib\n"
        "-rw-r--r--   1 root     root      2000000 Jan  1 00:00 usr/lib/modules/6.8.0-1/kernel/drivers/gpu/drm/"
        "nouveau/nouveau.ko.xz\n"
    )
    listed = initramfs_image.parse_lsinitrd(output)
    assert "etc/modprobe.d/gpuprov-nouveau.conf" in listed
    assert "lib" in listed
    assert "." not in listed
    assert "usr/lib/modules/6.8.0-1/kernel/drivers/gpu/drm/nouveau/nouveau.ko.xz" in listed


def test_compare_reports_each_kind_of_staleness() -> None:
    sha = hashlib.sha256(BLACKLIST).hexdigest()
    tracked = [
        {"path": "/etc/modprobe.d/a.conf", "sha256": sha},
        {"path": "/etc/modprobe.d/b.conf", "sha256": sha},
        {"path": "/etc/modprobe.d/c.conf", "sha256": None},
        {"path": "/etc/modprobe.d/d.conf", "sha256": sha},
        {"path": "/etc/modprobe.d/e.conf", "sha256": None},
    ]
    contents = {
        "/etc/modprobe.d/a.conf": None,
        "/etc/modprobe.d/b.conf": b"blacklist nouveau\n",
        "/etc/modprobe.d/c.conf": b"old",
        "/etc/modprobe.d/d.conf": BLACKLIST,
        "/etc/modprobe.d/e.conf": None,
    }
    kernel = {"image": "/boot/initrd.img-k", "files": [], "reasons": []}
    initramfs_files.compare(kernel, tracked, contents)
    assert kernel["reasons"] == [
        "/boot/initrd.img-k lacks /etc/modprobe.d/a.conf",
        "/boot/initrd.img-k has an outdated copy of /etc/modprobe.d/b.conf",
        "/boot/initrd.img-k still carries /etc/modprobe.d/c.conf, which is gone from disk",
    ]
    assert [f["matches"] for f in kernel["files"]] == [False, False, False, True, True]


# --- end to end through AnsibleModule, with a stand-in unmkinitramfs -------------------------------


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two installed kernels whose images are directories `<image>.d`; a leftover modules dir."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "unmkinitramfs"
    tool.write_text('#!/bin/sh\n[ -d "$1.d" ] || { echo "bad image $1" >&2; exit 1; }\ncp -a "$1.d/." "$2"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANSIBLE_REMOTE_TMP", str(tmp_path / "remote_tmp"))
    boot, modules, etc = tmp_path / "boot", tmp_path / "modules", tmp_path / "etc" / "modprobe.d"
    etc.mkdir(parents=True)
    (etc / "gpuprov-nouveau.conf").write_bytes(BLACKLIST)
    for version in ("5.4.0-190-generic", "5.15.0-119-generic"):
        (modules / version / "kernel" / "drivers" / "gpu" / "drm" / "nouveau").mkdir(parents=True)
        (modules / version / "kernel" / "drivers" / "gpu" / "drm" / "nouveau" / "nouveau.ko").touch()
        (boot / f"initrd.img-{version}.d").mkdir(parents=True)
        (boot / f"initrd.img-{version}").write_text("stand-in image")
        (boot / f"vmlinuz-{version}").touch()
    (modules / "6.8.0-1-removed").mkdir()
    return tmp_path


def _with_blacklist(host: Path, version: str, content: bytes, early: bool = False) -> None:
    image = host / "boot" / f"initrd.img-{version}.d"
    root = image / "main" if early else image
    if early:
        (image / "early" / "kernel").mkdir(parents=True)
    # the image holds the host path, which in these tests lies under tmp_path
    inside = root / str(host / "etc" / "modprobe.d" / "gpuprov-nouveau.conf").lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_bytes(content)
    mod = root / "lib" / "modules" / version / "kernel" / "drivers" / "gpu" / "drm" / "nouveau"
    mod.mkdir(parents=True)
    (mod / "nouveau.ko").touch()


def _run(host: Path, module: ModuleType, capsys: pytest.CaptureFixture[str], **args: object) -> dict[str, object]:
    params = {
        "files": [str(host / "etc" / "modprobe.d" / "gpuprov-nouveau.conf")],
        "scan_dirs": [str(host / "etc" / "modprobe.d")],
        "generator": "initramfs-tools",
        "boot_dir": str(host / "boot"),
        "modules_dir": str(host / "modules"),
        "_ansible_check_mode": True,
        "_ansible_remote_tmp": str(host / "remote_tmp"),
        **args,
    }
    with patch_module_args(params), pytest.raises(SystemExit):
        module.main()
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    return result


def test_all_kernels_stale_when_images_lack_the_blacklist(
    host: Path, initramfs_info: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _run(host, initramfs_info, capsys)
    assert result["kernel_versions"] == ["5.4.0-190-generic", "5.15.0-119-generic"]
    assert result["stale_kernels"] == ["5.4.0-190-generic", "5.15.0-119-generic"]
    kernels = result["kernels"]
    assert isinstance(kernels, list)
    assert kernels[0]["reasons"] == [
        f"{host}/boot/initrd.img-5.4.0-190-generic lacks {host}/etc/modprobe.d/gpuprov-nouveau.conf"
    ]
    assert kernels[0]["modules_on_disk"]["nouveau"] is True


def test_only_the_image_with_old_content_is_stale(
    host: Path, initramfs_info: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # one image carries the current file behind an early-microcode archive, one an older copy
    _with_blacklist(host, "5.15.0-119-generic", BLACKLIST, early=True)
    _with_blacklist(host, "5.4.0-190-generic", b"blacklist nouveau\n")
    result = _run(host, initramfs_info, capsys)
    assert result["stale_kernels"] == ["5.4.0-190-generic"]
    kernels = {k["version"]: k for k in result["kernels"]}  # type: ignore[union-attr]
    assert kernels["5.15.0-119-generic"]["modules_in_image"]["nouveau"] is True
    assert kernels["5.4.0-190-generic"]["reasons"][0].endswith(
        "has an outdated copy of " + f"{host}/etc/modprobe.d/gpuprov-nouveau.conf"
    )


def test_fresh_images_are_not_stale_and_kernels_filter(
    host: Path, initramfs_info: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    for version in ("5.4.0-190-generic", "5.15.0-119-generic"):
        _with_blacklist(host, version, BLACKLIST)
    assert _run(host, initramfs_info, capsys)["stale_kernels"] == []
    only = _run(host, initramfs_info, capsys, kernels=["5.15.0-119-generic"])
    assert only["kernel_versions"] == ["5.15.0-119-generic"]


def test_missing_and_unreadable_images_are_stale(
    host: Path, initramfs_info: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    (host / "boot" / "initrd.img-5.4.0-190-generic").unlink()
    (host / "boot" / "initrd.img-5.15.0-119-generic.d").rmdir()
    result = _run(host, initramfs_info, capsys)
    reasons = {k["version"]: k["reasons"] for k in result["kernels"]}  # type: ignore[union-attr]
    assert reasons["5.4.0-190-generic"] == [f"{host}/boot/initrd.img-5.4.0-190-generic is missing"]
    assert "cannot be read" in reasons["5.15.0-119-generic"][0]
    kernels = {k["version"]: k for k in result["kernels"]}  # type: ignore[union-attr]
    assert kernels["5.4.0-190-generic"]["rebuild_argv"][:2] == ["update-initramfs", "-c"]


def test_list_only_does_not_unpack(host: Path, initramfs_info: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(host, initramfs_info, capsys, inspect_images=False)
    assert result["stale_kernels"] == []
    assert result["modules_on_disk"] == {"nouveau": True, "nova_core": False, "nova_drm": False}
