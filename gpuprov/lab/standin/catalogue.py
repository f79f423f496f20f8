"""The stand-in packages the lab uses: Ubuntu-named kernels and metas, and NVIDIA's driver packages.

A stand-in kernel is a placeholder ``/boot/vmlinuz-<k>`` and an empty module tree; its headers package
links ``/usr/src/linux-headers-<k>`` to ``headers_target`` (real Debian headers installed in the
container) so DKMS really compiles against it, or ships a placeholder tree when no target is given.
The ``nvidia-dkms-<branch>`` stand-in carries a hello-world kernel module named ``nvidia`` and a
postinst that adds it to DKMS and builds it for every installed kernel with headers, as real driver
packages do (and, like them, exits 0 when a kernel has no headers). :func:`driver_packages` builds the
whole driver set of a branch around it (see the comment above it), :func:`cuda_metas` the ``cuda`` chain.
"""

from __future__ import annotations

from gpuprov.lab.mocknvml import driver_overlay
from gpuprov.lab.standin.deb import FileSpec, PackageSpec

#: Debian revisions NVIDIA's CUDA repository gives driver packages: ``535.183.01-0ubuntu1`` in the
#: ubuntu2004/2204/2404 directories, ``535.183.01-1`` in debian12.
UBUNTU_REVISION = "-0ubuntu1"
DEBIAN_REVISION = "-1"

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

#: Registers /usr/src/nvidia-{version} with DKMS once (the driver packages' postinst and the stand-in runfile's
#: nvidia-installer --dkms both run it).
DKMS_ADD = """\
    if ! dkms status -m nvidia -v {version} | grep -q .; then
        dkms add -m nvidia -v {version}
    fi
"""

DKMS_POSTINST = """\
# As dh_dkms does: add the source to DKMS, then build and install for each installed kernel that has
# headers. A kernel without headers is skipped with a message and the package still installs (exit 0):
# this is exactly how real hosts end up without a module (their headers are for another kernel).
if [ "$1" = configure ]; then
""" + DKMS_ADD + """\
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


def dkms_source(version: str) -> dict[str, str]:
    """The DKMS source tree of the stand-in ``nvidia`` module at ``version``: file name -> text (dkms.conf,
    Makefile, nvidia.c), as /usr/src/nvidia-<version>/ holds it."""
    return {"dkms.conf": DKMS_CONF.format(version=version), "Makefile": "obj-m := nvidia.o\n",
            "nvidia.c": MODULE_C.format(version=version)}


def nvidia_dkms(branch: str, version: str, package_version: str | None = None, name: str | None = None) -> PackageSpec:
    """``nvidia-dkms-<branch>`` with a real, tiny DKMS module source under /usr/src/nvidia-<version>.

    ``name`` overrides the package name (``nvidia-dkms-<branch>-open``, ``-server``); all of them provide
    and conflict with ``nvidia-dkms-kernel`` as NVIDIA's do, so two branches or flavours never coexist.
    """
    src = f"/usr/src/nvidia-{version}"
    fmt = {"version": version, "branch": branch}
    source = dkms_source(version)
    return PackageSpec(
        name=name or f"nvidia-dkms-{branch}",
        version=package_version or f"{version}{UBUNTU_REVISION}",
        depends=("dkms",),
        provides=("nvidia-dkms-kernel",),
        conflicts=("nvidia-dkms-kernel",),
        description=f"gpuprov stand-in NVIDIA {branch} DKMS module\nBuilds a hello-world module named nvidia.",
        files={f"{src}/{name}": FileSpec(text) for name, text in source.items()},
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


# --- NVIDIA's driver packages (CUDA repository naming) ---------------------------------------------------
# Shapes copied from NVIDIA's CUDA repository for Ubuntu: nvidia-driver-<b>[-open|-server] depends on its
# siblings at exactly its own version; siblings of different branches or flavours provide and conflict
# with one virtual name each (nvidia-driver-binary, nvidia-dkms-kernel, libnvidia-compute, nvidia-utils,
# nvidia-compute-utils), so two branches never coexist and apt must remove one set to install another;
# cuda-drivers-<b> depends on nvidia-driver-<b> (>=), cuda-drivers on the newest cuda-drivers-<b>, and
# the `cuda` meta reaches cuda-drivers through cuda-runtime-X-Y (how it swaps a managed driver).
# nvidia-fabricmanager-<b> has no dependency on the driver, as NVIDIA's has none: nothing but the operator
# keeps their versions equal, and the daemon refuses to start when they differ (CUDA then fails with 802 on
# NVSwitch systems).
#
# Lab hosts already carry the mock libnvidia-ml.so.1 and Debian's real nvidia-smi (gpuprov/lab/hardware.py),
# which nothing from NVIDIA's packages may overwrite, so the stand-ins ship neither: libnvidia-compute-<b>
# ships STANDIN_DRIVER_VERSION_FILE (the userland version a daemon compares itself with), nvidia-utils-<b>
# a README. The daemons (nvidia-persistenced, nv-fabricmanager) are shell loops with real systemd units.

#: What the stand-in libnvidia-compute-<branch> installs: the driver userland version, one line.
STANDIN_DRIVER_VERSION_FILE = "/usr/share/nvidia/gpuprov-standin/driver-version"
#: The mock NVML overlay the stand-in userland ships (gpuprov.lab.mocknvml.driver_overlay): with it installed, the
#: lab's mock reports the driver version of the package installed, not its profile's.
STANDIN_NVML_OVERLAY_FILE = "/usr/share/nvidia/gpuprov-standin/mock-nvml-driver.conf"

PERSISTENCED = """\
#!/bin/sh
# gpuprov stand-in for nvidia-persistenced {version}: stays up; keeps no GPU state.
echo "nvidia-persistenced (gpuprov stand-in) {version} started"
exec sleep infinity
"""

PERSISTENCED_UNIT = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=simple
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER = """\
#!/bin/sh
# gpuprov stand-in for nv-fabricmanager {version}. Like NVIDIA's, it refuses to run against a driver of
# another version (the real one compares with the loaded module; the stand-in with the installed userland).
if [ "$1" = "--standin-daemon" ]; then
    # the daemon: this script again, so the process is named nv-fabricmanager as NVIDIA's is (verify and
    # doctor look for it by name)
    trap 'kill $! 2>/dev/null; exit 0' TERM INT
    while :; do sleep 3600 & wait $!; done
fi
FM_VERSION={version}
if [ ! -r {driver_file} ]; then
    echo "fabric manager: NVIDIA GPU driver is not installed" >&2
    exit 1
fi
DRIVER=$(cat {driver_file})
if [ "$DRIVER" != "$FM_VERSION" ]; then
    echo "fabric manager NVIDIA GPU driver interface version $FM_VERSION don't match with driver version $DRIVER." \\
         "Please update with matching NVIDIA driver package." >&2
    exit 1
fi
echo "Successfully configured all the available NVSwitches to route GPU NVLink traffic (gpuprov stand-in $FM_VERSION)"
# forks like NVIDIA's (Type=forking): systemctl start returns only after the version check passed
mkdir -p {run_dir}
"$0" --standin-daemon >/dev/null 2>&1 </dev/null &
echo $! > {run_dir}/nv-fabricmanager.pid
"""

#: Where the stand-in Fabric Manager writes its pid file (NVIDIA's unit names the same PIDFile).
FABRICMANAGER_RUN_DIR = "/var/run/nvidia-fabricmanager"

FABRICMANAGER_UNIT = """\
[Unit]
Description=NVIDIA fabric manager service
After=network-online.target
Requires=network-online.target

[Service]
Type=forking
PIDFile=/var/run/nvidia-fabricmanager/nv-fabricmanager.pid
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER_CFG = "LOG_LEVEL=4\nFM_STAY_RESIDENT_ON_FAILURES=0\n"

SERVICE_PRERM = """\
if [ -d /run/systemd/system ]; then systemctl stop {unit} >/dev/null 2>&1 || true; fi
"""

SERVICE_POSTRM = """\
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
"""


def _exact(name: str, package_version: str) -> str:
    return f"{name} (= {package_version})"


def _service(unit: str) -> dict[str, str]:
    return {"prerm": SERVICE_PRERM.format(unit=unit), "postrm": SERVICE_POSTRM}


def userland_packages(names: tuple[str, str, str], label: str, version: str, pv: str) -> list[PackageSpec]:
    """The driver userland at package version ``pv``: ``names`` are libnvidia-compute, nvidia-utils and
    nvidia-compute-utils as the repository names them (``-<branch>[-server]``, or unbranched from R590), each
    providing and conflicting with its unbranched name, so two releases of different names never coexist."""
    lib, utils, cutils = names
    virtual = ("libnvidia-compute", "nvidia-utils", "nvidia-compute-utils")
    return [
        PackageSpec(name=lib, version=pv, architecture="amd64", provides=virtual[:1], conflicts=virtual[:1],
                    replaces=virtual[:1],
                    description=f"gpuprov stand-in NVIDIA libcompute package {label}\n"
                                "The driver userland version and the lab mock NVML's overlay (no libnvidia-ml).",
                    files={STANDIN_DRIVER_VERSION_FILE: FileSpec(version + "\n"),
                           STANDIN_NVML_OVERLAY_FILE: FileSpec(driver_overlay(version))}),
        PackageSpec(name=utils, version=pv, architecture="amd64", depends=(_exact(lib, pv),),
                    provides=virtual[1:2], conflicts=virtual[1:2], replaces=virtual[1:2],
                    description=f"gpuprov stand-in NVIDIA driver support binaries {label}\n"
                                "Ships no nvidia-smi: lab hosts carry Debian's real one.",
                    files={f"/usr/share/doc/{utils}/README.gpuprov": FileSpec(
                        f"gpuprov stand-in {utils} {pv}; nvidia-smi is not part of the stand-in.\n")}),
        PackageSpec(name=cutils, version=pv, architecture="amd64", depends=(_exact(lib, pv),),
                    provides=virtual[2:], conflicts=virtual[2:], replaces=virtual[2:],
                    description=f"gpuprov stand-in NVIDIA compute utilities {label}\n"
                                "nvidia-persistenced and its systemd unit.",
                    files={"/usr/bin/nvidia-persistenced": FileSpec(PERSISTENCED.format(version=version), 0o755),
                           "/lib/systemd/system/nvidia-persistenced.service": FileSpec(PERSISTENCED_UNIT)},
                    scripts=_service("nvidia-persistenced.service")),
    ]


def fabric_manager_package(name: str, label: str, version: str, pv: str) -> PackageSpec:
    """``name`` (nvidia-fabricmanager[-<branch>]) at ``pv``: nv-fabricmanager and its unit; it provides and
    conflicts with ``nvidia-fabricmanager``, so one Fabric Manager at a time."""
    return PackageSpec(
        name=name, version=pv, architecture="amd64", provides=("nvidia-fabricmanager",),
        conflicts=("nvidia-fabricmanager",), replaces=("nvidia-fabricmanager",),
        description=f"gpuprov stand-in Fabric Manager for NVSwitch based systems ({label})",
        files={"/usr/bin/nv-fabricmanager": FileSpec(
                   FABRICMANAGER.format(version=version, driver_file=STANDIN_DRIVER_VERSION_FILE,
                                        run_dir=FABRICMANAGER_RUN_DIR), 0o755),
               "/lib/systemd/system/nvidia-fabricmanager.service": FileSpec(FABRICMANAGER_UNIT),
               "/usr/share/nvidia/nvswitch/fabricmanager.cfg": FileSpec(FABRICMANAGER_CFG)},
        scripts=_service("nvidia-fabricmanager.service"),
    )


def driver_packages(branch: str, version: str, revision: str = UBUNTU_REVISION,
                    flavours: tuple[str, ...] = ("", "-open", "-server")) -> list[PackageSpec]:
    """One driver release of one branch as NVIDIA's CUDA repository ships it.

    ``driver_packages("535", "535.183.01")`` gives, at package version ``535.183.01-0ubuntu1``:
    nvidia-driver-535, nvidia-driver-535-open and nvidia-driver-535-server; nvidia-dkms-535, -open and
    -server (the tiny real DKMS module); libnvidia-compute-535 and -server; nvidia-utils-535 and -server;
    nvidia-compute-utils-535 and -server (nvidia-persistenced and its unit); nvidia-fabricmanager-535
    (nv-fabricmanager, nvidia-fabricmanager.service); cuda-drivers-535. ``flavours`` selects the
    nvidia-driver variants ("" proprietary, "-open", "-server", and Ubuntu's archive's "-server-open"; the
    -server ones take the -server userland).
    """
    pv = f"{version}{revision}"
    specs: list[PackageSpec] = []
    for u in sorted({"-server" if f.startswith("-server") else "" for f in flavours}):
        names = (f"libnvidia-compute-{branch}{u}", f"nvidia-utils-{branch}{u}", f"nvidia-compute-utils-{branch}{u}")
        specs += userland_packages(names, f"{branch}{u}", version, pv)
    for flavour in flavours:
        u = "-server" if flavour.startswith("-server") else ""
        dkms_name = f"nvidia-dkms-{branch}{flavour}"
        specs.append(nvidia_dkms(branch, version, pv, dkms_name))
        specs.append(PackageSpec(
            name=f"nvidia-driver-{branch}{flavour}", version=pv, architecture="amd64",
            depends=(_exact(dkms_name, pv), _exact(f"libnvidia-compute-{branch}{u}", pv),
                     _exact(f"nvidia-utils-{branch}{u}", pv), _exact(f"nvidia-compute-utils-{branch}{u}", pv)),
            provides=("nvidia-driver-binary",), conflicts=("nvidia-driver-binary",),
            description=f"gpuprov stand-in NVIDIA driver metapackage {branch}{flavour}",
        ))
    specs.append(fabric_manager_package(f"nvidia-fabricmanager-{branch}", branch, version, pv))
    specs.append(PackageSpec(name=f"cuda-drivers-{branch}", version=pv, architecture="amd64",
                             depends=(f"nvidia-driver-{branch} (>= {version})",),
                             description=f"gpuprov stand-in CUDA driver meta package, branch {branch}"))
    return specs


def cuda_metas(cuda: str, cuda_package_version: str, branch: str, driver_version: str,
               revision: str = UBUNTU_REVISION) -> list[PackageSpec]:
    """``cuda`` -> ``cuda-runtime-X-Y`` -> ``cuda-drivers`` -> ``cuda-drivers-<branch>``, as NVIDIA chains them.

    ``cuda_metas("12.8", "12.8.1-1", "570", "570.133.20")``: installing ``cuda`` pulls the newest driver
    branch, which is how it swaps a separately managed driver (docs/field-failures.md, 'The cuda meta-package').
    """
    xy = cuda.replace(".", "-")
    runtime = f"cuda-runtime-{xy}"
    return [
        meta("cuda", cuda_package_version, (f"{runtime} (>= {cuda_package_version})",)),
        meta(runtime, cuda_package_version, (f"cuda-drivers (>= {driver_version})",)),
        meta("cuda-drivers", f"{driver_version}{revision}", (f"cuda-drivers-{branch} (= {driver_version}{revision})",)),
    ]


PRESETS = ("ubuntu-hwe", "nvidia-dkms", "debian-kernel", "nvidia-driver")

#: Driver branches the lab's stand-in CUDA repository offers (``driver.branch: auto`` resolves to one
#: of these for the lab's H200 hosts), with a release of each.
LAB_BRANCHES = {"535": "535.183.01", "550": "550.127.05", "570": "570.133.20", "580": "580.65.06"}


def lab_cuda_packages(os_name: str = "ubuntu2004") -> list[PackageSpec]:
    """What the lab's stand-in CUDA repository for ``os_name`` serves: every :data:`LAB_BRANCHES` release as
    :func:`driver_packages` (with NVIDIA's revision for the OS: ``-1`` on debian12, ``-0ubuntu1`` on
    Ubuntu), and ``cuda`` 12.8 whose chain pulls the newest branch."""
    revision = DEBIAN_REVISION if os_name.startswith("debian") else UBUNTU_REVISION
    specs = [spec for branch, version in LAB_BRANCHES.items() for spec in driver_packages(branch, version, revision)]
    newest = max(LAB_BRANCHES, key=int)
    return specs + cuda_metas("12.8", "12.8.1-1", newest, LAB_BRANCHES[newest], revision)


def preset(name: str, headers_target: str | None = None) -> list[PackageSpec]:
    """Named package sets for Molecule and the CLI (``python -m gpuprov.lab.standin``).

    ``ubuntu-hwe``: fake 5.15.0-105-generic with linux-generic-hwe-20.04 metas; ``nvidia-dkms``:
    nvidia-dkms-535 (535.183.01); ``debian-kernel``: a newer Debian-named kernel 6.1.0-99-amd64 (image +
    headers) for the kernel-upgrade test; ``nvidia-driver``: the lab's CUDA-repository driver set
    (:func:`lab_cuda_packages`).
    """
    if name == "ubuntu-hwe":
        return ubuntu_kernel("5.15.0-105", "generic", "generic-hwe-20.04", "5.15.0.105.112~20.04.1",
                             headers_target)
    if name == "nvidia-dkms":
        return [nvidia_dkms("535", "535.183.01")]
    if name == "nvidia-driver":
        return lab_cuda_packages()
    if name == "debian-kernel":
        return [kernel_image("6.1.0-99-amd64", "6.1.999-1"), kernel_headers("6.1.0-99-amd64", "6.1.999-1",
                                                                             headers_target)]
    raise KeyError(name)
