#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""List the processes holding /dev/nvidia*, and end them when asked."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_holders
short_description: List the processes holding the GPU device files, and end them when asked
description:
  - Scans C(/proc/*/fd) for open files under C(/dev/nvidia) (what C(fuser -v /dev/nvidia*) reads) and returns
    one entry per process with its pid, command, command line, user and the device files it holds.
  - The module's own process and its ancestors (the Ansible connection) are never listed or signalled.
  - With O(end=true) it sends SIGTERM to each holder, waits O(timeout_s) seconds, then SIGKILL, and reports
    what it ended and what outlived both. In check mode nothing is signalled; the result says what would be.
  - With O(fail_on_holders=true) the task fails when a holder is left (found and not ended), naming each; this is
    the check before the NVIDIA kernel modules are unloaded for a driver change.
options:
  end:
    description: End the holders (SIGTERM, then SIGKILL after O(timeout_s)).
    type: bool
    default: false
  fail_on_holders:
    description: Fail when a holder is left, naming each process.
    type: bool
    default: false
  timeout_s:
    description: Seconds to wait after SIGTERM, and again after SIGKILL.
    type: float
    default: 10
  containers:
    description:
      - Also list the running Docker containers that use the GPUs (the C(nvidia) runtime, a C(--gpus) device
        request or a CDI device C(nvidia.com/gpu=...)). Nothing is listed where C(docker) is not installed or
        does not answer.
    type: bool
    default: false
  prefix:
    description: Path prefix of the device files (tests point it elsewhere).
    type: str
    default: /dev/nvidia
  proc_root:
    description: Root of procfs.
    type: path
    default: /proc
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Stop if anything still holds a GPU
  gpuprov.gpu.gpu_holders:
    fail_on_holders: true

- name: End what holds the GPUs
  gpuprov.gpu.gpu_holders:
    end: true
    fail_on_holders: true
"""

RETURN = r"""
holders:
  description: The processes found holding a device file, before any was ended.
  returned: always
  type: list
  elements: dict
  sample: [{pid: 4242, command: python3, cmdline: python3 train.py, user: ml, devices: [/dev/nvidia0]}]
ended:
  description: Pids that exited after the signals (empty without O(end) and in check mode).
  returned: always
  type: list
  elements: int
modules:
  description: Loaded kernel modules whose names begin with C(nvidia) (C(/proc/modules); empty where unreadable).
  returned: always
  type: list
  elements: str
  sample: [nvidia_uvm, nvidia_drm, nvidia_modeset, nvidia]
containers:
  description: Running containers that use the GPUs (with O(containers)).
  returned: always
  type: list
  elements: dict
  sample: [{id: 3f2a..., name: trainer, image: nvcr.io/nvidia/pytorch:25.01-py3}]
remaining:
  description: Pids still holding a device file after this module ran.
  returned: always
  type: list
  elements: int
"""

import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_holders import (
    ancestors,
    describe,
    device_holders,
    end_processes,
    loaded_modules,
)


def uses_gpus(config: dict[str, Any]) -> bool:
    """Whether a ``docker inspect`` document runs with the GPUs: the nvidia runtime, a device request for the
    nvidia driver or the gpu capability, or a CDI device of kind nvidia.com/gpu."""
    host = config.get("HostConfig") or {}
    if host.get("Runtime") == "nvidia":
        return True
    for request in host.get("DeviceRequests") or []:
        capabilities = [c for group in request.get("Capabilities") or [] for c in group]
        if request.get("Driver") == "nvidia" or "gpu" in capabilities:
            return True
        if any(str(d).startswith("nvidia.com/gpu") for d in request.get("DeviceIDs") or []):
            return True
    return False


def gpu_containers(module: AnsibleModule) -> list[dict[str, str]]:
    """Running Docker containers that use the GPUs: ``[{id, name, image}]``; empty without a docker that answers."""
    docker = module.get_bin_path("docker")
    if not docker:
        return []
    rc, out, _err = module.run_command([docker, "ps", "-q", "--no-trunc"])
    ids = out.split() if rc == 0 else []
    if not ids:
        return []
    rc, out, _err = module.run_command([docker, "inspect", *ids])
    try:
        configs = json.loads(out) if rc == 0 else []
    except ValueError:
        configs = []
    return [{"id": c.get("Id", ""), "name": str(c.get("Name", "")).lstrip("/"),
             "image": (c.get("Config") or {}).get("Image", "")} for c in configs if uses_gpus(c)]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "end": {"type": "bool", "default": False},
            "containers": {"type": "bool", "default": False},
            "fail_on_holders": {"type": "bool", "default": False},
            "timeout_s": {"type": "float", "default": 10.0},
            "prefix": {"type": "str", "default": "/dev/nvidia"},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    p = module.params
    exclude = set(ancestors(os.getpid(), p["proc_root"]))
    holders = device_holders(p["proc_root"], p["prefix"], exclude)
    pids = [h["pid"] for h in holders]
    ended: list[int] = []
    remaining: list[int] = pids
    if p["end"] and pids and not module.check_mode:
        ended, remaining = end_processes(pids, p["timeout_s"])
    result = {"changed": bool(ended) or (p["end"] and bool(pids) and module.check_mode),
              "holders": holders, "ended": ended, "remaining": remaining,
              "modules": loaded_modules(p["proc_root"]),
              "containers": gpu_containers(module) if p["containers"] else []}
    if p["fail_on_holders"] and remaining and not (p["end"] and module.check_mode):
        left = [describe(h) for h in holders if h["pid"] in remaining]
        module.fail_json(msg="%d process(es) hold the GPU device files: %s - stop them, or let gpuprov end them "
                             "(gpuprov upgrade --kill-holders)" % (len(left), "; ".join(left)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
