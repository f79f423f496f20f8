"""Build the tarball prepare.yml unpacks at / in a container: the mock NVML with ``PROFILE``.

    python make_fixture.py PROFILE OUT.tar
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuprov.mocknvml import install  # noqa: E402


def main(profile: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        install(root, profile)
        with tarfile.open(out, "w") as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
