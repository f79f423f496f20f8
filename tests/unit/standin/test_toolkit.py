"""Stand-ins of the CUDA toolkit, cuDNN and NCCL packages: names, versions and dependencies as NVIDIA's
CUDA repository has them, real ELF libraries with the right SONAMEs, and a signed repository of both kinds."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin.deb import BinaryPackage, FileSpec, PackageSpec, StandinPackage, build_deb, spec_of, stage
from gpuprov.lab.standin.repo import build_repository
from gpuprov.lab.standin.sharedlib import shared_library
from gpuprov.lab.standin.toolkit import (
    cuda_toolkit,
    cudnn_packages,
    lab_toolkit_packages,
    lab_toolkit_packages_for,
    nccl_packages,
)
from gpuprov.lab.standin.toolkit_releases import CUDA_RELEASES, version_code

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the stand-in libraries")
needs_repo_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gcc", "dpkg-deb", "dpkg-scanpackages", "gpg")),
    reason="gcc, dpkg-dev and gnupg are needed (bash .ci/setup installs them)",
)


def elf_soname(elf: bytes) -> str | None:
    """DT_SONAME of a little-endian ELF64 file, read from its SHT_DYNAMIC section."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    for _n, kind, _f, _a, offset, size, link, _i, _al, entsize in sections:
        if kind == 6:
            strtab = sections[link][4]
            for pos in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from("<qQ", elf, pos)
                if tag == 14:
                    return elf[strtab + value:elf.index(b"\0", strtab + value)].decode()
    return None


def by_name(packages: list[StandinPackage]) -> dict[str, PackageSpec]:
    return {spec_of(p).name: spec_of(p) for p in packages}


def binary(packages: list[StandinPackage], name: str) -> BinaryPackage:
    return next(p for p in packages if isinstance(p, BinaryPackage) and p.spec.name == name)


def test_version_codes_follow_nvidia() -> None:
    assert version_code("9.8.0", (10000, 100, 1)) == 90800      # cudnnGetVersion, cuDNN 9
    assert version_code("8.9.7", (1000, 100, 1)) == 8907        # CUDNN_VERSION, cuDNN 8
    assert version_code("2.26.2", (10000, 100, 1)) == 22602     # NCCL_VERSION_CODE
    assert version_code("12.8", (1000, 10)) == 12080            # cudaRuntimeGetVersion


def test_toolkit_is_versioned_and_never_pulls_a_driver() -> None:
    packages = by_name(cuda_toolkit("12.8"))
    assert set(packages) == {"cuda-toolkit-12-8", "cuda-nvcc-12-8", "cuda-cudart-12-8",
                             "cuda-toolkit-12-8-config-common"}
    meta = packages["cuda-toolkit-12-8"]
    assert meta.version == "12.8.1-1"
    assert meta.depends == ("cuda-nvcc-12-8 (>= 12.8.93-1)", "cuda-cudart-12-8 (>= 12.8.90-1)",
                            "cuda-toolkit-12-8-config-common (>= 12.8.1-1)")
    deps = " ".join(d for p in packages.values() for d in p.depends)
    assert "nvidia" not in deps and "cuda-drivers" not in deps
    with pytest.raises(ConfigError):
        cuda_toolkit("10.2")


@pytest.mark.parametrize("cuda", sorted(CUDA_RELEASES))
def test_nvcc_prints_nvidias_version_banner(tmp_path: Path, cuda: str) -> None:
    spec = by_name(cuda_toolkit(cuda))[f"cuda-nvcc-{cuda.replace('.', '-')}"]
    stage(spec, tmp_path / "root")
    nvcc = tmp_path / "root" / f"usr/local/cuda-{cuda}/bin/nvcc"
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout.splitlines()
    release = CUDA_RELEASES[cuda]
    assert out[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
    assert out[3] == f"Cuda compilation tools, release {cuda}, V{release.nvcc}"
    assert out[4].startswith(f"Build cuda_{cuda}.r{cuda}/compiler.")
    assert subprocess.run([str(nvcc), "x.cu"], capture_output=True, check=False).returncode == 1


def test_cudnn_names_follow_the_release_scheme() -> None:
    nine = by_name(cudnn_packages("9.8.0", "12"))
    assert set(nine) == {"libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"}
    assert nine["libcudnn9-dev-cuda-12"].version == "9.8.0.87-1"
    assert nine["libcudnn9-dev-cuda-12"].depends == ("libcudnn9-cuda-12 (= 9.8.0.87-1)",)
    eight = by_name(cudnn_packages("8.9.7", "11.8"))
    assert set(eight) == {"libcudnn8", "libcudnn8-dev"}
    assert eight["libcudnn8"].version == "8.9.7.29-1+cuda11.8"
    header = eight["libcudnn8-dev"].files["/usr/include/x86_64-linux-gnu/cudnn_version_v8.h"].content
    assert "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 7\n" in header
    with pytest.raises(ConfigError):
        cudnn_packages("9.8.0", "13")


def test_nccl_versions_carry_the_cuda_build() -> None:
    packages = by_name(nccl_packages("2.26.2", "12.8"))
    assert packages["libnccl2"].version == "2.26.2-1+cuda12.8"
    dev = packages["libnccl-dev"]
    assert dev.depends == ("libnccl2 (= 2.26.2-1+cuda12.8)",)
    header = dev.files["/usr/include/nccl.h"].content
    assert "#define NCCL_MAJOR 2\n#define NCCL_MINOR 26\n#define NCCL_PATCH 2\n" in header
    assert "#define NCCL_VERSION_CODE 22602\n" in header
    with pytest.raises(ConfigError):
        nccl_packages("2.26.2", "11.8")


def test_lab_set_has_wrong_candidates_for_older_cuda() -> None:
    versions = {spec_of(p).version for p in lab_toolkit_packages(("11.8", "12.8")) if spec_of(p).name == "libnccl2"}
    # the newest libnccl2 2.16.5 is the CUDA 12.0 build: an 11.8 host must not take apt's candidate
    assert {"2.16.5-1+cuda11.8", "2.16.5-1+cuda12.0", "2.26.2-1+cuda12.8"} <= versions


def test_lab_set_per_os_follows_the_matrix() -> None:
    focal = {spec_of(p).name for p in lab_toolkit_packages_for("ubuntu2004")}
    bookworm = {spec_of(p).name for p in lab_toolkit_packages_for("debian12")}
    assert "cuda-toolkit-11-8" in focal and "cuda-toolkit-13-0" not in focal
    assert "cuda-toolkit-13-0" in bookworm and "cuda-toolkit-11-8" not in bookworm
    assert {"libnccl2", "libnccl-dev", "libcudnn9-cuda-12"} <= bookworm
    with pytest.raises(ConfigError):
        lab_toolkit_packages_for("centos7")


@needs_gcc
def test_shared_library_has_the_soname_and_works(tmp_path: Path) -> None:
    data = shared_library("libnccl.so.2", "int ncclGetVersion(int *v) { *v = 22602; return 0; }\n")
    assert elf_soname(data) == "libnccl.so.2"
    path = tmp_path / "libnccl.so.2.26.2"
    path.write_bytes(data)
    version = ctypes.c_int()
    assert ctypes.CDLL(str(path)).ncclGetVersion(ctypes.byref(version)) == 0
    assert version.value == 22602


@needs_repo_tools
def test_binary_deb_ships_the_library_byte_for_byte(tmp_path: Path) -> None:
    package = binary(nccl_packages("2.16.5", "11.8"), "libnccl2")
    deb = build_deb(package, tmp_path / "out")
    assert deb.name == "libnccl2_2.16.5-1+cuda11.8_amd64.deb"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / "x")], check=True)
    lib = tmp_path / "x/usr/lib/x86_64-linux-gnu"
    assert (lib / "libnccl.so.2").readlink() == Path("libnccl.so.2.16.5")
    assert (lib / "libnccl.so.2.16.5").read_bytes() == package.binaries["/usr/lib/x86_64-linux-gnu/libnccl.so.2.16.5"]
    assert elf_soname((lib / "libnccl.so.2.16.5").read_bytes()) == "libnccl.so.2"
    control = subprocess.run(["dpkg-deb", "-f", str(deb), "Version", "Package"], capture_output=True, text=True,
                             check=True).stdout
    assert control == "Version: 2.16.5-1+cuda11.8\nPackage: libnccl2\n"


@pytest.mark.parametrize(("files", "binaries", "match"), [
    ({}, {"usr/lib/libx.so.1": b"x"}, "binary path 'usr/lib/libx.so.1' must be absolute"),
    ({}, {"/usr/lib/../libx.so.1": b"x"}, "must be absolute, without '..'"),
    ({"/usr/lib/libx.so.1": FileSpec("x")}, {"/usr/lib/libx.so.1": b"x"}, "given as text and binary"),
])
def test_binary_files_are_checked_like_text_files(tmp_path: Path, files: dict[str, FileSpec],
                                                  binaries: dict[str, bytes], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        stage(PackageSpec(name="libx1", version="1.0", files=files), tmp_path / "root", binaries)


@needs_repo_tools
def test_repository_indexes_text_and_binary_packages(tmp_path: Path) -> None:
    repo = build_repository(cuda_toolkit("11.8") + cudnn_packages("8.9.7", "11.8"), tmp_path / "repo")
    index = (repo.path / "Packages").read_text()
    for name in ("cuda-toolkit-11-8", "cuda-cudart-11-8", "libcudnn8", "libcudnn8-dev"):
        assert f"Package: {name}\n" in index
        assert name in repo.packages
    assert (repo.path / "InRelease").is_file() and repo.key.is_file()
