# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check rules on the firmware: boot mode and Secure Boot against the driver plan. Pure Python 3.8, no
Ansible; :func:`~findings.evaluate` calls :func:`check_firmware`."""


from __future__ import annotations


def check_firmware(out, platform, s):
    """boot_mode_* and secure_boot_* findings from platform_info's ``boot`` and ``secure_boot``."""
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
    # Only ubuntu-drivers installs Canonical's signed prebuilt modules; Ubuntu's distro driver packages build with
    # DKMS like the other methods, unsigned (the nvidia_driver role refuses both without a signing key)
    prebuilt = distro == "Ubuntu" and method == "ubuntu-drivers"
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
            "(linux-modules-nvidia-{}-server-<kernel>) where the archive has them for every installed kernel".format(
                sb.get("evidence"), method, branch or "<branch>"
            ),
            "none where the archive has them (the nvidia_driver role refuses a DKMS build without a MOK key); "
            "keep the kernel and the prebuilt module package in step",
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
            "(driver.method: ubuntu-drivers), or disable Secure Boot in firmware setup",
        )

