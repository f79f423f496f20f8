# Copyright: gpuprov contributors
# Apache-2.0
"""Which initramfs image each installed kernel boots with: the one a boot entry (grub.cfg, Boot Loader Spec)
references, else the generator's default name, and the command that rebuilds exactly that image; unified kernel
images are listed apart. Pure Python 3.8, no Ansible."""


from __future__ import annotations

import glob
import os

from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import find_modules

UKI_DIRS = ("efi/EFI/Linux", "EFI/Linux")


def boot_entry_images(boot_dir):
    """Map kernel version -> initrd paths referenced by grub.cfg or Boot Loader Spec entries."""
    refs: dict[str, list[str]] = {}
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
    """The image names the generator writes for ``version``, the preferred one first."""
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



def kernel_entries(generator, boot_dir, modules_dir, versions, modules):
    """One entry per kernel version: its kernel and image (see :func:`choose_image`), the rebuild command and which
    of ``modules`` its module tree ships; ``files``, ``reasons`` and ``modules_in_image`` are filled when the image
    is inspected (:func:`~initramfs_files.inspect_kernels`)."""
    refs = boot_entry_images(boot_dir)
    kernels = []
    for version in versions:
        image, source = choose_image(generator, boot_dir, version, refs)
        kernels.append(
            {
                "version": version,
                "kernel_image": os.path.join(boot_dir, "vmlinuz-" + version),
                "image": image,
                "image_exists": os.path.isfile(image),
                "image_source": source,
                "rebuild_argv": rebuild_argv(generator, boot_dir, version, image),
                "modules_on_disk": find_modules(os.path.join(modules_dir, version), modules),
                "modules_in_image": None,
                "files": [],
                "stale": False,
                "reasons": [],
            }
        )
    return kernels


def unified_images(boot_dir):
    """Unified kernel images (``EFI/Linux/*.efi``) under ``boot_dir``; their embedded initrd is not inspected."""
    found = []
    for sub in UKI_DIRS:
        found.extend(sorted(glob.glob(os.path.join(boot_dir, sub, "*.efi"))))
    return found
