# Copyright: gpuprov contributors
# Apache-2.0
"""Debian package state from ``dpkg-query``, without python3-apt.

Ansible's ``apt`` and ``package_facts`` (manager apt) need python3-apt on the managed host; hosts adopted
as they are (a real GPU server with NVIDIA's debs and no network) may lack it. dpkg-query is part of dpkg,
so it is on every Debian-family host. Kept free of AnsibleModule so unit tests can import it directly.
"""

from __future__ import annotations

from typing import Any

#: dpkg-query output format (dpkg-query expands the \t and \n escapes itself): one tab-separated line per
#: package. ``${Status}`` is dpkg's three-word status ("<want> <eflag> <status>", e.g. "hold ok installed"),
#: present in every dpkg version.
DPKG_QUERY_FORMAT = r"${Package}\t${Architecture}\t${Version}\t${Status}\n"

#: Selections (dpkg's "want" word) and package states, from dpkg-query(1).
SELECTIONS = ("unknown", "install", "hold", "deinstall", "purge")
STATES = ("not-installed", "config-files", "half-installed", "unpacked", "half-configured", "triggers-awaited",
          "triggers-pending", "installed")

#: Characters that make a dpkg-query argument a pattern (fnmatch) instead of a package name.
GLOB_CHARS = "*?["


def dpkg_query_argv(dpkg_query, names):
    """The dpkg-query command line: ``[dpkg_query, -W, -f, FORMAT, *names]`` (no names: every package)."""
    return [dpkg_query, "-W", "-f", DPKG_QUERY_FORMAT, *names]


def parse_dpkg_query(text, native_arch=""):
    """Parse dpkg-query output in :data:`DPKG_QUERY_FORMAT` into ``{name: entry}``.

    ``entry`` is ``{"version", "architecture", "status", "selection", "error"}``: ``status`` is the
    package state (``installed``, ``config-files``, ``half-configured``, ...), ``selection`` dpkg's want
    (``install``, ``hold``, ``deinstall``, ``purge``, ``unknown``), ``error`` the error flag (``ok`` or
    ``reinstreq``). A package of a foreign architecture (neither ``native_arch`` nor ``all``) is keyed
    ``name:arch``, as apt names it, so ``libc6`` is always the native one. Packages dpkg only knows of
    (``unknown ok not-installed``: never selected, never installed) are left out; a hold on a package
    that is not installed is kept. Lines that do not have four fields or a three-word status are skipped.
    """
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        name, arch, version, status = (f.strip() for f in fields)
        words = status.split()
        if not name or len(words) != 3:
            continue
        selection, error, state = words
        if selection == "unknown" and state == "not-installed":
            continue
        key = name if not native_arch or arch in (native_arch, "all", "") else name + ":" + arch
        packages[key] = {
            "version": version if state != "not-installed" else "",
            "architecture": arch,
            "status": state,
            "selection": selection,
            "error": error,
        }
    return packages


def read_dpkg(module, names, reader):
    """``(packages, native_arch)`` of this host: :func:`parse_dpkg_query` of ``dpkg-query`` for ``names`` ([]:
    every package), foreign architectures keyed ``name:arch`` by ``dpkg --print-architecture`` ("" and bare
    names where dpkg cannot tell it). ``module`` is the calling AnsibleModule (its ``get_bin_path``,
    ``run_command`` and ``fail_json``), ``reader`` the module's name for the message when dpkg is missing.
    Fails the module when dpkg-query exits 2 or above (1 only means a name matched nothing)."""
    dpkg_query = module.get_bin_path("dpkg-query")
    dpkg = module.get_bin_path("dpkg")
    if not dpkg_query or not dpkg:
        module.fail_json(msg=f"dpkg-query not found: {reader} reads Debian-family hosts only")
    rc, arch, _ = module.run_command([dpkg, "--print-architecture"])
    native = arch.strip() if rc == 0 else ""
    rc, out, err = module.run_command(dpkg_query_argv(dpkg_query, names))
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip()}", rc=rc)
    return parse_dpkg_query(out, native), native


def is_pattern(name):
    """Whether a dpkg-query argument is a pattern (``linux-image-*``) rather than one package name."""
    return any(c in name for c in GLOB_CHARS)


def missing_names(names, packages):
    """Requested plain names (not patterns) that are not installed, in request order."""
    return [n for n in names if not is_pattern(n) and (packages.get(n) or {}).get("status") != "installed"]


def installed_versions(packages: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{name: entry}`` of :func:`parse_dpkg_query` -> ``{name: version}`` of the installed packages (held or not)."""
    return {name: entry["version"] for name, entry in packages.items() if entry["status"] == "installed"}


def as_package_facts(packages):
    """``ansible_facts['packages']`` in package_facts' shape (installed packages only):
    ``{name: [{"name", "version", "arch", "source": "dpkg"}]}``; a foreign-architecture package keyed
    ``name:arch`` is listed under its bare name next to the native one, as package_facts does."""
    facts: dict[str, list[dict[str, str]]] = {}
    for key, entry in sorted(packages.items()):
        if entry["status"] != "installed":
            continue
        name = key.split(":", 1)[0]
        facts.setdefault(name, []).append(
            {"name": name, "version": entry["version"], "arch": entry["architecture"], "source": "dpkg"}
        )
    return facts
