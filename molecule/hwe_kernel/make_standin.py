"""Build the tarball prepare.yml unpacks at / in a container of OS_NAME booting DEBIAN_KERNEL (package VERSION).

    python make_standin.py OS_NAME DEBIAN_KERNEL VERSION OUT.tar

Every host gets the local fact the lab writes, ``/etc/ansible/facts.d/gpuprov.fact`` with
``booted_kernel`` (a container runs the build machine's kernel; the role treats this one as running), and
a stand-in Debian archive, ``debian-archive``, with what the role installs from Debian's: the headers of
DEBIAN_KERNEL (a placeholder tree) and the ``linux-headers-amd64`` meta at VERSION. prepare.yml makes it
the only base-OS source, so the scenario runs offline and fast (the real Debian headers, and DKMS
building against them, are the kernel tests' ground: tests/integration/test_kernel_headers.py).
The Ubuntu 20.04 stand-in also gets what ``gpuprov lab up`` gives it (gpuprov/lab/repo.py): the stand-in
Ubuntu archive with ``linux-generic-hwe-20.04`` (gpuprov.lab.standin.ubuntu_archive.archive_packages:
the HWE 5.15.0-105-generic image and headers, the headers linked to those of DEBIAN_KERNEL). Both are
signed with one key generated in OUT.gnupg (one home per host: concurrent builds in one gpg home fail;
never committed), live under /srv/gpuprov-standin, are served on the loopback by the lab's unit and are
named as apt sources.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuprov.lab.repo import ARCHIVE_SOURCE_FILE, ROOT_IN_HOST, UNIT, UNIT_TEXT, archive_source  # noqa: E402
from gpuprov.lab.standin import build_repository  # noqa: E402
from gpuprov.lab.standin.catalogue import kernel_headers, meta  # noqa: E402
from gpuprov.lab.standin.repo import KEY_NAME  # noqa: E402
from gpuprov.lab.standin.ubuntu_archive import archive_packages  # noqa: E402

ARCHIVE = "ubuntu2004-archive"
DEBIAN_ARCHIVE = "debian-archive"
DEBIAN_SOURCE = (
    "# gpuprov molecule hwe_kernel: stand-in for the Debian archive's kernel headers (the scenario runs offline).\n"
    + archive_source("ubuntu2004").split("\n", 1)[1].replace(ARCHIVE, DEBIAN_ARCHIVE)
)


def _add_text(tar: tarfile.TarFile, path: str, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main(os_name: str, kernel: str, version: str, out: str) -> None:
    """Write OUT: the local fact and the served stand-in archives (see the module docstring)."""
    repos = {DEBIAN_ARCHIVE: [kernel_headers(kernel, version),
                              meta("linux-headers-amd64", version, (f"linux-headers-{kernel}",))]}
    sources = {"/etc/apt/sources.list.d/gpuprov-molecule-debian.sources": DEBIAN_SOURCE}
    if os_name == "ubuntu2004":
        repos[ARCHIVE] = archive_packages("ubuntu2004", kernel)
        sources[ARCHIVE_SOURCE_FILE] = archive_source("ubuntu2004")
    with tarfile.open(out, "w") as tar, tempfile.TemporaryDirectory() as tmp:
        _add_text(tar, "/etc/ansible/facts.d/gpuprov.fact", json.dumps({"booted_kernel": kernel}) + "\n")
        for name, specs in repos.items():
            repo = build_repository(specs, Path(tmp) / name, gnupg_home=Path(out).with_suffix(".gnupg"))
            for path in sorted(repo.path.iterdir()):
                _add_text(tar, f"{ROOT_IN_HOST}/{name}/{path.name}", path.read_bytes())
        _add_text(tar, "/usr/share/keyrings/gpuprov-lab-archive.gpg", (repo.path / KEY_NAME).read_bytes())
        _add_text(tar, f"/etc/systemd/system/{UNIT}", UNIT_TEXT)
        for path, text in sources.items():
            _add_text(tar, path, text)


if __name__ == "__main__":
    main(*sys.argv[1:5])
