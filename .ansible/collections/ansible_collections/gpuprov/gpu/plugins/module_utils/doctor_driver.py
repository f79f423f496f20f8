# Copyright: gpuprov contributors
# Apache-2.0
"""gpuprov doctor rules on the GPU's way to a working driver: the GPU on the PCI bus, nouveau, the NVML/kernel
module version mismatch, and why the nvidia module is not loaded (Secure Boot, kernel headers, DKMS, no driver).
Pure Python 3.8, no Ansible, no I/O; :func:`~doctor.diagnose` calls :func:`check_bus_and_driver`."""


from __future__ import annotations

import re

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


def check_bus_and_driver(facts, out):
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

