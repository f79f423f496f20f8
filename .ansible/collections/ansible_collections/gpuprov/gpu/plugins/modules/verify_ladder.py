#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Run the verification ladder on a GPU host and return one step per rung (pass, fail or skip, with evidence)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verify_ladder
short_description: Prove a GPU host ready - NVML, nvidia-smi, versions, persistence, Fabric Manager, CUDA, P2P, NCCL
description:
  - Runs the verification ladder and returns C(report) with one entry per step, each
    C({name, status, evidence, reason}) where C(status) is C(pass), C(fail) or C(skip).
  - Steps C(gpus), C(nvidia_smi), C(driver_version), C(persistence), C(fabric_manager), C(services), C(mig),
    C(cuda_sample), C(p2p), C(nccl_allreduce), C(container), C(dcgm_diag), in that order.
  - Reads and runs tests only; the only files it writes are the CUDA sample's binary inside O(workdir). Needs
    neither systemd nor python3-apt; runs on Python 3.8 and later. Safe in check mode.
  - The ladder is C(module_utils/ladder.py); its steps are in C(ladder_host_steps.py) (the GPU stack) and
    C(ladder_workload_steps.py) (work on the GPUs).
options:
  nvml:
    description: The C(gpuprov_gpus) fact of nvml_facts.
    type: dict
    required: true
  workdir:
    description: Scratch directory holding C(gpuprov_cuda_sample.cu) and C(gpuprov_nccl_allreduce.py).
    type: path
    required: true
  expected:
    description: C({model, count, nvswitch, driver_version}) from the fleet file; null values skip that comparison.
    type: dict
    default: {}
  thresholds:
    description: C({min_busbw_gbps}) (number, or null for the model table), C(busbw_table) {model prefix -
      {nvlink, pcie}} in GB/s.
    type: dict
    default: {}
  steps:
    description: Steps to run; the others are reported as skip.
    type: list
    elements: str
  tool_dirs:
    description: Directories searched for tools after C(PATH) (nvcc lives in /usr/local/cuda/bin).
    type: list
    elements: path
    default: []
  python:
    description: Python with torch for the NCCL step; empty searches every C(python3) on C(PATH) and O(tool_dirs).
    type: str
    default: ""
  nccl:
    description: C({size_bytes, iters, warmup, timeout_s, env}) of the all-reduce.
    type: dict
    default: {}
  container:
    description: C({image, pull, timeout_s}) of the container smoke test.
    type: dict
    default: {}
  dcgm:
    description: C({level, timeout_s}) of the DCGM diagnostic.
    type: dict
    default: {}
  mig:
    description: C({layout, layouts}), the fleet's C(mig.layout) name and C(mig.layouts) table; a null layout skips
      the C(mig) step (MIG is not managed).
    type: dict
    default: {}
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Run the verification ladder
  verify_ladder:
    nvml: "{{ ansible_facts['gpuprov_gpus'] }}"
    workdir: /tmp/gpuprov-verify.x1y2
  check_mode: false
  register: result
"""

RETURN = r"""
report:
  description: C({steps, summary {pass, fail, skip}, status}) where status is fail when any step failed, else pass.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.ladder import STEPS, Ladder


def main():
    """Run the ladder and return the report; never changes the host outside ``workdir``."""
    module = AnsibleModule(
        argument_spec={
            "nvml": {"type": "dict", "required": True},
            "workdir": {"type": "path", "required": True},
            "expected": {"type": "dict", "default": {}},
            "thresholds": {"type": "dict", "default": {}},
            "steps": {"type": "list", "elements": "str", "default": list(STEPS)},
            "tool_dirs": {"type": "list", "elements": "path", "default": []},
            "python": {"type": "str", "default": ""},
            "nccl": {"type": "dict", "default": {}},
            "container": {"type": "dict", "default": {}},
            "dcgm": {"type": "dict", "default": {}},
            "mig": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    unknown = sorted(set(module.params["steps"]) - set(STEPS))
    if unknown:
        module.fail_json(msg="unknown verify step(s) %s: choose from %s" % (", ".join(unknown), ", ".join(STEPS)))
    module.exit_json(changed=False, report=Ladder(module.params).run_all())


if __name__ == "__main__":
    main()
