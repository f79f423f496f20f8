"""The files a MIG test host gets under ``/``: the mock NVML with a profile, Debian's real ``nvidia-smi`` (what
``gpuprov-mig.service`` runs at boot) and, for the tests' own probes only, the controller's ``pynvml.py`` under
:data:`PROBE_DIR` (the role installs no pynvml on a host)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pynvml

from gpuprov.lab.mocknvml import install
from gpuprov.lab.mocknvml.smi import fetch_nvidia_smi

#: where the probes' pynvml.py lies on the host (``sys.path.insert(0, PROBE_DIR)``)
PROBE_DIR = "/opt/gpuprov-test-probe"


def mig_host_files(root: Path, profile: str) -> None:
    """Write the mock NVML with ``profile``, ``usr/bin/nvidia-smi`` and the probes' pynvml under ``root``.

    Raises:
        EnvironmentMissing: no C compiler for the mock, or nvidia-smi could not be fetched from Debian.
    """
    install(root, profile)
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fetch_nvidia_smi(), smi)
    smi.chmod(0o755)
    probe = root / PROBE_DIR.lstrip("/")
    probe.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(str(pynvml.__file__), probe / "pynvml.py")
