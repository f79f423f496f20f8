"""Build the tarball prepare.yml unpacks at / in a container: the mock NVML with ``PROFILE``, Debian's real
nvidia-smi and the verifier's pynvml (tests/integration/mig_host.py).

    python make_fixture.py PROFILE OUT.tar
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.mig_host import mig_host_files  # noqa: E402


def main(profile: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mig_host_files(root, profile)
        with tarfile.open(out, "w") as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
