#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only package state for deciding whether apt has work to do, in one call and without opening apt's cache."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deb_apt_state
short_description: Read installed packages, holds, apt's auto-installed marks and the age of apt's lists at once
description:
  - One read-only call that returns what a role needs to know whether M(ansible.builtin.apt) with
    C(state=present) or C(update_cache)/C(cache_valid_time) would act, without opening apt's cache
    (which parses every package list, seconds per call on a host with a full archive).
  - Installed packages, versions and selections come from C(dpkg-query) (as in M(deb_packages)); the
    automatically-installed marks from C(/var/lib/apt/extended_states) (M(ansible.builtin.apt) marks every
    package it is asked to keep present as manually installed); the lists' age from the file
    M(ansible.builtin.apt) compares C(cache_valid_time) against.
  - Also reports whether python3-apt is usable the way M(ansible.builtin.apt) looks for it (as M(deb_packages)
    does), so a role needs no second call to decide whether apt can run at all.
  - Changes nothing on the host; check mode is fully supported and reads the same state.
options: {}
author: gpuprov contributors
notes:
  - Does not read apt's candidates or policy; a request that depends on them (a version pattern such as
    C(535.183.01-*), or a package not installed) is left to M(ansible.builtin.apt).
"""

EXAMPLES = r"""
- name: Read the package state once
  deb_apt_state:
  register: __role_debs
  check_mode: false
  changed_when: false

- name: Install the build tools unless they are installed and marked manual already
  ansible.builtin.apt:
    name: [dkms, make]
  when: >-
    [dkms, make] | reject('in', __role_debs.versions) | list
    + ([dkms, make] | select('in', __role_debs.auto_installed) | list) | length > 0
"""

RETURN = r"""
versions:
  description: >-
    Installed package (dpkg status installed) -> version, keyed by the bare name as C(dpkg-query -W
    -f '${Package}') prints it (a multiarch package listed twice keeps its last line).
  type: dict
  returned: always
  sample: {"nvidia-driver-535": "535.183.01-1", "dkms": "3.0.10-8+deb12u1"}
selections:
  description: Package -> dpkg selection (install, hold, deinstall, purge) for every package dpkg lists.
  type: dict
  returned: always
held:
  description: Names of the packages whose selection is hold, sorted.
  type: list
  returned: always
auto_installed:
  description: Installed packages apt marks automatically installed, sorted.
  type: list
  returned: always
apt_lists_age_s:
  description: >-
    Seconds since apt's lists were last refreshed, as M(ansible.builtin.apt) measures it for
    C(cache_valid_time); null when they never were.
  type: float
  returned: always
python_apt:
  description: Whether python3-apt is usable by M(ansible.builtin.apt) on this host.
  type: bool
  returned: always
python_apt_interpreter:
  description: The interpreter that imports C(apt) (this module's own first), or null.
  type: str
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.aptstate import (
    EXTENDED_STATES,
    lists_age,
    lists_mtime,
    parse_extended_states,
    python_apt_interpreter,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.deb import dpkg_query_argv, parse_dpkg_query


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    dpkg_query = module.get_bin_path("dpkg-query")
    if not dpkg_query:
        module.fail_json(msg="dpkg-query not found: deb_apt_state reads Debian-family hosts only")
    rc, out, err = module.run_command(dpkg_query_argv(dpkg_query, []))
    if rc != 0:
        module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip()}", rc=rc)
    # bare names, as the roles' dpkg-query readers key them (no native architecture: nothing is qualified)
    packages = parse_dpkg_query(out)
    versions = {k: v["version"] for k, v in packages.items() if v["status"] == "installed"}
    try:
        with open(EXTENDED_STATES, encoding="utf-8", errors="replace") as handle:
            auto = [n for n in parse_extended_states(handle.read()) if n in versions]
    except FileNotFoundError:
        auto = []
    except OSError as exc:
        module.fail_json(msg=f"cannot read {EXTENDED_STATES}: {exc}")
    interpreter = python_apt_interpreter()
    module.exit_json(
        changed=False,
        versions=versions,
        selections={k: v["selection"] for k, v in packages.items()},
        held=sorted(k for k, v in packages.items() if v["selection"] == "hold"),
        auto_installed=auto,
        apt_lists_age_s=lists_age(time.time(), lists_mtime()),
        python_apt=interpreter is not None,
        python_apt_interpreter=interpreter,
    )


if __name__ == "__main__":
    main()
