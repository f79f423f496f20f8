#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Plan the gpuprov-worker@ instances of a host: which GPUs (by UUID), which CPUs each may run on."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_workers_plan
short_description: Decide the gpuprov-worker@ instances of a host and the CPU affinity of each
description:
  - Read-only; changes nothing. Input is the NVML view of the host (C(ansible_facts['gpuprov_gpus']) from
    the C(gpuprov.gpu.nvml_facts) module) and the operator's GPU selection.
  - One instance per selected GPU, named by its NVML index. NVML indexes GPUs in PCI bus order, as
    nvidia-smi does; each instance is pinned by the GPU's UUID and bus id, never by a bare index
    (CUDA's default order is fastest first, not PCI bus order).
  - The CPUs of a GPU instance are the GPU's PCI function's C(local_cpulist) under O(sysfs_root) (the CPUs
    of its NUMA node). When that file is missing, unreadable or empty, the instance gets all online CPUs
    (C(<sysfs_root>/devices/system/cpu/online)) and C(cpu_source) says C(fallback_all).
  - With no usable GPU (NVML unavailable, no GPUs, or O(selection) C(cpu)) and O(selection) C(all) or
    C(cpu), the plan is one CPU-mode instance named C(cpu) on all online CPUs.
  - Lost GPUs (Xid 79) are left out of C(all) and listed in C(skipped) (a host whose GPUs are all lost gets no
    instance, not a CPU one); naming one explicitly is an error.
options:
  gpus:
    description: The C(gpuprov_gpus) fact (keys C(available), C(gpus)).
    type: dict
    required: true
  selection:
    description:
      - C(all), C(cpu), a list of NVML indexes or GPU UUIDs, or the same as a comma-separated string.
    type: raw
    required: true
  sysfs_root:
    description: Root of the sysfs tree read for C(local_cpulist) and the online CPUs.
    type: path
    default: /sys
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Plan the worker instances
  image_workers_plan:
    gpus: "{{ ansible_facts['gpuprov_gpus'] }}"
    selection: all
  register: __image_workers_plan
  check_mode: false
"""

RETURN = r"""
mode:
  description: C(gpu) or C(cpu).
  returned: always
  type: str
instances:
  description: One entry per worker instance, in NVML index order.
  returned: always
  type: list
  elements: dict
  sample:
    - instance: "0"
      index: 0
      uuid: GPU-00000000-0000-4000-8000-000000000a01
      bus_id: "0000:07:00.0"
      name: NVIDIA H200
      gpus_arg: GPU-00000000-0000-4000-8000-000000000a01
      cuda_visible_devices: GPU-00000000-0000-4000-8000-000000000a01
      cpus: "0-15,32-47"
      cpu_source: local_cpulist
      gpus_on_cpus: 1  # GPU instances with this same CPU list (their workers share those CPUs); 1 in CPU mode
fallbacks:
  description: Instances whose CPU list fell back to all online CPUs, with the reason.
  returned: always
  type: list
  elements: dict
skipped:
  description: GPUs left out of C(all) (lost), with the reason.
  returned: always
  type: list
  elements: dict
online_cpus:
  description: The host's online CPU list (C(0-63)).
  returned: always
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpulist(text):
    """``'0-3,8'`` -> ``[0, 1, 2, 3, 8]``; raises ValueError on anything else (empty included)."""
    text = (text or "").strip()
    if not CPULIST.match(text):
        raise ValueError(f"not a CPU list: {text!r}")
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"descending range {part!r}")
        cpus.extend(range(first, last + 1))
    return sorted(set(cpus))


def format_cpulist(cpus):
    """``[0, 1, 2, 3, 8]`` -> ``'0-3,8'`` (the kernel's and systemd's notation)."""
    parts: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if parts and cpu == parts[-1][1] + 1:
            parts[-1][1] = cpu
        else:
            parts.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def read_cpulist(path):
    """The normalised CPU list in ``path``, or ``(None, reason)``."""
    try:
        with open(path) as fh:
            return format_cpulist(parse_cpulist(fh.read())), None
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"


def selected_tokens(selection):
    """``'all'``/``'cpu'`` or the list of tokens (index strings or UUIDs) the operator named."""
    if isinstance(selection, str):
        text = selection.strip()
        if text in ("all", "cpu"):
            return text
        items = [t for t in (s.strip() for s in text.split(",")) if t]
    elif isinstance(selection, (list, tuple)):
        items = [str(t).strip() for t in selection]
    elif isinstance(selection, int) and not isinstance(selection, bool):
        items = [str(selection)]
    else:
        raise ValueError(f"selection must be all, cpu, or GPU indexes/UUIDs, not {selection!r}")
    if not items:
        raise ValueError("selection names no GPU")
    return items


def plan(gpus_fact, selection, sysfs_root):
    """The plan (see RETURN); raises ValueError for a selection that names a GPU NVML does not show."""
    online, _ = read_cpulist(os.path.join(sysfs_root, "devices/system/cpu/online"))
    if online is None:
        online = format_cpulist(range(os.cpu_count() or 1))
    tokens = selected_tokens(selection)
    gpus = list(gpus_fact.get("gpus") or []) if gpus_fact.get("available") else []
    result = {"mode": "cpu", "instances": [], "fallbacks": [], "skipped": [], "online_cpus": online}
    if tokens == "cpu" or (tokens == "all" and not gpus):
        result["instances"].append(
            {
                "instance": "cpu",
                "index": None,
                "uuid": None,
                "bus_id": None,
                "name": "cpu",
                "gpus_arg": "cpu",
                "cuda_visible_devices": "",
                "cpus": online,
                "cpu_source": "cpu_mode",
                "gpus_on_cpus": 1,
            }
        )
        return result
    if tokens == "all":
        picked = []
        for g in gpus:
            if g.get("lost"):
                result["skipped"].append(
                    {"index": g.get("index"), "reason": "GPU is lost ({})".format(g.get("error_name"))}
                )
            else:
                picked.append(g)
    else:
        if not gpus:
            raise ValueError(
                "GPUs {} were selected but NVML shows none ({})".format(
                    ",".join(tokens), gpus_fact.get("error_name") or "no GPUs"
                )
            )
        picked = []
        for token in tokens:
            match = [g for g in gpus if token in (str(g.get("index")), g.get("uuid"))]
            if not match:
                raise ValueError(
                    "GPU {!r} is not on this host; NVML shows indexes {}".format(
                        token, ", ".join(str(g.get("index")) for g in gpus)
                    )
                )
            if match[0].get("lost"):
                raise ValueError("GPU {} is lost ({}); leave it out".format(token, match[0].get("error_name")))
            if match[0] not in picked:
                picked.append(match[0])
        picked.sort(key=lambda g: g["index"])
    result["mode"] = "gpu"
    for g in picked:
        bus = (g.get("pci_bus_id_sysfs") or "").lower()
        cpus, why = (
            read_cpulist(os.path.join(sysfs_root, "bus/pci/devices", bus, "local_cpulist"))
            if bus
            else (None, "no PCI bus id")
        )
        source = "local_cpulist"
        if cpus is None:
            cpus, source = online, "fallback_all"
            result["fallbacks"].append({"instance": str(g["index"]), "reason": why})
        result["instances"].append(
            {
                "instance": str(g["index"]),
                "index": g["index"],
                "uuid": g.get("uuid"),
                "bus_id": bus,
                "name": g.get("name"),
                "gpus_arg": g.get("uuid"),
                "cuda_visible_devices": g.get("uuid"),
                "cpus": cpus,
                "cpu_source": source,
            }
        )
    for inst in result["instances"]:  # gpuprov images run divides the CPUs among these (gpuprov.images.sizing)
        inst["gpus_on_cpus"] = sum(1 for other in result["instances"] if other["cpus"] == inst["cpus"])
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "dict", "required": True},
            "selection": {"type": "raw", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    try:
        result = plan(module.params["gpus"], module.params["selection"], module.params["sysfs_root"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
