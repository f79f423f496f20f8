# Copyright: gpuprov contributors
# Apache-2.0
"""initramfs_info's tracked files and how an image's copy of them is judged: the files to track (those asked for,
and modprobe files that mention a pattern), their sha256 on disk, and each kernel's image compared against them.
Pure Python 3.8, no Ansible."""


from __future__ import annotations

import glob
import hashlib
import os
import re


def sha256_bytes(data):
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    """Hex sha256 of a file, None when it is missing or unreadable."""
    try:
        with open(path, "rb") as handle:
            return sha256_bytes(handle.read())
    except OSError:
        return None


def mentions(path, regex):
    """The first match of ``regex`` on a non-comment line of the file, None when there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            match = regex.search(stripped)
            if match:
                return match.group(0)
    return None


def tracked_files(files, scan_dirs, patterns):
    """Requested files first, then scanned modprobe files, deduplicated by their real path."""
    regex = re.compile("|".join(re.escape(p) for p in patterns)) if patterns else None
    tracked = []
    seen = set()

    def add(path, reason):
        real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        tracked.append({"path": path, "reason": reason, "sha256": sha256_file(path)})

    for path in files:
        add(path, "requested")
    if regex is not None:
        for directory in scan_dirs:
            for path in sorted(glob.glob(os.path.join(directory, "*.conf"))):
                if not os.path.isfile(path):
                    continue
                word = mentions(path, regex)
                if word:
                    add(path, "mentions " + word)
    return tracked

def compare(kernel, tracked, contents):
    """Fill kernel['files'] and kernel['reasons'] from the contents read out of its image."""
    image = kernel["image"]
    for item in tracked:
        data = contents.get(item["path"])
        in_image = data is not None
        on_disk = item["sha256"] is not None
        matches = (in_image and on_disk and sha256_bytes(data) == item["sha256"]) or (not in_image and not on_disk)
        kernel["files"].append({"path": item["path"], "on_disk": on_disk, "in_image": in_image, "matches": matches})
        if matches:
            continue
        if on_disk and not in_image:
            kernel["reasons"].append("{} lacks {}".format(image, item["path"]))
        elif on_disk:
            kernel["reasons"].append("{} has an outdated copy of {}".format(image, item["path"]))
        else:
            kernel["reasons"].append("{} still carries {}, which is gone from disk".format(image, item["path"]))



def inspect_kernels(reader, kernels, tracked, modules):
    """Read each kernel's image with ``reader`` (an :class:`~initramfs_image.ImageReader`), compare the tracked
    files and the ``modules`` in it, and set the kernel's ``stale`` when it has any reason."""
    for kernel in kernels:
        if not kernel["image_exists"]:
            kernel["reasons"].append("{} is missing".format(kernel["image"]))
        else:
            try:
                contents, in_image = reader.inspect(kernel["image"], [t["path"] for t in tracked], modules)
            except RuntimeError as exc:
                kernel["reasons"].append("{} cannot be read: {}".format(kernel["image"], exc))
            else:
                kernel["modules_in_image"] = in_image
                compare(kernel, tracked, contents)
        kernel["stale"] = bool(kernel["reasons"])
