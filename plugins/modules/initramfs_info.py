#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Read-only report of installed kernels, their initramfs images and what those images carry."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: initramfs_info
short_description: Report which installed kernels' initramfs images lack the current content of given files
description:
  - Lists the installed kernels (C(<modules_dir>/<k>) with a C(<boot_dir>/vmlinuz-<k>)), not only the
    running one, and the initramfs image each one boots with.
  - The image is the one a boot entry references (C(grub.cfg) or Boot Loader Spec entries) when one
    does, else the generator's default name (C(initrd.img-<k>) for initramfs-tools,
    C(initramfs-<k>.img) then C(initrd.img-<k>) for dracut).
  - For each image it reports, for every tracked file, whether the image contains it and whether the
    content (sha256) equals the file on disk; a tracked file absent from disk must be absent from the
    image. An image that differs in any tracked file, is missing or cannot be read is stale.
  - Tracked files are O(files) plus every C(*.conf) file under O(scan_dirs) whose non-comment lines
    mention one of O(scan_patterns).
  - Only command-line tools exist to read images - C(unmkinitramfs) (initramfs-tools, splits
    concatenated early microcode archives into C(early*/) and C(main/)) or C(lsinitrd) (dracut) - so
    the module runs them into a private temporary directory and changes nothing on the host.
  - Unified kernel images (C(EFI/Linux/*.efi)) are reported with a warning; their embedded initrd is
    not inspected.
options:
  files:
    description: Absolute paths that every image must carry with the content they have on disk.
    type: list
    elements: path
    default: []
  scan_dirs:
    description: Directories whose C(*.conf) files are tracked when they mention a pattern.
    type: list
    elements: path
    default: [/etc/modprobe.d, /usr/lib/modprobe.d, /lib/modprobe.d]
  scan_patterns:
    description: Substrings that make a scanned file reach early boot (matched on non-comment lines).
    type: list
    elements: str
    default: [nouveau, nova_core, nova_drm, nvidia, NVreg_]
  modules:
    description: Kernel modules looked for on disk per kernel and inside each image.
    type: list
    elements: str
    default: [nouveau, nova_core, nova_drm]
  kernels:
    description: Inspect only these installed kernel versions (all when empty).
    type: list
    elements: str
    default: []
  inspect_images:
    description: Unpack and compare the images. When false only kernels, images and on-disk modules are listed.
    type: bool
    default: true
  generator:
    description: Initramfs generator; V(auto) picks initramfs-tools when C(update-initramfs) exists, else dracut.
    type: str
    choices: [auto, initramfs-tools, dracut]
    default: auto
  boot_dir:
    description: Directory holding the kernels and images.
    type: path
    default: /boot
  modules_dir:
    description: Directory holding one module tree per installed kernel.
    type: path
    default: /lib/modules
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Find initramfs images that lack the blacklist
  initramfs_info:
    files: [/etc/modprobe.d/gpuprov-nouveau.conf]
  register: __role_initramfs
  check_mode: false
"""

RETURN = r"""
generator:
  description: The generator in use (initramfs-tools, dracut or none).
  returned: always
  type: str
kernel_versions:
  description: Installed kernel versions, oldest first (only those in O(kernels) when it is set).
  returned: always
  type: list
  elements: str
stale_kernels:
  description: Versions whose image is stale (empty when O(inspect_images) is false).
  returned: always
  type: list
  elements: str
kernels:
  description: One entry per installed kernel.
  returned: always
  type: list
  elements: dict
  sample:
    - version: 6.1.0-28-amd64
      image: /boot/initrd.img-6.1.0-28-amd64
      image_exists: true
      image_source: default
      rebuild_argv: [update-initramfs, -u, -k, 6.1.0-28-amd64]
      modules_on_disk: {nouveau: true, nova_core: false, nova_drm: false}
      modules_in_image: {nouveau: true, nova_core: false, nova_drm: false}
      files:
        - {path: /etc/modprobe.d/gpuprov-nouveau.conf, on_disk: true, in_image: false, matches: false}
      stale: true
      reasons: ["/boot/initrd.img-6.1.0-28-amd64 lacks /etc/modprobe.d/gpuprov-nouveau.conf"]
tracked_files:
  description: The files compared, with why each is tracked and its sha256 on disk (null when absent).
  returned: always
  type: list
  elements: dict
modules_on_disk:
  description: For each name in O(modules), whether any installed kernel ships it.
  returned: always
  type: dict
unified_images:
  description: Unified kernel images found; their embedded initrd is not inspected.
  returned: always
  type: list
  elements: str
running_kernel:
  description: The running kernel release (in a container, the host's).
  returned: always
  type: str
"""

import glob
import hashlib
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import find_modules, installed_kernels, module_name_of

UKI_DIRS = ("efi/EFI/Linux", "EFI/Linux")
MAX_LINKS = 40
LS_LINE = re.compile(r"^[-dlcbps][rwxsStT-]{9}\S*\s")


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    try:
        with open(path, "rb") as handle:
            return sha256_bytes(handle.read())
    except OSError:
        return None


def mentions(path, regex):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            match = regex.search(stripped)
            if match:
                return match.group(0)
    return None


def tracked_files(files, scan_dirs, patterns):
    """Requested files first, then scanned modprobe files, deduplicated by their real path."""
    regex = re.compile("|".join(re.escape(p) for p in patterns)) if patterns else None
    tracked = []
    seen = set()

    def add(path, reason):
        real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        tracked.append({"path": path, "reason": reason, "sha256": sha256_file(path)})

    for path in files:
        add(path, "requested")
    if regex is not None:
        for directory in scan_dirs:
            for path in sorted(glob.glob(os.path.join(directory, "*.conf"))):
                if not os.path.isfile(path):
                    continue
                word = mentions(path, regex)
                if word:
                    add(path, "mentions " + word)
    return tracked


def candidate_paths(path):
    """Relative paths under which an image may hold a host file (merged /usr moves /lib to /usr/lib)."""
    out = []
    for variant in (path, os.path.realpath(path)):
        rel = variant.lstrip("/")
        for alt in (rel, re.sub(r"^usr/lib/", "lib/", rel), re.sub(r"^lib/", "usr/lib/", rel)):
            if alt not in out:
                out.append(alt)
    return out


def resolve_in_root(root, rel):
    """Resolve rel inside an unpacked image like a chroot would; None unless it ends at a regular file."""
    parts = [p for p in rel.split("/") if p and p != "."]
    current = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if current:
                current.pop()
            continue
        candidate = os.path.join(root, *current, part)
        if os.path.islink(candidate):
            links += 1
            if links > MAX_LINKS:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        current.append(part)
    full = os.path.join(root, *current)
    return full if os.path.isfile(full) and not os.path.islink(full) else None


def unpacked_roots(directory):
    """unmkinitramfs writes early*/ and main/ for concatenated archives, else the archive itself."""
    main = os.path.join(directory, "main")
    if os.path.isdir(main):
        early = sorted(glob.glob(os.path.join(directory, "early*")))
        return [main, *early]
    return [directory]


def read_from_roots(roots, path):
    """Content of a host path as the unpacked image holds it, or None when the image lacks it."""
    for root in roots:
        for rel in candidate_paths(path):
            found = resolve_in_root(root, rel)
            if found:
                with open(found, "rb") as handle:
                    return handle.read()
    return None


def boot_entry_images(boot_dir):
    """Map kernel version -> initrd paths referenced by grub.cfg or Boot Loader Spec entries."""
    refs = {}
    sources = [os.path.join(boot_dir, "grub", "grub.cfg"), os.path.join(boot_dir, "grub2", "grub.cfg")]
    sources += sorted(glob.glob(os.path.join(boot_dir, "loader", "entries", "*.conf")))
    for source in sources:
        try:
            with open(source, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        version = None
        for line in lines:
            words = line.split()
            if len(words) < 2:
                continue
            if words[0] in ("linux", "linuxefi", "linux16"):
                name = os.path.basename(words[1])
                version = name[len("vmlinuz-") :] if name.startswith("vmlinuz-") else None
            elif words[0] in ("initrd", "initrdefi", "initrd16") and version:
                for ref in words[1:]:
                    base = os.path.basename(ref)
                    # early microcode archives (intel-ucode.img) ride along; only the kernel's own image counts
                    if version in base:
                        refs.setdefault(version, [])
                        path = os.path.join(boot_dir, base)
                        if path not in refs[version]:
                            refs[version].append(path)
    return refs


def default_images(generator, boot_dir, version):
    if generator == "dracut":
        return [os.path.join(boot_dir, f"initramfs-{version}.img"), os.path.join(boot_dir, "initrd.img-" + version)]
    return [os.path.join(boot_dir, "initrd.img-" + version)]


def rebuild_argv(generator, boot_dir, version, image):
    """The command that rebuilds exactly the image the boot path uses for this kernel."""
    if generator == "dracut":
        return ["dracut", "--force", image, version]
    if generator == "initramfs-tools":
        if image != default_images(generator, boot_dir, version)[0]:
            # a boot entry names another file than update-initramfs would write: build that file
            return ["mkinitramfs", "-o", image, version]
        return ["update-initramfs", "-u" if os.path.exists(image) else "-c", "-k", version]
    return []


def choose_image(generator, boot_dir, version, refs):
    """The image the boot path uses: a boot entry's reference first, else the generator's naming."""
    for path in refs.get(version, []):
        if os.path.exists(path):
            return path, "boot entry"
    defaults = default_images(generator, boot_dir, version)
    for path in defaults:
        if os.path.exists(path):
            return path, "default"
    return defaults[0], "default"


class ImageReader:
    """Reads files and module names out of an image with the generator's own tools."""

    def __init__(self, module, generator):
        self.module = module
        self.generator = generator
        if generator == "dracut":
            self.lsinitrd = module.get_bin_path("lsinitrd", required=True)
        else:
            self.unmkinitramfs = module.get_bin_path("unmkinitramfs", required=True)

    def inspect(self, image, paths, modules):
        """Return ({path: bytes or None}, {module: bool}); raise RuntimeError when the image is unreadable."""
        if self.generator == "dracut":
            return self._inspect_dracut(image, paths, modules)
        return self._inspect_unpacked(image, paths, modules)

    def _inspect_unpacked(self, image, paths, modules):
        workdir = tempfile.mkdtemp(prefix="initramfs_info-", dir=self.module.tmpdir)
        try:
            rc, _out, err = self.module.run_command([self.unmkinitramfs, image, workdir])
            if rc != 0:
                raise RuntimeError(f"unmkinitramfs {image} failed (rc {rc}): {err.strip()}")
            roots = unpacked_roots(workdir)
            contents = {path: read_from_roots(roots, path) for path in paths}
            in_image = find_modules(workdir, modules)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return contents, in_image

    def _inspect_dracut(self, image, paths, modules):
        rc, out, err = self.module.run_command([self.lsinitrd, image])
        if rc != 0:
            raise RuntimeError(f"lsinitrd {image} failed (rc {rc}): {err.strip()}")
        listed = parse_lsinitrd(out)
        wanted = {name.replace("-", "_"): name for name in modules}
        in_image = dict.fromkeys(modules, False)
        for entry in listed:
            name = module_name_of(os.path.basename(entry))
            if name in wanted:
                in_image[wanted[name]] = True
        contents = {}
        for path in paths:
            contents[path] = None
            for rel in candidate_paths(path):
                if rel in listed:
                    rc, data, err = self.module.run_command([self.lsinitrd, "-f", rel, image], encoding=None)
                    if rc != 0:
                        raise RuntimeError(f"lsinitrd -f {rel} {image} failed (rc {rc})")
                    contents[path] = data
                    break
        return contents, in_image


def parse_lsinitrd(output):
    """Paths listed by `lsinitrd IMAGE` (ls -l style lines, early and main archives alike)."""
    paths = set()
    for line in output.splitlines():
        if not LS_LINE.match(line):
            continue
        fields = line.split(None, 8)
        if len(fields) < 9:
            continue
        name = fields[8].split(" -> ")[0].strip()
        if name and name != ".":
            paths.add(name[2:] if name.startswith("./") else name)
    return paths


def compare(kernel, tracked, contents):
    """Fill kernel['files'] and kernel['reasons'] from the contents read out of its image."""
    image = kernel["image"]
    for item in tracked:
        data = contents.get(item["path"])
        in_image = data is not None
        on_disk = item["sha256"] is not None
        matches = (in_image and on_disk and sha256_bytes(data) == item["sha256"]) or (not in_image and not on_disk)
        kernel["files"].append({"path": item["path"], "on_disk": on_disk, "in_image": in_image, "matches": matches})
        if matches:
            continue
        if on_disk and not in_image:
            kernel["reasons"].append("{} lacks {}".format(image, item["path"]))
        elif on_disk:
            kernel["reasons"].append("{} has an outdated copy of {}".format(image, item["path"]))
        else:
            kernel["reasons"].append("{} still carries {}, which is gone from disk".format(image, item["path"]))


def run_module():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "scan_dirs": {
                "type": "list",
                "elements": "path",
                "default": ["/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d"],
            },
            "scan_patterns": {
                "type": "list",
                "elements": "str",
                "default": ["nouveau", "nova_core", "nova_drm", "nvidia", "NVreg_"],
            },
            "modules": {"type": "list", "elements": "str", "default": ["nouveau", "nova_core", "nova_drm"]},
            "kernels": {"type": "list", "elements": "str", "default": []},
            "inspect_images": {"type": "bool", "default": True},
            "generator": {"type": "str", "default": "auto", "choices": ["auto", "initramfs-tools", "dracut"]},
            "boot_dir": {"type": "path", "default": "/boot"},
            "modules_dir": {"type": "path", "default": "/lib/modules"},
        },
        supports_check_mode=True,
    )
    params = module.params
    generator = params["generator"]
    if generator == "auto":
        if module.get_bin_path("update-initramfs"):
            generator = "initramfs-tools"
        elif module.get_bin_path("dracut"):
            generator = "dracut"
        else:
            generator = "none"
    for not_abs in [p for p in params["files"] if not os.path.isabs(p)]:
        module.fail_json(msg=f"files must be absolute paths: {not_abs}")

    versions = installed_kernels(params["modules_dir"], params["boot_dir"])
    if params["kernels"]:
        versions = [v for v in versions if v in params["kernels"]]
    refs = boot_entry_images(params["boot_dir"])
    tracked = tracked_files(params["files"], params["scan_dirs"], params["scan_patterns"])
    kernels = []
    for version in versions:
        image, source = choose_image(generator, params["boot_dir"], version, refs)
        kernels.append(
            {
                "version": version,
                "kernel_image": os.path.join(params["boot_dir"], "vmlinuz-" + version),
                "image": image,
                "image_exists": os.path.isfile(image),
                "image_source": source,
                "rebuild_argv": rebuild_argv(generator, params["boot_dir"], version, image),
                "modules_on_disk": find_modules(os.path.join(params["modules_dir"], version), params["modules"]),
                "modules_in_image": None,
                "files": [],
                "stale": False,
                "reasons": [],
            }
        )

    if params["inspect_images"] and kernels:
        if generator == "none":
            module.fail_json(msg="No initramfs generator found (neither update-initramfs nor dracut is installed)")
        reader = ImageReader(module, generator)
        for kernel in kernels:
            if not kernel["image_exists"]:
                kernel["reasons"].append("{} is missing".format(kernel["image"]))
            else:
                try:
                    contents, in_image = reader.inspect(
                        kernel["image"], [t["path"] for t in tracked], params["modules"]
                    )
                except RuntimeError as exc:
                    kernel["reasons"].append("{} cannot be read: {}".format(kernel["image"], exc))
                else:
                    kernel["modules_in_image"] = in_image
                    compare(kernel, tracked, contents)
            kernel["stale"] = bool(kernel["reasons"])

    unified = []
    for sub in UKI_DIRS:
        unified.extend(sorted(glob.glob(os.path.join(params["boot_dir"], sub, "*.efi"))))
    for path in unified:
        module.warn(f"Unified kernel image {path} found; its embedded initrd is not inspected")

    modules_any = {name: any(k["modules_on_disk"][name] for k in kernels) for name in params["modules"]}
    module.exit_json(
        changed=False,
        generator=generator,
        kernel_versions=versions,
        stale_kernels=[k["version"] for k in kernels if k["stale"]],
        kernels=kernels,
        tracked_files=tracked,
        modules_on_disk=modules_any,
        unified_images=unified,
        running_kernel=os.uname().release,
    )


def main():
    run_module()


if __name__ == "__main__":
    main()
