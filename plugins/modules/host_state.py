#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only host state a role decides from, in one call: packages, paths, small files and read-only commands."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Read package state, paths, small files and the output of read-only commands in one call
description:
  - One read-only call in place of a role's separate C(stat), C(slurp), C(command) and package probes, so a
    role's no-op run is one probe, decisions on the controller, and action tasks only for what differs.
  - Package state comes from C(dpkg-query) (as in M(deb_apt_state)) and apt's automatically-installed marks
    from C(/var/lib/apt/extended_states), without opening apt's cache.
  - Changes nothing on the host; check mode is fully supported and reads the same state.
options:
  packages:
    description:
      - Package names or dpkg-query patterns to read (C(libnccl*)). Null reads no package state; an empty
        list reads every package dpkg knows. A name dpkg does not know is not an error; it is just absent
        from RV(versions).
    type: list
    elements: str
  paths:
    description:
      - Absolute paths to C(lstat) (links are not followed), for RV(paths), keyed as given. A path that does not
        exist, or one of whose parents is not a directory, is C(exists=false); any other error (permission, a loop
        of links) fails the module naming it, as does a relative path (C(~) included).
    type: list
    elements: str
    default: []
  link_roots:
    description:
      - Directories that stand for C(/) to the program that reads the paths under them (a containerised
        driver's root, as the NVIDIA container toolkit reads C(/run/nvidia/driver)). For a path under one of
        them, RV(paths)' C(target_isreg) follows links as that program does - an absolute target starts again
        at the directory and C(..) stops there - so a link that resolves only on the host does not count. A
        path under several of them takes the deepest (paths and roots compared as written, C(//run) as C(/run));
        a path under none follows links as the host does.
    type: list
    elements: str
    default: []
  read:
    description:
      - Absolute paths of text files to read whole, for RV(files), keyed as given; meant for small files
        (version headers, JSON, configuration). A file that does not exist or cannot be read is null, never an
        error; a relative path fails the module.
    type: list
    elements: str
    default: []
  commands:
    description:
      - Read-only commands to run, name -> argv (no shell), for RV(commands). A non-zero exit is returned,
        not a failure; the caller decides. A program that is not installed (not on PATH, or an absolute path
        that is not an executable) gives rc 127. Never give a command that changes the host.
    type: dict
    default: {}
author: gpuprov contributors
notes:
  - Does not read apt's candidates or policy; run C(apt-cache madison) through O(commands) for those.
"""

EXAMPLES = r"""
- name: Read the NCCL packages, library link, header and linker cache at once
  host_state:
    packages: [libnccl2, libnccl-dev]
    paths: [/usr/lib/x86_64-linux-gnu/libnccl.so.2]
    read: [/usr/include/nccl.h]
    commands:
      madison: [apt-cache, madison, libnccl2]
      ldconfig: [ldconfig, -p]
  register: __nccl_state
  check_mode: false
  changed_when: false
"""

RETURN = r"""
versions:
  description: Installed package (dpkg status installed) -> version, among O(packages); empty when it is null.
  type: dict
  returned: always
  sample: {"libnccl2": "2.26.2-1+cuda12.8"}
selections:
  description: Package -> dpkg selection (install, hold, deinstall, purge), among O(packages).
  type: dict
  returned: always
auto_installed:
  description: Installed packages among O(packages) that apt marks automatically installed, sorted.
  type: list
  returned: always
paths:
  description: >-
    Path -> C(exists), C(islnk), C(isdir), C(isreg), C(lnk_source) (the link's target resolved to an absolute
    path, as M(ansible.builtin.stat) reports it; null when not a link), C(target_isreg) (the path, links
    followed - inside its O(link_roots) entry if it has one - is a regular file: false for a dangling or looping
    link or a link to a directory), C(mode) (permission bits,
    four octal digits), C(uid) and C(gid) (null when the path does not exist).
  type: dict
  returned: always
  sample: {"/usr/local/cuda": {"exists": true, "islnk": true, "isdir": false, "isreg": false,
           "lnk_source": "/usr/local/cuda-12.8", "target_isreg": false, "mode": "0777", "uid": 0, "gid": 0}}
files:
  description: Path -> text content (UTF-8, undecodable bytes replaced), or null when it cannot be read.
  type: dict
  returned: always
commands:
  description: >-
    Name -> C(rc), C(stdout) and C(stderr) of each command in O(commands) (bytes that are not UTF-8 replaced);
    rc 127 with the reason in stderr when the program is not installed.
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.aptstate import EXTENDED_STATES, parse_extended_states
from ansible_collections.gpuprov.gpu.plugins.module_utils.deb import read_dpkg
from ansible_collections.gpuprov.gpu.plugins.module_utils.host_files import lexical, path_state, read_text


def package_state(module, names):
    """``(versions, selections, auto_installed)`` of ``names`` (dpkg-query names or patterns; [] for all)."""
    # a package of a foreign architecture is keyed name:arch, so a bare name is always the native one's state
    packages, native = read_dpkg(module, names, "host_state")
    versions = {k: v["version"] for k, v in packages.items() if v["status"] == "installed"}
    auto = []
    if versions:
        text = read_text(EXTENDED_STATES)
        auto = [n for n in parse_extended_states(text or "", native_arch=native) if n in versions]
    return versions, {k: v["selection"] for k, v in packages.items()}, auto


def link_root(path, roots):
    """The deepest of ``roots`` (absolute directories) that ``path`` lies under, compared as written
    (:func:`lexical`), else ``/``."""
    under = [lexical(r) for r in roots if os.path.commonpath([lexical(r), lexical(path)]) == lexical(r)]
    return max(under, key=len, default="/")


def lstat_or_fail(module, path, roots):
    """:func:`path_state` of ``path``, links followed inside its :func:`link_root`; fails the module on an error
    other than its absence."""
    try:
        return path_state(path, link_root(path, roots))
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc.strerror} (errno {exc.errno})")


def run_commands(module, commands):
    """``{name: {rc, stdout, stderr}}`` of each read-only command (argv lists, no shell)."""
    results = {}
    for name, argv in commands.items():
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            module.fail_json(
                msg=f"commands.{name} must be a non-empty list of strings (an argv, no shell), not {argv!r}"
            )
        program = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
        if not program or not os.access(program, os.X_OK):
            results[name] = {
                "rc": 127,
                "stdout": "",
                "stderr": f"{argv[0]} is not installed (not an executable on PATH)",
            }
            continue
        # a byte that is not UTF-8 (a path in another encoding) must not fail the whole read
        rc, out, err = module.run_command([program, *argv[1:]], errors="replace")
        results[name] = {"rc": rc, "stdout": out, "stderr": err}
    return results


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str"},
            "paths": {"type": "list", "elements": "str", "default": []},
            "link_roots": {"type": "list", "elements": "str", "default": []},
            "read": {"type": "list", "elements": "str", "default": []},
            "commands": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    # keyed as given, so a role finds each answer under the string it asked with: nothing to expand or resolve
    relative = [p for p in params["paths"] + params["read"] + params["link_roots"] if not os.path.isabs(p)]
    if relative:
        module.fail_json(msg=f"paths, link_roots and read take absolute paths; not absolute: {', '.join(relative)}")
    versions, selections, auto = ({}, {}, [])
    if params["packages"] is not None:
        versions, selections, auto = package_state(module, params["packages"])
    module.exit_json(
        changed=False,
        versions=versions,
        selections=selections,
        auto_installed=auto,
        paths={p: lstat_or_fail(module, p, params["link_roots"]) for p in params["paths"]},
        files={p: read_text(p) for p in params["read"]},
        commands=run_commands(module, params["commands"]),
    )


if __name__ == "__main__":
    main()
