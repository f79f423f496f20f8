# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules on the GPUs' BAR1 apertures: the size NVML reports against the model's, the placement the
sysfs ``resource`` file shows and the kernel log's RmInitAdapter / invalid region lines. Pure Python 3.8, no
Ansible; :func:`~findings.evaluate` calls :func:`check_bars`."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import norm_bus, norm_model, usable_gpus

MIB = 1024**2

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

FIX_FIRMWARE_BAR = (
    "enable Above 4G Decoding (and Resizable BAR where offered) and disable CSM in the system "
    "BIOS; after a BIOS update check these again (updates reset them). In a VM, enlarge the "
    "hypervisor's 64-bit MMIO window for passthrough GPUs"
)


def bar1_min_mib(model):
    """The expected minimum BAR1 in MiB of a model (:data:`BAR1_MIN_MIB`), None for an unlisted one."""
    key = norm_model(model)
    for prefix, mib in BAR1_MIN_MIB:
        if key.startswith(prefix):
            return mib
    return None


def check_bars(out, platform, gpus, s):
    """bar1_*, rm_init_failed, pci_region_invalid and gpus_not_initialised findings."""
    pci = platform.get("pci") or {}
    functions = {f["bus_id"]: f for f in pci.get("nvidia_functions") or [] if f.get("is_gpu")}
    nvml_by_bus = {norm_bus(g.get("pci_bus_id_sysfs")): g for g in usable_gpus(gpus)}
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

