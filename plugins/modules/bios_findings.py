#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Turn a platform_info report and the gpuprov_gpus fact into bios_check findings (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bios_findings
short_description: Evaluate the bios_check rules on a platform report and NVML facts
description:
  - Pure computation, changes nothing. The rules live in C(module_utils/findings.py) and the C(findings_*.py)
    files it runs, one per group of checks; gpuprov imports them too. The result is put together by
    C(module_utils/bios_report.py), which M(bios_probe) (the bios_check role's one call) returns as well.
  - Sets C(ansible_facts['bios_check_findings']) (this host's findings) and C(ansible_facts['gpuprov_findings'])
    (the findings of every gpuprov role so far, each with C(role)), replacing earlier bios_check entries.
options:
  platform:
    description: The C(platform) result of C(platform_info).
    type: dict
    required: true
  gpus:
    description: The C(gpuprov_gpus) fact of C(nvml_facts).
    type: dict
    default: {}
  settings:
    description: Thresholds and driver plan (keys of C(DEFAULTS) in C(module_utils/findings.py)).
    type: dict
    default: {}
  previous_gpus:
    description: GPUs of the last report on this host, to name the UUID of a GPU NVML can no longer open.
    type: list
    elements: dict
    default: []
  existing_findings:
    description: C(ansible_facts['gpuprov_findings']) before this run of the role.
    type: list
    elements: dict
    default: []
  fail_on:
    description: Severities that fail the host; returned as C(failing).
    type: list
    elements: str
    default: [fail]
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Evaluate the findings
  bios_findings:
    platform: "{{ __bios_check_platform.platform }}"
    gpus: "{{ ansible_facts['gpuprov_gpus'] }}"
  check_mode: false
"""

RETURN = r"""
findings:
  description: The findings, C({id, severity, subject, evidence, fix}), fail first.
  returned: always
  type: list
  elements: dict
failing:
  description: The findings whose severity is in O(fail_on).
  returned: always
  type: list
  elements: dict
fail_message:
  description: One line per failing finding with its evidence and fix (empty when none fails).
  returned: always
  type: str
report:
  description: The JSON report the role writes - findings, platform, NVML summary and GPUs; no timestamps.
  returned: always
  type: dict
report_gpus:
  description: Per usable GPU the values the report keeps (bus id, name, UUID, memory, BAR1, PCIe, power limit).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.bios_report import result


def main():
    module = AnsibleModule(
        argument_spec={
            "platform": {"type": "dict", "required": True},
            "gpus": {"type": "dict", "default": {}},
            "settings": {"type": "dict", "default": {}},
            "previous_gpus": {"type": "list", "elements": "dict", "default": []},
            "existing_findings": {"type": "list", "elements": "dict", "default": []},
            "fail_on": {"type": "list", "elements": "str", "default": ["fail"]},
        },
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(
        changed=False,
        **result(params["platform"], params["gpus"], params["settings"], params["previous_gpus"],
                 params["existing_findings"], params["fail_on"]),
    )


if __name__ == "__main__":
    main()
