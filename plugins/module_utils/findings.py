# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules: platform report + NVML facts + thresholds -> findings. Pure Python 3.8, no Ansible.

Input shapes: ``platform`` is what the ``platform_info`` module returns, ``gpus`` the ``gpuprov_gpus`` fact
(docs/facts.md), ``settings`` the thresholds and plan below (:data:`DEFAULTS`). Output: a list of findings
``{id, severity (fail|warn|info), subject, evidence, fix}`` sorted by severity, id and subject. The ids are
listed in :data:`FINDING_IDS` and documented in docs/bios-check.md. gpuprov loads this file too (like
gpuprov/facts.py loads gpuprov_nvml.py), so keep it free of Ansible imports.
"""


from __future__ import annotations

import re

GIB = 1024**3
MIB = 1024**2
SEVERITIES = ("fail", "warn", "info")

#: Thresholds and the driver plan; the role fills them from the fleet's ``bios_check`` and ``driver`` settings.
DEFAULTS = {
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

#: Expected minimum BAR1 (MiB) of large-BAR models with Above 4G Decoding on, by normalised model prefix.
#: h200: 262144 measured on a real 2x H200 (tests/data/real-h200/facts.json, tests/data/nvml-h200x2);
#: the others are the BAR1 totals nvidia-smi -q reports on correctly configured hosts (NVIDIA product briefs,
#: verified: false). Models not listed get no size check; the sysfs and kernel-log checks still apply.
BAR1_MIN_MIB = (
    ("h200", 262144),
    ("h100", 131072),
    ("gh200", 262144),
    ("b200", 262144),
    ("a100sxm480gb", 131072),
    ("a100pcie80gb", 131072),
    ("a10080gb", 131072),
    ("a100", 65536),
    ("a40", 65536),
    ("a10", 32768),
    ("l40", 65536),
    ("l4", 16384),
    ("v100", 16384),
)

#: Xids that mean hardware or firmware trouble, not an install problem (NVIDIA Xid catalogue).
HARDWARE_XIDS = {
    48: "double-bit ECC error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
}

FIX_FIRMWARE_BAR = (
    "enable Above 4G Decoding (and Resizable BAR where offered) and disable CSM in the system "
    "BIOS; after a BIOS update check these again (updates reset them). In a VM, enlarge the "
    "hypervisor's 64-bit MMIO window for passthrough GPUs"
)
FIX_HARDWARE = (
    "reboot or power-cycle, then check power delivery, cooling, seating and system BIOS; this is not "
    "a driver install problem"
)

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


def norm_bus(bus_id):
    """'00000000:3B:00.0' / '0000:3b:00' -> '0000:3b:00.0'; None stays None."""
    if not bus_id:
        return None
    text = str(bus_id).strip().lower()
    if re.match(r"^[0-9a-f]{8}:", text):
        text = text[4:]
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", text):
        text = "0000:" + text
    if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$", text):
        text += ".0"
    return text


def norm_model(name):
    """'NVIDIA GeForce RTX 3090' / 'RTX-3090' -> 'rtx3090'."""
    text = str(name or "").lower()
    for word in ("nvidia", "geforce", "tesla", "quadro"):
        text = text.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", text)


def model_matches(expected, nvml_name):
    """Fleet 'H200' matches NVML 'NVIDIA H200' and 'NVIDIA H200 NVL'; 'A100-SXM4-80GB' only that board."""
    want, have = norm_model(expected), norm_model(nvml_name)
    return bool(want) and have.startswith(want)


def bar1_min_mib(model):
    key = norm_model(model)
    for prefix, mib in BAR1_MIN_MIB:
        if key.startswith(prefix):
            return mib
    return None


def _gib(value):
    return "%.1f GiB" % (value / GIB) if isinstance(value, (int, float)) else "n/a"


class _Findings:
    def __init__(self, severity_overrides):
        self.items = []
        self.overrides = severity_overrides or {}

    def add(self, fid, severity, subject, evidence, fix):
        severity = self.overrides.get(fid, severity)
        self.items.append({"id": fid, "severity": severity, "subject": subject, "evidence": evidence, "fix": fix})


def _usable_gpus(gpus):
    return [g for g in (gpus or {}).get("gpus") or [] if not g.get("lost")]


def _firmware(out, platform, s):
    boot = platform.get("boot") or {}
    mode = boot.get("mode")
    if mode == "unknown":
        out.add(
            "boot_mode_unknown",
            "info",
            "firmware",
            "cannot tell the boot mode: {}".format(boot.get("evidence")),
            "none needed; on bare metal check the boot mode in the firmware setup (UEFI recommended)",
        )
    elif mode == "legacy":
        out.add(
            "boot_mode_legacy",
            "warn",
            "firmware",
            boot.get("evidence"),
            "switch the firmware to UEFI boot and disable CSM; legacy boot often leaves large GPU BARs unmapped",
        )
    sb = platform.get("secure_boot") or {}
    if sb.get("enabled") is None:
        if mode == "uefi":
            out.add(
                "secure_boot_unknown",
                "info",
                "firmware",
                "cannot tell the Secure Boot state: {}".format(sb.get("evidence")),
                "install mokutil, or run as root so efivars can be read",
            )
        return
    if not sb.get("enabled"):
        return
    distro = str(s.get("os_distribution") or "")
    method = str(s.get("driver_method") or "")
    branch = s.get("driver_branch")
    prebuilt = distro == "Ubuntu" and method in ("distro", "ubuntu-drivers")
    if s.get("signing_key_set"):
        out.add(
            "secure_boot_signing_planned",
            "info",
            "firmware",
            "Secure Boot is on ({}); the fleet file sets a MOK key for module signing".format(sb.get("evidence")),
            "make sure that key is enrolled (mokutil --list-enrolled); enrolment needs the console",
        )
    elif prebuilt:
        out.add(
            "secure_boot_signing_planned",
            "info",
            "firmware",
            "Secure Boot is on ({}); {} installs Canonical-signed prebuilt modules "
            "(linux-modules-nvidia-{}-<kernel>)".format(sb.get("evidence"), method, branch or "<branch>"),
            "none; keep the kernel and the prebuilt module package in step",
        )
    else:
        out.add(
            "secure_boot_unsigned_modules",
            "fail",
            "firmware",
            "Secure Boot is on ({}) and driver method {} on {} builds an unsigned kernel module "
            "that the kernel will refuse to load; no MOK key is set in the fleet file".format(
                sb.get("evidence"), method or "?", distro or "this OS"
            ),
            "enroll a MOK key (mokutil --import, confirm at the console) and set secure_boot.mok_key and "
            "secure_boot.mok_cert in the fleet file, or use Canonical-signed prebuilt modules on Ubuntu "
            "(driver.method: ubuntu-drivers or distro), or disable Secure Boot in firmware setup",
        )


def _bars(out, platform, gpus, s):
    pci = platform.get("pci") or {}
    functions = {f["bus_id"]: f for f in pci.get("nvidia_functions") or [] if f.get("is_gpu")}
    nvml_by_bus = {norm_bus(g.get("pci_bus_id_sysfs")): g for g in _usable_gpus(gpus)}
    override = s.get("min_bar1_mib")
    expected_model = s.get("expected_gpu_model")
    flagged = set()
    for bus, gpu in sorted(nvml_by_bus.items(), key=lambda kv: str(kv[0])):
        minimum = override if isinstance(override, int) else bar1_min_mib(gpu.get("name") or expected_model)
        bar1 = gpu.get("bar1_total_bytes")
        if minimum and isinstance(bar1, int) and bar1 < minimum * MIB:
            flagged.add(bus)
            out.add(
                "bar1_too_small",
                "fail",
                bus,
                "GPU %s (%s, uuid %s): BAR1 is %d MiB, a correctly configured %s has at least %d MiB"
                % (bus, gpu.get("name"), gpu.get("uuid"), bar1 // MIB, gpu.get("name"), minimum),
                f"GPU {bus}: {FIX_FIRMWARE_BAR}",
            )
    for bus, func in sorted(functions.items()):
        bar1 = func.get("bar1")
        if not bar1:
            continue
        name = (nvml_by_bus.get(bus) or {}).get("name") or expected_model
        minimum = override if isinstance(override, int) else bar1_min_mib(name)
        if not bar1.get("assigned"):
            flagged.add(bus)
            out.add(
                "bar1_unassigned",
                "fail",
                bus,
                f"GPU {bus}: BAR1 not mapped (resource line is empty)",
                f"GPU {bus}: {FIX_FIRMWARE_BAR}",
            )
        elif not bar1.get("above_4g"):
            large = minimum is None or minimum > 256
            flagged.add(bus)
            out.add(
                "bar1_below_4g",
                "fail" if large else "info",
                bus,
                "GPU %s: BAR1 of %d MiB placed below 4 GiB at 0x%x (32-bit MMIO window)"
                % (bus, bar1.get("size_bytes", 0) // MIB, bar1.get("start", 0)),
                f"GPU {bus}: {FIX_FIRMWARE_BAR}",
            )
    events = (platform.get("kernel_log") or {}).get("events") or []
    for event in events:
        if event.get("kind") == "rm_init_failed":
            out.add(
                "rm_init_failed",
                "fail",
                event.get("bus_id") or "gpu",
                "kernel log: {}".format(event.get("line")),
                "GPU {}: {}".format(event.get("bus_id"), FIX_FIRMWARE_BAR),
            )
        elif event.get("kind") == "invalid_region":
            out.add(
                "pci_region_invalid",
                "fail",
                event.get("bus_id") or "gpu",
                "kernel log: {}".format(event.get("line")),
                "GPU {}: {}".format(event.get("bus_id") or "(see log)", FIX_FIRMWARE_BAR),
            )
    count = (gpus or {}).get("count")
    driver_loaded = bool(pci.get("nvidia_module_loaded")) or bool((gpus or {}).get("available"))
    if (gpus or {}).get("available") and count == 0 and functions and driver_loaded:
        for bus in sorted(functions):
            out.add(
                "gpus_not_initialised",
                "fail",
                bus,
                f"GPU {bus} is on the PCI bus and the driver is loaded, but NVML finds no GPU (nvidia-smi: "
                "No devices were found)",
                f"GPU {bus}: BAR1 not mapped; {FIX_FIRMWARE_BAR}",
            )


def _pcie(out, gpus, s):
    load = s.get("load_utilization_pct") or 50
    width_cap = s.get("pcie_width") or 16
    gen_cap = s.get("pcie_gen")
    for gpu in _usable_gpus(gpus):
        pcie = gpu.get("pcie") or {}
        bus = norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index"))
        gen_max, gen_gpu, width_max = pcie.get("gen_max"), pcie.get("gen_gpu_max"), pcie.get("width_max")
        gen_cur, width_cur = pcie.get("gen_current"), pcie.get("width_current")
        util = (gpu.get("live") or {}).get("utilization_gpu_pct")
        gen_wanted = min(gen_gpu, gen_cap) if isinstance(gen_gpu, int) and isinstance(gen_cap, int) else gen_gpu
        link = (
            f"Gen{gen_max} x{width_max} (now Gen{gen_cur} x{width_cur}; GPU capable of Gen{gen_gpu}, "
            f"slot expected at Gen{gen_wanted} x{width_cap}; utilisation {util}%)"
        )
        degraded_gen = isinstance(gen_max, int) and isinstance(gen_wanted, int) and gen_max < gen_wanted
        degraded_width = isinstance(width_max, int) and width_max < width_cap
        if degraded_gen or degraded_width:
            out.add(
                "pcie_link_degraded",
                "fail",
                bus,
                "GPU {} ({}): the slot trained at {}".format(bus, gpu.get("name"), link),
                "reseat the card / move it to an x%d Gen%s slot / check the riser and cabling; set the "
                "slot's link speed to Auto/Gen%s in firmware; a board built for fewer lanes or an older generation "
                "is declared in the fleet file (bios_check.pcie_width, bios_check.pcie_gen)"
                % (width_cap, gen_wanted or "4", gen_wanted or "4"),
            )
        elif (
            isinstance(util, (int, float))
            and util >= load
            and (
                (isinstance(gen_cur, int) and isinstance(gen_max, int) and gen_cur < gen_max)
                or (isinstance(width_cur, int) and isinstance(width_max, int) and width_cur < width_max)
            )
        ):
            out.add(
                "pcie_link_low_under_load",
                "warn",
                bus,
                f"GPU {bus} under load: link {link}",
                "check the slot's ASPM / link power management settings in firmware and the riser; an idle "
                "GPU dropping its link speed is normal, a busy one is not",
            )


def _p2p(out, platform, gpus, s):
    pci = platform.get("pci") or {}
    gpu_count = max(len(pci.get("gpu_functions") or []), len(_usable_gpus(gpus)))
    if gpu_count < 2:
        return
    mmu = platform.get("iommu") or {}
    if mmu.get("mode") == "translated":
        out.add(
            "iommu_translating",
            "info" if s.get("vfio_hypervisor") else "warn",
            "iommu",
            "the IOMMU translates GPU DMA ({}; kernel arguments {}): peer-to-peer traffic between GPUs is "
            "redirected or blocked (NCCL hangs, case B16)".format(mmu.get("source"), mmu.get("cmdline_args")),
            "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX), or turn off VT-d / AMD-Vi in "
            "firmware if nothing needs it; keep it on VFIO hosts",
        )
    for bridge in pci.get("bridges") or []:
        bits = [b for b in bridge.get("acs_ctl") or [] if b in ("ReqRedir", "CmpltRedir", "UpstreamFwd", "SrcValid")]
        redirect = [b for b in bits if b != "SrcValid"]
        if not redirect:
            continue
        out.add(
            "acs_redirect",
            "info" if s.get("vfio_hypervisor") else "warn",
            bridge["bus_id"],
            "PCIe bridge {} above GPU(s) {} has ACS {} set ({}): GPU peer-to-peer goes through the root complex "
            "or is blocked (NCCL hangs, case B16)".format(
                bridge["bus_id"], ", ".join(bridge.get("gpus") or []), " ".join(bits), bridge.get("source")
            ),
            "disable ACS (PCIe ACS / ACS control) for the switch and root ports in firmware setup, or clear it "
            "on {} at every boot with a unit; not on VFIO passthrough hosts, where ACS provides isolation".format(
                bridge["bus_id"]
            ),
        )


def _capacity(out, platform, gpus, s):
    total = (platform.get("ram") or {}).get("total_bytes")
    min_gb = s.get("min_ram_gb") or 64
    if not isinstance(total, int):
        out.add("ram_unknown", "info", "ram", "cannot read MemTotal", "none")
    elif total < min_gb * 10**9 * 0.95:  # MemTotal excludes firmware/kernel reservations
        out.add(
            "ram_low",
            "warn",
            "ram",
            "%.1f GB of RAM, below %d GB" % (total / 10**9, min_gb),
            "add memory: image pipelines stage batches in host RAM (at least %d GB)" % min_gb,
        )
    for disk in platform.get("disks") or []:
        if disk.get("rotational") and not disk.get("removable") and (disk.get("size_bytes") or 0) > 0:
            out.add(
                "disk_rotational",
                "warn",
                disk["name"],
                "/dev/{} is a rotational disk ({})".format(disk["name"], _gib(disk.get("size_bytes"))),
                "keep image data and caches on NVMe; use rotational disks only for cold storage",
            )
    psu = s.get("psu_watts")
    gpu_w = [g.get("enforced_power_limit_w") or g.get("power_limit_w") for g in _usable_gpus(gpus)]
    gpu_w = [float(w) for w in gpu_w if isinstance(w, (int, float))]
    if not psu:
        out.add(
            "psu_unknown",
            "info",
            "psu",
            "psu_watts is not set in the fleet file; GPUs draw up to %d W" % int(sum(gpu_w)),
            "set psu_watts for this host so the headroom can be checked",
        )
        return
    need = sum(gpu_w) + float(s.get("cpu_tdp_watts") or 0)
    headroom = s.get("psu_headroom_pct")
    headroom = 25 if headroom is None else headroom
    if gpu_w and psu < need * (1 + headroom / 100.0):
        out.add(
            "psu_headroom",
            "fail",
            "psu",
            "PSU %d W vs %d W (GPU power limits %s W + CPU %s W): needs %d%% headroom, i.e. %d W"
            % (
                psu,
                need,
                "+".join("%d" % w for w in gpu_w),
                s.get("cpu_tdp_watts"),
                headroom,
                need * (1 + headroom / 100.0),
            ),
            "fit a larger PSU, or lower the GPU power limits (nvidia-smi -pl) and say so in psu_watts",
        )


def _inventory(out, gpus, s):
    if not (gpus or {}).get("available"):
        return
    want_count, want_model = s.get("expected_gpu_count"), s.get("expected_gpu_model")
    count = (gpus or {}).get("count")
    if isinstance(want_count, int) and isinstance(count, int) and count not in (0, want_count):
        out.add(
            "gpu_count_mismatch",
            "fail",
            "gpus",
            "NVML finds %d GPU(s), the fleet file expects %d" % (count, want_count),
            "fix gpus.count in the fleet file, or find the missing GPU (seating, power)",
        )
    if want_model:
        for gpu in _usable_gpus(gpus):
            if gpu.get("name") and not model_matches(want_model, gpu.get("name")):
                bus = norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index"))
                out.add(
                    "gpu_model_mismatch",
                    "fail",
                    bus,
                    "GPU {} is {}, the fleet file expects {}".format(bus, gpu.get("name"), want_model),
                    "fix gpus.model in the fleet file or put this host in a group with the right model",
                )


def _lost(out, platform, gpus, previous):
    """One hardware finding per bus id, merging NVML lost GPUs, hardware Xids, fallen-off-the-bus lines and
    GPUs on the PCI bus that NVML does not list."""
    uuids = {norm_bus(g.get("pci_bus_id_sysfs")): g.get("uuid") for g in previous or [] if g.get("uuid")}
    uuids.update(
        {norm_bus(g.get("pci_bus_id_sysfs")): g.get("uuid") for g in (gpus or {}).get("gpus") or [] if g.get("uuid")}
    )
    per_bus = {}

    def note(bus, lost, text):
        entry = per_bus.setdefault(bus, {"lost": False, "evidence": []})
        entry["lost"] = entry["lost"] or lost
        if text not in entry["evidence"]:
            entry["evidence"].append(text)

    for gpu in (gpus or {}).get("gpus") or []:
        if gpu.get("lost"):
            note(
                norm_bus(gpu.get("pci_bus_id_sysfs")) or "gpu{}".format(gpu.get("index")),
                True,
                "NVML: GPU {} {}".format(gpu.get("index"), gpu.get("error_name")),
            )
    for event in (platform.get("kernel_log") or {}).get("events") or []:
        bus = event.get("bus_id") or "gpu"
        if event.get("kind") == "xid" and event.get("xid") in HARDWARE_XIDS:
            note(bus, event["xid"] == 79, "kernel log: Xid %d (%s)" % (event["xid"], HARDWARE_XIDS[event["xid"]]))
        elif event.get("kind") == "fallen_off_bus":
            note(bus, True, "kernel log: GPU has fallen off the bus")
    functions = (platform.get("pci") or {}).get("gpu_functions") or []
    known = {norm_bus(g.get("pci_bus_id_sysfs")) for g in (gpus or {}).get("gpus") or []}
    if (gpus or {}).get("available") and (gpus or {}).get("count"):
        for bus in functions:
            if bus not in known:
                note(bus, True, "on the PCI bus but not in NVML's %d GPU(s)" % gpus["count"])
    for bus in sorted(per_bus, key=str):
        entry = per_bus[bus]
        what = "lost (fell off the bus)" if entry["lost"] else "reported a hardware error"
        out.add(
            "gpu_lost" if entry["lost"] else "gpu_hardware_xid",
            "fail",
            bus,
            "GPU {} (uuid {}) {} - hardware fault: {}".format(
                bus, uuids.get(bus) or "unknown", what, "; ".join(entry["evidence"])
            ),
            f"GPU {bus}: {FIX_HARDWARE}",
        )


def evaluate(platform, gpus, settings=None, previous_gpus=None):
    """Return the findings for one host (see module docstring)."""
    s = dict(DEFAULTS)
    s.update({k: v for k, v in (settings or {}).items() if v is not None or k in ("psu_watts",)})
    out = _Findings(s.get("severity"))
    platform = platform or {}
    _firmware(out, platform, s)
    if gpus and not gpus.get("available"):
        out.add(
            "nvml_unavailable",
            "info",
            "nvml",
            "NVML is unavailable: {} ({}); NVML checks skipped".format(gpus.get("error_name"), gpus.get("error")),
            "none before the driver is installed; afterwards run gpuprov doctor",
        )
    _bars(out, platform, gpus, s)
    _pcie(out, gpus, s)
    _p2p(out, platform, gpus, s)
    _capacity(out, platform, gpus, s)
    _inventory(out, gpus, s)
    _lost(out, platform, gpus, previous_gpus)
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
