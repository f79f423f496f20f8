"""Stand-ins of what the nvidia_driver role's method ubuntu-drivers installs from Ubuntu's archive.

* ``ubuntu-drivers-common`` with a stand-in ``ubuntu-drivers`` command (:data:`UBUNTU_DRIVERS`): ``list --gpgpu``
  and ``install --gpgpu nvidia:<branch>-server[-open]``, which installs through apt the headless driver of the
  branch and, where the archive has the module meta of every installed kernel flavour
  (``linux-modules-nvidia-<branch>-server-generic``), those metas; otherwise the DKMS headless driver. Ubuntu's tool
  (https://github.com/canonical/ubuntu-drivers-common) looks at the running kernel's flavour only; a lab
  container's running kernel is the machine's, so the stand-in looks at the installed kernel metas instead. Every
  run is appended to :data:`UBUNTU_DRIVERS_LOG`;
* the headless sets, ``nvidia-headless-no-dkms-<branch>-server[-open]`` (libnvidia-compute and
  nvidia-compute-utils at the driver's version) and ``nvidia-headless-<branch>-server[-open]`` (the same with
  ``nvidia-dkms-<branch>-server[-open]``);
* Canonical's precompiled modules, ``linux-modules-nvidia-<branch>-server[-open]-<kernel>``: a prebuilt
  ``/lib/modules/<kernel>/kernel/nvidia-<branch>srv/nvidia.ko`` (``nvidia-<branch>srv-open`` for open) that
  ``modinfo -k`` reads (:func:`module_object`: an ELF object with the ``.modinfo`` section of the driver's version;
  a container loads no module, and the stand-in kernels are placeholders nothing could be compiled against), and
  the per-flavour metas ``linux-modules-nvidia-<branch>-server[-open]-<flavour>`` that depend on them. Canonical's are
  signed; the stand-ins carry no signature. ``linux-objects-nvidia-*`` and ``linux-signatures-nvidia-*``, which the
  real per-kernel package depends on, are folded into it.
"""

from __future__ import annotations

import struct

from gpuprov.lab.standin.deb import BinaryPackage, FileSpec, PackageSpec

#: Where the stand-in ``ubuntu-drivers`` records each run (one line: the arguments and the packages it installed).
UBUNTU_DRIVERS_LOG = "/var/log/gpuprov-standin-ubuntu-drivers.log"

UBUNTU_DRIVERS = """\
#!/bin/sh
# gpuprov stand-in for ubuntu-drivers (ubuntu-drivers-common): list --gpgpu, install --gpgpu nvidia:<branch>-server
set -e
cmd=${1:-}
[ $# -gt 0 ] && shift
gpgpu=
driver=
for arg in "$@"; do
    case $arg in
        --gpgpu) gpgpu=1 ;;
        -*) ;;
        *) driver=$arg ;;
    esac
done
case $cmd in
list)
    apt-cache pkgnames nvidia-headless-no-dkms- | sed 's/^nvidia-headless-no-dkms-/nvidia:/' | sort
    ;;
install)
    if [ -z "$gpgpu" ]; then
        echo "ubuntu-drivers (gpuprov stand-in): only install --gpgpu is stood in" >&2
        exit 2
    fi
    case $driver in
        nvidia:?*) ;;
        *) echo "ubuntu-drivers: name the driver, e.g. install --gpgpu nvidia:580-server" >&2; exit 2 ;;
    esac
    set_name=${driver#nvidia:}
    metas=
    missing=
    for image in $(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'linux-image-*' 2>/dev/null \\
                   | awk '$1 == "ii" { print $2 }' | grep -v '^linux-image-[0-9]' || true); do
        meta=linux-modules-nvidia-$set_name-${image#linux-image-}
        if apt-cache show "$meta" >/dev/null 2>&1; then metas="$metas $meta"; else missing=1; fi
    done
    if [ -n "$metas" ] && [ -z "$missing" ]; then
        packages="nvidia-headless-no-dkms-$set_name$metas"
    else
        packages="nvidia-headless-$set_name"
    fi
    echo "install --gpgpu $driver: $packages" >> {log}
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages
    ;;
*)
    echo "usage: ubuntu-drivers list --gpgpu | install --gpgpu nvidia:<branch>-server[-open]" >&2
    exit 2
    ;;
esac
""".replace("{log}", UBUNTU_DRIVERS_LOG)

DEPMOD = 'if [ "$1" = configure ] || [ "$1" = remove ]; then depmod -a {kernel} || true; fi\n'


def module_object(info: dict[str, str]) -> bytes:
    """A relocatable x86-64 ELF object carrying ``info`` in its ``.modinfo`` section (``key=value`` strings, as a
    kernel module's), which kmod's ``modinfo`` and ``depmod`` read; it has no code and cannot load.

    Layout (ELF-64 little endian, System V ABI): header, the section contents, then four section headers (null,
    ``.modinfo``, ``.shstrtab``, ``.gnu.linkonce.this_module``)."""
    modinfo = b"".join(f"{key}={value}".encode() + b"\0" for key, value in info.items())
    this_module = b"\0" * 64
    names = b"\0.modinfo\0.shstrtab\0.gnu.linkonce.this_module\0"
    offsets = (64, 64 + len(modinfo), 64 + len(modinfo) + len(this_module))
    body = modinfo + this_module + names
    section_headers_at = (64 + len(body) + 7) & ~7
    body += b"\0" * (section_headers_at - 64 - len(body))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8  # 64-bit, little endian, ELF version 1, System V
    # e_type REL, e_machine x86-64, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum,
    # e_shentsize, e_shnum, e_shstrndx
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, section_headers_at, 0, 64, 0, 0, 64, 4, 2)

    def section(name: int, kind: int, flags: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, flags, 0, offset, size, 0, 0, 1, 0)

    sections = (section(0, 0, 0, 0, 0) + section(1, 1, 2, offsets[0], len(modinfo))  # PROGBITS, ALLOC
                + section(10, 3, 0, offsets[2], len(names))  # STRTAB
                + section(20, 1, 3, offsets[1], len(this_module)))  # PROGBITS, WRITE|ALLOC
    return header + body + sections


def ubuntu_drivers_common(version: str) -> PackageSpec:
    """``ubuntu-drivers-common`` at ``version`` with the stand-in ``ubuntu-drivers`` (module docstring)."""
    return PackageSpec(name="ubuntu-drivers-common", version=version, architecture="amd64",
                       description="gpuprov stand-in of ubuntu-drivers-common\n"
                                   "ubuntu-drivers list --gpgpu and install --gpgpu nvidia:<branch>-server.",
                       files={"/usr/bin/ubuntu-drivers": FileSpec(UBUNTU_DRIVERS, 0o755)})


def headless_packages(branch: str, kernel_suffix: str, package_version: str) -> list[PackageSpec]:
    """``nvidia-headless-no-dkms-<branch><kernel_suffix>`` and ``nvidia-headless-<branch><kernel_suffix>``
    (``kernel_suffix``: ``-server`` or ``-server-open``) at ``package_version``, over the archive's ``-server``
    userland and DKMS package of the same version."""
    exact = f"(= {package_version})"
    no_dkms = f"nvidia-headless-no-dkms-{branch}{kernel_suffix}"
    return [
        PackageSpec(name=no_dkms, version=package_version, architecture="amd64",
                    depends=(f"libnvidia-compute-{branch}-server {exact}",
                             f"nvidia-compute-utils-{branch}-server {exact}"),
                    description=f"gpuprov stand-in NVIDIA headless driver {branch}{kernel_suffix}, no DKMS"),
        PackageSpec(name=f"nvidia-headless-{branch}{kernel_suffix}", version=package_version, architecture="amd64",
                    depends=(f"{no_dkms} {exact}", f"nvidia-dkms-{branch}{kernel_suffix} {exact}"),
                    description=f"gpuprov stand-in NVIDIA headless driver {branch}{kernel_suffix} with DKMS"),
    ]


def precompiled_modules(branch: str, driver_version: str, kernel_suffix: str, kernel: str, flavour_meta: str,
                        version: str) -> list[BinaryPackage | PackageSpec]:
    """Canonical's precompiled module of driver ``branch`` (``driver_version``) for ``kernel`` (``6.8.0-87-generic``),
    ``linux-modules-nvidia-<branch><kernel_suffix>-<kernel>``, and the meta of its kernel flavour
    (``flavour_meta``: ``generic-hwe-24.04``), both at the kernel's package ``version``."""
    name = f"linux-modules-nvidia-{branch}{kernel_suffix}-{kernel}"
    other = "-server-open" if kernel_suffix == "-server" else "-server"
    directory = f"nvidia-{branch}srv" + ("-open" if kernel_suffix.endswith("-open") else "")
    info = {"version": driver_version, "license": "NVIDIA", "description": "gpuprov stand-in precompiled nvidia module",
            "name": "nvidia", "vermagic": f"{kernel} SMP preempt mod_unload modversions "}
    spec = PackageSpec(name=name, version=version, architecture="amd64", depends=(f"linux-image-{kernel}",),
                       conflicts=(f"linux-modules-nvidia-{branch}{other}-{kernel}",),
                       description=f"gpuprov stand-in Linux kernel nvidia modules for version {kernel}\n"
                                   f"Driver {driver_version}, prebuilt (no signature).",
                       scripts={"postinst": DEPMOD.format(kernel=kernel), "postrm": DEPMOD.format(kernel=kernel)})
    meta = PackageSpec(name=f"linux-modules-nvidia-{branch}{kernel_suffix}-{flavour_meta}", version=version,
                       architecture="amd64", depends=(f"{name} (= {version})",),
                       description=f"gpuprov stand-in extra drivers for nvidia-{branch}{kernel_suffix} for the "
                                   f"{flavour_meta} flavour")
    module = module_object(info)
    return [BinaryPackage(spec, {f"/lib/modules/{kernel}/kernel/{directory}/nvidia.ko": module}), meta]
