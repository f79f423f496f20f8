"""Real state after the nouveau role: blacklist file, every installed kernel's initramfs, reboot decision.

A container shares the host's kernel, so nothing here loads modules or boots an image: the tests stop
at the kernel boundary and check what leads past it (modprobe config, initramfs content read back with
unmkinitramfs/lsinitramfs, nouveau_reboot_required recorded by converge.yml).
"""

from __future__ import annotations

import json

CONF = "/etc/modprobe.d/gpuprov-nouveau.conf"
# Early-boot files prepare.yml seeded (the stale-initramfs state): a blacklist left by an earlier attempt and a
# package-shipped file with an NVIDIA option.
SEEDED = ["/etc/modprobe.d/blacklist-nouveau.conf", "/lib/modprobe.d/nvidia-graphics-drivers-lab.conf"]
NVIDIA_VENDOR = "0x10de"


def installed_kernels(host):
    """Every kernel with a module tree and a /boot/vmlinuz-<k>, not only the running one."""
    return sorted(k for k in host.file("/lib/modules").listdir() if host.file(f"/boot/vmlinuz-{k}").exists)


def image_sha256s(host, image, paths):
    """sha256 of each path inside image ("MISSING" when absent), unpacked once with unmkinitramfs.

    unmkinitramfs splits concatenated early-microcode archives into early*/ and main/.
    """
    checks = "; ".join(
        'if [ -f "$r/{rel}" ]; then sha256sum "$r/{rel}" | cut -d" " -f1; else echo MISSING; fi'.format(
            rel=path.lstrip("/")
        )
        for path in paths
    )
    script = (
        'set -e; d=$(mktemp -d); trap \'rm -rf "$d"\' EXIT; unmkinitramfs "$1" "$d"; '
        'r="$d"; if [ -d "$d/main" ]; then r="$d/main"; fi; ' + checks
    )
    return dict(zip(paths, host.check_output("sh -c %s sh %s", script, image).split(), strict=True))


def disk_sha256(host, path):
    return host.check_output("sha256sum %s", path).split()[0]


def test_two_or_more_kernels_are_installed(host):
    # prepare.yml copies the image's kernel entry as a second, non-running kernel
    assert len(installed_kernels(host)) >= 2


def test_blacklist_file_content_and_mode(host):
    conf = host.file(CONF)
    assert conf.is_file
    assert conf.user == "root"
    assert conf.group == "root"
    assert conf.mode == 0o644
    nova = [
        mod
        for mod in ("nova_core", "nova_drm")
        if host.run(
            "find /lib/modules/ -name %s -o -name %s", f"{mod}.ko*", f"{mod.replace('_', '-')}.ko*"
        ).stdout.strip()
    ]
    lines = conf.content_string.splitlines()
    assert lines[0].startswith("#")
    assert "Ansible managed" in conf.content_string
    directives = [line for line in lines if line and not line.startswith("#")]
    assert directives == ["blacklist nouveau", "options nouveau modeset=0"] + [f"blacklist {m}" for m in nova]


def test_every_kernel_image_carries_current_early_boot_files(host):
    kernels = installed_kernels(host)
    assert kernels
    for kernel in kernels:
        image = f"/boot/initrd.img-{kernel}"
        assert host.file(image).is_file, f"{image} missing"
        listing = host.check_output("lsinitramfs %s", image).splitlines()
        assert CONF.lstrip("/") in listing, f"{image} lacks {CONF}"
        paths = [CONF, *SEEDED]
        in_image = image_sha256s(host, image, paths)
        for path in paths:
            assert in_image[path] == disk_sha256(host, path), f"{image}: {path} missing or differs"


def _bound_to_nouveau(host):
    bound = []
    for bus_id in host.file("/sys/bus/pci/devices").listdir():
        base = f"/sys/bus/pci/devices/{bus_id}"
        if host.file(f"{base}/vendor").content_string.strip() != NVIDIA_VENDOR:
            continue
        driver = host.file(f"{base}/driver")
        if driver.exists and driver.linked_to.rsplit("/", 1)[-1] in ("nouveau", "nova_core", "nova_drm"):
            bound.append(bus_id)
    return bound


def test_reboot_required_follows_the_real_sysfs(host):
    record = json.loads(host.file("/var/lib/gpuprov-molecule/nouveau-sysfs.json").content_string)
    loaded = any(host.file(f"/sys/module/{m}").is_directory for m in ("nouveau", "nova_core", "nova_drm"))
    expected = loaded or bool(_bound_to_nouveau(host))
    assert record["required"] is expected
    assert bool(record["reasons"]) is expected


def test_reboot_required_when_a_gpu_is_bound_to_nouveau(host):
    record = json.loads(host.file("/var/lib/gpuprov-molecule/nouveau-fakesys.json").content_string)
    assert record["required"] is True
    assert "kernel module nouveau is loaded" in record["reasons"]
    assert "PCI device 0000:17:00.0 is bound to nouveau" in record["reasons"]
    # the non-NVIDIA function in the fake tree is not reported
    assert not any("0000:18:00.0" in reason for reason in record["reasons"])
