# Copyright: gpuprov contributors
# Apache-2.0
"""Which kernel the next boot starts: GRUB's default, or a Boot Loader Specification (BLS) entry of systemd-boot.

Read-only and free of AnsibleModule so unit tests import it directly. Sources of the rules:

- GRUB: ``GRUB_DEFAULT`` in ``/etc/default/grub``; ``saved`` means ``saved_entry`` of the environment block
  (``/boot/grub/grubenv``), and a ``next_entry`` there (``grub-reboot``) wins for one boot, as the generated
  ``grub.cfg`` header does (https://www.gnu.org/software/grub/manual/grub/grub.html#Simple-configuration).
- systemd-boot (https://uapi-group.org/specifications/specs/boot_loader_specification/ and
  https://www.freedesktop.org/software/systemd/man/latest/loader.conf.html): type #1 entries
  ``<esp>/loader/entries/<id>.conf`` with ``version`` and ``linux`` keys; the next boot takes the EFI variable
  ``LoaderEntryOneShot`` (``bootctl set-oneshot``), else ``LoaderEntryDefault`` (``bootctl set-default``), else
  ``default`` of ``loader.conf`` (a glob over entry ids; ``@saved`` is ``LoaderEntryLastBooted``), else the first
  entry of the menu, which sorts the newest version first.
"""

from __future__ import annotations

import fnmatch
import os
import re

from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import version_key

KERNEL_IN_ENTRY = re.compile(r"(?:Linux|linux)[ -](\d+\.\d+[^\s'\"]*)")
#: vendor GUID of the systemd-boot EFI variables (Boot Loader Interface)
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
#: where systemd-boot's ``loader/`` directory lies, in the order searched: the ESP mounted at /boot/efi or /efi, or
#: /boot itself (the extended boot loader partition)
LOADER_DIRS = ("/boot/efi/loader", "/efi/loader", "/boot/loader")
#: ``/boot/vmlinuz-<k>`` (kernel-install's BLS layout is ``/<entry-token>/<k>/linux``)
LINUX_PATH_KERNEL = re.compile(r"(?:vmlinuz-(?P<a>[^/\s]+)|/(?P<b>\d+\.\d+[^/\s]*)/linux)$")


def read_text(path):
    """The text of ``path`` (undecodable bytes replaced), '' when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def grub_entry(default_text, grubenv_text=""):
    """The menu entry GRUB boots next, as written (``Advanced options...>Ubuntu, with Linux 5.15.0-105-generic``,
    a menu entry id, an index), or None when GRUB_DEFAULT is unset or ``saved`` with nothing saved."""
    value = None
    for raw in default_text.splitlines():
        line = raw.strip()
        if line.startswith("GRUB_DEFAULT="):
            value = line.split("=", 1)[1].strip().strip("\"'")
    env = {}
    for line in grubenv_text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, val = line.split("=", 1)
            env[key] = val.strip()
    if env.get("next_entry"):
        return env["next_entry"]
    if value == "saved":
        value = env.get("saved_entry")
    return value or None


def kernel_of_grub_entry(value):
    """Kernel version a GRUB entry names (title or ``gnulinux-<k>-advanced-<uuid>`` id), None for an index."""
    if not value:
        return None
    match = KERNEL_IN_ENTRY.search(value.split(">")[-1])
    # menu entry ids look like gnulinux-<k>-advanced-<uuid> or gnulinux-<k>-recovery-<uuid>
    return re.sub(r"-(?:advanced|recovery)-.*$", "", match.group(1)) if match else None


def parse_grub_default(default_text, grubenv_text=""):
    """Kernel version GRUB boots next, or None when its default names no kernel.

    ``GRUB_DEFAULT=0`` (the first entry: the newest kernel on Debian/Ubuntu) and unknown forms return None,
    so the caller falls back to the newest installed kernel.
    """
    return kernel_of_grub_entry(grub_entry(default_text, grubenv_text))


def parse_bls_entry(entry_id, text):
    """One BLS type #1 entry -> ``{"id", "version"}``; ``version`` from its ``version`` key, else from the
    ``linux`` path (``/vmlinuz-<k>`` or ``/<token>/<k>/linux``), else None."""
    keys = {}
    for raw in text.splitlines():
        parts = raw.strip().split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            keys[parts[0]] = parts[1].strip()
    version = keys.get("version")
    if not version:
        match = LINUX_PATH_KERNEL.search(keys.get("linux", ""))
        version = (match.group("a") or match.group("b")) if match else None
    return {"id": entry_id, "version": version}


def read_bls(loader_dirs):
    """(entries, loader.conf ``default``) from the first of ``loader_dirs`` (``<esp>/loader``) with entries or a
    loader.conf. ``entries``: :func:`parse_bls_entry` dicts, ids with their ``.conf``, sorted by file name."""
    for loader in loader_dirs:
        entries_dir = os.path.join(loader, "entries")
        names = sorted(os.listdir(entries_dir)) if os.path.isdir(entries_dir) else []
        conf = os.path.join(loader, "loader.conf")
        if not names and not os.path.isfile(conf):
            continue
        entries = [parse_bls_entry(n, read_text(os.path.join(entries_dir, n))) for n in names if n.endswith(".conf")]
        default = None
        for raw in read_text(conf).splitlines():
            parts = raw.strip().split(None, 1)
            if len(parts) == 2 and parts[0] == "default":
                default = parts[1].strip()
        return entries, default
    return [], None


def efi_string(efivars_dir, name):
    """A systemd-boot EFI variable (4 attribute bytes, then a NUL-terminated UTF-16LE string), '' when absent."""
    try:
        with open(os.path.join(efivars_dir, f"{name}-{LOADER_GUID}"), "rb") as handle:
            data = handle.read()
    except OSError:
        return ""
    return data[4:].decode("utf-16-le", errors="replace").split("\0", 1)[0]


def bls_default(entries, conf_default=None, oneshot="", efi_default="", last_booted=""):
    """Kernel version of the entry systemd-boot boots next, or None when no rule selects an entry with a version.

    A glob pattern that matches several entries takes the newest version among them, as the menu orders them.
    """
    def matching(pattern):
        found = [e for e in entries if e["version"] and (fnmatch.fnmatchcase(e["id"], pattern)
                                                         or fnmatch.fnmatchcase(e["id"][:-len(".conf")], pattern))]
        return sorted(found, key=lambda e: version_key(e["version"]))

    if conf_default == "@saved":
        conf_default = last_booted
    for pattern in (oneshot, efi_default, conf_default):
        if pattern:
            found = matching(pattern)
            if found:
                return found[-1]["version"]
    return None


def uses_systemd_boot(efivars_dir, entries, grub_default_text):
    """Whether systemd-boot starts this host: it set ``LoaderInfo`` on this boot, or BLS entries exist and GRUB
    has no configuration."""
    return bool(efi_string(efivars_dir, "LoaderInfo")) or (bool(entries) and not grub_default_text.strip())


def next_boot_kernel(installed, grub_default_text, grubenv_text, loader_dirs, efivars_dir):
    """(version, source) of the kernel the next boot starts, among ``installed`` (oldest first).

    ``source``: ``bls`` (systemd-boot's entry, or a GRUB saved entry that is a BLS entry id), ``grub`` (GRUB's
    default names the kernel), ``newest`` (no rule names an installed kernel: the newest, which both boot loaders
    put first), ``none`` (nothing installed).
    """
    entries, conf_default = read_bls(loader_dirs)
    candidates = []
    if uses_systemd_boot(efivars_dir, entries, grub_default_text):
        candidates.append((bls_default(entries, conf_default, efi_string(efivars_dir, "LoaderEntryOneShot"),
                                       efi_string(efivars_dir, "LoaderEntryDefault"),
                                       efi_string(efivars_dir, "LoaderEntryLastBooted")), "bls"))
    else:
        entry = grub_entry(grub_default_text, grubenv_text)
        candidates.append((kernel_of_grub_entry(entry), "grub"))
        by_id = [e["version"] for e in entries if entry and entry in (e["id"], e["id"][:-len(".conf")])]
        candidates.append((by_id[0] if by_id else None, "bls"))
    for version, source in candidates:
        if version and version in installed:
            return version, source
    return (installed[-1], "newest") if installed else ("", "none")
