"""Stand-in NVIDIA Container Toolkit packages (libnvidia-container repository layout) for the
container_toolkit role's tests.

Package names, file paths and the version-locked dependency chain follow NVIDIA's packages
(``nvidia-container-toolkit`` -> ``nvidia-container-toolkit-base`` + ``libnvidia-container-tools`` ->
``libnvidia-container1``, all at one version, as NVIDIA's install guide pins them). The programs are
shell stubs with the failure signatures of the real ones:

* ``nvidia-container-cli [--root R] [--cgroup-root C] info`` fails with
  ``cgroup subsystem devices not found`` when the library version is below 1.8.0 (the first release
  with cgroup v2 support, NVIDIA's libnvidia-container changelog) and ``C`` (default ``/sys/fs/cgroup``)
  is a unified hierarchy (``cgroup.controllers`` present, no ``devices/``), as old libraries do on a cgroup v2
  host; and with ``load library failed: libnvidia-ml.so.1`` when no ``libnvidia-ml.so.1`` lies under ``R``'s
  library directories, as with a containerised-driver root on a host-installed driver. Without ``--root`` it
  reads ``root`` from the ``[nvidia-container-cli]`` table of ``/etc/nvidia-container-runtime/config.toml``.
* ``nvidia-container-runtime`` execs ``runc`` with its arguments (the real one adds the prestart hook).
* ``nvidia-ctk --version`` prints the toolkit version; ``nvidia-ctk cdi generate`` / ``cdi list`` write and list
  a CDI specification of the host's GPUs read through ``libnvidia-ml.so.1`` (the mock NVML in the lab;
  :mod:`gpuprov.lab.standin.ctk_cdi`).

``/etc/nvidia-container-runtime/config.toml`` is created by ``nvidia-container-toolkit-base``'s postinst
only where it does not exist, as current real packages do (their postinst runs ``nvidia-ctk config
--in-place``; the file is no longer a dpkg conffile), with the real commented defaults, so an admin's
edited file - or a wrong driver root carried over from an old install - survives an upgrade, and the
role's merge is tested against the file it meets on real hosts. The default is kept in
``/usr/share/gpuprov-standin/nvidia-container-toolkit/config.toml``.

``python -m gpuprov.lab.standin.container OUT`` builds a signed repository with every version in
:data:`VERSIONS` and prints its one-line apt source.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gpuprov.exceptions import GpuprovError
from gpuprov.lab.standin.deb import FileSpec, PackageSpec
from gpuprov.lab.standin.repo import build_repository

log = logging.getLogger(__name__)

#: Versions built into the stand-in repository: one below the cgroup v2 floor (1.3.2-1, which fails on cgroup v2) and
#: the role's default pin (NVIDIA's release of 2025-06, libnvidia-container 1.17.8).
VERSIONS = ("1.3.2-1", "1.17.8-1")

#: First libnvidia-container release supporting cgroup v2 (NVIDIA libnvidia-container changelog, v1.8.0).
CGROUP_V2_FLOOR = "1.8.0"

CONFIG_TOML = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""

# Library directories the stub searches under the driver root, as libnvidia-container's ldcache does
# for Debian/Ubuntu and RPM layouts.
CLI_STUB = r"""#!/bin/sh
# gpuprov stand-in for nvidia-container-cli @VERSION@ (see gpuprov/lab/standin/container.py)
version=@VERSION@
floor=@FLOOR@
config=/etc/nvidia-container-runtime/config.toml
root=""
cgroot=/sys/fs/cgroup
cmd=""
while [ $# -gt 0 ]; do
    case "$1" in
        --version) echo "cli-version: $version"; echo "lib-version: $version"; exit 0 ;;
        --root) root=$2; shift ;;
        --root=*) root=${1#--root=} ;;
        --cgroup-root) cgroot=$2; shift ;;
        --cgroup-root=*) cgroot=${1#--cgroup-root=} ;;
        -*) ;;
        *) [ -z "$cmd" ] && cmd=$1 ;;
    esac
    shift
done
if [ -z "$root" ] && [ -r "$config" ]; then
    root=$(sed -n '/^\[nvidia-container-cli\]/,/^\[/{s/^root *= *"\(.*\)"/\1/p}' "$config")
fi
[ -n "$root" ] || root=/
if [ -f "$cgroot/cgroup.controllers" ] && [ ! -d "$cgroot/devices" ] \
   && dpkg --compare-versions "${version%-*}" lt "$floor"; then
    echo "nvidia-container-cli: container error: cgroup subsystem devices not found: unknown" >&2
    exit 1
fi
for d in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib64 lib64 usr/lib; do
    if [ -e "${root%/}/$d/libnvidia-ml.so.1" ]; then
        echo "NVRM version: stand-in (root ${root}, ${d}/libnvidia-ml.so.1)"
        exit 0
    fi
done
msg="load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory"
echo "nvidia-container-cli: initialization error: $msg (root $root)" >&2
exit 1
"""

RUNTIME_STUB = """#!/bin/sh
# gpuprov stand-in for nvidia-container-runtime: the real one injects the prestart hook, then runs runc.
exec runc "$@"
"""

DEFAULT_CONFIG = "/usr/share/gpuprov-standin/nvidia-container-toolkit/config.toml"
CONFIG = "/etc/nvidia-container-runtime/config.toml"
BASE_POSTINST = f"""if [ "$1" = configure ] && [ ! -e {CONFIG} ]; then
    mkdir -p {CONFIG.rsplit("/", 1)[0]}
    cp {DEFAULT_CONFIG} {CONFIG}
fi
"""

#: Source of the stand-in ``nvidia-ctk`` (a standalone script, shipped as it is).
CTK_SOURCE = Path(__file__).with_name("ctk_cdi.py")

HOOK_STUB = """#!/bin/sh
# gpuprov stand-in for nvidia-container-runtime-hook
exec nvidia-container-cli "$@"
"""


def ctk_stub(version: str) -> str:
    """The ``nvidia-ctk`` stand-in, :mod:`gpuprov.lab.standin.ctk_cdi` with ``version``'s upstream part as its
    version: ``--version``, ``cdi generate`` and ``cdi list`` from the host's NVML; anything else fails (exit 2)."""
    upstream = version.split("-", maxsplit=1)[0]
    return CTK_SOURCE.read_text(encoding="utf-8").replace('VERSION = "@VERSION@"', f'VERSION = "{upstream}"', 1)


def toolkit_packages(version: str) -> list[PackageSpec]:
    """The four packages of one toolkit release: ``libnvidia-container1``, ``libnvidia-container-tools``,
    ``nvidia-container-toolkit-base`` and ``nvidia-container-toolkit``, each depending on the others at
    exactly ``version`` (a Debian version such as ``1.17.8-1``)."""
    upstream = version.split("-", maxsplit=1)[0]
    exact = f"(= {version})"
    cli = CLI_STUB.replace("@VERSION@", version).replace("@FLOOR@", CGROUP_V2_FLOOR)
    return [
        PackageSpec(
            name="libnvidia-container1", version=version, architecture="amd64",
            description="NVIDIA container runtime library (gpuprov stand-in)",
            files={"/usr/share/doc/libnvidia-container1/VERSION": FileSpec(upstream + "\n")},
        ),
        PackageSpec(
            name="libnvidia-container-tools", version=version, architecture="amd64",
            depends=(f"libnvidia-container1 {exact}",),
            description="NVIDIA container runtime library, command-line tools (gpuprov stand-in)",
            files={"/usr/bin/nvidia-container-cli": FileSpec(cli, mode=0o755)},
        ),
        PackageSpec(
            name="nvidia-container-toolkit-base", version=version, architecture="amd64",
            description="NVIDIA Container Toolkit base (gpuprov stand-in)",
            scripts={"postinst": BASE_POSTINST},
            files={
                DEFAULT_CONFIG: FileSpec(CONFIG_TOML),
                "/usr/bin/nvidia-ctk": FileSpec(ctk_stub(version), mode=0o755),
                "/usr/bin/nvidia-container-runtime": FileSpec(RUNTIME_STUB, mode=0o755),
            },
        ),
        PackageSpec(
            name="nvidia-container-toolkit", version=version, architecture="amd64",
            depends=(f"nvidia-container-toolkit-base {exact}", f"libnvidia-container-tools {exact}"),
            description="NVIDIA Container Toolkit (gpuprov stand-in)",
            files={"/usr/bin/nvidia-container-runtime-hook": FileSpec(HOOK_STUB, mode=0o755)},
        ),
    ]


def packages(versions: tuple[str, ...] = VERSIONS) -> list[PackageSpec]:
    """Every stand-in toolkit package at every version in ``versions``."""
    return [spec for version in versions for spec in toolkit_packages(version)]


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuprov.lab.standin.container OUT [--gnupg-home DIR]``: build the signed repository."""
    parser = argparse.ArgumentParser(prog="python -m gpuprov.lab.standin.container", description=main.__doc__)
    parser.add_argument("out", type=Path, help="repository directory to create")
    parser.add_argument("--gnupg-home", type=Path, default=None, help="reuse (or create) the signing key here")
    args = parser.parse_args(argv)
    try:
        repo = build_repository(packages(), args.out, gnupg_home=args.gnupg_home)
    except GpuprovError as exc:
        sys.stderr.write(f"gpuprov.lab.standin.container: {exc}\n")
        return exc.exit_code
    sys.stdout.write(repo.source_line() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
