"""module_utils/bootloader: the kernel the next boot starts, from GRUB's files or systemd-boot's BLS entries."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import bootloader

GUID = bootloader.LOADER_GUID
OLD, NEW = "6.1.0-28-amd64", "6.1.0-31-amd64"


@pytest.mark.parametrize(
    ("default", "grubenv", "expected"),
    [
        ("GRUB_DEFAULT=0\n", "", None),
        ('GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux 5.15.0-105-generic"\n', "",
         "5.15.0-105-generic"),
        ("GRUB_DEFAULT=saved\n", "# GRUB Environment Block\nsaved_entry=gnulinux-advanced-x>gnulinux-5.4.0-190-generic"
         "-advanced-x\n", "5.4.0-190-generic"),
        ("GRUB_DEFAULT=saved\n", "saved_entry=Debian GNU/Linux, with Linux 6.1.0-50-amd64\n", "6.1.0-50-amd64"),
        ("GRUB_DEFAULT=saved\n", "", None),
        ("# GRUB_DEFAULT=1\nGRUB_TIMEOUT=5\n", "", None),
        # grub-reboot: next_entry wins for one boot, whatever GRUB_DEFAULT says
        ("GRUB_DEFAULT=0\n", "next_entry=gnulinux-advanced-x>gnulinux-5.4.0-190-generic-advanced-x\n",
         "5.4.0-190-generic"),
        ("GRUB_DEFAULT=saved\n", "saved_entry=Debian GNU/Linux, with Linux 6.1.0-50-amd64\nnext_entry=\n",
         "6.1.0-50-amd64"),
    ],
)
def test_parse_grub_default(default: str, grubenv: str, expected: str | None) -> None:
    assert bootloader.parse_grub_default(default, grubenv) == expected


def _efivar(efivars: Path, name: str, value: str) -> None:
    efivars.mkdir(parents=True, exist_ok=True)
    (efivars / f"{name}-{GUID}").write_bytes(b"\x07\x00\x00\x00" + (value + "\0").encode("utf-16-le"))


def _bls(root: Path, entries: dict[str, str], conf: str | None = None) -> Path:
    loader = root / "efi" / "loader"
    (loader / "entries").mkdir(parents=True)
    for name, text in entries.items():
        (loader / "entries" / name).write_text(text)
    if conf is not None:
        (loader / "loader.conf").write_text(conf)
    return loader


ENTRIES = {
    # kernel-install's layout: /<entry-token>/<k>/linux, with a version key
    f"abc-{OLD}.conf": f"title Debian GNU/Linux 12\nversion {OLD}\nlinux /abc/{OLD}/linux\n",
    # no version key: the version comes from the linux path
    f"abc-{NEW}.conf": f"title Debian GNU/Linux 12\nlinux /vmlinuz-{NEW}\ninitrd /initrd.img-{NEW}\n",
}


def test_bls_entry_version_from_key_or_linux_path(tmp_path: Path) -> None:
    entries, default = bootloader.read_bls([str(tmp_path / "absent"), str(_bls(tmp_path, ENTRIES, "timeout 3\n"))])
    assert [(e["id"], e["version"]) for e in entries] == [(f"abc-{OLD}.conf", OLD), (f"abc-{NEW}.conf", NEW)]
    assert default is None


@pytest.mark.parametrize(
    ("conf", "efivars", "expected"),
    [
        # no rule: the menu's first entry, the newest version
        ("timeout 3\n", {}, (NEW, "newest")),
        (f"default abc-{OLD}.conf\n", {}, (OLD, "bls")),
        ("default abc-*\n", {}, (NEW, "bls")),  # a glob over several: the newest of them
        (f"default abc-{OLD}\n", {}, (OLD, "bls")),  # an id written without .conf
        # bootctl set-default beats loader.conf; set-oneshot beats both
        (f"default abc-{NEW}.conf\n", {"LoaderEntryDefault": f"abc-{OLD}.conf"}, (OLD, "bls")),
        (f"default abc-{OLD}.conf\n", {"LoaderEntryDefault": f"abc-{OLD}.conf",
                                       "LoaderEntryOneShot": f"abc-{NEW}.conf"}, (NEW, "bls")),
        ("default @saved\n", {"LoaderEntryLastBooted": f"abc-{OLD}.conf"}, (OLD, "bls")),
        # an entry for a kernel that is not installed: the newest installed
        ("default abc-7.0.0-1-amd64.conf\n", {}, (NEW, "newest")),
    ],
)
def test_systemd_boot_next_kernel(tmp_path: Path, conf: str, efivars: dict[str, str],
                                  expected: tuple[str, str]) -> None:
    loader = _bls(tmp_path, ENTRIES, conf)
    efi = tmp_path / "efivars"
    _efivar(efi, "LoaderInfo", "systemd-boot 252.30-1~deb12u2")
    for name, value in efivars.items():
        _efivar(efi, name, value)
    # GRUB's files are present too (GRUB installed but not the boot loader): LoaderInfo says systemd-boot booted
    grub = 'GRUB_DEFAULT="Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-28-amd64"\n'
    assert bootloader.next_boot_kernel([OLD, NEW], grub, "", [str(loader)], str(efi)) == expected


def test_grub_host_ignores_bls_rules_without_loader_info(tmp_path: Path) -> None:
    loader = _bls(tmp_path, ENTRIES, f"default abc-{NEW}.conf\n")
    grub = f'GRUB_DEFAULT="Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {OLD}"\n'
    efi = str(tmp_path / "no-efivars")
    assert bootloader.next_boot_kernel([OLD, NEW], grub, "", [str(loader)], efi) == (OLD, "grub")
    # GRUB reading BLS entries (blscfg): its saved entry is an entry id
    assert bootloader.next_boot_kernel([OLD, NEW], "GRUB_DEFAULT=saved\n", f"saved_entry=abc-{OLD}\n",
                                       [str(loader)], efi) == (OLD, "bls")
    # entries and no GRUB configuration: systemd-boot's rules
    assert bootloader.next_boot_kernel([OLD, NEW], "", "", [str(loader)], efi) == (NEW, "bls")


def test_next_boot_kernel_without_any_boot_loader_file(tmp_path: Path) -> None:
    absent = [str(tmp_path / "loader")]
    assert bootloader.next_boot_kernel([OLD, NEW], "", "", absent, str(tmp_path)) == (NEW, "newest")
    assert bootloader.next_boot_kernel([OLD, NEW], "GRUB_DEFAULT=0\n", "", absent, str(tmp_path)) == (NEW, "newest")
    assert bootloader.next_boot_kernel([], "GRUB_DEFAULT=0\n", "", absent, str(tmp_path)) == ("", "none")
    grub = f'GRUB_DEFAULT="Debian GNU/Linux, with Linux {OLD}"\n'
    assert bootloader.next_boot_kernel([OLD, NEW], grub, "", absent, str(tmp_path)) == (OLD, "grub")
    # GRUB names a kernel that is not installed (removed since): the newest installed
    assert bootloader.next_boot_kernel([NEW], grub, "", absent, str(tmp_path)) == (NEW, "newest")
