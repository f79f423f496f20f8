#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Assert a mig-parted style MIG layout through NVML and apply it only where the GPUs differ."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_layout
short_description: Assert and apply a MIG layout (MIG mode, GPU and compute instances) through NVML
description:
  - Reads every GPU the layout names through NVML (pynvml over C(libnvidia-ml.so.1)) and compares its MIG mode
    and GPU instance profile counts with the layout. Only GPUs that differ are changed; a matching host reports
    C(changed=false).
  - Applying destroys the GPU's compute and GPU instances, sets the MIG mode when it differs and creates the
    declared GPU instances, largest first, each with one compute instance spanning it.
  - A MIG mode change is refused with a clear message while C(nvidia_drm) is loaded or a process has the GPU's
    C(/dev/nvidia<minor>) open. When NVML leaves the change pending, RV(reboot_required) is true.
  - A GPU whose MIG mode NVML does not support (V100, GeForce) fails the module when the layout enables MIG on it.
  - pynvml need not be installed on the host; the action plugin of the same name ships the controller's copy.
  - In check mode nothing is changed; RV(gpus) tells what would be.
options:
  entries:
    description: The layout, a list of C({devices, mig_enabled, mig_devices}) entries (the fleet file's
      C(mig.layouts.<name>)).
    type: list
    elements: dict
    required: true
  allow_destroy:
    description: Allow destroying existing GPU instances that differ from the layout (running MIG workloads die).
      Without it, such a change fails and names the instances.
    type: bool
    default: false
  proc_root:
    description: Root of procfs read for C(modules) and open file descriptors.
    type: path
    default: /proc
  pynvml_dir:
    description: Directory holding C(pynvml.py); set by the action plugin.
    type: path
attributes:
  check_mode:
    support: full
notes:
  - The engine is C(module_utils/mig.py). The boot unit gpuprov-mig.service re-creates each GPU's C(create) list
    with the host's nvidia-smi.
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Apply seven 1g.10gb instances on every GPU
  mig_layout:
    entries:
      - {devices: all, mig_enabled: true, mig_devices: {"1g.10gb": 7}}
"""

RETURN = r"""
gpus:
  description: Per GPU the layout names, its state before any change.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index, type: int}
    uuid: {description: GPU UUID, type: str}
    mig_capable: {description: Whether NVML supports MIG mode on the GPU, type: bool}
    instances: {description: GPU instance profile -> count found, type: dict}
    create: {description: The GPU instance profiles the layout declares, one per instance, largest first (the
      creation order), type: list}
    state: {description: '"ok", "MIG mode off", "MIG on but no instances", "instances differ from the declared
      layout" or "MIG mode on"', type: str}
    actions: {description: What was (or in check mode would be) done; empty when the GPU matches, type: list}
    after: {description: GPU instance profile -> count after applying (only for changed GPUs), type: dict}
drift:
  description: Whether a GPU differed from the layout when the module started (true even when it applied).
  returned: always
  type: bool
reboot_required:
  description: A MIG mode change is pending until a GPU reset or reboot.
  returned: always
  type: bool
mode_change:
  description: Whether the MIG mode of a GPU had to change (GPU clients must be stopped around it).
  returned: always
  type: bool
"""

import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.mig import MigError, run


def main():
    """Plan, and outside check mode apply, the layout."""
    module = AnsibleModule(
        argument_spec={
            "entries": {"type": "list", "elements": "dict", "required": True},
            "allow_destroy": {"type": "bool", "default": False},
            "proc_root": {"type": "path", "default": "/proc"},
            "pynvml_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    if module.params["pynvml_dir"]:
        sys.path.insert(0, module.params["pynvml_dir"])
    try:
        import pynvml
    except ImportError as exc:
        module.fail_json(msg=f"pynvml is not importable; run mig_layout through its action plugin: {exc}")
    try:
        plan = run(pynvml, module.params["entries"], apply=False, proc_root=module.params["proc_root"])
        doomed = [e for e in plan["gpus"] if any(a.startswith("destroy") for a in e["actions"])]
        if doomed and not module.params["allow_destroy"]:
            module.fail_json(
                msg="the layout would destroy existing MIG instances ("
                + "; ".join(f"GPU {e['index']}: {e['instances']}" for e in doomed)
                + "); workloads in them die. Set mig_allow_destroy=true to confirm.",
                gpus=plan["gpus"],
            )
        result = plan
        if plan["changed"] and not module.check_mode:
            result = run(pynvml, module.params["entries"], apply=True, proc_root=module.params["proc_root"])
    except MigError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
