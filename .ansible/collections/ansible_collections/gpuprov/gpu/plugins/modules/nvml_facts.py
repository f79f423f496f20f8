#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only NVML facts of a host's NVIDIA GPUs as ``ansible_facts['gpuprov_gpus']``."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvml_facts
short_description: Report the NVIDIA GPUs of a host through NVML as ansible_facts['gpuprov_gpus']
description:
  - Initialises NVML (C(libnvidia-ml.so.1)) through pynvml, reads every GPU and shuts NVML down; changes nothing.
  - pynvml need not be installed on the host. The action plugin of the same name copies the controller's
    C(pynvml.py) into the task's remote temporary directory, passes that directory as O(pynvml_dir) and removes
    it afterwards.
  - When NVML cannot be initialised (driver not loaded, library missing, NVML/kernel module version mismatch)
    the module still succeeds and reports C(available=false) with the NVML error name and reason.
  - A call that NVML does not support on a GPU gives null for that field. A GPU that NVML reports lost
    (C(NVML_ERROR_GPU_IS_LOST), Xid 79) gets C(lost=true) and its error; the other GPUs are still reported.
  - Runs on Python 3.8 and later.
options:
  pynvml_dir:
    description:
      - Directory holding C(pynvml.py), put first on C(sys.path). Set by the action plugin; leave unset.
    type: path
  sysfs_root:
    description: Root of the sysfs tree read for C(module/nvidia/version).
    type: path
    default: /sys
  proc_root:
    description: Root of the procfs tree read for C(driver/nvidia/gpus) (bus id of a GPU whose handle is lost).
    type: path
    default: /proc
attributes:
  check_mode:
    support: full
notes:
  - The collector is C(module_utils/nvml.py), shared with C(gpuprov facts) on the controller.
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Read the NVML facts
  nvml_facts:
  check_mode: false

- name: Require large BAR1 on every GPU
  ansible.builtin.assert:
    that: item.bar1_total_bytes >= 17179869184
    fail_msg: "GPU {{ item.pci_bus_id_sysfs }}: BAR1 is {{ item.bar1_total_bytes }} bytes"
  loop: "{{ ansible_facts['gpuprov_gpus']['gpus'] }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpuprov_gpus:
      description: NVML's view of the host's GPUs. Units are in the key names (C(_bytes), C(_w) watts, C(_c) °C).
      returned: always
      type: dict
      contains:
        available:
          description: Whether NVML initialised and enumerated the GPUs.
          type: bool
        error_name:
          description: NVML error name when not available (C(NVML_ERROR_DRIVER_NOT_LOADED),
            C(NVML_ERROR_LIB_RM_VERSION_MISMATCH), C(NVML_ERROR_LIBRARY_NOT_FOUND)); null otherwise.
          type: str
        error:
          description: NVML's reason text for O(error_name); null otherwise.
          type: str
        facts_version:
          description: Version of this fact shape (1).
          type: int
        kernel_module_version:
          description: Version of the loaded nvidia kernel module from C(/sys/module/nvidia/version); null when
            not loaded. Differs from RV(ansible_facts.gpuprov_gpus.driver_version) after a userland upgrade.
          type: str
          sample: "580.159.04"
        driver_version:
          description: Driver version NVML reports.
          type: str
          sample: "580.159.04"
        nvml_version:
          description: NVML library version.
          type: str
          sample: "13.580.159.04"
        cuda_driver_version:
          description: Highest CUDA version the driver supports, C(major.minor).
          type: str
          sample: "13.0"
        cuda_driver_version_int:
          description: The same as NVML's integer (1000 * major + 10 * minor).
          type: int
          sample: 13000
        count:
          description: Number of GPUs NVML enumerates.
          type: int
        cuda_arch_bin:
          description: Unique compute capabilities of the GPUs, ascending, comma-joined (for C(CUDA_ARCH_BIN) of
            builds such as OpenCV); null without GPUs.
          type: str
          sample: "9.0"
        nvswitch_present:
          description: Whether an active NVLink of any GPU ends at an NVSwitch; null when no link says.
          type: bool
        lost_gpus:
          description: Indices of the GPUs reported lost.
          type: list
          elements: int
        gpus:
          description:
            - One entry per GPU index. Keys C(index), C(lost), C(error_name), C(error), C(name), C(uuid),
              C(serial), C(minor_number), C(pci_bus_id) (C(00000000:00:06.0), as NVML gives it),
              C(pci_bus_id_sysfs) (C(0000:00:06.0)), C(pci_bus_id_source) (C(nvml), or C(procfs) when NVML
              refused the handle), C(pci_device_id), C(pci_subsystem_id) (C(0x233510de)).
            - C(compute_capability) (C(9.0)), C(architecture) (C(hopper)), C(memory_total_bytes),
              C(bar1_total_bytes) (bytes), C(persistence_mode) (bool).
            - C(mig) {C(current), C(pending)} (bool), C(max_devices) (int).
            - C(ecc) {C(current), C(pending)} (bool), C(uncorrected_volatile), C(corrected_volatile),
              C(uncorrected_aggregate), C(corrected_aggregate) (error counts; null when ECC is off),
              C(retired_pages_pending) (bool), C(remapped_rows) {C(correctable), C(uncorrectable), C(pending),
              C(failure)}.
            - C(pcie) {C(gen_current), C(gen_max) (the most the link can train to in this slot), C(gen_gpu_max)
              (the GPU's own maximum), C(width_current), C(width_max) (lanes)}.
            - C(power_limit_w), C(power_default_limit_w), C(enforced_power_limit_w) (W, from NVML's mW).
            - C(numa_node) (null when unsupported), C(cpu_affinity) (list of CPU ids).
            - C(nvlink) {C(links) [{C(link), C(active), C(version) (C(4.0)), C(remote_device_type) (gpu, switch, ibmnpu,
              unknown)}], C(active_links), C(nvswitch_present)}.
            - C(errors) {field: NVML error name} for calls that failed other than "not supported".
            - C(live) {C(temperature_c) (°C), C(power_draw_w) (W), C(utilization_gpu_pct),
              C(utilization_memory_pct) (%), C(performance_state) (P-state number), C(memory_used_bytes),
              C(bar1_used_bytes)}, values that change while the GPU runs.
          type: list
          elements: dict
"""

# Ansible modules import after their documentation blocks (ansible-test's layout), hence E402.
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.nvml import collect


def main():
    """Collect the facts and exit; fails only when pynvml cannot be imported."""
    module = AnsibleModule(
        argument_spec={
            "pynvml_dir": {"type": "path"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    if module.params["pynvml_dir"]:
        sys.path.insert(0, module.params["pynvml_dir"])
    try:
        import pynvml
    except ImportError as exc:
        module.fail_json(
            msg="pynvml is not importable here; call the module as gpuprov.gpu.nvml_facts, whose action plugin "
            f"ships the controller's pynvml.py: {exc}"
        )
    facts = collect(pynvml, sysfs_root=module.params["sysfs_root"], proc_root=module.params["proc_root"])
    module.exit_json(changed=False, ansible_facts={"gpuprov_gpus": facts})


if __name__ == "__main__":
    main()
