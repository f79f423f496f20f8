#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check in one call: read NVML, the platform and the last report, evaluate the findings, write the report."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bios_probe
short_description: Read NVML, the platform and the last report, evaluate the bios_check findings, write the report
description:
  - One call in place of M(nvml_facts), M(platform_info), M(host_state) (the last report) and M(bios_findings)
    followed by a directory and a file task, so bios_check's no-op run runs one module on the host.
  - Reads NVML as M(nvml_facts) does (C(module_utils/nvml.py)), the platform as M(platform_info) does
    (C(module_utils/platform_report.py)) and evaluates the rules as M(bios_findings) does
    (C(module_utils/bios_report.py), C(module_utils/findings.py)); the GPUs of the last report at O(report_path)
    give the UUID of a GPU NVML can no longer open.
  - Writes the JSON report to O(report_path) (directory 0755, file 0644, both O(owner):O(group)) only when its
    content, mode or owner differ; the content is written to a temporary file beside it and renamed over it, so
    a reader never sees half a report. The report has no timestamps or live readings, so a second run on an
    unchanged host reports C(changed=false) and writes nothing.
  - In check mode it reads the same state, writes nothing and reports C(changed) as the change a real run
    would make.
  - pynvml need not be installed on the host; the action plugin of the same name ships the controller's
    C(pynvml.py), as for M(nvml_facts). NVML missing or failing is a state (C(available=false)), not a failure.
  - Runs on Python 3.8 and later.
options:
  pynvml_dir:
    description: Directory holding C(pynvml.py), put first on C(sys.path). Set by the action plugin; leave unset.
    type: path
  sysfs_root:
    description: Root of the sysfs tree.
    type: path
    default: /sys
  proc_root:
    description: Root of the procfs tree (cmdline, meminfo, cpuinfo, driver/nvidia/gpus).
    type: path
    default: /proc
  kernel_log_path:
    description: File with kernel log lines to scan instead of C(journalctl -k -b) (e.g. a fixture).
    type: path
  lspci_path:
    description: File with C(lspci -vvv -D) output to read ACS from instead of config space or running lspci.
    type: path
  kernel_log_unavailable:
    description:
      - Why the kernel log cannot be scanned (no systemd journal of this boot). When set, the platform's
        C(kernel_log) is reported unavailable with this reason instead of reading an empty or older journal
        as "no event since boot".
    type: str
  report_path:
    description: The JSON report read as the last one and written.
    type: path
    default: /var/lib/gpuprov/bios_check.json
  owner:
    description: Owner of the report and its directory (name or uid).
    type: str
    default: root
  group:
    description: Group of the report and its directory (name or gid).
    type: str
    default: root
  settings:
    description: Thresholds and driver plan (keys of C(DEFAULTS) in C(module_utils/findings.py)).
    type: dict
    default: {}
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
notes:
  - Does not fail the host on findings; the role asserts on RV(failing) with RV(fail_message), after the facts
    are set.
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Read the host, evaluate the findings and write the report
  gpuprov.gpu.bios_probe:
    fail_on: [fail]
    settings:
      min_ram_gb: 64
      expected_gpu_model: H200
  register: __bios_check_result

- name: Fail the host on findings of a failing severity
  ansible.builtin.assert:
    that: __bios_check_result.failing | length == 0
    fail_msg: "{{ __bios_check_result.fail_message }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpuprov_gpus:
      description: NVML's view of the host's GPUs, as M(nvml_facts) sets it.
      type: dict
    bios_check_findings:
      description: This host's findings, as M(bios_findings) sets them.
      type: list
      elements: dict
    gpuprov_findings:
      description: The findings of every gpuprov role so far, each with C(role), earlier bios_check entries
        replaced.
      type: list
      elements: dict
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
  description: The JSON report written to O(report_path) - findings, platform, NVML summary and GPUs.
  returned: always
  type: dict
report_gpus:
  description: Per usable GPU the values the report keeps (bus id, name, UUID, memory, BAR1, PCIe, power limit).
  returned: always
  type: list
  elements: dict
previous_gpus:
  description: The GPUs of the last report (empty when there was none or it was not a report).
  returned: always
  type: list
  elements: dict
report_path:
  description: O(report_path).
  returned: always
  type: str
"""

# Ansible modules import after their documentation blocks (ansible-test's layout), hence E402.
import os
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.bios_report import (
    kernel_log_unavailable,
    previous_gpus,
    report_text,
    result,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.host_files import read_text
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml import collect as collect_nvml
from ansible_collections.gpuprov.gpu.plugins.module_utils.platform_report import collect as collect_platform

DIR_MODE = 0o755
FILE_MODE = 0o644


def set_attributes(module, path, mode, changed):
    """Owner, group and ``mode`` of ``path`` set where they differ (in check mode only reported); ``changed``
    or'ed with whether they did."""
    params = module.params
    changed = module.set_owner_if_different(path, params["owner"], changed)
    changed = module.set_group_if_different(path, params["group"], changed)
    return module.set_mode_if_different(path, mode, changed)


def write_report(module, path, old_text, text):
    """Write ``text`` to ``path`` where it, the file's mode or owner or its directory's differ; True if any did
    (or, in check mode, would)."""
    directory = os.path.dirname(path) or "."
    changed = False
    if not os.path.isdir(directory):
        changed = True
        if not module.check_mode:
            try:
                os.makedirs(directory, DIR_MODE)
            except OSError as exc:
                module.fail_json(msg="cannot create the directory of report_path %s: %s" % (path, exc))
    changed = set_attributes(module, directory, DIR_MODE, changed)
    if old_text != text:
        changed = True
        if not module.check_mode:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bios_check.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                module.atomic_move(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return set_attributes(module, path, FILE_MODE, changed)


def main():
    module = AnsibleModule(
        argument_spec={
            "pynvml_dir": {"type": "path"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
            "kernel_log_path": {"type": "path"},
            "lspci_path": {"type": "path"},
            "kernel_log_unavailable": {"type": "str"},
            "report_path": {"type": "path", "default": "/var/lib/gpuprov/bios_check.json"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "settings": {"type": "dict", "default": {}},
            "existing_findings": {"type": "list", "elements": "dict", "default": []},
            "fail_on": {"type": "list", "elements": "str", "default": ["fail"]},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["pynvml_dir"]:
        sys.path.insert(0, params["pynvml_dir"])
    try:
        import pynvml
    except ImportError as exc:
        module.fail_json(
            msg="pynvml is not importable here; call the module as gpuprov.gpu.bios_probe, whose action plugin "
            f"ships the controller's pynvml.py: {exc}"
        )
    gpus = collect_nvml(pynvml, sysfs_root=params["sysfs_root"], proc_root=params["proc_root"])
    platform = collect_platform(params["sysfs_root"], params["proc_root"], params["kernel_log_path"],
                                params["lspci_path"])
    if params["kernel_log_unavailable"]:
        platform["kernel_log"] = kernel_log_unavailable(params["kernel_log_unavailable"])
    path = params["report_path"]
    old_text = read_text(path)
    previous = previous_gpus(old_text)
    out = result(platform, gpus, params["settings"], previous, params["existing_findings"], params["fail_on"])
    out["ansible_facts"]["gpuprov_gpus"] = gpus
    changed = write_report(module, path, old_text, report_text(out["report"]))
    module.exit_json(changed=changed, previous_gpus=previous, report_path=path, **out)


if __name__ == "__main__":
    main()
