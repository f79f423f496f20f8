# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules: platform report + NVML facts + thresholds -> findings. Pure Python 3.8, no Ansible.

Input shapes: ``platform`` is what the ``platform_info`` module returns, ``gpus`` the ``gpuprov_gpus`` fact
(docs/facts.md), ``settings`` the thresholds and plan below (:data:`DEFAULTS`). Output: a list of findings
``{id, severity (fail|warn|info), subject, evidence, fix}`` sorted by severity, id and subject. The ids are
listed in :data:`FINDING_IDS` and documented in docs/bios-check.md. gpuprov imports this file too, so keep
it and the rule files free of Ansible imports.

The rules are grouped by what they check, one file per group: ``findings_firmware`` (boot mode, Secure
Boot), ``findings_bars`` (BAR1 size and placement), ``findings_pcie`` (PCIe links, IOMMU and ACS between
GPUs), ``findings_capacity`` (RAM, disks, PSU) and ``findings_gpus`` (GPU count and model, lost GPUs and
hardware Xids). This file holds the settings, runs the groups in order and words the result.
"""


from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.findings_bars import check_bars
from ansible_collections.gpuprov.gpu.plugins.module_utils.findings_capacity import check_capacity
from ansible_collections.gpuprov.gpu.plugins.module_utils.findings_firmware import check_firmware
from ansible_collections.gpuprov.gpu.plugins.module_utils.findings_gpus import check_inventory, check_lost
from ansible_collections.gpuprov.gpu.plugins.module_utils.findings_pcie import check_links, check_p2p

SEVERITIES = ("fail", "warn", "info")

#: Thresholds and the driver plan; the role fills them from the fleet's ``bios_check`` and ``driver`` settings.
DEFAULTS: dict[str, Any] = {
    "min_ram_gb": 64,
    # Assumption: a dual-socket server with two 350 W CPUs (Xeon 8480+, EPYC 9654 class), plus board margin.
    "cpu_tdp_watts": 700,
    "psu_watts": None,
    "psu_headroom_pct": 25,
    "load_utilization_pct": 50,
    # the link each GPU's slot is built for: x16, or fewer lanes where the board splits them by design (four
    # cards on 16 lanes as four x8); "auto" generation is the GPU's own, a number caps it (a Gen5 GPU in a Gen4
    # server)
    "pcie_width": 16,
    "pcie_gen": "auto",
    "min_bar1_mib": "auto",
    "expected_gpu_model": None,
    "expected_gpu_count": None,
    "vfio_hypervisor": False,
    "severity": {},
    # driver plan, for Secure Boot
    "os_distribution": None,
    "driver_method": None,
    "driver_branch": None,
    "signing_key_set": False,
}

#: Every finding id the rules can give (docs/bios-check.md explains each).
FINDING_IDS = (
    "boot_mode_unknown",
    "boot_mode_legacy",
    "secure_boot_unknown",
    "secure_boot_unsigned_modules",
    "secure_boot_signing_planned",
    "nvml_unavailable",
    "bar1_too_small",
    "bar1_unassigned",
    "bar1_below_4g",
    "gpus_not_initialised",
    "rm_init_failed",
    "pci_region_invalid",
    "pcie_link_degraded",
    "pcie_link_low_under_load",
    "iommu_translating",
    "acs_redirect",
    "ram_low",
    "ram_unknown",
    "disk_rotational",
    "psu_headroom",
    "psu_unknown",
    "gpu_count_mismatch",
    "gpu_model_mismatch",
    "gpu_lost",
    "gpu_hardware_xid",
)


class Findings:
    """The findings of one host; ``add`` applies the severity overrides of the settings."""

    def __init__(self, severity_overrides):
        self.items = []
        self.overrides = severity_overrides or {}

    def add(self, fid, severity, subject, evidence, fix):
        severity = self.overrides.get(fid, severity)
        self.items.append({"id": fid, "severity": severity, "subject": subject, "evidence": evidence, "fix": fix})


def evaluate(platform, gpus, settings=None, previous_gpus=None):
    """Return the findings for one host (see module docstring)."""
    s = dict(DEFAULTS)
    s.update({k: v for k, v in (settings or {}).items() if v is not None or k in ("psu_watts",)})
    out = Findings(s.get("severity"))
    platform = platform or {}
    check_firmware(out, platform, s)
    if gpus and not gpus.get("available"):
        out.add(
            "nvml_unavailable",
            "info",
            "nvml",
            "NVML is unavailable: {} ({}); NVML checks skipped".format(gpus.get("error_name"), gpus.get("error")),
            "none before the driver is installed; afterwards run gpuprov doctor",
        )
    check_bars(out, platform, gpus, s)
    check_links(out, gpus, s)
    check_p2p(out, platform, gpus, s)
    check_capacity(out, platform, gpus, s)
    check_inventory(out, gpus, s)
    check_lost(out, platform, gpus, previous_gpus)
    rank = {name: i for i, name in enumerate(SEVERITIES)}
    return sorted(out.items, key=lambda f: (rank.get(f["severity"], 9), f["id"], str(f["subject"])))


def failing(findings, fail_on):
    """The findings whose severity is in ``fail_on``."""
    return [f for f in findings if f["severity"] in (fail_on or [])]


def fail_message(findings, fail_on):
    """A readable multi-line message: one line per finding with its evidence and fix."""
    if not findings:
        return ""
    lines = ["bios_check: %d finding(s) of severity %s:" % (len(findings), "/".join(fail_on or []))]
    for f in findings:
        lines.append("- [{}] {} {}: {}".format(f["severity"], f["id"], f["subject"], f["evidence"]))
        lines.append("    fix: {}".format(f["fix"]))
    return "\n".join(lines)


REPORT_GPU_KEYS = (
    "index",
    "name",
    "uuid",
    "pci_bus_id_sysfs",
    "memory_total_bytes",
    "bar1_total_bytes",
    "enforced_power_limit_w",
)


def report_gpus(gpus):
    """What the report keeps per GPU NVML can open: identity, memory, BAR1, PCIe maxima, power limit.

    Live values (current link, utilisation, temperature) are left out so an unchanged host gives an unchanged
    report."""
    out = []
    for gpu in (gpus or {}).get("gpus") or []:
        if gpu.get("lost"):
            continue
        entry = {key: gpu.get(key) for key in REPORT_GPU_KEYS}
        pcie = gpu.get("pcie") or {}
        entry["pcie"] = {key: pcie.get(key) for key in ("gen_max", "gen_gpu_max", "width_max")}
        out.append(entry)
    return out
