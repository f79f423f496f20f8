# Copyright: gpuprov contributors
# Apache-2.0
"""Paths and small text files of a host as modules read them (host_state, bios_probe): lstat state and whole
text. Pure Python 3.8, no Ansible."""

from __future__ import annotations

import os
import stat


def path_state(path):
    """``{exists, islnk, isdir, isreg, lnk_source, target_isreg, mode, uid, gid}`` of ``path`` from lstat (links
    not followed); ``target_isreg`` alone follows links: the path is, or leads to, a regular file (false for a
    dangling link or a link to a directory). ``mode`` is the permission bits as four octal digits (``"0644"``),
    None with ``uid`` and ``gid`` when the path does not exist (ENOENT, or ENOTDIR: a parent is not a directory).
    Raises OSError for any other lstat error (EACCES, ELOOP), which says nothing of whether the path exists."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"exists": False, "islnk": False, "isdir": False, "isreg": False, "lnk_source": None,
                "target_isreg": False, "mode": None, "uid": None, "gid": None}  # fmt: skip
    islnk = stat.S_ISLNK(st.st_mode)
    return {
        "exists": True,
        "islnk": islnk,
        "isdir": stat.S_ISDIR(st.st_mode),
        "isreg": stat.S_ISREG(st.st_mode),
        "lnk_source": os.path.realpath(path) if islnk else None,
        "target_isreg": os.path.isfile(path) if islnk else stat.S_ISREG(st.st_mode),
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
