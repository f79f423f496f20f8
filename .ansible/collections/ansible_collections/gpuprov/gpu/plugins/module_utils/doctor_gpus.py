# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules on the state of each GPU NVML can open: persistence mode (health.persistence_off, as the
verify ladder's persistence step), ECC and row remapping, MIG mode pending a reset, temperature and throttle
reasons. Pure Python 3.8, no Ansible, no I/O; :func:`~doctor.diagnose` calls :func:`check_gpu_state`."""


from __future__ import annotations

from ansible_collections.gpuprov.gpu.plugins.module_utils.gpus import usable_gpus
from ansible_collections.gpuprov.gpu.plugins.module_utils.health import persistence_off

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


def gpu_label(gpu):
    """'GPU 0 (0000:3b:00.0)', how the diagnoses name a GPU."""
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id_sysfs") or "bus id unknown")


def check_ecc(gpu, out):
    """ecc_uncorrectable (volatile uncorrectable errors, page retirement pending), row_remap_pending and
    row_remap_failure for one GPU, from NVML's ECC counters and nvmlDeviceGetRemappedRows (``remapped_rows``
    {correctable, uncorrectable, pending, failure}: NVML's corrRows, uncRows, isPending, failureOccurred)."""
    ecc = gpu.get("ecc") or {}
    rows = ecc.get("remapped_rows") or {}
    subject = gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index")
    who = "%s (uuid %s)" % (gpu_label(gpu), gpu.get("uuid"))
    index = gpu.get("index")
    bad = []
    if (ecc.get("uncorrected_volatile") or 0) > 0:
        bad.append("%d uncorrectable ECC error(s) since the last reset" % ecc["uncorrected_volatile"])
    if ecc.get("retired_pages_pending"):
        bad.append("a page retirement is pending")
    if bad:
        out.add(
            "ecc_uncorrectable",
            "fail",
            subject,
            "%s: %s" % (who, "; ".join(bad)),
            "drain the jobs on GPU %s, then reset it (nvidia-smi -r -i %s) or reboot so the retirement takes "
            "effect; if uncorrectable errors come back, replace the GPU (RMA)" % (index, index),
        )
    counts = "%s row(s) remapped for uncorrectable and %s for correctable errors" % (
        rows.get("uncorrectable"), rows.get("correctable"))
    if rows.get("pending"):
        out.add(
            "row_remap_pending",
            "fail",
            subject,
            "%s: a row remap is pending (%s); the GPU uses the faulty row until it is reset" % (who, counts),
            "drain the jobs on GPU %s, then reset it (nvidia-smi -r -i %s) or reboot so the remap takes effect"
            % (index, index),
        )
    if rows.get("failure"):
        out.add(
            "row_remap_failure",
            "fail",
            subject,
            "%s: row remapping FAILED, no spare row was left (%s)" % (who, counts),
            "take GPU %s out of service, run nvidia-bug-report.sh and contact the hardware vendor (RMA)" % index,
        )


def check_gpu_state(facts, out):
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
            "lost state)" % ", ".join(gpu_label(g) for g in off),
            "nvidia-smi -pm 1 now; keep it across reboots with systemctl enable --now nvidia-persistenced",
            ["nvidia-smi", "-pm", "1"],
        )
    for gpu in gpus:
        check_ecc(gpu, out)
        mig = gpu.get("mig") or {}
        if mig.get("pending") is not None and mig.get("current") is not None and mig["pending"] != mig["current"]:
            out.add(
                "mig_pending",
                "warn",
                gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index"),
                "%s: MIG mode is %s but %s is pending a GPU reset"
                % (gpu_label(gpu), "on" if mig["current"] else "off", "on" if mig["pending"] else "off"),
                "with GPU %s idle: nvidia-smi -r -i %s (or reboot); then create the MIG instances "
                "(gpuprov apply FLEET --tags mig)" % (gpu.get("index"), gpu.get("index")),
            )
        temp = (gpu.get("live") or {}).get("temperature_c")
        if isinstance(temp, (int, float)) and temp >= HOT_C:
            out.add(
                "gpu_hot",
                "warn",
                gpu.get("pci_bus_id_sysfs") or "gpu%s" % gpu.get("index"),
                "%s is at %s C (warning from %d C)" % (gpu_label(gpu), temp, HOT_C),
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
            "%s clocks are held down: %s (reasons 0x%x)" % (gpu_label(gpu), ", ".join(n for n, _s in hits), reasons),
            "thermal: check airflow and fans; HW slowdown / power brake: check the PSU and power cables "
            "(an external power brake signal); nvidia-smi -q -d PERFORMANCE shows the live reasons",
        )

