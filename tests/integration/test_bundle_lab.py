"""Issue 7 item 5 acceptance: a bundle built from the stand-in repository installs the stack on a lab host
with no other repository reachable.

On the controller: a signed stand-in CUDA repository (two 570 releases, so the pinned one is told apart from
the newest; cuda-toolkit-12-8 with its real nvcc/cudart stand-ins; NCCL 2.26.2 for CUDA 12.2 and 12.8) is
served on 127.0.0.1 and ``gpuprov bundle`` turns a debian12 fleet into DIR/debian12/, re-signed with the
bundle key. On the lab host (a debian12 systemd container): the distribution packages an air-gapped site
takes from its own Debian mirror (dkms, gcc, make, libc6-dev, the kernel headers, python3-debian, gnupg) are
installed while it still has a network; then every apt source is removed and the container is disconnected
from every Docker network. Only the copied bundle remains, served on the host's loopback, and the
nvidia_driver, cuda and nccl roles run through gpuprov.runner with nothing but the fleet's ``mirrors:``
values (URL and fingerprint; the key URL is the default the roles derive). The installed versions must be
the manifest's.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuprov.cli.__main__ import main
from gpuprov.lab.mirrors import read_mirrors
from gpuprov.lab.standin.catalogue import DEBIAN_REVISION, driver_packages
from gpuprov.lab.standin.repo import build_repository
from gpuprov.lab.standin.toolkit import cuda_toolkit, nccl_packages
from tests.integration.kernel_lab import dkms_container, exec_ok, run
from tests.unit.test_bundle import serve, write_fleet

pytestmark = [pytest.mark.lab, pytest.mark.slow]

BUNDLE_IN_CONTAINER = "/srv/gpuprov-bundle"
PORT = 8473


def _isolate(container: Any) -> None:
    """Drop every apt source and every network of ``container`` (its loopback stays)."""
    exec_ok(container, "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                       "python3-debian gnupg >/dev/null")
    exec_ok(container, "mkdir -p /root/apt-sources-off && find /etc/apt/sources.list /etc/apt/sources.list.d "
                       "-maxdepth 1 -type f -exec mv -t /root/apt-sources-off {} + ; rm -rf /var/lib/apt/lists/*")
    container.reload()
    for name in list(container.attrs["NetworkSettings"]["Networks"]):
        container.client.networks.get(name).disconnect(container)
    container.reload()
    assert container.attrs["NetworkSettings"]["Networks"] == {}


def _copy_bundle(container: Any, out: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(out / "debian12"), arcname="debian12")
    exec_ok(container, f"mkdir -p {BUNDLE_IN_CONTAINER}")
    container.put_archive(BUNDLE_IN_CONTAINER, buffer.getvalue())
    url = f"http://127.0.0.1:{PORT}/debian12/"
    exec_ok(container, (
        f"cd {BUNDLE_IN_CONTAINER} && (setsid nohup python3 -m http.server --bind 127.0.0.1 {PORT} "
        ">/dev/null 2>&1 &); for i in $(seq 50); do python3 -c \"import urllib.request as u; "
        f"u.urlopen('{url}InRelease')\" 2>/dev/null && break; sleep 0.2; done"
    ))


def _installed(container: Any) -> dict[str, str]:
    text = exec_ok(container, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'")
    # "ii" installed, "hi" installed and held (the roles hold what they install)
    return {f[0]: f[1] for f in (line.split() for line in text.splitlines()) if len(f) >= 3 and f[2][1:] == "i"}


def test_bundle_installs_driver_cuda_nccl_without_other_repositories(
        tmp_path: Path, lab_images: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "source"
    build_repository([*driver_packages("570", "570.133.20", DEBIAN_REVISION, flavours=("",)),
                      *driver_packages("570", "570.172.08", DEBIAN_REVISION, flavours=("",)),
                      *cuda_toolkit("12.8"), *nccl_packages("2.26.2", "12.2"),
                      *nccl_packages("2.26.2", "12.8")], source)
    out = tmp_path / "bundle"
    for url in serve(source):
        fleet = write_fleet(tmp_path, url, gpus={"model": "H200", "count": 2}, cudnn={"version": None},
                            monitoring={"enabled": False})
        assert main(["bundle", str(fleet), "-o", str(out), "--base-url", f"http://127.0.0.1:{PORT}/"]) == 0
    stdout = capsys.readouterr().out
    fingerprint = stdout.split("cuda_repo_key_fingerprint: ")[1].split()[0]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    bundled = {p["name"]: p["version"] for p in manifest["oses"]["debian12"]["packages"]}
    assert bundled["nvidia-driver-570"] == "570.133.20-1"
    assert bundled["libnccl2"] == "2.26.2-1+cuda12.8"

    with dkms_container(lab_images["debian12"], "bundle") as (container, kernel):
        _isolate(container)
        _copy_bundle(container, out)
        # nothing but the bundle: fetching from this machine's Debian mirror fails, apt knows no source
        debian = read_mirrors().debian
        assert container.exec_run(["python3", "-c", "import sys, urllib.request as u; "
                                   "u.urlopen(sys.argv[1], timeout=5)", f"{debian}/"])[0] != 0
        mirrors = {"gpuprov_mirrors_cuda_repo_url": f"http://127.0.0.1:{PORT}/debian12/",
                   "gpuprov_mirrors_cuda_repo_key_fingerprint": fingerprint}
        fleet_vars = {"gpuprov_driver_branch": "570", "gpuprov_driver_version": "570.133.20",
                      "gpuprov_driver_flavour": "proprietary", "gpuprov_cuda_version": "12.8",
                      "gpuprov_nccl_version": "2.26.2", "nvidia_driver_running_kernel": kernel, **mirrors}
        for playbook, prefixes in (("nvidia_driver.yml", ("nvidia-", "libnvidia-")), ("cuda.yml", ("cuda-",)),
                                   ("nccl.yml", ("libnccl",))):
            result = run(container, playbook, tmp_path / "state", fleet_vars)
            installed = _installed(container)
            assert result.failed_hosts == [], f"{playbook}: " + " ".join(
                str(f.get("msg")) for h in result.hosts.values() for f in h.failures) + f"; installed: {installed}"
            for name, version in bundled.items():
                if name.startswith(prefixes):
                    assert installed.get(name) == version, f"{name}: installed {installed.get(name)}, bundled {version}"
        sources = exec_ok(container, "grep -rh '^URIs:\\|^deb ' /etc/apt/sources.list.d/ || true")
        assert set(sources.split()) <= {"URIs:", f"http://127.0.0.1:{PORT}/debian12/"}, sources
        assert "nvidia/570.133.20" in exec_ok(container, "dkms status")
