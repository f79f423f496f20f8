"""The stand-in packages the lab uses: Ubuntu-named kernels and metas, and ``nvidia-dkms-<branch>``.

A stand-in kernel is a placeholder ``/boot/vmlinuz-<k>`` and an empty module tree; its headers package
links ``/usr/src/linux-headers-<k>`` to ``headers_target`` (real Debian headers installed in the
container) so DKMS really compiles against it, or ships a placeholder tree when no target is given.
The ``nvidia-dkms-<branch>`` stand-in carries a hello-world kernel module named ``nvidia`` and a
postinst that adds it to DKMS and builds it for every installed kernel with headers, as real driver
packages do (and, like them, exits 0 when a kernel has no headers).
"""

from __future__ import annotations

from gpuprov.standin.deb import FileSpec, PackageSpec

MODULE_C = """\
// gpuprov stand-in for the NVIDIA kernel module: loads nothing, exists to be built by DKMS.
#include <linux/module.h>
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpuprov stand-in nvidia module");
MODULE_VERSION("{version}");
static int __init standin_init(void) {{ return 0; }}
static void __exit standin_exit(void) {{ }}
module_init(standin_init);
module_exit(standin_exit);
"""

DKMS_CONF = """\
PACKAGE_NAME=nvidia
PACKAGE_VERSION={version}
BUILT_MODULE_NAME[0]=nvidia
DEST_MODULE_LOCATION[0]=/updates/dkms
MAKE[0]="make -C ${{kernel_source_dir}} M=${{dkms_tree}}/${{PACKAGE_NAME}}/${{PACKAGE_VERSION}}/build modules"
CLEAN="true"
AUTOINSTALL=yes
"""

DKMS_POSTINST = """\
# As dh_dkms does: add the source to DKMS, then build and install for each installed kernel that has
# headers. A kernel without headers is skipped with a message and the package still installs (exit 0):
# this is exactly how real hosts end up without a module (case B02).
if [ "$1" = configure ]; then
    if ! dkms status -m nvidia -v {version} | grep -q .; then
        dkms add -m nvidia -v {version}
    fi
    for vmlinuz in /boot/vmlinuz-*; do
        [ -e "$vmlinuz" ] || continue
        k=${{vmlinuz#/boot/vmlinuz-}}
        if [ ! -e "/lib/modules/$k/build" ]; then
            echo "nvidia-dkms-{branch}: no kernel headers for $k, module not built" >&2
            continue
        fi
        dkms install -m nvidia -v {version} -k "$k" || echo "nvidia-dkms-{branch}: build failed for $k" >&2
    done
fi
exit 0
"""

DKMS_PRERM = """\
if [ "$1" = remove ] || [ "$1" = upgrade ]; then
    dkms remove -m nvidia -v {version} --all || true
fi
"""


def nvidia_dkms(branch: str, version: str, package_version: str | None = None) -> PackageSpec:
    """``nvidia-dkms-<branch>`` with a real, tiny DKMS module source under /usr/src/nvidia-<version>."""
    src = f"/usr/src/nvidia-{version}"
    fmt = {"version": version, "branch": branch}
    return PackageSpec(
        name=f"nvidia-dkms-{branch}",
        version=package_version or f"{version}-0gpuprov1",
        depends=("dkms",),
        provides=("nvidia-dkms-kernel",),
        description=f"gpuprov stand-in NVIDIA {branch} DKMS module\nBuilds a hello-world module named nvidia.",
        files={
            f"{src}/dkms.conf": FileSpec(DKMS_CONF.format(**fmt)),
            f"{src}/Makefile": FileSpec("obj-m := nvidia.o\n"),
            f"{src}/nvidia.c": FileSpec(MODULE_C.format(**fmt)),
        },
        scripts={"postinst": DKMS_POSTINST.format(**fmt), "prerm": DKMS_PRERM.format(**fmt)},
    )


KERNEL_HOOKS = """\
if [ "$1" = configure ] && [ -d /etc/kernel/postinst.d ]; then
    run-parts --report --exit-on-error --arg={kernel} --arg=/boot/vmlinuz-{kernel} /etc/kernel/postinst.d
fi
"""


def kernel_image(kernel: str, version: str, hooks: bool = False) -> PackageSpec:
    """``linux-image-<kernel>``: placeholder vmlinuz and an empty module tree that depmod accepts.

    With ``hooks`` the postinst also runs ``/etc/kernel/postinst.d`` as real kernel packages do
    (initramfs-tools builds the kernel's initramfs there).
    """
    postinst = f'if [ "$1" = configure ]; then depmod -a {kernel} || true; fi\n'
    if hooks:
        postinst += KERNEL_HOOKS.format(kernel=kernel)
    return PackageSpec(
        name=f"linux-image-{kernel}",
        version=version,
        architecture="amd64",
        description=f"gpuprov stand-in kernel image {kernel}\nA placeholder; it cannot boot.",
        files={
            f"/boot/vmlinuz-{kernel}": FileSpec("gpuprov stand-in kernel image\n"),
            f"/lib/modules/{kernel}/modules.order": FileSpec(""),
            f"/lib/modules/{kernel}/modules.builtin": FileSpec(""),
        },
        scripts={"postinst": postinst},
    )


def kernel_headers(kernel: str, version: str, headers_target: str | None = None,
                   depends: tuple[str, ...] = ()) -> PackageSpec:
    """``linux-headers-<kernel>``: /usr/src/linux-headers-<kernel> and the /lib/modules/<kernel>/build link.

    ``depends`` names the real package that provides ``headers_target`` (e.g. Debian's
    ``linux-headers-5.10.0-32-amd64``), so apt installs the real headers the link points at.
    """
    src = f"/usr/src/linux-headers-{kernel}"
    files = {f"/lib/modules/{kernel}/build": FileSpec(link=src)}
    if headers_target:
        files[src] = FileSpec(link=headers_target)
    else:
        files[f"{src}/Makefile"] = FileSpec("# gpuprov stand-in headers: not buildable\n")
    return PackageSpec(
        name=f"linux-headers-{kernel}",
        version=version,
        architecture="amd64",
        depends=depends,
        description=f"gpuprov stand-in kernel headers {kernel}",
        files=files,
    )


def meta(name: str, version: str, depends: tuple[str, ...]) -> PackageSpec:
    """A meta package that only depends on others (linux-generic-hwe-20.04, linux-headers-generic, ...)."""
    return PackageSpec(name=name, version=version, architecture="amd64", depends=depends,
                       description=f"gpuprov stand-in meta package {name}")


def ubuntu_kernel(abi: str, flavour: str, meta_suffix: str, meta_version: str,
                  headers_target: str | None = None, headers_depends: tuple[str, ...] = (),
                  hooks: bool = False) -> list[PackageSpec]:
    """Image, headers and the three metas of one Ubuntu kernel line.

    ``ubuntu_kernel("5.15.0-105", "generic", "generic-hwe-20.04", "5.15.0.105.112~20.04.1")`` gives
    linux-image-5.15.0-105-generic, linux-headers-5.15.0-105-generic, linux-image-generic-hwe-20.04,
    linux-headers-generic-hwe-20.04 and linux-generic-hwe-20.04.
    """
    kernel = f"{abi}-{flavour}"
    pkg_version = meta_version
    top = f"linux-{meta_suffix}"
    return [
        kernel_image(kernel, pkg_version, hooks),
        kernel_headers(kernel, pkg_version, headers_target, headers_depends),
        meta(f"linux-image-{meta_suffix}", meta_version, (f"linux-image-{kernel}",)),
        meta(f"linux-headers-{meta_suffix}", meta_version, (f"linux-headers-{kernel}",)),
        meta(top, meta_version, (f"linux-image-{meta_suffix}", f"linux-headers-{meta_suffix}")),
    ]


PRESETS = ("ubuntu-hwe", "nvidia-dkms", "debian-kernel")

#: The stand-in HWE kernel of the Ubuntu 20.04 lab host (what ``ubuntu-hwe`` builds).
HWE_ABI = "5.15.0-105"
HWE_META_VERSION = "5.15.0.105.112~20.04.1"


#: Driver branches the lab's stand-in CUDA repository offers (``driver.branch: auto`` resolves to one
#: of these for the lab's H200 hosts), with a release of each.
LAB_BRANCHES = {"535": "535.183.01", "550": "550.127.05", "570": "570.133.20", "580": "580.65.06"}


def lab_cuda_packages() -> list[PackageSpec]:
    """What the lab's stand-in CUDA repository serves: ``nvidia-dkms-<branch>`` (the tiny real module)."""
    return [nvidia_dkms(branch, version) for branch, version in LAB_BRANCHES.items()]


def lab_ubuntu_archive_packages(debian_kernel: str) -> list[PackageSpec]:
    """The Ubuntu 20.04 stand-in's archive extras: ``linux-generic-hwe-20.04`` and its image/headers metas.

    The HWE headers link to the real Debian headers of ``debian_kernel`` (the stand-in's own kernel,
    e.g. ``5.10.0-32-amd64``) and depend on their package, so DKMS really compiles for the HWE kernel.
    """
    real = f"linux-headers-{debian_kernel}"
    return ubuntu_kernel(HWE_ABI, "generic", "generic-hwe-20.04", HWE_META_VERSION, f"/usr/src/{real}", (real,),
                         hooks=True)


def preset(name: str, headers_target: str | None = None) -> list[PackageSpec]:
    """Named package sets for Molecule and the CLI (``python -m gpuprov.standin``).

    ``ubuntu-hwe``: fake 5.15.0-105-generic with linux-generic-hwe-20.04 metas; ``nvidia-dkms``:
    nvidia-dkms-535 (535.183.01); ``debian-kernel``: a newer Debian-named kernel 6.1.0-99-amd64 (image +
    headers) for the kernel-upgrade test.
    """
    if name == "ubuntu-hwe":
        return ubuntu_kernel("5.15.0-105", "generic", "generic-hwe-20.04", "5.15.0.105.112~20.04.1",
                             headers_target)
    if name == "nvidia-dkms":
        return [nvidia_dkms("535", "535.183.01")]
    if name == "debian-kernel":
        return [kernel_image("6.1.0-99-amd64", "6.1.999-1"), kernel_headers("6.1.0-99-amd64", "6.1.999-1",
                                                                             headers_target)]
    raise KeyError(name)
