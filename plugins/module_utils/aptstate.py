# Copyright: gpuprov contributors
# Apache-2.0
"""apt's own bookkeeping read without opening apt's cache: the auto-installed marks and the age of the lists.

Opening apt's cache (python3-apt, ``apt-get``, ``apt-mark``) parses every package list and takes seconds on a
host with a full archive (over ten on a container image that disables ``pkgcache.bin``). A role that only
needs to know whether ``apt state=present`` or ``apt update_cache cache_valid_time=N`` would act can read the
two files apt itself consults instead. Kept free of AnsibleModule so unit tests can import it directly.
"""

from __future__ import annotations

import os
import sys

from ansible.module_utils.common.respawn import probe_interpreters_for_module

#: apt's record of automatically installed packages (apt-mark auto/manual writes it).
EXTENDED_STATES = "/var/lib/apt/extended_states"
#: What ansible.builtin.apt reads as the time of the last ``apt-get update`` (ansible-core 2.17-2.19,
#: get_cache_mtime): the APT::Periodic success stamp if it exists, else the lists directory's mtime.
UPDATE_SUCCESS_STAMP = "/var/lib/apt/periodic/update-success-stamp"
LISTS_DIR = "/var/lib/apt/lists"


def parse_extended_states(text, native_arch=""):
    """Names apt marks automatically installed, from ``extended_states`` (deb822 stanzas with ``Package``,
    ``Architecture`` and ``Auto-Installed``). Returned as a sorted list, keyed like
    gpuprov_deb.parse_dpkg_query: the bare name for the native architecture or ``all`` (or when
    ``native_arch`` is empty), ``name:arch`` otherwise. Stanzas without ``Auto-Installed: 1`` are left out."""
    auto = set()
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line[:1].isspace():
                fields[key.strip().lower()] = value.strip()
        name = fields.get("package", "")
        if not name or fields.get("auto-installed") != "1":
            continue
        arch = fields.get("architecture", "")
        auto.add(name if not native_arch or arch in (native_arch, "all", "") else name + ":" + arch)
    return sorted(auto)


def lists_mtime(stamp=UPDATE_SUCCESS_STAMP, lists=LISTS_DIR):
    """The time (seconds since the epoch) ansible.builtin.apt compares cache_valid_time against: the mtime of
    ``stamp`` if it exists, else of ``lists``, else 0.0 (apt then always refreshes).

    Also 0.0 when ``lists`` holds no package index at all (no ``*_Packages*`` file): container and cloud
    images delete the lists after their build, which leaves a recent, empty folder that apt would take for
    fresh lists and then find no package (the role's installs failed on such a host within an hour of
    its image's build)."""
    if os.path.isdir(lists) and not any("_Packages" in name for name in os.listdir(lists)):
        return 0.0
    for path in (stamp, lists):
        if os.path.exists(path):
            return os.stat(path).st_mtime
    return 0.0


def lists_age(now, mtime):
    """Seconds since the lists were last refreshed (``now`` and ``mtime`` in epoch seconds); None when they
    never were (``mtime`` 0). A clock behind the files gives a negative age, which reads as fresh, as it
    does for ansible.builtin.apt."""
    if not mtime:
        return None
    return round(now - mtime, 1)


# The interpreters ansible.builtin.apt falls back to when its own cannot import apt (ansible-core 2.17-2.19).
APT_INTERPRETERS = ["/usr/bin/python3", "/usr/bin/python"]


def python_apt_interpreter():
    """The interpreter that can import python3-apt's ``apt``: this one first, then APT_INTERPRETERS; or None."""
    try:
        import apt  # noqa: F401  (probe only)
        import apt_pkg  # noqa: F401
    except ImportError:
        # this interpreter, started the usual way, was just tried: a second start of it in a subprocess (tens of ms
        # per call) would fail the same way
        usual = not (sys.flags.no_site or sys.flags.isolated or sys.flags.ignore_environment)
        tried = sys.executable if usual else None
        return probe_interpreters_for_module([p for p in APT_INTERPRETERS if p != tried], "apt")
    return sys.executable
