"""Build what prepare.yml copies into the lab containers: the signed stand-in libnvidia-container
repository (gpuprov/lab/standin/container.py), the mock NVML library with the a100x8-nvswitch profile (eight MIG-capable
A100s, for the CDI specification) and the repository key's fingerprint.

    python build_standin.py OUT    # OUT/repo.tar, OUT/nvml/libnvidia-ml.so.1, OUT/nvml/mock-nvml.conf, OUT/fingerprint

The repository goes over as one tar file (a per-file copy into a container is slow on a loaded machine).
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from gpuprov.lab.mocknvml import compile_profile
from gpuprov.lab.mocknvml.build import build_library
from gpuprov.lab.standin import build_repository
from gpuprov.lab.standin.container import packages
from gpuprov.lab.standin.repo import key_fingerprint


def main(out: Path) -> int:
    repo = build_repository(packages(), out / "repo", gnupg_home=out / "gnupg")
    with tarfile.open(out / "repo.tar", "w") as tar:
        tar.add(str(repo.path), arcname="gpuprov-standin-container")
    build_library(out / "nvml")
    (out / "nvml" / "mock-nvml.conf").write_text(compile_profile("a100x8-nvswitch"), encoding="utf-8")
    (out / "fingerprint").write_text(key_fingerprint(repo.key) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
