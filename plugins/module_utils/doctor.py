# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules: collected facts -> diagnoses. Pure Python 3.8, no Ansible, no I/O.

Input: one host's ``facts`` dict (every key optional; a missing key means "not collected", and its rules stay quiet)::

    nvml:     the gpuprov_gpus fact (gpuprov_nvml.collect, docs/facts.md)
    platform: platform_info's report (boot, secure_boot, pci, kernel_log, ...)
    pci:      gpu_pci_info's result (devices, modules, bindings, pci_readable)
    kernel:   kernel_dkms_info's result (running_kernel, kernels [...])
    module_log: kernel log lines about loading kernel modules (Secure Boot rejections), a list of str
    samples:  {"window_s": float, "gpus": {"<index>": [utilisation %, ...]}}, NVML sampled over the window
    throttle: {"<index>": NVML clocks event (throttle) reasons bitmask}
    holders:  [{pid, command, devices}] processes holding /dev/nvidia* (fuser -v or a /proc/*/fd scan)
    nvml_pids: pids NVML lists as running on any GPU, or None when unknown
    daemons:  NVIDIA daemons running (gpuprov_health.running_daemons), or None when unknown
    services: the stack's systemd units (gpuprov_health.service_states), or None without systemd
    expected: what the fleet file expects of the host {model, count, nvswitch, driver_version, pcie_width,
              pcie_gen, mig_layout, mig_layouts}, or None locally
    mig_instances: ``nvidia-smi mig -lgi`` output (str), or None where no GPU has MIG on

Output: diagnoses ``{id, severity (fail|warn|info), subject, evidence, fix, fixable, action}``; ``action`` is
the argv of the safe repair when ``fixable`` (see docs/doctor.md). bios_check's PCIe, BAR and lost-GPU rules
come from gpuprov_findings.evaluate, which the caller passes in as ``findings_evaluate``. The rules the
verify ladder applies too (GPU count and model, driver versions, persistence, Fabric Manager) are
gpuprov_health's, and the MIG layout rule gpuprov_miglayout's, so doctor and verify say the same of a host.
"""


from __future__ import annotations

import re

from ansible_collections.gpuprov.gpu.plugins.module_utils.health import (
    FIX_FABRIC_MANAGER,
    FIX_SERVICE,
    driver_problems,
    expectation_problems,
    fabric_manager,
    persistence_off,
    stopped_services,
    usable_gpus,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import (
    desired_layout,
    layout_problems,
    parse_mig_instances,
    unset,
)

SEVERITIES = ("fail", "warn", "info")

#: bios_check findings that are doctor diagnoses too (ids kept, evidence and fix as bios_check words them).
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
    "gpu_hardware_xid",
)

#: Assumption: data-centre GPUs slow down at about 87-90 C (nvidia-smi -q "GPU Slowdown Temp" on H100/H200 and
#: A100); warning a few degrees earlier gives time to check airflow before clocks drop.
HOT_C = 85

#: NVML clocks event reasons (nvmlClocksEventReasons*): bit -> (name, severity).
THROTTLE_BITS = (
    (0x8, "HW slowdown", "warn"),
    (0x20, "SW thermal slowdown", "warn"),
    (0x40, "HW thermal slowdown", "warn"),
    (0x80, "HW power brake slowdown", "fail"),
)

#: Utilisation swinging (data starvation), over at least MIN_SAMPLES samples of one GPU: the standard
#: deviation is at least SWING_STDEV points, some sample reaches BUSY_PCT and the samples at or below IDLE_PCT
#: make up at least LOW_SHARE of the window. Assumption, not a vendor number: a GPU fed fast enough stays
#: near its mean; a starved one alternates bursts with idle gaps while the next batch loads.
MIN_SAMPLES = 5
SWING_STDEV = 25.0
BUSY_PCT = 70
IDLE_PCT = 10
LOW_SHARE = 0.3

#: Processes that hold /dev/nvidia* by design and are never stale.
DAEMONS = ("nvidia-persiste", "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine", "nvidia-smi", "dcgm")

SECURE_BOOT_LOG = re.compile(
    r"(Loading of unsigned module is rejected|Key was rejected by service|module verification failed"
    r"|Lockdown: .*unsigned module)",
    re.IGNORECASE,
)

FIX_SECURE_BOOT = (
    "Secure Boot refuses the unsigned nvidia module: install the distribution-signed prebuilt modules "
    "(linux-modules-nvidia-<branch>-$(uname -r) on Ubuntu; set driver.method: ubuntu-drivers), or sign the "
    "DKMS module with a MOK key and enroll it (mokutil --import MOK.der, confirm at the console, reboot), or "
    "disable Secure Boot in firmware setup; reinstalling the driver does not help"
)


class _Out:
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


def _label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id_sysfs") or "bus id unknown")


def _gpu_functions(facts):
    """Bus ids of NVIDIA display functions, from gpu_pci_info or platform_info; None when sysfs was unread."""
    pci = facts.get("pci")
    if pci is not None:
        if not pci.get("pci_readable", True):
            return None
        return [d["bus_id"] for d in pci.get("devices") or [] if d.get("is_gpu")]
    plat = (facts.get("platform") or {}).get("pci")
    if plat is not None:
        return list(plat.get("gpu_functions") or []) if plat.get("readable", True) else None
    return None


def _module_loaded(facts, name):
    pci = facts.get("pci") or {}
    if name in (pci.get("modules") or {}):
        return bool(pci["modules"][name])
    if name == "nvidia":
        plat = (facts.get("platform") or {}).get("pci") or {}
        if "nvidia_module_loaded" in plat:
            return bool(plat["nvidia_module_loaded"])
    return None


def _running_kernel(facts):
    kernel = facts.get("kernel") or {}
    running = kernel.get("running_kernel")
    for entry in kernel.get("kernels") or []:
        if entry.get("running") or entry.get("version") == running:
            return entry
    return None


def _secure_boot_lines(facts):
    return [line.strip() for line in facts.get("module_log") or [] if SECURE_BOOT_LOG.search(line)]


def _bus_and_driver(facts, out):
    """GPU not on the bus, nouveau bound or loaded, driver/library mismatch, driver not loaded (and why)."""
    nvml = facts.get("nvml") or {}
    functions = _gpu_functions(facts)
    error = nvml.get("error_name")
    no_gpu_seen = not nvml.get("available") or not nvml.get("count")
    if no_gpu_seen and functions is not None and not functions and error != "NVML_ERROR_LIB_RM_VERSION_MISMATCH":
        out.add(
            "gpu_not_on_bus",
            "fail",
            "pci",
            "no NVIDIA display function on the PCI bus (lspci -d 10de: lists no VGA/3D controller); NVML: %s"
            % (error or "%s GPU(s)" % nvml.get("count")),
            "reseat the GPU and its power cables, make sure the slot is enabled in firmware setup (and, in a VM, "
            "that the GPU is passed through); no driver action can help",
        )
        return
    bindings = (facts.get("pci") or {}).get("bindings") or {}
    foreign = {bus: drv for bus, drv in sorted(bindings.items()) if drv in ("nouveau", "nova_core")}
    nouveau = _module_loaded(facts, "nouveau")
    if foreign or nouveau:
        out.add(
            "nouveau_loaded",
            "fail",
            ", ".join(foreign) or "nouveau",
            "the nouveau module is loaded%s, so nvidia.ko cannot bind the GPU(s)"
            % ("".join(" and drives %s" % bus for bus in foreign) if foreign else ""),
            "blacklist nouveau and rebuild every initramfs (gpuprov apply FLEET --tags nouveau, or "
            "echo 'blacklist nouveau' > /etc/modprobe.d/blacklist-nouveau.conf && update-initramfs -u -k all), "
            "then reboot; unloading nouveau on a live host (modprobe -r nouveau) is not done automatically",
        )
    if error == "NVML_ERROR_LIB_RM_VERSION_MISMATCH":
        module = nvml.get("kernel_module_version") or "unknown"
        out.add(
            "driver_library_mismatch",
            "fail",
            "driver",
            "NVML: Driver/library version mismatch (%s): the userland libraries were upgraded past the loaded "
            "kernel module %s (nvidia-smi: 'Failed to initialize NVML: Driver/library version mismatch')"
            % (nvml.get("error"), module),
            "reboot (or, with the GPUs idle, reload the module: systemctl stop nvidia-persistenced; "
            "modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia); find the upgrade in "
            "/var/log/apt/history.log and hold every driver-coupled package (gpuprov apply FLEET --tags "
            "nvidia_driver); do not reinstall the driver",
        )
        return
    if error != "NVML_ERROR_DRIVER_NOT_LOADED" or not functions or foreign or nouveau:
        if error and error not in ("NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
            out.add(
                "nvml_unavailable",
                "fail",
                "nvml",
                "NVML is unavailable: %s (%s)" % (error, nvml.get("error")),
                "install the driver's userland (gpuprov apply FLEET --tags nvidia_driver) and check that "
                "libnvidia-ml.so.1 is on the loader path (ldconfig -p | grep libnvidia-ml)"
                if error == "NVML_ERROR_LIBRARY_NOT_FOUND"
                else "run nvidia-smi for the driver's own message and check the kernel log (journalctl -k -b)",
            )
        return
    _driver_not_loaded(facts, out, functions)


def _driver_not_loaded(facts, out, functions):
    subject = ", ".join(functions)
    base = "GPU(s) %s on the PCI bus, the nvidia module is not loaded (nvidia-smi: couldn't communicate with " \
        "the NVIDIA driver)" % subject
    rejected = _secure_boot_lines(facts)
    sb = ((facts.get("platform") or {}).get("secure_boot") or {}).get("enabled")
    entry = _running_kernel(facts)
    mod = ((entry or {}).get("modules") or {}).get("nvidia") or {}
    if rejected or (sb and mod.get("ok") and not mod.get("signer")):
        out.add(
            "secure_boot_rejects_module",
            "fail",
            "driver",
            "%s; Secure Boot is %s; %s"
            % (base, "on" if sb else "unknown", "kernel log: " + rejected[0] if rejected else "the module is unsigned"),
            FIX_SECURE_BOOT,
        )
        return
    if entry is None:
        out.add(
            "driver_not_loaded",
            "fail",
            subject,
            base + "; the kernel/DKMS state was not collected",
            "check dkms status and ls /usr/src/linux-headers-$(uname -r); then modprobe nvidia",
        )
        return
    kernel = entry.get("version")
    if mod.get("ok"):
        out.add(
            "driver_not_loaded",
            "fail",
            subject,
            base + "; the module is built for the running kernel %s (%s)" % (kernel, mod.get("modinfo_filename")),
            "load it: modprobe nvidia (and enable nvidia-persistenced); if it refuses, read journalctl -k -b",
            ["modprobe", "nvidia"],
        )
    elif not entry.get("headers_present"):
        out.add(
            "kernel_headers_missing",
            "fail",
            subject,
            "%s; no nvidia module for the running kernel %s: %s not installed, so DKMS built nothing for it "
            "(DKMS state %s)" % (base, kernel, entry.get("headers_package"), mod.get("dkms_state")),
            "install the headers of the running kernel and build the module: apt-get install %s && "
            "dkms autoinstall -k %s && modprobe nvidia (gpuprov apply FLEET --tags nvidia_driver does the same "
            "for every installed kernel)" % (entry.get("headers_package"), kernel),
        )
    elif mod.get("dkms_version"):
        out.add(
            "dkms_module_missing",
            "fail",
            subject,
            "%s; headers for %s are present but DKMS state of nvidia/%s is %s (module file %s)"
            % (base, kernel, mod.get("dkms_version"), mod.get("dkms_state"),
               "present" if mod.get("file") else "absent"),
            "build and load it: dkms autoinstall -k %s && modprobe nvidia" % kernel,
            ["dkms", "autoinstall", "-k", str(kernel)],
        )
    else:
        out.add(
            "driver_not_installed",
            "fail",
            subject,
            base + "; no nvidia module is added to DKMS and none is built for %s" % kernel,
            "install the driver: gpuprov apply FLEET --tags nvidia_driver",
        )


def _gpu_state(facts, out):
    """ECC, persistence, MIG pending, temperature and throttle reasons, per GPU."""
    nvml = facts.get("nvml") or {}
    gpus = usable_gpus(nvml)
    off_indices = persistence_off(nvml)
    off = [g for g in gpus if str(g.get("index")) in off_indices]
    if off:
        out.add(
            "persistence_off",
            "warn",
            ", ".join(str(g.get("index")) for g in off),
            "persistence mode is off on GPU(s) %s: the driver tears the GPUs down between jobs (slow start, "
            "lost state)" % ", ".join(_label(g) for g in off),
            "nvidia-smi -pm 1 now; keep it across reboots with systemctl enable --now nvidia-persistenced",
            ["nvidia-smi", "-pm", "1"],
        )
    for gpu in gpus:
        ecc = gpu.get("ecc") or {}
        rows = ecc.get("remapped_rows") or {}
        bad = []
        if (ecc.get("uncorrected_volatile") or 0) > 0:
            bad.append("%d uncorrectable ECC error(s) since the last reset" % ecc["uncorrected_volatile"])
        if rows.get("pending"):
            bad.append("a row remap is pending")
        if rows.get("failure"):
            bad.append("row remapping FAILED")
        if ecc.get("retired_pages_pending"):
            bad.append("a page retirement is pending")
        if bad:
            out.add(
                "ecc_uncorrectable",
                "fail",
                gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index"),
                "%s (uuid %s): %s" % (_label(gpu), gpu.get("uuid"), "; ".join(bad)),
                "drain the jobs on GPU %s, then reset it (nvidia-smi -r -i %s) or reboot so the remap/retirement "
                "takes effect; if uncorrectable errors come back or remapping failed, replace the GPU (RMA)"
                % (gpu.get("index"), gpu.get("index")),
            )
        mig = gpu.get("mig") or {}
        if mig.get("pending") is not None and mig.get("current") is not None and mig["pending"] != mig["current"]:
            out.add(
                "mig_pending",
                "warn",
                gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index"),
                "%s: MIG mode is %s but %s is pending a GPU reset"
                % (_label(gpu), "on" if mig["current"] else "off", "on" if mig["pending"] else "off"),
                "with GPU %s idle: nvidia-smi -r -i %s (or reboot); then create the MIG instances "
                "(gpuprov apply FLEET --tags mig)" % (gpu.get("index"), gpu.get("index")),
            )
        temp = (gpu.get("live") or {}).get("temperature_c")
        if isinstance(temp, (int, float)) and temp >= HOT_C:
            out.add(
                "gpu_hot",
                "warn",
                gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index"),
                "%s is at %s C (warning from %d C)" % (_label(gpu), temp, HOT_C),
                "check airflow, fans and inlet temperature (blanking panels, fan profile in the BMC); "
                "nvidia-smi -q -d TEMPERATURE,PERFORMANCE shows the slowdown threshold and throttle reasons",
            )
    by_index = {str(g.get("index")): g for g in gpus}
    for index, reasons in sorted((facts.get("throttle") or {}).items()):
        if not isinstance(reasons, int):
            continue
        hits = [(name, sev) for bit, name, sev in THROTTLE_BITS if reasons & bit]
        if not hits:
            continue
        gpu = by_index.get(str(index)) or {"index": index}
        out.add(
            "gpu_throttled",
            "fail" if any(sev == "fail" for _n, sev in hits) else "warn",
            gpu.get("pci_bus_id_sysfs") or "gpu%s" % index,
            "%s clocks are held down: %s (reasons 0x%x)" % (_label(gpu), ", ".join(n for n, _s in hits), reasons),
            "thermal: check airflow and fans; HW slowdown / power brake: check the PSU and power cables "
            "(an external power brake signal); nvidia-smi -q -d PERFORMANCE shows the live reasons",
        )


def _services(facts, out):
    """A unit of the stack enabled at boot and not running (gpuprov_health.stopped_services, as verify's services
    step): judged with or without NVML."""
    for unit, problem in stopped_services(facts.get("services")):
        out.add("service_stopped", "fail", unit, problem, FIX_SERVICE % (unit, unit, unit))


def _fleet_rules(facts, out):
    """The rules verify applies too (gpuprov_health): GPU count and model, driver versions, Fabric Manager."""
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


def _mig_layout(facts, out):
    """The fleet's MIG layout against the GPUs' MIG modes and instances (gpuprov_miglayout, as verify's mig step)."""
    expected = facts.get("expected") or {}
    nvml = facts.get("nvml") or {}
    layout = expected.get("mig_layout")
    if unset(layout) or not nvml.get("available"):
        return
    modes = {g.get("index"): (g.get("mig") or {}).get("current") for g in usable_gpus(nvml)}
    desired, problem = desired_layout(layout, expected.get("mig_layouts"), list(modes))
    found = [problem] if desired is None else layout_problems(
        desired, modes, parse_mig_instances(facts.get("mig_instances") or ""))
    if found:
        out.add("mig_layout", "fail", "mig", "; ".join(found),
                "apply the fleet's MIG layout %s: gpuprov apply FLEET --tags mig (it needs the GPUs idle)" % layout)


def _stdev(values):
    mean = sum(values) / float(len(values))
    return (sum((v - mean) ** 2 for v in values) / float(len(values))) ** 0.5


def swinging(values):
    """True when utilisation samples swing between bursts and long idle periods (thresholds above)."""
    values = [v for v in values if isinstance(v, (int, float))]
    if len(values) < MIN_SAMPLES:
        return False
    low = sum(1 for v in values if v <= IDLE_PCT) / float(len(values))
    return _stdev(values) >= SWING_STDEV and max(values) >= BUSY_PCT and low >= LOW_SHARE


def _utilisation(facts, out):
    samples = facts.get("samples") or {}
    by_index = {str(g.get("index")): g for g in usable_gpus(facts.get("nvml"))}
    for index, values in sorted((samples.get("gpus") or {}).items()):
        if not swinging(values):
            continue
        gpu = by_index.get(str(index)) or {"index": index}
        out.add(
            "utilization_swinging",
            "warn",
            gpu.get("pci_bus_id_sysfs") or "gpu%s" % index,
            "%s utilisation over %ss swings between idle and busy (data starvation): %s"
            % (_label(gpu), samples.get("window_s"), ", ".join("%d%%" % v for v in values)),
            "the input pipeline cannot keep the GPU fed: raise DataLoader num_workers and prefetch, pin host "
            "memory, decode on the GPU (DALI), keep the dataset on local NVMe, and watch CPU usage while training",
        )


def _holders(facts, out):
    holders = facts.get("holders")
    if holders is None:
        return
    known = facts.get("nvml_pids")
    for proc in holders:
        command = str(proc.get("command") or "?")
        if command.startswith(DAEMONS) or (known is not None and proc.get("pid") in known):
            continue
        out.add(
            "stale_device_holder",
            "warn" if known is not None else "info",
            "pid %s" % proc.get("pid"),
            "process %s (%s) holds %s but %s"
            % (
                proc.get("pid"),
                command,
                ", ".join(proc.get("devices") or ["/dev/nvidia*"]),
                "NVML lists no GPU work for it (left over from an interrupted job?)"
                if known is not None
                else "NVML's process list is not collected here",
            ),
            "check it with fuser -v /dev/nvidia* and ps -o pid,etime,cmd -p %s; if it is a dead job's leftover: "
            "kill %s (kill -9 %s if it ignores TERM); the GPU memory is freed when it exits"
            % (proc.get("pid"), proc.get("pid"), proc.get("pid")),
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


def diagnose(facts, findings_evaluate=None):
    """Return the diagnoses for one host's ``facts`` (see the module docstring), sorted by severity and id."""
    facts = facts or {}
    out = _Out()
    _bus_and_driver(facts, out)
    if findings_evaluate is not None and (facts.get("platform") is not None or facts.get("nvml")):
        for finding in findings_evaluate(facts.get("platform") or {}, facts.get("nvml") or {}, _link_settings(facts)):
            if finding["id"] in FINDINGS_KEPT:
                out.add(finding["id"], finding["severity"], finding["subject"], finding["evidence"], finding["fix"])
    _gpu_state(facts, out)
    _fleet_rules(facts, out)
    _mig_layout(facts, out)
    _services(facts, out)
    _utilisation(facts, out)
    _holders(facts, out)
    rank = {name: i for i, name in enumerate(SEVERITIES)}
    return sorted(out.items, key=lambda d: (rank.get(d["severity"], 9), d["id"], str(d["subject"])))


def problems(diagnoses):
    """The diagnoses that make doctor exit 1: severity fail or warn."""
    return [d for d in diagnoses or [] if d["severity"] in ("fail", "warn")]
