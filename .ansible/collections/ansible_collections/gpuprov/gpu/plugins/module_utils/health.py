# Copyright: gpuprov contributors
# Apache-2.0
"""GPU health rules that the verify ladder (``verify_ladder``) and ``gpuprov doctor`` both apply: one copy of
each, so the two never disagree about a host. Pure Python 3.8 except :func:`running_daemons`, which reads procfs,
and :func:`service_states`, which asks systemd through the caller's ``run``.

Inputs are the ``gpuprov_gpus`` fact (``collect`` of module_utils/nvml.py, docs/facts.md), what the fleet file
expects of the host (``{model, count, nvswitch, driver_version}``, each None when unset) and the daemons found
running. Each rule returns problems as sentences (empty when healthy); callers wrap them in a verify step or a
doctor diagnosis.
"""


from __future__ import annotations

import os

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import model_matches, usable_gpus

#: The NVIDIA daemons whose presence the rules read (process names as in ``/proc/PID/comm``, 15 characters).
DAEMONS = ("nvidia-persistenced", "nv-fabricmanager", "nv-hostengine")

#: ``fabric.state`` values (``FABRIC_STATES`` of module_utils/nvml_links.py) that mean the GPU takes part in an
#: NVSwitch fabric.
FABRIC_REPORTED = ("not_started", "in_progress", "completed")

#: systemd units of the stack (shell patterns as ``systemctl list-units`` takes them): the persistence daemon,
#: Fabric Manager, DCGM and its exporter, the container runtimes, the roles' own (MIG layout, image workers)
SERVICE_PATTERNS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service",
                    "dcgm-exporter.service", "docker.service", "containerd.service", "gpuprov-mig.service",
                    "gpuprov-worker@*.service")
_SHOW = ("Id", "Type", "UnitFileState", "ActiveState", "SubState", "Result", "ConditionResult")
_RUNNING = ("active", "activating", "reloading")
FIX_SERVICE = ("systemctl start %s; if it stops again, systemctl status %s and journalctl -b -u %s say why "
               "(gpuprov apply FLEET re-runs the role that owns it)")

FIX_FABRIC_MANAGER = (
    "install nvidia-fabricmanager-<branch> at exactly the driver's version and start it "
    "(systemctl enable --now nvidia-fabricmanager); gpuprov apply FLEET --role nvidia_driver does both"
)


def running_daemons(proc_root="/proc", names=DAEMONS):
    """Names from ``names`` that some process runs, from ``<proc_root>/*/comm`` (no systemd, no psutil)."""
    found = set()
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "comm")) as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        for name in names:
            if comm == name[:15]:  # the kernel keeps 15 characters of the name
                found.add(name)
    return sorted(found)


def gpu_problems(nvml, expected):
    """Lost GPUs, a count or model other than the fleet file's (:func:`expectation_problems`), no GPU at all
    (NVML must be available)."""
    names = [g.get("name") for g in (nvml or {}).get("gpus") or []]
    problems = []
    lost = (nvml or {}).get("lost_gpus") or []
    if lost:
        problems.append("GPU(s) %s lost (Xid 79?)" % lost)
    problems.extend(expectation_problems(nvml, expected))
    if not names:
        problems.append("NVML enumerates no GPU")
    return problems


def expectation_problems(nvml, expected):
    """A GPU count or model other than the fleet file's (``gpus.count``, ``gpus.model``: 'H200' matches
    'NVIDIA H200 NVL')."""
    expected = expected or {}
    names = [g.get("name") for g in (nvml or {}).get("gpus") or []]
    problems = []
    want_count = expected.get("count")
    if want_count not in (None, "") and int(want_count) != int((nvml or {}).get("count") or 0):
        problems.append("%s GPU(s) found, the fleet file expects %s" % ((nvml or {}).get("count"), want_count))
    want_model = expected.get("model")
    if want_model:
        wrong = [n for n in names if n and not model_matches(want_model, n)]
        if wrong:
            problems.append("GPU model %s, the fleet file expects %s" % (", ".join(sorted(set(wrong))), want_model))
    return problems


def driver_problems(nvml, expected):
    """NVML library vs driver, loaded kernel module vs userland, and the fleet file's pinned version."""
    nvml = nvml or {}
    driver, version = nvml.get("driver_version"), str(nvml.get("nvml_version") or "")
    library = version.split(".", 1)[1] if "." in version else (version or None)
    module = nvml.get("kernel_module_version")
    want = (expected or {}).get("driver_version")
    problems = []
    if library != driver:
        problems.append("NVML library %s does not match driver %s (userland/kernel mismatch)" % (version, driver))
    if module and module != driver:
        problems.append("loaded kernel module %s differs from the userland driver %s: reboot or reload" %
                        (module, driver))
    if want and str(want) != str(driver):
        problems.append("driver %s, the fleet file pins %s" % (driver, want))
    return problems


def persistence_off(nvml):
    """Indices (str) of the GPUs whose persistence mode is off, sorted."""
    return sorted(str(g.get("index")) for g in usable_gpus(nvml) if g.get("persistence_mode") is False)


def nvswitch_system(nvml, expected):
    """True when the fleet file says the host's GPUs sit on NVSwitches, or NVML sees an NVLink to one."""
    return bool((expected or {}).get("nvswitch")) or bool((nvml or {}).get("nvswitch_present"))


def fabric_manager(nvml, expected, daemons):
    """``(status, reason)`` of Fabric Manager on this host: ``skip`` off NVSwitch systems; else the GPUs' fabric
    registration where NVML reports it (Hopper and later: every GPU ``completed`` with ``NVML_SUCCESS``), and
    the ``nv-fabricmanager`` process where it does not (A100 NVSwitch systems)."""
    if not nvswitch_system(nvml, expected):
        return "skip", ("not an NVSwitch system (NVML sees no NVSwitch link and the fleet file sets "
                        "gpus.nvswitch false)")
    reported = [g for g in usable_gpus(nvml) if (g.get("fabric") or {}).get("state") in FABRIC_REPORTED]
    if reported:
        bad = [g for g in reported if g["fabric"]["state"] != "completed" or g["fabric"]["status"] != "NVML_SUCCESS"]
        if bad:
            return "fail", ("GPU fabric registration incomplete on GPU(s) %s (state %s, %s): %s" % (
                ", ".join(str(g.get("index")) for g in bad), bad[0]["fabric"]["state"], bad[0]["fabric"]["status"],
                FIX_FABRIC_MANAGER))
        return "pass", None
    if "nv-fabricmanager" in (daemons or []):
        return "pass", None
    return "fail", ("NVSwitch system without a running nv-fabricmanager and no fabric state from NVML: CUDA "
                    "initialisation fails with 'system not yet initialized'; " + FIX_FABRIC_MANAGER)


def service_states(run, systemd_dir="/run/systemd/system"):
    """The stack's loaded units (:data:`SERVICE_PATTERNS`) as ``{unit: {type, enabled, active, sub, result,
    condition}}`` (``systemctl show`` properties Type, UnitFileState, ActiveState, SubState, Result and
    ConditionResult: ``no`` when a ``Condition*=`` of the unit skipped its last start), asked through
    ``run(argv) -> (rc, stdout)``; None where systemd is not the init (no ``systemd_dir``: a container, a chroot)
    or systemctl fails."""
    if not os.path.isdir(systemd_dir):
        return None
    rc, out = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "--type=service",
                   *SERVICE_PATTERNS])
    if rc != 0:
        return None
    units = sorted({line.split()[0] for line in out.splitlines() if line.strip()})
    if not units:
        return {}
    rc, out = run(["systemctl", "show", "--no-pager", "--property=" + ",".join(_SHOW), *units])
    if rc != 0:
        return None
    states: dict[str, dict[str, str | None]] = {}
    unit: dict[str, str] = {}
    for line in [*out.splitlines(), ""]:
        if not line.strip():
            if unit.get("Id"):
                states[unit["Id"]] = {"type": unit.get("Type"), "enabled": unit.get("UnitFileState"),
                                      "active": unit.get("ActiveState"), "sub": unit.get("SubState"),
                                      "result": unit.get("Result"), "condition": unit.get("ConditionResult")}
            unit = {}
            continue
        key, _, value = line.partition("=")
        unit[key] = value
    return states


def stopped_services(states):
    """``[(unit, sentence)]`` for each unit enabled at boot that is not running (a oneshot: whose last run
    failed), sorted by unit; empty when ``states`` is None (unknown) or all run."""
    problems = []
    for unit, state in sorted((states or {}).items()):
        if state.get("enabled") not in ("enabled", "enabled-runtime"):
            continue
        if state.get("type") == "oneshot":
            if state.get("result") in (None, "", "success"):
                continue
        elif state.get("active") in _RUNNING:
            continue
        result = state.get("result")
        if state.get("condition") == "no":
            problems.append((unit, "%s is enabled but systemd skipped its start: a Condition of the unit was not "
                             "met (systemctl status %s names it)" % (unit, unit)))
            continue
        problems.append((unit, "%s is enabled but %s (%s%s)" % (
            unit, state.get("active"), state.get("sub"),
            ", result %s" % result if result not in (None, "", "success") else ", stopped")))
    return problems
