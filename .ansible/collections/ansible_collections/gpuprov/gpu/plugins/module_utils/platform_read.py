# Copyright: gpuprov contributors
# Apache-2.0
"""How platform_info reads the host: a file (sysfs, procfs), a directory listing, a command's output. Each
answers None (or an empty result) instead of raising, since a missing attribute is an answer too. Pure Python 3.8,
no Ansible."""


from __future__ import annotations

import os
import subprocess


def read_file(path, binary=False):
    """A file's content (stripped text, or bytes with ``binary``); None when it is missing or unreadable."""
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read() if binary else handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def list_dir(path):
    """The sorted entries of a directory; None when it is missing or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def run_command(argv):
    """(rc, stdout) of a command; (None, '') when it is not installed or cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return proc.returncode, proc.stdout.decode("utf-8", "replace")
