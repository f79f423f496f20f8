#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Refresh apt's package lists when they are older than a limit or hold no package index."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_lists_refresh
short_description: Refresh apt's package lists when they are due, or when they hold no package index
description:
  - Runs C(apt-get update) when apt's lists are older than O(valid_time_s), measured as
    M(ansible.builtin.apt) measures them for C(cache_valid_time) (the update-success stamp, else the lists
    folder), or when the lists folder holds no package index at all.
  - The second case is why this module exists. Container and cloud images delete their lists after the
    build, which leaves a recent, empty folder; M(ansible.builtin.apt) with C(cache_valid_time) takes that
    for fresh lists, skips the update and then finds no package to install.
  - Refreshing changes no configuration, so the module reports C(changed=false); run it with
    C(check_mode=false) so that check mode sees the candidates too.
options:
  valid_time_s:
    description: Lists younger than this many seconds (and holding an index) are left as they are.
    type: int
    default: 3600
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Refresh the apt package lists
  apt_lists_refresh:
    valid_time_s: 3600
  check_mode: false
  changed_when: false
"""

RETURN = r"""
refreshed:
  description: Whether C(apt-get update) ran.
  type: bool
  returned: always
apt_lists_age_s:
  description: Age of the lists in seconds before this call; null when they held no index or never were refreshed.
  type: float
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.aptstate import lists_age, lists_mtime


def main() -> None:
    module = AnsibleModule(argument_spec={"valid_time_s": {"type": "int", "default": 3600}}, supports_check_mode=True)
    age = lists_age(time.time(), lists_mtime())
    if age is not None and age <= module.params["valid_time_s"]:
        module.exit_json(changed=False, refreshed=False, apt_lists_age_s=age)
    rc, _out, err = module.run_command(
        ["apt-get", "update", "-q"], environ_update={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    )
    if rc != 0:
        module.fail_json(msg=f"apt-get update failed (exit {rc}): {err.strip()[-2000:]}", rc=rc, apt_lists_age_s=age)
    module.exit_json(changed=False, refreshed=True, apt_lists_age_s=age)


if __name__ == "__main__":
    main()
