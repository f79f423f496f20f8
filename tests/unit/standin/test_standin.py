"""The stand-in package builder: control text, staged trees, real .deb files and a signed repository."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gpuprov.aptsign import release_text
from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin import FileSpec, PackageSpec, build_deb, build_repository
from gpuprov.lab.standin.catalogue import (
    DKMS_CONF,
    FABRICMANAGER,
    LAB_BRANCHES,
    cuda_metas,
    driver_packages,
    lab_cuda_packages,
    nvidia_dkms,
    preset,
    ubuntu_kernel,
)
from gpuprov.lab.standin.deb import stage

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")
needs_repo_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("dpkg-deb", "dpkg-scanpackages", "gpg")),
    reason="dpkg-dev and gnupg are needed (bash .ci/setup installs them)",
)


def test_control_text() -> None:
    spec = PackageSpec(name="linux-generic-hwe-20.04", version="5.15.0.105.112~20.04.1", architecture="amd64",
                       depends=("a", "b (>= 1)"), description="summary\nline one\n\nline three")
    control = spec.control()
    assert "Package: linux-generic-hwe-20.04\n" in control
    assert "Depends: a, b (>= 1)\n" in control
    assert control.endswith("Description: summary\n line one\n .\n line three\n")


@pytest.mark.parametrize(
    "spec",
    [
        PackageSpec(name="Bad_Name", version="1"),
        PackageSpec(name="ok", version="v1"),
        PackageSpec(name="ok", version="1", files={"relative/path": FileSpec()}),
        PackageSpec(name="ok", version="1", files={"/a/../etc/passwd": FileSpec()}),
        PackageSpec(name="ok", version="1", scripts={"config": "true"}),
    ],
)
def test_invalid_specs_are_refused(tmp_path: Path, spec: PackageSpec) -> None:
    with pytest.raises(ConfigError):
        stage(spec, tmp_path / "root")


def test_stage_writes_files_links_and_scripts(tmp_path: Path) -> None:
    spec = PackageSpec(name="xy", version="1", files={"/usr/bin/tool": FileSpec("#!/bin/sh\n", 0o755),
                                                     "/lib/modules/k/build": FileSpec(link="/usr/src/h")},
                       scripts={"postinst": "echo hi\n"})
    stage(spec, tmp_path / "root")
    assert (tmp_path / "root/usr/bin/tool").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "root/lib/modules/k/build").readlink() == Path("/usr/src/h")
    postinst = (tmp_path / "root/DEBIAN/postinst").read_text()
    assert postinst.startswith("#!/bin/sh\nset -e\n")


def test_nvidia_dkms_carries_a_real_module_source() -> None:
    spec = nvidia_dkms("535", "535.183.01")
    assert spec.name == "nvidia-dkms-535"
    assert spec.version == "535.183.01-0ubuntu1"
    assert spec.depends == ("dkms",)
    assert spec.provides == spec.conflicts == ("nvidia-dkms-kernel",)
    conf = spec.files["/usr/src/nvidia-535.183.01/dkms.conf"].content
    assert conf == DKMS_CONF.format(version="535.183.01")
    for line in ("PACKAGE_NAME=nvidia", "BUILT_MODULE_NAME[0]=nvidia", "AUTOINSTALL=yes"):
        assert line in conf.splitlines()
    assert "module_init" in spec.files["/usr/src/nvidia-535.183.01/nvidia.c"].content
    assert "dkms install -m nvidia -v 535.183.01" in spec.scripts["postinst"]
    assert spec.scripts["postinst"].rstrip().endswith("exit 0")


def test_ubuntu_kernel_metas_follow_ubuntu_names() -> None:
    names = {s.name: s for s in ubuntu_kernel("5.15.0-105", "generic", "generic-hwe-20.04", "5.15.0.105.112~20.04.1",
                                              "/usr/src/linux-headers-6.1.0-50-amd64")}
    assert names["linux-generic-hwe-20.04"].depends == ("linux-image-generic-hwe-20.04",
                                                       "linux-headers-generic-hwe-20.04")
    assert names["linux-headers-generic-hwe-20.04"].depends == ("linux-headers-5.15.0-105-generic",)
    headers = names["linux-headers-5.15.0-105-generic"].files
    assert headers["/usr/src/linux-headers-5.15.0-105-generic"].link == "/usr/src/linux-headers-6.1.0-50-amd64"
    assert headers["/lib/modules/5.15.0-105-generic/build"].link == "/usr/src/linux-headers-5.15.0-105-generic"
    with pytest.raises(KeyError):
        preset("nope")


def test_release_lists_hashes(tmp_path: Path) -> None:
    (tmp_path / "Packages").write_text("Package: x\n")
    text = release_text(tmp_path, ["Packages"], origin="gpuprov-standin")
    assert "SHA256:\n" in text
    assert " 11 Packages" in text


@needs_dpkg
def test_build_deb_is_a_real_package(tmp_path: Path) -> None:
    deb = build_deb(nvidia_dkms("535", "535.183.01"), tmp_path)
    assert deb.name == "nvidia-dkms-535_535.183.01-0ubuntu1_all.deb"
    info = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Depends", "Conflicts"], capture_output=True,
                          text=True, check=True).stdout
    assert info == "Package: nvidia-dkms-535\nDepends: dkms\nConflicts: nvidia-dkms-kernel\n"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "root/root" in listing
    assert "./usr/src/nvidia-535.183.01/dkms.conf" in listing


@needs_repo_tools
def test_repository_is_indexed_and_signed(tmp_path: Path) -> None:
    repo = build_repository(preset("ubuntu-hwe") + preset("nvidia-dkms"), tmp_path / "repo")
    packages = (repo.path / "Packages").read_text()
    assert "Package: linux-generic-hwe-20.04" in packages
    assert "Package: nvidia-dkms-535" in packages
    for name in ("InRelease", "Release.gpg", "key.gpg", "Packages.gz"):
        assert (repo.path / name).is_file()
    # no secret key material is left beside the repository
    assert not list(repo.path.glob(".gnupg*"))
    assert repo.source_line() == f"deb [signed-by={repo.key}] file:{repo.path} ./"
    verify = subprocess.run(
        ["gpgv", "--keyring", str(repo.key), str(repo.path / "Release.gpg"), str(repo.path / "Release")],
        capture_output=True, text=True, check=False,
    )
    assert verify.returncode == 0, verify.stderr


def test_driver_set_follows_nvidia_dependency_shape() -> None:
    specs = {s.name: s for s in driver_packages("535", "535.183.01", "-1")}
    pv = "535.183.01-1"
    assert specs["nvidia-driver-535"].depends == (
        f"nvidia-dkms-535 (= {pv})", f"libnvidia-compute-535 (= {pv})", f"nvidia-utils-535 (= {pv})",
        f"nvidia-compute-utils-535 (= {pv})")
    assert specs["nvidia-driver-535-open"].depends[0] == f"nvidia-dkms-535-open (= {pv})"
    assert specs["nvidia-driver-535-open"].depends[1] == f"libnvidia-compute-535 (= {pv})"
    assert specs["nvidia-driver-535-server"].depends[1] == f"libnvidia-compute-535-server (= {pv})"
    # two branches or flavours never coexist: every member conflicts with the virtual name it provides
    for name in ("nvidia-driver-535", "nvidia-driver-535-open", "libnvidia-compute-535", "nvidia-utils-535-server",
                 "nvidia-fabricmanager-535", "nvidia-dkms-535-server"):
        assert specs[name].provides and specs[name].provides == specs[name].conflicts, name
    # Fabric Manager does not depend on the driver (nothing but the operator keeps them equal), as NVIDIA's
    assert specs["nvidia-fabricmanager-535"].depends == ()
    assert "nvidia-persistenced.service" in "".join(specs["nvidia-compute-utils-535"].files)
    assert specs["cuda-drivers-535"].depends == ("nvidia-driver-535 (>= 535.183.01)",)
    assert {s.version for s in specs.values()} == {pv}


def test_cuda_meta_chain_reaches_the_newest_driver() -> None:
    specs = {s.name: s for s in cuda_metas("12.8", "12.8.1-1", "580", "580.65.06")}
    assert specs["cuda"].depends == ("cuda-runtime-12-8 (>= 12.8.1-1)",)
    assert specs["cuda-runtime-12-8"].depends == ("cuda-drivers (>= 580.65.06)",)
    assert specs["cuda-drivers"].depends == ("cuda-drivers-580 (= 580.65.06-0ubuntu1)",)


def test_lab_repository_keeps_the_lab_nvidia_smi_and_mock_nvml() -> None:
    specs = lab_cuda_packages("debian12")
    names = {s.name for s in specs}
    for branch in LAB_BRANCHES:
        assert {f"nvidia-driver-{branch}-open", f"nvidia-fabricmanager-{branch}", f"cuda-drivers-{branch}"} <= names
    assert {"cuda", "cuda-drivers"} <= names
    assert all(s.version.endswith("-1") for s in specs if s.name.startswith("nvidia-driver-"))
    shipped = {path for s in specs for path in s.files}
    # lab hosts carry Debian's real nvidia-smi and the mock libnvidia-ml (gpuprov/lab/hardware.py)
    assert not [p for p in shipped if p.endswith("/nvidia-smi") or "libnvidia-ml" in p]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_fabric_manager_refuses_another_driver_version(tmp_path: Path) -> None:
    script = tmp_path / "nv-fabricmanager"
    driver = tmp_path / "driver-version"
    script.write_text(FABRICMANAGER.format(version="535.183.01", driver_file=driver, run_dir=tmp_path / "run"))
    script.chmod(0o755)
    missing = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False)
    assert missing.returncode == 1 and "driver is not installed" in missing.stderr
    driver.write_text("535.261.03\n")
    other = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False)
    assert other.returncode == 1
    assert "version 535.183.01 don't match with driver version 535.261.03" in other.stderr


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_fabric_manager_daemon_is_named_like_nvidias(tmp_path: Path) -> None:
    """At the driver's version it forks a daemon whose process name (``/proc/PID/comm``, 15 characters) is
    NVIDIA's, which verify's fabric_manager step and doctor look for, and writes its pid file."""
    script = tmp_path / "nv-fabricmanager"
    driver = tmp_path / "driver-version"
    driver.write_text("535.183.01\n")
    script.write_text(FABRICMANAGER.format(version="535.183.01", driver_file=driver, run_dir=tmp_path / "run"))
    script.chmod(0o755)
    started = subprocess.run([str(script)], capture_output=True, text=True, check=False, timeout=30)
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "run" / "nv-fabricmanager.pid").read_text())
    try:
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "nv-fabricmanager"[:15]
    finally:
        os.kill(pid, signal.SIGTERM)
