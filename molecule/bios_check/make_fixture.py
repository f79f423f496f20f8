"""Build the tarball prepare.yml unpacks at / in a container: mock NVML ``PROFILE`` + fixture tree.

    python make_fixture.py PROFILE OUT.tar

The fixture is the healthy 2x H200 VM of tests/bios_check_fixtures.py under /opt/gpuprov-bios.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuprov.lab.mocknvml import install  # noqa: E402
from tests.bios_check_fixtures import build_tree, healthy_h200  # noqa: E402


def main(profile: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        install(root, profile)
        build_tree(root / "opt" / "gpuprov-bios", healthy_h200())
        with tarfile.open(out, "w") as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
