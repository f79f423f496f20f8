# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules that the verify ladder applies too, from the same code: the stack's services, GPU count and
model, driver versions and Fabric Manager (module_utils/health.py) and the MIG layout (module_utils/miglayout.py),
so doctor and verify say the same of a host. Pure Python 3.8, no Ansible, no I/O; :func:`~doctor.diagnose` calls
the three ``check_*`` functions."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import usable_gpus
from ansible_collections.gpuprov.gpu.plugins.module_utils.health import (
    FIX_FABRIC_MANAGER,
    FIX_SERVICE,
    driver_problems,
    expectation_problems,
    fabric_manager,
    stopped_services,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import (
    desired_layout,
    layout_problems,
    parse_mig_instances,
    unset,
)


def check_services(facts, out):
    """A unit of the stack enabled at boot and not running (health.stopped_services, as verify's services
    step): judged with or without NVML."""
    for unit, problem in stopped_services(facts.get("services")):
        out.add("service_stopped", "fail", unit, problem, FIX_SERVICE % (unit, unit, unit))


def check_fleet_rules(facts, out):
    """The rules verify applies too (module_utils/health.py): GPU count and model, driver versions, Fabric Manager."""
    nvml = facts.get("nvml") or {}
    if not nvml.get("available"):
        return
    expected = facts.get("expected") or {}
    unexpected = expectation_problems(nvml, expected)
    if unexpected:
        out.add("gpus_unexpected", "fail", "gpus", "; ".join(unexpected),
                "check the fleet file's gpus.model and gpus.count against nvidia-smi -L; a GPU missing from the "
                "list is lost (see gpu_lost) or not seated")
    mismatch = driver_problems(nvml, expected)
    if mismatch:
        out.add("driver_version_mismatch", "fail", "driver", "; ".join(mismatch),
                "reboot (or unload and reload the nvidia modules) after a driver change so the kernel module and "
                "the libraries are one version; a pinned version other than the installed one: gpuprov apply "
                "FLEET --role nvidia_driver")
    if facts.get("daemons") is None and not any((g.get("fabric") or {}).get("state") for g in usable_gpus(nvml)):
        return  # nothing to judge Fabric Manager by
    status, reason = fabric_manager(nvml, expected, facts.get("daemons"))
    if status == "fail":
        out.add("fabric_manager", "fail", "fabric", reason, FIX_FABRIC_MANAGER)


def check_mig_layout(facts, out):
    """The fleet's MIG layout against the GPUs' MIG modes and instances (miglayout, as verify's mig step)."""
    expected = facts.get("expected") or {}
    nvml = facts.get("nvml") or {}
    layout = expected.get("mig_layout")
    if unset(layout) or not nvml.get("available"):
        return
    modes = {g.get("index"): (g.get("mig") or {}).get("current") for g in usable_gpus(nvml)}
    desired, problem = desired_layout(layout, expected.get("mig_layouts"), list(modes))
    found = [str(problem)] if desired is None else layout_problems(
        desired, modes, parse_mig_instances(facts.get("mig_instances") or ""))
    if found:
        out.add("mig_layout", "fail", "mig", "; ".join(found),
                "apply the fleet's MIG layout %s: gpuprov apply FLEET --tags mig (it needs the GPUs idle)" % layout)

