"""The DCGM stand-ins the monitoring role's tests run against (gpuprov/lab/standin/dcgm.py), run for real here:
the host engine serves its version, dcgmi reports both its own and the engine's, and the exporter refuses an
engine of another DCGM with "API version mismatch" while serving every collectors field otherwise."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.lab.standin.dcgm import EXPORTER_VERSIONS, build, dcgm_package, exporter_script


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


def test_exporter_for_another_dcgm_exits_with_api_mismatch(engine: tuple[Path, int], tmp_path: Path) -> None:
    _, port = engine
    exporter = _exporter(tmp_path, "3.3.9-3.6.1")
    proc = subprocess.run([sys.executable, str(exporter), "-r", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          check=False, timeout=30)
    assert proc.returncode == 1
    assert "API version mismatch" in proc.stderr and "3.3.9" in proc.stderr and "3.3.5" in proc.stderr


def _serve(exporter: Path, port: int, csv: Path, path: str | None = None) -> str:
    """The /metrics body of ``exporter`` talking to the host engine on ``port`` (PATH ``path`` when given)."""
    listen = _free_port()
    env = dict(os.environ, **({"PATH": path} if path else {}))
    proc = subprocess.Popen([sys.executable, str(exporter), "-r", f"127.0.0.1:{port}", "-f", str(csv),
                             "-a", f"127.0.0.1:{listen}"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert "Starting webserver" in proc.stdout.readline()
        for _ in range(50):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{listen}/metrics", timeout=2) as resp:
                    return resp.read().decode()
            except OSError:
                time.sleep(0.1)
        return ""
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_exporter_serves_the_gpus_nvidia_smi_reports(engine: tuple[Path, int], tmp_path: Path) -> None:
    """In the lab the exporter reports the host's simulated GPUs as nvidia-smi (over the mock NVML) lists them, so
    an eight-A100 host shows eight A100s, not the default H200 pair."""
    _, port = engine
    exporter = _exporter(tmp_path, "3.3.5-3.4.1")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rows = "".join(f"{i}, GPU-a100-{i}, NVIDIA A100-SXM4-80GB, {30 + i}, 61.5, 0, 0, 81000, 4, 4, 16, 16\n"
                   for i in range(8))
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    (bindir / "nvidia-smi").chmod(0o755)
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t.\n", encoding="utf-8")
    body = _serve(exporter, port, csv, f"{bindir}{os.pathsep}{os.environ['PATH']}")
    temps = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 8 and all('modelName="NVIDIA A100-SXM4-80GB"' in t for t in temps), body
    assert temps[7].endswith(" 37") and 'UUID="GPU-a100-7"' in temps[7], temps


def test_matching_exporter_serves_collector_fields(engine: tuple[Path, int], tmp_path: Path) -> None:
    _, port = engine
    exporter = _exporter(tmp_path, "3.3.5-3.4.1")
    version = subprocess.run([sys.executable, str(exporter), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "DCGM Exporter version 3.3.5-3.4.1"
    csv = tmp_path / "counters.csv"
    csv.write_text("# c\nDCGM_FI_DEV_GPU_TEMP, gauge, t.\nDCGM_FI_DEV_XID_ERRORS, gauge, x.\n", encoding="utf-8")
    # no nvidia-smi on PATH: the default idle H200 pair
    body = _serve(exporter, port, csv, str(Path(sys.executable).parent))
    series = [line.split("{")[0] for line in body.splitlines() if line.startswith("DCGM_FI_")]
    assert sorted(series) == ["DCGM_FI_DEV_GPU_TEMP"] * 2 + ["DCGM_FI_DEV_XID_ERRORS"] * 2


def test_build_writes_repository_and_manifest(tmp_path: Path) -> None:
    manifest = build(tmp_path)
    assert manifest == json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert sorted(manifest["exporters"]) == sorted(EXPORTER_VERSIONS)
    packages = (tmp_path / "repo" / "Packages").read_text(encoding="utf-8")
    assert packages.count("Package: datacenter-gpu-manager") == 2
    assert "Version: 1:3.3.5" in packages and "Version: 1:3.3.9" in packages
    assert (tmp_path / "repo.tar").is_file()
