"""A lab host's simulated GPU "hardware": the mock NVML with one profile, and Debian's real nvidia-smi.

:func:`install` puts into a running lab container

* ``/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`` - the mock library (:mod:`gpuprov.lab.mocknvml`),
  built here with the system compiler;
* ``/etc/gpuprov/mock-nvml.conf`` - the compiled profile the library reads (all shipped profiles are
  under ``/etc/gpuprov/mock-nvml.d/`` as well);
* ``/usr/bin/nvidia-smi`` - the real binary from Debian non-free: 535.261.03 (bookworm) on Debian 12 hosts
  and the Ubuntu 22.04 and 24.04 stand-ins (glibc 2.36 and 2.41); 470.256.02 (bullseye, glibc 2.31) on the
  Ubuntu 20.04 stand-in, whose glibc is too old for 535.

so the product code on the host (pynvml through the nvml_facts module, nvidia-smi) is the code that runs
on a real server. :func:`fleet_gpus` derives the fleet file's ``gpus`` settings from the profile, so the
lab fleet file describes the hardware its hosts pretend to have.
"""

from __future__ import annotations

import io
import logging
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError, HostsFailed
from gpuprov.lab.mocknvml import install as install_mock
from gpuprov.lab.mocknvml import list_profiles, load_profile
from gpuprov.lab.mocknvml.smi import BOOKWORM_VERSION, BULLSEYE_VERSION, fetch_nvidia_smi
from gpuprov.lab.standin.catalogue import STANDIN_NVML_OVERLAY_FILE
from gpuprov.matrix import load_matrix

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "h200x2"

#: nvidia-smi package version per lab OS (glibc: bullseye 2.31, bookworm 2.36, trixie 2.41; 535 needs >= 2.34).
NVIDIA_SMI_FOR_OS: dict[str, str] = {"debian12": BOOKWORM_VERSION, "ubuntu2004": BULLSEYE_VERSION,
                                     "ubuntu2204": BOOKWORM_VERSION, "ubuntu2404": BOOKWORM_VERSION}

#: NVML's remote device type for an NVLink that ends at an NVSwitch (nvmlIntNvLinkDeviceType_t).
_NVLINK_REMOTE_SWITCH = 2


def check_profile(name: str) -> str:
    """Return ``name`` if it is a shipped profile.

    Raises:
        ConfigError: unknown profile (the message lists the shipped ones).
    """
    known = list_profiles()
    if name not in known:
        raise ConfigError(f"--profile {name}: no such mock NVML profile - use one of: {', '.join(known)}")
    return name


def fleet_gpus(profile: str) -> dict[str, Any] | None:
    """The fleet file's ``gpus`` section for hardware ``profile``: ``{model, count, nvswitch}``.

    The model is the compatibility matrix's name for the profile's first GPU (NVML name such as
    "NVIDIA H200" -> "H200"); ``nvswitch`` is true when the profile's NVLinks end at an NVSwitch.
    Returns None for profiles without readable GPUs (driver not loaded, version mismatch), for which
    the fleet keeps the lab default.
    """
    data = load_profile(profile)
    gpus = data.get("gpus") or []
    names: list[str] = [g["name"] for g in gpus if isinstance(g, dict) and isinstance(g.get("name"), str)]
    if not names:
        return None
    model = load_matrix().gpu_for_nvml_name(names[0])
    if model is None:
        return None
    nvswitch = any(
        isinstance(g.get("nvlink"), dict) and g["nvlink"].get("remote_device_type") == _NVLINK_REMOTE_SWITCH
        for g in gpus
        if isinstance(g, dict)
    )
    return {"model": model.model, "count": len(gpus), "nvswitch": nvswitch}


def _tar(root: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(root.rglob("*")):
            info = archive.gettarinfo(str(path), arcname=str(path.relative_to(root)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if path.is_file() and not path.is_symlink():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def install(container: Any, os_name: str, profile: str) -> None:
    """Install the mock NVML with ``profile`` and the matching real nvidia-smi into ``container``.

    Re-running replaces the files (switching profile is a re-run).

    Raises:
        ConfigError: unknown profile or lab OS.
        EnvironmentMissing: no C compiler, or nvidia-smi could not be fetched from Debian.
        HostsFailed: the files could not be put into the container.
    """
    check_profile(profile)
    if os_name not in NVIDIA_SMI_FOR_OS:
        raise ConfigError(f"lab OS {os_name}: no nvidia-smi build known for it")
    smi = fetch_nvidia_smi(NVIDIA_SMI_FOR_OS[os_name])
    hostname = container.attrs["Config"]["Hostname"]
    with tempfile.TemporaryDirectory(prefix="gpuprov-hw-") as tmp:
        root = Path(tmp)
        install_mock(root, profile, overlay=STANDIN_NVML_OVERLAY_FILE)  # the installed driver's version wins
        target = root / "usr" / "bin" / "nvidia-smi"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(smi.read_bytes())
        target.chmod(0o755)
        if not container.put_archive("/", _tar(root)):
            raise HostsFailed(f"could not copy the mock NVML into {container.name}", [hostname])
    code, output = container.exec_run(["/sbin/ldconfig"], user="root")
    if code != 0:
        raise HostsFailed(f"ldconfig failed in {container.name}: {output.decode(errors='replace')}", [hostname])
    log.info("%s: mock NVML profile %s, nvidia-smi %s", container.name, profile, NVIDIA_SMI_FOR_OS[os_name])
