"""Build what prepare.yml unpacks in a container: the signed stand-in CUDA repository and a mock NVML.

    python make_fixture.py repo OUT_DIR           # signed repository (toolkits, cuDNN, NCCL) with files/ (the
                                                  # CUDA 12.8 runfile, the cuDNN 9.10.2 archive): repo.tar,
                                                  # FINGERPRINT, files.json (name -> sha256)
    python make_fixture.py nvml PROFILE OUT.tar   # mock NVML with PROFILE, as a tarball for /
    python make_fixture.py driver NAME VERSION OUT.deb   # an empty installed-driver package

The repository is gpuprov.lab.standin.toolkit's lab set: cuda-toolkit-11-8/12-2/12-8/13-0 and every cuDNN and
NCCL build for them, so apt's candidate is often NOT the build for the installed CUDA (libnccl2's
candidate is +cuda12.0 next to the +cuda11.8 an 11.8 host needs), which the roles must pick.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuprov.lab.mocknvml import install  # noqa: E402
from gpuprov.lab.standin.deb import PackageSpec, build_deb  # noqa: E402
from gpuprov.lab.standin.nvidia_files import cuda_runfile, cudnn_archive  # noqa: E402
from gpuprov.lab.standin.repo import build_repository, key_fingerprint  # noqa: E402
from gpuprov.lab.standin.toolkit import lab_toolkit_packages  # noqa: E402


def build_repo(out: Path) -> None:
    """Signed repository under ``out/repo`` (key generated in ``out/gnupg``) with NVIDIA's files for sites that
    take files under ``files/``, packed as ``out/repo.tar`` (unpacked at /opt), its key's fingerprint in
    ``out/FINGERPRINT`` and the files' sha256 in ``out/files.json`` (``{name: sha256}``)."""
    repo = build_repository(lab_toolkit_packages(), out / "repo", gnupg_home=out / "gnupg")
    files = repo.path / "files"
    files.mkdir()
    made = [cuda_runfile("12.8", files), cudnn_archive("9.10.2", "12", files)]
    (out / "files.json").write_text(json.dumps({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in made}),
                                    encoding="utf-8")
    fingerprint = key_fingerprint(repo.key)
    # NVIDIA publishes its key as <last 8 hex digits of the fingerprint>.pub next to the index.
    (repo.path / f"{fingerprint[-8:].lower()}.pub").write_bytes(repo.key.read_bytes())
    with tarfile.open(out / "repo.tar", "w") as tar:
        tar.add(str(repo.path), arcname="gpuprov-standin")
    (out / "FINGERPRINT").write_text(fingerprint + "\n", encoding="utf-8")


def build_driver_package(name: str, version: str, out: Path) -> None:
    """An empty ``name`` package at ``version`` (``libnvidia-compute-535`` ``535.183.01-0ubuntu1``): what a
    host whose driver is installed but not loaded yet (no reboot) shows the cuda role."""
    spec = PackageSpec(name=name, version=version, architecture="amd64",
                       description="gpuprov molecule fixture: an installed, not loaded NVIDIA driver")
    deb = build_deb(spec, out.parent)
    deb.replace(out)


def build_nvml(profile: str, out: Path) -> None:
    """Mock NVML with ``profile`` as a tarball to unpack at /."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        install(root, profile)
        with tarfile.open(out, "w") as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)


if __name__ == "__main__":
    if sys.argv[1] == "repo":
        build_repo(Path(sys.argv[2]))
    elif sys.argv[1] == "driver":
        build_driver_package(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    else:
        build_nvml(sys.argv[2], Path(sys.argv[3]))
