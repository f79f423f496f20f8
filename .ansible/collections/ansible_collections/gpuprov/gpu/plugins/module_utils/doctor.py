# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules: collected facts -> diagnoses. Pure Python 3.8, no Ansible, no I/O.

Input: one host's ``facts`` dict (every key optional; a missing key means "not collected", and its rules stay quiet)::

    nvml:     the gpuprov_gpus fact (``collect`` of module_utils/nvml.py, docs/facts.md)
    platform: platform_info's report (boot, secure_boot, pci, kernel_log, ...)
    pci:      gpu_pci_info's result (devices, modules, bindings, pci_readable)
    kernel:   kernel_dkms_info's result (running_kernel, kernels [...])
    module_log: kernel log lines about loading kernel modules (Secure Boot rejections), a list of str
    samples:  {"window_s": float, "gpus": {"<index>": [utilisation %, ...]}}, NVML sampled over the window
    throttle: {"<index>": NVML clocks event (throttle) reasons bitmask}
    holders:  [{pid, command, devices, ...}] processes holding /dev/nvidia* or GPU memory (fuser -v, or locally
              gpuprov.holders: with user, cmdline, gpu_memory_bytes, allowed (a known service) and job_ended)
    nvml_pids: pids NVML lists as running on any GPU, or None when unknown
    daemons:  NVIDIA daemons running (``running_daemons`` of module_utils/health.py), or None when unknown
    services: the stack's systemd units (``service_states`` of module_utils/health.py), or None without systemd
    expected: what the fleet file expects of the host {model, count, nvswitch, driver_version, pcie_width,
              pcie_gen, mig_layout, mig_layouts}, or None locally
    mig_instances: ``nvidia-smi mig -lgi`` output (str), or None where no GPU has MIG on

Output: diagnoses ``{id, severity (fail|warn|info), subject, evidence, fix, fixable, action}``; ``action`` is
the argv of the safe repair when ``fixable`` (see docs/doctor.md).

The rules are grouped by what they look at, one file per group: ``doctor_driver`` (the GPU on the bus, nouveau,
why the driver is not loaded), ``doctor_gpus`` (persistence, ECC and row remapping, MIG pending, temperature,
throttling), ``doctor_health`` (Xid and SXid events of the kernel log, classified after NVIDIA's Xid catalogue),
``doctor_fleet`` (the rules the verify ladder applies too: services, GPU count and model, driver versions,
Fabric Manager, MIG layout) and ``doctor_workload`` (utilisation swinging, stale and leftover GPU holders). bios_check's
PCIe, BAR and lost-GPU rules come from module_utils/findings.py's ``evaluate``, which the caller passes in as
``findings_evaluate``. This file runs the groups in order and sorts the result.
"""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_driver import check_bus_and_driver
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_fleet import (
    check_fleet_rules,
    check_mig_layout,
    check_services,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_gpus import check_gpu_state
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_health import check_kernel_log_events
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_workload import check_holders, check_utilisation

SEVERITIES = ("fail", "warn", "info")

#: bios_check findings that are doctor diagnoses too (ids kept, evidence and fix as bios_check words them).
#: Its gpu_hardware_xid is not: doctor reports every Xid with its class and action (doctor_health).
FINDINGS_KEPT = (
    "bar1_too_small",
    "bar1_unassigned",
    "bar1_below_4g",
    "gpus_not_initialised",
    "rm_init_failed",
    "pci_region_invalid",
    "pcie_link_degraded",
    "pcie_link_low_under_load",
    "gpu_lost",
)


class Diagnoses:
    """The diagnoses of one host, in the order the rules add them."""

    def __init__(self):
        self.items = []

    def add(self, did, severity, subject, evidence, fix, action=None):
        self.items.append(
            {
                "id": did,
                "severity": severity,
                "subject": subject,
                "evidence": evidence,
                "fix": fix,
                "fixable": action is not None,
                "action": list(action) if action else None,
            }
        )


def _link_settings(facts):
    """bios_check's settings for the PCIe link the fleet file declares (``expected`` pcie_width, pcie_gen; numbers
    may arrive as strings from Ansible's templating); {} locally, where bios_check's defaults apply."""
    expected = facts.get("expected") or {}
    out = {}
    for key in ("pcie_width", "pcie_gen"):
        value = expected.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) or value == "auto":
            out[key] = value
    return out


def diagnose(facts: dict[str, Any] | None, findings_evaluate: Callable[..., list[dict[str, Any]]] | None = None,
             ) -> list[dict[str, Any]]:
    """Return the diagnoses for one host's ``facts`` (see the module docstring), sorted by severity and id."""
    facts = facts or {}
    out = Diagnoses()
    check_bus_and_driver(facts, out)
    if findings_evaluate is not None and (facts.get("platform") is not None or facts.get("nvml")):
        for finding in findings_evaluate(facts.get("platform") or {}, facts.get("nvml") or {}, _link_settings(facts)):
            if finding["id"] in FINDINGS_KEPT:
                out.add(finding["id"], finding["severity"], finding["subject"], finding["evidence"], finding["fix"])
    check_gpu_state(facts, out)
    check_kernel_log_events(facts, out)
    check_fleet_rules(facts, out)
    check_mig_layout(facts, out)
    check_services(facts, out)
    check_utilisation(facts, out)
    check_holders(facts, out)
    rank = {name: i for i, name in enumerate(SEVERITIES)}
    return sorted(out.items, key=lambda d: (rank.get(d["severity"], 9), d["id"], str(d["subject"])))


def problems(diagnoses: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The diagnoses that make doctor exit 1: severity fail or warn."""
    return [d for d in diagnoses or [] if d["severity"] in ("fail", "warn")]

