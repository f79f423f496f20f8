"""A stand-in of NVIDIA's driver runfile, ``NVIDIA-Linux-x86_64-<version>.run``, for the runfile method's tests.

NVIDIA's runfile is a makeself archive: a shell header that extracts the gzip'd tar appended to it (the directory
``NVIDIA-Linux-x86_64-<version>/``) into a temporary directory and runs its ``nvidia-installer`` with the
arguments given to the ``.run`` (``-x``/``--extract-only`` only extracts). The stand-in has the same shape. Its
``nvidia-installer`` is a shell script that accepts NVIDIA's options (an unknown option fails, as NVIDIA's does),
so the role's flags are really checked; it installs:

- the module source under ``/usr/src/nvidia-<version>`` (``kernel/`` or ``kernel-open/`` of the archive, chosen by
  ``--kernel-module-type`` or the older ``--kernel-module-build-directory=kernel-open``), registered with DKMS and
  built for ``--kernel-name`` (default ``uname -r``), with the same DKMS source and commands as the stand-in
  ``nvidia-dkms-<branch>`` package (:func:`gpuprov.lab.standin.catalogue.dkms_source`);
- ``libnvidia-cfg.so.<version>`` (a real ELF, soname ``libnvidia-cfg.so.1``), ``nvidia-persistenced`` (a daemon
  that forks and writes its pid file, as NVIDIA's does), itself as ``/usr/bin/nvidia-installer`` and the lab's
  driver-version and mock-NVML overlay files (so the lab's mock NVML reports the runfile's version);
- the record NVIDIA's installer keeps, ``/var/lib/nvidia/log``: the version on the first line, the description on
  the second, then ``1: <file>`` and its checksum per installed file (backup.c in
  https://github.com/NVIDIA/nvidia-installer); ``--uninstall`` removes what it lists and the DKMS module.

It refuses to install over a driver installed from packages (NVIDIA's warns and asks; the stand-in, silent, stops)
and uninstalls an earlier runfile driver first, as NVIDIA's does. ``--dkms`` is required: a build without DKMS
is not part of the stand-in.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from gpuprov.lab.mocknvml import driver_overlay
from gpuprov.lab.standin.catalogue import DKMS_ADD, STANDIN_DRIVER_VERSION_FILE, STANDIN_NVML_OVERLAY_FILE, dkms_source
from gpuprov.lab.standin.sharedlib import shared_library

#: Where NVIDIA's installer puts the 64-bit libraries on Debian and Ubuntu (its --utility-libdir default there).
LIBDIR = "/usr/lib/x86_64-linux-gnu"

HEADER = """\
#!/bin/sh
# gpuprov stand-in for {name}: a self-extracting archive in the layout of NVIDIA's runfile (makeself): this
# header, then a gzip'd tar of {top}/. -x / --extract-only extracts into the current directory; anything
# else is passed to {top}/nvidia-installer.
skip={skip}
for a in "$@"; do
    case "$a" in
        -x|--extract-only) tail -n +$skip "$0" | tar xzf - && echo "Extracted to ./{top}"; exit $?;;
    esac
done
tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/makeself.XXXXXX") || exit 1
if ! tail -n +$skip "$0" | tar xzf - -C "$tmp"; then
    echo "{name}: the archive is corrupt" >&2; rm -rf "$tmp"; exit 1
fi
(cd "$tmp/{top}" && ./nvidia-installer "$@")
rc=$?
rm -rf "$tmp"
exit $rc
"""

INSTALLER = """\
#!/bin/sh
# gpuprov stand-in for nvidia-installer {version} (see gpuprov/lab/standin/runfile.py).
set -u
VERSION={version}
DESCRIPTION="NVIDIA Accelerated Graphics Driver for Linux-x86_64 (gpuprov stand-in)"
LOG=/var/lib/nvidia/log
INSTALLER_LOG=/var/log/nvidia-installer.log
dkms=0 uninstall=0 type=default kernel=$(uname -r) key="" cert=""
for a in "$@"; do
    case "$a" in
        -s|--silent|--ui=none|-q|--no-questions|-a|--accept-license|--no-opengl-files) ;;
        --skip-module-load|--skip-module-unload|--no-x-check|--no-nouveau-check|--disable-nouveau|--no-drm) ;;
        --no-systemd) ;;
        --dkms) dkms=1;;
        --uninstall) uninstall=1;;
        -v|--version) echo "nvidia-installer:  version $VERSION"; exit 0;;
        --kernel-module-type=open|--kernel-module-type=proprietary) type=${{a#*=}};;
        --kernel-module-build-directory=kernel-open|-m=kernel-open) type=open;;
        --kernel-module-build-directory=kernel|-m=kernel) type=proprietary;;
        --kernel-name=*|-k=*) kernel=${{a#*=}};;
        --module-signing-secret-key=*) key=${{a#*=}};;
        --module-signing-public-key=*) cert=${{a#*=}};;
        *) echo "ERROR: Unrecognized option: '$a'; see 'nvidia-installer --help' for usage information." >&2
           exit 1;;
    esac
done
say() {{ echo "$*"; echo "$*" >> "$INSTALLER_LOG"; }}
do_uninstall() {{
    if [ ! -r "$LOG" ]; then echo "ERROR: No driver backed up (no $LOG)." >&2; return 1; fi
    old=$(head -n1 "$LOG")
    say "Uninstalling $(sed -n 2p "$LOG") ($old)"
    dkms remove -m nvidia -v "$old" --all >/dev/null 2>&1 || true
    rm -rf "/usr/src/nvidia-$old"
    sed -n 's/^[12]: //p' "$LOG" | while read -r f; do rm -f "$f"; done
    rm -rf /var/lib/nvidia
}}
if [ $uninstall = 1 ]; then do_uninstall; exit $?; fi
: > "$INSTALLER_LOG"
packaged=$(dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}}\\n' 'nvidia-driver*' 'libnvidia-compute*' \\
           'nvidia-dkms*' 'nvidia-kernel-dkms' 'libcuda1' 2>/dev/null | awk '$1 ~ /^.i/ {{print $2}}' | xargs)
if [ -n "$packaged" ]; then
    say "ERROR: An NVIDIA driver installed from packages is present ($packaged); uninstall it with the package" \\
        "manager before installing this driver."
    exit 1
fi
if [ $dkms = 0 ]; then say "ERROR: the gpuprov stand-in installs with --dkms only."; exit 1; fi
if [ -r "$LOG" ]; then do_uninstall || exit 1; fi
if [ "$type" = default ]; then
    if [ "${{VERSION%%.*}}" -ge 560 ]; then type=open; else type=proprietary; fi
fi
src=kernel; [ "$type" = open ] && src=kernel-open
if [ -n "$key$cert" ] && ! {{ [ -r "$key" ] && [ -r "$cert" ]; }}; then
    say "ERROR: the module signing key or certificate cannot be read."; exit 1
fi
say "Installing $DESCRIPTION $VERSION, kernel module type: $type, for kernel $kernel"
mkdir -p /var/lib/nvidia && chmod 700 /var/lib/nvidia
printf '%s\\n%s\\n' "$VERSION" "$DESCRIPTION" > "$LOG"
record() {{ echo "1: $1" >> "$LOG"; cksum "$1" | cut -d' ' -f1 >> "$LOG"; }}
put() {{ mkdir -p "$(dirname "$2")" && cp "$1" "$2" && chmod "$3" "$2" && record "$2"; }}
put libnvidia-cfg.so.$VERSION {libdir}/libnvidia-cfg.so.$VERSION 0644
ln -sf libnvidia-cfg.so.$VERSION {libdir}/libnvidia-cfg.so.1
printf '2: %s\\n%s\\n' {libdir}/libnvidia-cfg.so.1 libnvidia-cfg.so.$VERSION >> "$LOG"
put nvidia-persistenced /usr/bin/nvidia-persistenced 0755
put nvidia-installer /usr/bin/nvidia-installer 0755
put driver-version {version_file} 0644
put mock-nvml-driver.conf {overlay_file} 0644
mkdir -p "/usr/src/nvidia-$VERSION" && cp "$src"/* "/usr/src/nvidia-$VERSION/"
{dkms_add}if ! dkms install -m nvidia -v "$VERSION" -k "$kernel" >> "$INSTALLER_LOG" 2>&1; then
    say "ERROR: Failed to install the kernel module through DKMS for $kernel (see $INSTALLER_LOG)."
    exit 1
fi
say "Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: $VERSION) is now complete."
"""

PERSISTENCED = """\
#!/bin/sh
# gpuprov stand-in for nvidia-persistenced {version}: forks, writes its pid file like NVIDIA's, keeps no GPU state.
mkdir -p /var/run/nvidia-persistenced
sh -c 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done' >/dev/null 2>&1 </dev/null &
echo $! > /var/run/nvidia-persistenced/nvidia-persistenced.pid
echo "nvidia-persistenced (gpuprov stand-in) {version} started"
"""

LIBRARY_C = "int nvCfgGpuprovStandin(void) { return 0; }\n"


def runfile_name(version: str) -> str:
    """NVIDIA's file name for the x86_64 driver ``version``: ``NVIDIA-Linux-x86_64-<version>.run``."""
    return f"NVIDIA-Linux-x86_64-{version}.run"


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def build_runfile(version: str, out_dir: Path) -> Path:
    """Write the stand-in ``NVIDIA-Linux-x86_64-<version>.run`` into ``out_dir`` (created) and return its path.

    Raises:
        EnvironmentMissing: gcc is missing (the stand-in library is compiled).
        ConfigError: gcc failed, or the mock NVML has no CUDA release for ``version`` (its overlay).
    """
    top = f"NVIDIA-Linux-x86_64-{version}"
    installer = INSTALLER.format(
        version=version,
        libdir=LIBDIR,
        version_file=STANDIN_DRIVER_VERSION_FILE,
        overlay_file=STANDIN_NVML_OVERLAY_FILE,
        dkms_add=DKMS_ADD.format(version=version),
    )
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w:gz") as tar:
        _add(tar, f"{top}/nvidia-installer", installer.encode(), 0o755)
        _add(tar, f"{top}/.manifest", f"{version}\nLinux-x86_64\ngpuprov stand-in\n".encode())
        for kind in ("kernel", "kernel-open"):
            for name, text in dkms_source(version).items():
                _add(tar, f"{top}/{kind}/{name}", text.encode())
        _add(tar, f"{top}/libnvidia-cfg.so.{version}", shared_library("libnvidia-cfg.so.1", LIBRARY_C))
        _add(tar, f"{top}/nvidia-persistenced", PERSISTENCED.format(version=version).encode(), 0o755)
        _add(tar, f"{top}/driver-version", f"{version}\n".encode())
        _add(tar, f"{top}/mock-nvml-driver.conf", driver_overlay(version).encode())
    name = runfile_name(version)
    header = HEADER.format(name=name, top=top, skip=0)
    header = HEADER.format(name=name, top=top, skip=header.count("\n") + 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_bytes(header.encode() + payload.getvalue())
    path.chmod(0o755)
    return path


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path`` (what ``driver.runfile_sha256`` holds)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
