"""The DCGM stand-ins the monitoring role's tests run against (gpuprov/standin/dcgm.py), run for real here:
the host engine serves its version, dcgmi reports both its own and the engine's, and the exporter refuses an
engine of another DCGM with "API version mismatch" (case B22) while serving every collectors field otherwise."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.standin.dcgm import EXPORTER_VERSIONS, build, dcgm_package, exporter_script


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The 3.3.5 stand-in package's nv-hostengine, running on a free port; yields its dcgmi and the port."""
    spec = dcgm_package("3.3.5")
    for path, file in spec.files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.content, encoding="utf-8")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "usr/bin/nv-hostengine"), "-n", "-p", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "Started host engine version 3.3.5" in proc.stdout.readline()
        yield tmp_path / "usr/bin/dcgmi", port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_package_layout() -> None:
    spec = dcgm_package("3.3.9")
    assert (spec.name, spec.version) == ("datacenter-gpu-manager", "1:3.3.9")
    assert set(spec.files) == {"/usr/bin/nv-hostengine", "/usr/bin/dcgmi", "/lib/systemd/system/nvidia-dcgm.service"}
    assert "ExecStart=/usr/bin/nv-hostengine -n" in spec.files["/lib/systemd/system/nvidia-dcgm.service"].content


def test_dcgmi_reports_engine_version(engine: tuple[Path, int]) -> None:
    dcgmi, port = engine
    out = subprocess.run([sys.executable, str(dcgmi), "-v", "--host", f"127.0.0.1:{port}"], capture_output=True,
                         text=True, check=True).stdout
    own, _, remote = out.partition("Hostengine build info:")
    assert "Version : 3.3.5" in own and "Version : 3.3.5" in remote


def _exporter(tmp_path: Path, version: str) -> Path:
    path = tmp_path / f"dcgm-exporter-{version}"
    path.write_text(exporter_script(version), encoding="utf-8")
    return path


def test_b22_exporter_for_another_dcgm_exits_with_api_mismatch(engine: tuple[Path, int], tmp_path: Path) -> None:
    _, port = engine
    exporter = _exporter(tmp_path, "3.3.9-3.6.1")
    proc = subprocess.run([sys.executable, str(exporter), "-r", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          check=False, timeout=30)
    assert proc.returncode == 1
    assert "API version mismatch" in proc.stderr and "3.3.9" in proc.stderr and "3.3.5" in proc.stderr


def test_matching_exporter_serves_collector_fields(engine: tuple[Path, int], tmp_path: Path) -> None:
    _, port = engine
    exporter = _exporter(tmp_path, "3.3.5-3.4.1")
    version = subprocess.run([sys.executable, str(exporter), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "DCGM Exporter version 3.3.5-3.4.1"
    csv = tmp_path / "counters.csv"
    csv.write_text("# c\nDCGM_FI_DEV_GPU_TEMP, gauge, t.\nDCGM_FI_DEV_XID_ERRORS, gauge, x.\n", encoding="utf-8")
    listen = _free_port()
    proc = subprocess.Popen([sys.executable, str(exporter), "-r", f"127.0.0.1:{port}", "-f", str(csv),
                             "-a", f"127.0.0.1:{listen}"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "Starting webserver" in proc.stdout.readline()
        body = ""
        for _ in range(50):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{listen}/metrics", timeout=2) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        series = [line.split("{")[0] for line in body.splitlines() if line.startswith("DCGM_FI_")]
        assert sorted(series) == ["DCGM_FI_DEV_GPU_TEMP"] * 2 + ["DCGM_FI_DEV_XID_ERRORS"] * 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_build_writes_repository_and_manifest(tmp_path: Path) -> None:
    manifest = build(tmp_path)
    assert manifest == json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert sorted(manifest["exporters"]) == sorted(EXPORTER_VERSIONS)
    packages = (tmp_path / "repo" / "Packages").read_text(encoding="utf-8")
    assert packages.count("Package: datacenter-gpu-manager") == 2
    assert "Version: 1:3.3.5" in packages and "Version: 1:3.3.9" in packages
    assert (tmp_path / "repo.tar").is_file()
