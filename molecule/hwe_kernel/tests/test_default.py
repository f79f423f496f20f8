"""Real state after the hwe_kernel role: kernel packages, headers for every installed kernel, holds, the
reboot decision, and no reboot.

A container shares the host's kernel, so nothing here boots the HWE kernel: the tests stop at the kernel
boundary and check what leads past it (installed image and headers, the headers tree DKMS would build
against, holds, hwe_kernel_reboot_required recorded by converge.yml, PID 1 never restarted).
"""

from __future__ import annotations

import json

HWE_META = "linux-generic-hwe-20.04"
HWE_KERNEL = "5.15.0-105-generic"


def is_ubuntu2004(host):
    return host.backend.get_hostname().endswith("ubuntu2004")


def installed_kernels(host):
    """Every kernel with a /boot/vmlinuz-<k> (an installed image), not only the booted one."""
    return sorted(name[len("vmlinuz-"):] for name in host.file("/boot").listdir() if name.startswith("vmlinuz-"))


def packages(host, pattern):
    """{name: (version, status)} of the packages matching a dpkg-query pattern, as dpkg reports them."""
    out = host.run("dpkg-query -W -f '${Package}\\t${Version}\\t${Status}\\n' %s", pattern).stdout
    return {n: (v, s) for n, v, s in (line.split("\t") for line in out.splitlines())}


def recorded(host):
    return json.loads(host.file("/var/lib/gpuprov-molecule/hwe_kernel.json").content_string)


def booted_kernel(host):
    return json.loads(host.file("/etc/ansible/facts.d/gpuprov.fact").content_string)["booted_kernel"]


def test_hwe_line_installed_where_the_ga_kernel_is_too_old(host):
    metas = packages(host, "linux-*generic-hwe-20.04")
    if is_ubuntu2004(host):
        assert set(metas) == {HWE_META, "linux-image-generic-hwe-20.04", "linux-headers-generic-hwe-20.04"}
        assert all(status == "hold ok installed" for _version, status in metas.values())
        assert HWE_KERNEL in installed_kernels(host)
    else:
        assert not [name for name, (_v, status) in metas.items() if status.endswith(" installed")]
        assert installed_kernels(host) == [booted_kernel(host)]


def test_hwe_image_and_headers_match(host):
    if not is_ubuntu2004(host):
        return
    image = packages(host, f"linux-image-{HWE_KERNEL}")[f"linux-image-{HWE_KERNEL}"]
    headers = packages(host, f"linux-headers-{HWE_KERNEL}")[f"linux-headers-{HWE_KERNEL}"]
    # a kernel's own packages bring no other kernel: kernel.hold holds only the metas
    assert image[1] == headers[1] == "install ok installed"
    assert image[0] == headers[0]
    # the headers tree DKMS builds against: the stand-in links it to the real Debian headers
    build = host.file(f"/lib/modules/{HWE_KERNEL}/build")
    assert build.is_symlink
    assert host.file(f"/usr/src/linux-headers-{HWE_KERNEL}/Makefile").exists


def test_no_installed_kernel_without_headers(host):
    kernels = installed_kernels(host)
    assert booted_kernel(host) in kernels
    for kernel in kernels:
        assert packages(host, f"linux-headers-{kernel}")[f"linux-headers-{kernel}"][1].endswith(" installed"), kernel
        assert host.run("test -e /lib/modules/%s/build/Makefile", kernel).rc == 0, kernel
    # and the headers flavour follows every image meta (linux-image-amd64 -> linux-headers-amd64), at the image
    # meta's own version: a newer headers meta would pull a newer kernel image (Debian's headers depend on it)
    image_metas = [n for n, (_v, s) in packages(host, "linux-image-*").items()
                   if s.endswith(" installed") and not n[len("linux-image-"):][:1].isdigit()]
    assert image_metas
    for meta in image_metas:
        headers_meta = "linux-headers-" + meta[len("linux-image-"):]
        assert packages(host, headers_meta)[headers_meta][1] == "hold ok installed", headers_meta
        assert packages(host, headers_meta)[headers_meta][0] == packages(host, meta)[meta][0], headers_meta


def test_kernel_metas_are_held_and_recorded(host):
    """kernel.hold (converge.yml): every installed kernel meta package is held, and recorded as gpuprov's hold."""
    installed = [n for n, (_v, s) in packages(host, "linux-image-*").items() if s.endswith(" installed")]
    installed += [n for n, (_v, s) in packages(host, "linux-headers-*").items() if s.endswith(" installed")]
    metas = {n for n in installed if not n.split("-", 2)[2][:1].isdigit()}
    held = set(host.run("apt-mark showhold").stdout.split())
    assert metas
    assert metas <= held
    assert not {n for n in installed if n not in metas} & held
    record = json.loads(host.file("/var/lib/gpuprov/kernel-hold.json").content_string)
    assert metas <= set(record["held"]) <= held


def test_reboot_required_is_set_and_no_reboot_was_done(host):
    decision = recorded(host)
    assert decision["reboot_ok"] is False
    if is_ubuntu2004(host):
        # the newest installed kernel is the default boot kernel and it is not the booted one
        assert decision == {"reboot_required": True, "expected_kernel": HWE_KERNEL, "reboot_ok": False}
    else:
        assert decision == {"reboot_required": False, "expected_kernel": booted_kernel(host), "reboot_ok": False}
    # PID 1 (systemd) still runs since prepare: ansible.builtin.reboot would have restarted it
    stat = host.file("/proc/1/stat").content_string
    assert stat.split(") ")[1].split()[19] == host.file("/var/lib/gpuprov-molecule/pid1-start").content_string.strip()
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
