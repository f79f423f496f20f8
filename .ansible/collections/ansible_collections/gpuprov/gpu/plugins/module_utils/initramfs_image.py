# Copyright: gpuprov contributors
# Apache-2.0
"""Reading an initramfs image with the generator's own tools: ``unmkinitramfs`` (initramfs-tools; early microcode
archives unpack into ``early*/`` beside ``main/``) or ``lsinitrd`` (dracut), and finding a host path inside the
image as a chroot would (merged /usr, symbolic links kept inside). Pure Python 3.8; :class:`ImageReader` runs the
tools through the AnsibleModule it is given."""


from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile

from ansible_collections.gpuprov.gpu.plugins.module_utils.kernels import find_modules, module_name_of

#: Symbolic links followed while resolving one path inside an image before giving up (a loop).
MAX_LINKS = 40
#: A line of ``lsinitrd``'s ``ls -l`` style listing.
LS_LINE = re.compile(r"^[-dlcbps][rwxsStT-]{9}\S*\s")


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
    current: list[str] = []
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
        contents: dict[str, bytes | None] = {}
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
