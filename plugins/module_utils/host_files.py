# Copyright: gpuprov contributors
# Apache-2.0
"""Paths and small text files of a host as modules read them (host_state, bios_probe): lstat state and whole
text. Pure Python 3.8, no Ansible."""

from __future__ import annotations

import os
import stat

# Linux's limit on links followed in one path lookup (MAXSYMLINKS, path_resolution(7))
MAX_LINKS = 40


def lexical(path):
    """``path`` (absolute) with ``.``, ``..``, repeated and trailing slashes taken out, without reading the disk:
    paths compared as written (``//run`` is ``/run``; os.path.normpath alone keeps a leading ``//``, which POSIX
    leaves open)."""
    return os.path.normpath("/" + path.lstrip("/"))


def resolve_in_root(path, root="/"):
    """The path ``path`` leads to with every link followed as if ``root`` were ``/`` (a chroot into it): an
    absolute link target starts again at ``root`` and ``..`` stops there, as the NVIDIA container toolkit reads a
    driver root (libnvidia-container's ``path_resolve``). ``path`` is absolute and lies under ``root``; the answer
    is a path on this host under the real path of ``root``, or None where the lookup fails as the kernel's would:
    a component missing, one that is not a directory with more to follow, or more than :data:`MAX_LINKS` links (a
    loop). Raises OSError for any other error (EACCES), and ValueError for a ``path`` outside ``root``."""
    relative = os.path.relpath(lexical(path), lexical(root))
    if relative == ".." or relative.startswith("../"):
        raise ValueError(f"{path} is not under {root}")
    base = os.path.realpath(root)
    pending = relative.split("/") + ([""] if path.endswith("/") else [])  # relpath drops a trailing slash
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = resolved[:-1]
            continue
        candidate = os.path.join(base, *resolved, part)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISLNK(st.st_mode):
            if pending and not stat.S_ISDIR(st.st_mode):  # "file/", "file/..": ENOTDIR
                return None
            resolved.append(part)
            continue
        links += 1
        if links > MAX_LINKS:  # ELOOP
            return None
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = []
        pending = target.split("/") + pending
    return os.path.join(base, *resolved)


def path_state(path, root="/"):
    """``{exists, islnk, isdir, isreg, lnk_source, target_isreg, mode, uid, gid}`` of ``path``: all but
    ``target_isreg`` from this host's lstat (the last component's link not followed). ``target_isreg``: the path,
    every link in it followed inside ``root`` (:func:`resolve_in_root`; ``path`` lies under it), is a regular file
    (false for a dangling or looping link, or a directory); with a root other than ``/`` it may differ from what
    the host's own lookup says, as a link in a parent directory may lead elsewhere.
    ``lnk_source`` is the link's target as this host resolves it (as ansible.builtin.stat reports it).
    ``mode`` is the permission bits as four octal digits (``"0644"``), None with ``uid`` and ``gid`` when the path
    does not exist (ENOENT, or ENOTDIR: a parent is not a directory).
    Raises OSError for any other lstat error (EACCES, ELOOP), which says nothing of whether the path exists, and
    for such an error while following the links (EACCES)."""
    target = resolve_in_root(path, root)
    target_isreg = target is not None and stat.S_ISREG(os.lstat(target).st_mode)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"exists": False, "islnk": False, "isdir": False, "isreg": False, "lnk_source": None,
                "target_isreg": target_isreg, "mode": None, "uid": None, "gid": None}  # fmt: skip
    islnk = stat.S_ISLNK(st.st_mode)
    return {
        "exists": True,
        "islnk": islnk,
        "isdir": stat.S_ISDIR(st.st_mode),
        "isreg": stat.S_ISREG(st.st_mode),
        "lnk_source": os.path.realpath(path) if islnk else None,
        "target_isreg": target_isreg,
        "mode": "%04o" % stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }


def read_text(path):
    """The text of ``path`` (UTF-8, errors replaced), or None when it does not exist or cannot be read. Line endings
    are kept as they are on disk (no ``\r\n`` -> ``\n`` translation), so a file that differs from a text only in
    them reads as different."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()
    except OSError:
        return None
