#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only Debian package state through dpkg-query, and whether python3-apt is usable."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deb_packages
short_description: Read Debian package versions, states and holds with dpkg-query (no python3-apt needed)
description:
  - Runs C(dpkg-query -W -f '${Package}\t${Architecture}\t${Version}\t${Status}\n' [NAMES...]) and returns
    one entry per package with its version, state and selection (C(hold) for held packages).
  - Works where M(ansible.builtin.package_facts) and M(ansible.builtin.apt) do not, because both need
    python3-apt on the managed host; dpkg-query is part of dpkg itself.
  - Also reports whether python3-apt is usable the way M(ansible.builtin.apt) looks for it (importable by
    the module's interpreter, else by C(/usr/bin/python3) or C(/usr/bin/python)), so a role can skip its
    apt tasks with a stated reason, or fail with a clear one, instead of letting apt try to install
    python3-apt itself (which needs network).
  - Changes nothing on the host; check mode is fully supported and reads the same state.
options:
  names:
    description:
      - Package names or dpkg-query patterns (C(linux-image-*)). Empty reads every package dpkg knows.
      - A name dpkg does not know is not an error; it is listed in C(missing).
    type: list
    elements: str
    default: []
  package_facts:
    description:
      - Also set C(ansible_facts['packages']) in the shape M(ansible.builtin.package_facts) returns
        (installed packages only; C(name -> [{name, version, arch, source}])), so tasks written for
        package_facts keep working.
    type: bool
    default: false
author: gpuprov contributors
notes:
  - Packages dpkg only knows of (state C(unknown ok not-installed)) are left out; a package removed with its
    configuration kept is returned with status C(config-files) and an empty version.
  - A package of a foreign architecture is keyed C(name:arch), as apt names it; the bare name is the native
    (or C(all)) package.
"""

EXAMPLES = r"""
- name: Read the kernel packages and whether apt can be used
  deb_packages:
    names: ["linux-image-*", "linux-headers-*", linux-generic-hwe-20.04]
  register: __hwe_kernel_packages
  check_mode: false
  changed_when: false

- name: Use it where a role used package_facts
  deb_packages:
    package_facts: true
  check_mode: false
  changed_when: false
"""

RETURN = r"""
packages:
  description: >-
    Package name -> version (empty unless unpacked or installed), architecture, status (dpkg's state:
    installed, config-files, half-configured, unpacked, ...), selection (install, hold, deinstall, purge,
    unknown) and error (dpkg's error flag, ok or reinstreq).
  type: dict
  returned: always
  sample: {"linux-image-6.1.0-50-amd64": {"version": "6.1.176-1", "architecture": "amd64",
            "status": "installed", "selection": "hold", "error": "ok"}}
installed:
  description: Names of the packages whose status is installed, sorted.
  type: list
  returned: always
held:
  description: Names of the packages whose selection is hold, sorted.
  type: list
  returned: always
missing:
  description: Requested plain names (not patterns) that are not installed, in request order.
  type: list
  returned: always
versions:
  description: Installed package (status installed) -> version, as M(deb_apt_state) returns it.
  type: dict
  returned: always
selections:
  description: Package -> selection (install, hold, deinstall, purge), as M(deb_apt_state) returns it.
  type: dict
  returned: always
auto_installed:
  description: >-
    Installed packages among those read that apt marks automatically installed (C(/var/lib/apt/extended_states)),
    sorted; with RV(versions) what the gpuprov.gpu.apt_pending filter decides from.
  type: list
  returned: always
native_architecture:
  description: C(dpkg --print-architecture).
  type: str
  returned: always
python_apt:
  description: Whether python3-apt is usable by M(ansible.builtin.apt) on this host.
  type: bool
  returned: always
python_apt_interpreter:
  description: The interpreter that imports C(apt) (this module's own first), or null.
  type: str
  returned: always
ansible_facts:
  description: C(packages) in package_facts' shape, when O(package_facts) is true.
  type: dict
  returned: when package_facts is true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.aptstate import (
    EXTENDED_STATES,
    parse_extended_states,
    python_apt_interpreter,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.deb import as_package_facts, missing_names, read_dpkg


def main():
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "default": []},
            "package_facts": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    names = module.params["names"]
    # a name that matched nothing lands in `missing`
    packages, native = read_dpkg(module, names, "deb_packages")
    interpreter = python_apt_interpreter()
    versions = {k: v["version"] for k, v in packages.items() if v["status"] == "installed"}
    try:
        with open(EXTENDED_STATES, encoding="utf-8", errors="replace") as handle:
            auto = [n for n in parse_extended_states(handle.read(), native) if n in versions]
    except OSError:
        auto = []
    result = {
        "changed": False,
        "packages": packages,
        "installed": sorted(k for k, v in packages.items() if v["status"] == "installed"),
        "held": sorted(k for k, v in packages.items() if v["selection"] == "hold"),
        "missing": missing_names(names, packages),
        "versions": versions,
        "selections": {k: v["selection"] for k, v in packages.items()},
        "auto_installed": auto,
        "native_architecture": native,
        "python_apt": interpreter is not None,
        "python_apt_interpreter": interpreter,
    }
    if module.params["package_facts"]:
        result["ansible_facts"] = {"packages": as_package_facts(packages)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
