#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only kernel-by-module matrix: installed kernels, their headers and their DKMS modules."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_dkms_info
short_description: Report every installed kernel's headers and DKMS module state (read-only)
description:
  - Lists the installed kernels (a C(<boot_dir>/vmlinuz-<k>) or an installed C(linux-image-<k>) package),
    the running kernel (C(uname -r), or O(running_kernel)), the default boot kernel (GRUB's default when it
    names a kernel, else the newest installed) and kernels newer than the running one (pending).
  - For each kernel it reports whether headers are present (C(<src_dir>/linux-headers-<k>) exists and the
    C(<modules_dir>/<k>/build) link resolves), the DKMS state of every O(modules) entry, whether the built
    module file exists under C(<modules_dir>/<k>/updates/dkms) and whether C(modinfo -k <k>) finds it.
  - DKMS has no library or machine-readable output, only the C(dkms status) CLI, so the module runs it and
    parses the line formats of DKMS 2.x (C(name, version, kernel, arch) then a colon and the state) and 2.8+/3.x
    (C(name/version, kernel, arch) then a colon and the state), with or without a trailing note.
  - Changes nothing on the host.
options:
  modules:
    description: DKMS module names to report per kernel.
    type: list
    elements: str
    default: [nvidia]
  running_kernel:
    description: Treat this version as the running kernel instead of C(uname -r) (tests, containers).
    type: str
  modules_dir:
    description: Kernel modules root.
    type: path
    default: /lib/modules
  boot_dir:
    description: Directory holding C(vmlinuz-<k>).
    type: path
    default: /boot
  src_dir:
    description: Directory holding C(linux-headers-<k>).
    type: path
    default: /usr/src
  grub_default_file:
    description: File holding C(GRUB_DEFAULT=).
    type: path
    default: /etc/default/grub
  grubenv:
    description: GRUB environment block holding C(saved_entry=).
    type: path
    default: /boot/grub/grubenv
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Read the kernel-by-module matrix
  kernel_dkms_info:
    modules: [nvidia]
  register: __nvidia_driver_kernels
  check_mode: false
  changed_when: false
"""

RETURN = r"""
running_kernel:
  description: The running kernel version (or O(running_kernel)).
  type: str
  returned: always
default_kernel:
  description: The kernel the next boot starts.
  type: str
  returned: always
default_kernel_source:
  description: C(grub) when GRUB names the kernel, C(newest) otherwise.
  type: str
  returned: always
installed_kernels:
  description: Installed kernel versions, oldest first.
  type: list
  returned: always
kernels:
  description: >-
    One entry per installed kernel plus the running kernel: version, installed, running, default,
    pending, vmlinuz, image_package, headers_package, headers_dir, build_link, headers_present and
    modules (name -> dkms_version, dkms_state, file, modinfo, modinfo_filename, signer, ok).
  type: list
  returned: always
dkms:
  description: Parsed C(dkms status) lines (module, version, kernel, arch, state, note).
  type: list
  returned: always
dkms_versions:
  description: Module name -> DKMS versions known (added, built or installed), oldest first.
  type: dict
  returned: always
headers_only_kernels:
  description: Kernels with headers (package or directory) but no installed image.
  type: list
  returned: always
packages:
  description: Installed linux-image-* and linux-headers-* packages (name -> version).
  type: dict
  returned: always
image_metas:
  description: Installed kernel image meta packages (no version in the name).
  type: list
  returned: always
headers_metas:
  description: Installed kernel headers meta packages.
  type: list
  returned: always
headers_metas_without_image:
  description: Headers metas whose image meta is not installed (they drift ahead of the images).
  type: list
  returned: always
missing_headers:
  description: Kernels without headers.
  type: list
  returned: always
missing_modules:
  description: One {kernel, module, version} per module not built and installed.
  type: list
  returned: always
problems:
  description: One readable message per missing piece, naming the kernel and the package.
  type: list
  returned: always
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.deb import (
    dpkg_query_argv,
    installed_versions,
    parse_dpkg_query,
)
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import find_modules, version_key

# DKMS 2.x: "nvidia, 535.183.01, 5.15.0-105-generic, x86_64: installed"
# DKMS 2.8+ / 3.x: "nvidia/535.183.01, 5.15.0-105-generic, x86_64: installed (WARNING! ...)"
# Either, not built for any kernel: "nvidia/535.183.01: added" or "nvidia, 535.183.01: added"
DKMS_LINE = re.compile(
    r"^(?P<module>[^,/:\s]+)(?:/|,\s*)(?P<version>[^,:\s]+)"
    r"(?:,\s*(?P<kernel>[^,:\s]+))?(?:,\s*(?P<arch>[^,:\s]+))?"
    r":\s*(?P<state>[A-Za-z][\w-]*)(?P<note>.*)$"
)
KERNEL_IN_ENTRY = re.compile(r"(?:Linux|linux)[ -](\d+\.\d+[^\s'\"]*)")
IMAGE_PACKAGE = re.compile(r"^linux-image-(?:unsigned-)?(\d+\.\d+.*)$")
HEADERS_PACKAGE = re.compile(r"^linux-headers-(\d+\.\d+.*)$")
# Arch-independent halves of a kernel's headers: Debian's linux-headers-<abi>-common(-rt) and Ubuntu's
# flavourless linux-headers-<abi> (5.15.0-105). They belong to a flavoured kernel, never stand alone.
COMMON_HEADERS = re.compile(r"^(?:\d+\.\d+\.\d+-\d+|.*-common(?:-rt)?)$")


def parse_dkms_status(text):
    """Parse `dkms status` output into dicts; lines that are not status lines (errors, warnings) are skipped."""
    entries = []
    for line in text.splitlines():
        match = DKMS_LINE.match(line.strip())
        if not match:
            continue
        entry = match.groupdict()
        entry["note"] = (entry["note"] or "").strip()
        entries.append(entry)
    return entries


def parse_grub_default(default_text, grubenv_text=""):
    """Kernel version that GRUB_DEFAULT (or the saved entry) names, or None when it names no kernel.

    `GRUB_DEFAULT=0` (the first entry: the newest kernel on Debian/Ubuntu) and unknown forms return None,
    so the caller falls back to the newest installed kernel.
    """
    value = None
    for raw in default_text.splitlines():
        line = raw.strip()
        if line.startswith("GRUB_DEFAULT="):
            value = line.split("=", 1)[1].strip().strip("\"'")
    if value == "saved":
        value = None
        for line in grubenv_text.splitlines():
            if line.startswith("saved_entry="):
                value = line.split("=", 1)[1].strip()
    if not value:
        return None
    match = KERNEL_IN_ENTRY.search(value.split(">")[-1])
    # menu entry ids look like gnulinux-<k>-advanced-<uuid> or gnulinux-<k>-recovery-<uuid>
    return re.sub(r"-(?:advanced|recovery)-.*$", "", match.group(1)) if match else None


def choose_default_kernel(installed, grub_kernel):
    """(version, source): GRUB's kernel when installed, else the newest installed kernel."""
    if grub_kernel and grub_kernel in installed:
        return grub_kernel, "grub"
    return (installed[-1], "newest") if installed else ("", "none")


def split_packages(packages):
    """(image kernels, image metas, headers kernels, headers metas) from installed package names."""
    image_kernels, image_metas, headers_kernels, headers_metas = [], [], [], []
    for name in sorted(packages):
        image = IMAGE_PACKAGE.match(name)
        headers = HEADERS_PACKAGE.match(name)
        if image:
            image_kernels.append(image.group(1))
        elif headers:
            if not COMMON_HEADERS.match(headers.group(1)):
                headers_kernels.append(headers.group(1))
        elif name.startswith("linux-image-"):
            image_metas.append(name)
        elif name.startswith("linux-headers-"):
            headers_metas.append(name)
    return image_kernels, image_metas, headers_kernels, headers_metas


def headers_metas_without_image(image_metas, headers_metas):
    """Headers metas (linux-headers-X) installed without their image meta (linux-image-X): they pull
    headers for kernels that are not installed, and DKMS builds for those, not for the running kernel."""
    return [m for m in headers_metas if "linux-image-" + m[len("linux-headers-"):] not in image_metas]


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def kernel_entry(version, params, dkms_entries, dkms_versions, modinfo):
    """The matrix row of one kernel; modinfo(kernel, module) returns (filename or None, signer)."""
    build = os.path.join(params["modules_dir"], version, "build")
    headers_dir = os.path.join(params["src_dir"], "linux-headers-" + version)
    entry = {
        "version": version,
        "vmlinuz": os.path.exists(os.path.join(params["boot_dir"], "vmlinuz-" + version)),
        "headers_package": "linux-headers-" + version,
        "headers_dir": os.path.isdir(headers_dir),
        "build_link": os.path.exists(build),
        "modules": {},
    }
    entry["headers_present"] = entry["headers_dir"] and entry["build_link"]
    updates = os.path.join(params["modules_dir"], version, "updates", "dkms")
    files = find_modules(updates, params["modules"])
    for name in params["modules"]:
        states = [e for e in dkms_entries if e["module"] == name and e["kernel"] == version]
        versions = dkms_versions.get(name, [])
        want = versions[-1] if versions else None
        state = next((e for e in states if e["version"] == want), states[-1] if states else None)
        filename, signer = modinfo(version, name) if files[name] else (None, "")
        entry["modules"][name] = {
            "dkms_version": state["version"] if state else want,
            "dkms_state": state["state"] if state else ("added" if want else "absent"),
            "file": files[name],
            "modinfo": filename is not None,
            "modinfo_filename": filename or "",
            "signer": signer,
            "ok": bool(state and state["state"].startswith("installed") and files[name] and filename),
        }
    return entry


def problems_of(kernels, headers_kernels):
    """Readable messages: 'no nvidia module for <k> (running): linux-headers-<k> not installed; ...'."""
    out = []
    others = ", ".join(headers_kernels) or "none"
    for k in kernels:
        roles = [r for r in ("running", "default", "pending") if k.get(r)]
        label = k["version"] + (" (" + ", ".join(roles) + ")" if roles else "")
        for name, mod in sorted(k["modules"].items()):
            if mod["ok"]:
                continue
            if not k["headers_present"]:
                out.append(f"no {name} module for {label}: {k['headers_package']} not installed; "
                           f"installed headers are for {others}")
            elif mod["dkms_version"] is None:
                out.append(f"no {name} module for {label}: no {name} version is added to DKMS")
            else:
                found = "present" if mod["file"] else "absent"
                out.append(f"no {name} module for {label}: DKMS state {mod['dkms_state']} for "
                           f"{name}/{mod['dkms_version']}, module file {found}")
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "modules": {"type": "list", "elements": "str", "default": ["nvidia"]},
            "running_kernel": {"type": "str"},
            "modules_dir": {"type": "path", "default": "/lib/modules"},
            "boot_dir": {"type": "path", "default": "/boot"},
            "src_dir": {"type": "path", "default": "/usr/src"},
            "grub_default_file": {"type": "path", "default": "/etc/default/grub"},
            "grubenv": {"type": "path", "default": "/boot/grub/grubenv"},
        },
        supports_check_mode=True,
    )
    params = module.params
    running = params["running_kernel"] or os.uname().release

    packages = {}
    dpkg = module.get_bin_path("dpkg-query")
    if dpkg:
        _rc, out, _err = module.run_command(dpkg_query_argv(dpkg, ["linux-image-*", "linux-headers-*"]))
        packages = installed_versions(parse_dpkg_query(out))
    image_kernels, image_metas, headers_kernels, headers_metas = split_packages(packages)

    boot = set()
    if os.path.isdir(params["boot_dir"]):
        boot = {n[len("vmlinuz-"):] for n in os.listdir(params["boot_dir"]) if n.startswith("vmlinuz-")}
    installed = sorted(boot | set(image_kernels), key=version_key)
    src_headers = []
    if os.path.isdir(params["src_dir"]):
        prefix = "linux-headers-"
        src_headers = [n[len(prefix):] for n in os.listdir(params["src_dir"])
                       if n.startswith(prefix) and n[len(prefix):][:1].isdigit()
                       and not COMMON_HEADERS.match(n[len(prefix):])]
    all_headers = sorted(set(headers_kernels) | set(src_headers), key=version_key)

    dkms_entries = []
    dkms_bin = module.get_bin_path("dkms")
    if dkms_bin:
        _rc, out, _err = module.run_command([dkms_bin, "status"])
        dkms_entries = parse_dkms_status(out)
    found_versions: dict[str, set[str]] = {}
    for entry in dkms_entries:
        found_versions.setdefault(entry["module"], set()).add(entry["version"])
    dkms_versions = {k: sorted(v, key=version_key) for k, v in found_versions.items()}

    modinfo_bin = module.get_bin_path("modinfo")

    def modinfo(kernel, name):
        if not modinfo_bin:
            return None, ""
        rc, out, _err = module.run_command([modinfo_bin, "-k", kernel, "-F", "filename", name])
        if rc != 0 or not out.strip():
            return None, ""
        rc, signer, _err = module.run_command([modinfo_bin, "-k", kernel, "-F", "signer", name])
        return out.strip().splitlines()[0], signer.strip() if rc == 0 else ""

    grub_kernel = parse_grub_default(_read(params["grub_default_file"]), _read(params["grubenv"]))
    default, default_source = choose_default_kernel(installed, grub_kernel)
    versions = sorted(set(installed) | {running}, key=version_key)
    kernels = []
    for version in versions:
        entry = kernel_entry(version, params, dkms_entries, dkms_versions, modinfo)
        entry["installed"] = version in installed
        entry["image_package"] = next(
            (p for p in ("linux-image-" + version, "linux-image-unsigned-" + version) if p in packages), ""
        )
        entry["running"] = version == running
        entry["default"] = version == default
        entry["pending"] = version_key(version) > version_key(running) and version in installed
        kernels.append(entry)

    missing_modules = [
        {"kernel": k["version"], "module": name, "version": mod["dkms_version"]}
        for k in kernels for name, mod in sorted(k["modules"].items()) if not mod["ok"]
    ]
    module.exit_json(
        changed=False,
        running_kernel=running,
        default_kernel=default,
        default_kernel_source=default_source,
        installed_kernels=installed,
        kernels=kernels,
        dkms=dkms_entries,
        dkms_versions=dkms_versions,
        headers_only_kernels=[k for k in all_headers if k not in installed and k != running],
        packages=packages,
        image_metas=image_metas,
        headers_metas=headers_metas,
        headers_metas_without_image=headers_metas_without_image(image_metas, headers_metas),
        missing_headers=[k["version"] for k in kernels if not k["headers_present"]],
        missing_modules=missing_modules,
        problems=problems_of(kernels, all_headers),
    )


if __name__ == "__main__":
    main()
