"""The stand-in runfile: a self-extracting archive in NVIDIA's layout whose nvidia-installer takes NVIDIA's options.

Installing writes under /usr and needs DKMS, so that part runs in the integration test
(tests/integration/test_driver_cases.py); here the archive is extracted and its installer run for the answers that
change nothing on the machine."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuprov.lab.standin.catalogue import dkms_source
from gpuprov.lab.standin.runfile import build_runfile, runfile_name, sha256_of

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

VERSION = "580.95.05"


@pytest.fixture(scope="module")
def runfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_runfile(VERSION, tmp_path_factory.mktemp("runfile"))


def _sh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60)


def test_named_as_nvidia_names_it_with_its_checksum(runfile: Path) -> None:
    assert runfile.name == runfile_name(VERSION) == "NVIDIA-Linux-x86_64-580.95.05.run"
    assert sha256_of(runfile) == hashlib.sha256(runfile.read_bytes()).hexdigest()
    assert runfile.read_bytes().startswith(b"#!/bin/sh\n")


def test_extract_only_gives_nvidias_tree(runfile: Path, tmp_path: Path) -> None:
    proc = _sh(str(runfile), "--extract-only", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    top = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}"
    for kind in ("kernel", "kernel-open"):
        assert {p.name: p.read_text() for p in (top / kind).iterdir()} == dkms_source(VERSION)
    assert (top / "nvidia-installer").stat().st_mode & 0o111
    elf = (top / f"libnvidia-cfg.so.{VERSION}").read_bytes()
    assert elf[:4] == b"\x7fELF"
    assert (top / ".manifest").read_text().splitlines()[0] == VERSION


def test_the_run_passes_its_arguments_to_the_installer(runfile: Path, tmp_path: Path) -> None:
    version = _sh(str(runfile), "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"nvidia-installer:  version {VERSION}"
    bad = _sh(str(runfile), "--silent", "--no-such-option", cwd=tmp_path)
    assert bad.returncode == 1 and "Unrecognized option: '--no-such-option'" in bad.stderr
    # nothing is left behind in the working directory: the archive extracts into a temporary one
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_runfile_fails(runfile: Path, tmp_path: Path) -> None:
    cut = tmp_path / runfile.name
    cut.write_bytes(runfile.read_bytes()[:-200])
    proc = _sh(str(cut), "--version", cwd=tmp_path)
    assert proc.returncode == 1 and "the archive is corrupt" in proc.stderr
