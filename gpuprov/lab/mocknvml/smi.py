"""Fetch NVIDIA's real ``nvidia-smi`` binary from Debian non-free, to run it against the mock NVML.

Debian ships ``nvidia-smi`` as its own package; it depends on the driver, so it is downloaded with
``apt-get download`` through a throwaway apt configuration (nothing is installed, the system's apt
sources are untouched) and unpacked with ``dpkg-deb -x``. The result is cached outside the repository
(``~/.cache/gpuprov/nvidia-smi/<version>/``); binaries are never committed.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from gpuprov import resources
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab.mirrors import read_mirrors

log = logging.getLogger(__name__)

#: Debian suite and package version of the nvidia-smi builds we test against.
BOOKWORM_VERSION = "535.261.03-1"
BULLSEYE_VERSION = "470.256.02-2"
_SUITES = {BOOKWORM_VERSION: "bookworm", BULLSEYE_VERSION: "bullseye"}
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_BINARY = Path("usr/lib/nvidia/current/nvidia-smi")


def cache_dir() -> Path:
    """Return ``$XDG_CACHE_HOME/gpuprov/nvidia-smi`` (``~/.cache/...`` by default)."""
    return resources.cache_dir() / "nvidia-smi"


def _apt_options(root: Path) -> list[str]:
    return [
        "-o",
        f"Dir::Etc={root / 'etc'}",
        "-o",
        f"Dir::Etc::sourcelist={root / 'etc' / 'sources.list'}",
        "-o",
        f"Dir::Etc::sourceparts={root / 'etc' / 'sources.list.d'}",
        "-o",
        f"Dir::State={root}",
        "-o",
        f"Dir::State::Lists={root / 'lists'}",
        "-o",
        f"Dir::State::status={root / 'status'}",
        "-o",
        f"Dir::Cache={root / 'cache'}",
        "-o",
        "APT::Architecture=amd64",
        "-o",
        "APT::Sandbox::User=root",
        "-o",
        "Debug::NoLocking=1",
    ]


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    try:
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise EnvironmentMissing(f"fetching nvidia-smi failed: {' '.join(cmd[:2])}: {detail.strip()}") from exc


def fetch_nvidia_smi(version: str = BOOKWORM_VERSION, cache: Path | None = None) -> Path:
    """Return the path of the real ``nvidia-smi`` of Debian package ``version``, downloading it once.

    Raises :class:`~gpuprov.exceptions.EnvironmentMissing` when apt-get/dpkg-deb are missing or the
    download fails (no network, no Debian mirror).
    """
    if version not in _SUITES:
        raise EnvironmentMissing(f"unknown nvidia-smi version {version}; known: {', '.join(_SUITES)}")
    target = (cache or cache_dir()) / version
    binary = target / _BINARY
    if binary.is_file():
        return binary
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise EnvironmentMissing(f"{tool} not found: cannot fetch nvidia-smi from Debian")
    apt_root = target / "apt"
    for sub in ("etc/sources.list.d", "lists/partial", "cache/archives/partial"):
        (apt_root / sub).mkdir(parents=True, exist_ok=True)
    (apt_root / "status").touch()
    suite = _SUITES[version]
    keyring = f"[signed-by={_KEYRING}] " if Path(_KEYRING).is_file() else ""
    mirror = read_mirrors().debian  # this machine's own Debian mirror; the repository names none
    (apt_root / "etc" / "sources.list").write_text(f"deb {keyring}{mirror} {suite} non-free\n", encoding="utf-8")
    options = _apt_options(apt_root)
    log.info("downloading nvidia-smi %s from Debian %s non-free", version, suite)
    _run(["apt-get", *options, "update"])
    download = target / "deb"
    download.mkdir(exist_ok=True)
    _run(["apt-get", *options, "download", f"nvidia-smi={version}"], cwd=download)
    debs = sorted(download.glob("nvidia-smi_*.deb"))
    if not debs:
        raise EnvironmentMissing(f"apt-get download produced no nvidia-smi .deb in {download}")
    _run(["dpkg-deb", "-x", str(debs[-1]), str(target)])
    if not binary.is_file():
        raise EnvironmentMissing(f"{debs[-1].name} has no {_BINARY}")
    return binary
