"""The lab's stand-in NVIDIA (CUDA) repository, served inside each lab host on its loopback.

NVIDIA's repositories are out of reach from the lab, so ``gpuprov lab up`` does what an air-gapped
site does: it publishes a signed mirror and points the fleet file's ``mirrors.cuda_repo_url`` and
``mirrors.cuda_repo_key_fingerprint`` at it, and the nvidia_driver role configures it like any mirror.

* :func:`build` makes, in the lab state dir, one flat repository per lab OS with
  :mod:`gpuprov.lab.standin` (NVIDIA's driver packages of every lab branch - nvidia-driver-<b>[-open|-server],
  nvidia-dkms-<b> with the tiny real DKMS module, libnvidia-compute, nvidia-utils, nvidia-compute-utils
  with nvidia-persistenced, nvidia-fabricmanager, cuda-drivers - and, where NVIDIA publishes R590+, an R595
  release under NVIDIA's unbranched names (nvidia-open, nvidia-dkms-open, libnvidia-compute ...) with its pinning
  package nvidia-driver-pinning-595 (:mod:`gpuprov.lab.standin.unbranched`), the ``cuda`` chain, the CUDA toolkits
  NVIDIA publishes for that OS with their cuDNN and NCCL builds, and ``datacenter-gpu-manager``, which
  NVIDIA's CUDA repository carries too), plus for each Ubuntu stand-in an "archive" repository,
  ``<os>-archive``, with what Ubuntu's own archive would carry (:mod:`gpuprov.lab.standin.ubuntu_archive`: the
  GA and HWE kernel metas, from 22.04 on the ``-server`` driver sets). Beside them: ``libnvidia-container``
  (the NVIDIA Container Toolkit repository, one for every OS as NVIDIA's is) and ``dcgm-exporter`` (the
  exporter binaries a site hosts itself, :data:`EXPORTER_VERSION` named by the fleet file with its sha256).
  All are signed with one key per lab, generated once in ``<lab>/standin/gnupg`` (mode 0700, never
  committed); its public key is published next to the packages as ``<fpr[-8:]>.pub``, the file name
  NVIDIA uses (``3bf863cc.pub``).
* :func:`install` copies the repositories to ``/srv/gpuprov-standin/`` in a container, starts
  ``gpuprov-standin-repo.service`` (``python3 -m http.server --bind 127.0.0.1 PORT``) and, on an
  Ubuntu stand-in, adds the archive repository as a base-OS apt source (the role does not manage the
  distribution archive), plus ``/etc/ansible/facts.d/gpuprov.fact`` naming the container's booted
  kernel (``uname -r`` in a container is the build machine's).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError, HostsFailed
from gpuprov.lab.imagespecs import spec_for
from gpuprov.lab.standin import dcgm
from gpuprov.lab.standin.catalogue import lab_cuda_packages
from gpuprov.lab.standin.container import packages as container_toolkit_packages
from gpuprov.lab.standin.deb import StandinPackage
from gpuprov.lab.standin.repo import KEY_NAME, build_repository, key_fingerprint
from gpuprov.lab.standin.toolkit import lab_toolkit_packages_for
from gpuprov.lab.standin.ubuntu_archive import archive_for, archive_packages
from gpuprov.lab.standin.unbranched import lab_unbranched_packages

log = logging.getLogger(__name__)

#: Loopback port the repository is served on inside every lab host.
PORT = 8471
ROOT_IN_HOST = "/srv/gpuprov-standin"
UNIT = "gpuprov-standin-repo.service"
#: Bump when the repositories' content changes, so ``lab up`` rebuilds them.
CONTENT_VERSION = "9"
#: Directory (under the served root) of the NVIDIA Container Toolkit repository stand-in.
CONTAINER_TOOLKIT_DIR = "libnvidia-container"
#: Directory of the dcgm-exporter binaries, and the one the lab fleet runs (paired with DCGM 3.3.5).
EXPORTER_DIR = "dcgm-exporter"
EXPORTER_VERSION = dcgm.EXPORTER_VERSIONS[0]

UNIT_TEXT = f"""\
# gpuprov lab: serves the stand-in NVIDIA repository on this host's loopback only.
[Unit]
Description=gpuprov lab stand-in apt repository (127.0.0.1:{PORT})
After=network.target

[Service]
ExecStart=/usr/bin/python3 -m http.server --bind 127.0.0.1 {PORT} --directory {ROOT_IN_HOST}
DynamicUser=yes
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

#: Where an Ubuntu stand-in's archive repository is named as an apt source, and the key it is signed with.
ARCHIVE_SOURCE_FILE = "/etc/apt/sources.list.d/gpuprov-lab-archive.sources"
ARCHIVE_KEYRING = "/usr/share/keyrings/gpuprov-lab-archive.gpg"


def archive_source(os_name: str) -> str:
    """The deb822 apt source naming the stand-in Ubuntu archive of ``os_name`` on the host's loopback.

    Raises:
        ConfigError: ``os_name`` is not an Ubuntu stand-in (or not a lab OS).
    """
    spec, archive = spec_for(os_name), archive_for(os_name)
    if spec.standin is None or archive is None:
        raise ConfigError(f"lab OS {os_name} is not an Ubuntu stand-in: it has no stand-in Ubuntu archive")
    return (f"# gpuprov lab: stand-in for the Ubuntu {spec.standin.release} archive (this host is "
            f"{spec.standin.userland} underneath).\n"
            f"Types: deb\nURIs: http://127.0.0.1:{PORT}/{archive.directory}/\nSuites: /\n"
            f"Signed-By: {ARCHIVE_KEYRING}\n")


@dataclass(frozen=True)
class LabRepository:
    """The repositories built for one lab OS: local directory names and the signing key."""

    os: str
    root: Path
    dirs: tuple[str, ...]
    fingerprint: str

    @property
    def url(self) -> str:
        """The CUDA repository URL as a lab host sees it."""
        return url_for(self.os)


def _debian_kernel(container: Any) -> str:
    code, out = container.exec_run(["/bin/sh", "-c", "ls /boot | sed -n 's/^vmlinuz-//p' | sort -V | head -n1"])
    kernel = str(out.decode(errors="replace")).strip()
    if code != 0 or not kernel:
        raise HostsFailed(f"{container.name}: no kernel under /boot", [container.attrs["Config"]["Hostname"]])
    return kernel


def _repositories(os_name: str, debian_kernel: str) -> dict[str, list[StandinPackage]]:
    """The apt repositories a lab host of ``os_name`` is served: directory name -> packages."""
    wanted: dict[str, list[StandinPackage]] = {
        os_name: [*lab_cuda_packages(os_name), *lab_unbranched_packages(os_name), *lab_toolkit_packages_for(os_name),
                  *(dcgm.dcgm_package(v) for v in dcgm.DCGM_VERSIONS)],
        CONTAINER_TOOLKIT_DIR: [*container_toolkit_packages()],
    }
    archive = archive_for(os_name)
    if archive is not None:
        wanted[archive.directory] = list(archive_packages(os_name, debian_kernel))
    return wanted


def _write_exporters(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for version in dcgm.EXPORTER_VERSIONS:
        target = directory / f"dcgm-exporter-{version}"
        data = dcgm.exporter_script(version).encode()
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)


def build(lab_dir: Path, os_name: str, debian_kernel: str) -> LabRepository:
    """Build (or reuse) the signed stand-in repositories for ``os_name`` under ``<lab_dir>/standin``.

    Raises EnvironmentMissing (dpkg-deb, dpkg-scanpackages, gpg or gcc missing) or ConfigError.
    """
    root = lab_dir / "standin" / "srv"
    home = lab_dir / "standin" / "gnupg"
    wanted = _repositories(os_name, debian_kernel)
    for name, packages in wanted.items():
        repo_dir = root / name
        stamp = repo_dir / ".gpuprov-stamp"
        # only the archive's headers point at the host's Debian kernel; the others are the same for every host
        kernel = {"kernel": debian_kernel} if name.endswith("-archive") else {}
        stamp_text = json.dumps({"v": CONTENT_VERSION, **kernel})
        if stamp.is_file() and stamp.read_text(encoding="utf-8") == stamp_text and (repo_dir / KEY_NAME).is_file():
            continue
        for old in repo_dir.glob("*"):
            old.unlink()
        repo = build_repository(packages, repo_dir, gnupg_home=home)
        fpr = key_fingerprint(repo.key)
        # NVIDIA publishes the CUDA repository's key as <last 8 hex digits of the fingerprint>.pub next to the
        # index, and the container toolkit's as gpgkey at the top of its repository
        key_file = "gpgkey" if name == CONTAINER_TOOLKIT_DIR else f"{fpr[-8:].lower()}.pub"
        (repo_dir / key_file).write_bytes(repo.key.read_bytes())
        stamp.write_text(stamp_text, encoding="utf-8")
        log.info("stand-in repository %s built (key %s)", repo_dir, fpr)
    _write_exporters(root / EXPORTER_DIR)
    return LabRepository(os_name, root, (*wanted, EXPORTER_DIR), key_fingerprint(root / os_name / KEY_NAME))


def exporter_url() -> str:
    """URL of the dcgm-exporter binary of :data:`EXPORTER_VERSION` as a lab host sees it."""
    return f"http://127.0.0.1:{PORT}/{EXPORTER_DIR}/dcgm-exporter-{EXPORTER_VERSION}"


def exporter_sha256() -> str:
    """sha256 (hex) of that binary."""
    return hashlib.sha256(dcgm.exporter_script(EXPORTER_VERSION).encode()).hexdigest()


def container_toolkit_url() -> str:
    """URL of the NVIDIA Container Toolkit repository stand-in as a lab host sees it."""
    return f"http://127.0.0.1:{PORT}/{CONTAINER_TOOLKIT_DIR}/"


def url_for(os_name: str) -> str:
    """The stand-in CUDA repository URL a lab host of ``os_name`` uses (on its own loopback)."""
    return f"http://127.0.0.1:{PORT}/{os_name}/"


def lab_fingerprint(lab_dir: Path) -> str | None:
    """The fingerprint of the lab's repository signing key, or None before the first build."""
    keys = sorted((lab_dir / "standin" / "srv").glob(f"*/{KEY_NAME}"))
    return str(key_fingerprint(keys[0])) if keys else None


def _tar(repo: LabRepository) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in repo.dirs:
            for path in sorted((repo.root / name).iterdir()):
                info = archive.gettarinfo(str(path), arcname=f"{Path(ROOT_IN_HOST).name}/{name}/{path.name}")
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = 0o644
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
    return buffer.getvalue()


def _tar_files(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for arcname, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(arcname.lstrip("/"))
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _archive_dir(repo: LabRepository) -> str | None:
    archive = archive_for(repo.os)
    return archive.directory if archive is not None and archive.directory in repo.dirs else None


def _extra_files(repo: LabRepository) -> dict[str, str]:
    files = {f"/etc/systemd/system/{UNIT}": UNIT_TEXT}
    if _archive_dir(repo):
        files[ARCHIVE_SOURCE_FILE] = archive_source(repo.os)
    return files


def install(container: Any, lab_dir: Path, os_name: str) -> LabRepository:
    """Build the repositories for ``os_name``, copy them into ``container`` and serve them on its loopback.

    Also writes the booted-kernel local fact. Raises HostsFailed when a step in the container fails.
    """
    hostname = container.attrs["Config"]["Hostname"]
    kernel = _debian_kernel(container)
    repo = build(lab_dir, os_name, kernel)
    code, out = container.exec_run(["/bin/sh", "-c", f"rm -rf {ROOT_IN_HOST} && mkdir -p /srv"], user="root")
    if code != 0 or not container.put_archive("/srv", _tar(repo)) or not container.put_archive(
        "/", _tar_files(_extra_files(repo))
    ):
        raise HostsFailed(f"could not copy the stand-in repository into {container.name}: {out!r}", [hostname])
    fact = json.dumps({"booted_kernel": kernel})
    archive_dir = _archive_dir(repo)
    script = (
        "set -e; mkdir -p /etc/ansible/facts.d /usr/share/keyrings; "
        f"printf '%s\\n' '{fact}' > /etc/ansible/facts.d/gpuprov.fact; "
        + (f"cp {ROOT_IN_HOST}/{archive_dir}/{KEY_NAME} {ARCHIVE_KEYRING}; " if archive_dir else "")
        + f"systemctl daemon-reload; systemctl enable {UNIT} >/dev/null 2>&1; systemctl restart {UNIT}; "
        f"for i in $(seq 50); do python3 -c \"import urllib.request as u; u.urlopen('{repo.url}Release')\" "
        "2>/dev/null && exit 0; sleep 0.2; done; exit 1"
    )
    code, out = container.exec_run(["/bin/sh", "-c", script], user="root")
    if code != 0:
        raise HostsFailed(
            f"{container.name}: the stand-in repository is not served: {out.decode(errors='replace')}", [hostname]
        )
    log.info("%s: stand-in repository at %s (kernel %s)", container.name, repo.url, kernel)
    return repo
