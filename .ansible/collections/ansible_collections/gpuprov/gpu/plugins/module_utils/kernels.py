# Copyright: gpuprov contributors
# Apache-2.0
"""Shared, read-only helpers for gpuprov modules: installed kernels, their modules, sysfs attributes.

Kept free of AnsibleModule so unit tests can import it directly.
"""

from __future__ import annotations

import os
import re

MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


def version_key(version):
    """Sort key that orders kernel versions naturally (5.4.0-190 < 5.15.0-119 < 6.1.0-28)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", version) if part]


def installed_kernels(modules_dir="/lib/modules", boot_dir="/boot"):
    """Kernels that are really installed: a modules directory with a matching /boot/vmlinuz-<k>."""
    if not os.path.isdir(modules_dir):
        return []
    found = []
    for name in os.listdir(modules_dir):
        if not os.path.isdir(os.path.join(modules_dir, name)):
            continue
        if os.path.exists(os.path.join(boot_dir, "vmlinuz-" + name)):
            found.append(name)
    return sorted(found, key=version_key)


def module_name_of(filename):
    """`nova-core.ko.zst` -> `nova_core`; None when the name is not a kernel module file."""
    for suffix in MODULE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)].replace("-", "_")
    return None


def find_modules(tree, wanted):
    """Map each wanted module name to True when a module file of that name exists under tree.

    Symbolic links to directories (for example `build` pointing at the headers) are not followed.
    """
    wanted_norm = {name.replace("-", "_"): name for name in wanted}
    found = dict.fromkeys(wanted, False)
    if not os.path.isdir(tree):
        return found
    for _dirpath, _dirnames, filenames in os.walk(tree):
        for filename in filenames:
            name = module_name_of(filename)
            if name in wanted_norm:
                found[wanted_norm[name]] = True
    return found


def read_attr(path):
    """Content of a sysfs attribute stripped of whitespace, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def link_basename(path):
    """Basename of a symbolic link's target (sysfs `driver` and `module` links), or None."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None
