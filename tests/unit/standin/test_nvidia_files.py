"""Stand-ins of NVIDIA's CUDA runfile and cuDNN archive, and the self-extracting archive builder under the runfile:
the runfile takes NVIDIA's toolkit options and installs the toolkit only; the archive has NVIDIA's layout."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin.nvidia_files import cuda_runfile, cudnn_archive, cudnn_archive_name, runfile_name
from gpuprov.lab.standin.selfextract import self_extracting_archive

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the stand-in libraries")


def run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", *map(str, argv)], capture_output=True, text=True, check=False, env=env)


def test_self_extracting_archive_runs_its_installer_with_the_arguments(tmp_path: Path) -> None:
    folder = tmp_path / "payload"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "hello.txt").write_text("hello\n", encoding="utf-8")
    (folder / "install.sh").write_text('cp data/hello.txt "$1"; echo "args: $*"; exit "$2"\n', encoding="utf-8")
    out = self_extracting_archive(folder, "install.sh", tmp_path / "x.run", "test payload")
    assert out.stat().st_mode & 0o777 == 0o755
    work = tmp_path / "tmp"
    work.mkdir()
    done = run(out, tmp_path / "copied.txt", "0", env={"PATH": "/usr/bin:/bin", "TMPDIR": str(work)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"args: {tmp_path / 'copied.txt'} 0\n"
    assert (tmp_path / "copied.txt").read_text(encoding="utf-8") == "hello\n"
    assert list(work.iterdir()) == []  # the unpacked payload is removed
    assert run(out, tmp_path / "again.txt", "3").returncode == 3  # the installer's status is the runfile's
    assert run(out, "--list").stdout.split() == ["data/", "data/hello.txt", "install.sh"]
    assert run(out, "--noexec", "--target", tmp_path / "t").returncode == 0
    assert (tmp_path / "t" / "install.sh").is_file()
    # the same folder gives the same bytes
    assert self_extracting_archive(folder, "install.sh", tmp_path / "y.run", "test payload").read_bytes() == \
        out.read_bytes()


def test_self_extracting_archive_needs_its_installer_inside_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a file inside"):
        self_extracting_archive(tmp_path, "missing.sh", tmp_path / "x.run", "label")


@needs_gcc
def test_cuda_runfile_installs_the_toolkit_only_with_nvidias_options(tmp_path: Path) -> None:
    runfile = cuda_runfile("12.8", tmp_path)
    assert runfile.name == runfile_name("12.8") == "cuda_12.8.1_570.124.06_linux.run"
    root = tmp_path / "cuda-12.8"
    for refused in (["--silent"], ["--toolkit", f"--toolkitpath={root}"], ["--silent", "--driver", "--toolkit"]):
        failed = run(runfile, *refused, f"--toolkitpath={root}")
        assert failed.returncode == 1 and "gpuprov stand-in runfile" in failed.stderr
        assert not root.exists()
    log = tmp_path / "cuda-installer.log"
    done = run(runfile, "--silent", "--toolkit", f"--toolkitpath={root}", "--no-man-page", "--override",
               f"--tmpdir={tmp_path}", env={"PATH": "/usr/bin:/bin", "GPUPROV_STANDIN_INSTALLER_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    assert f"--silent --toolkit --toolkitpath={root} --no-man-page --override" in log.read_text(encoding="utf-8")
    nvcc = subprocess.run([str(root / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=True)
    assert "Cuda compilation tools, release 12.8, V12.8.93" in nvcc.stdout
    assert json.loads((root / "version.json").read_text(encoding="utf-8"))["cuda"]["version"] == "12.8.1"
    assert (root / "lib64").resolve() == (root / "targets" / "x86_64-linux" / "lib").resolve()
    version = ctypes.c_int()
    ctypes.CDLL(str(root / "lib64" / "libcudart.so.12")).cudaRuntimeGetVersion(ctypes.byref(version))
    assert version.value == 12080
    with pytest.raises(ConfigError, match="offered are"):
        runfile_name("12.2")


@needs_gcc
def test_cudnn_archive_has_nvidias_layout(tmp_path: Path) -> None:
    archive = cudnn_archive("9.10.2", "12", tmp_path)
    assert archive.name == cudnn_archive_name("9.10.2", "12") == "cudnn-linux-x86_64-9.10.2.21_cuda12-archive.tar.xz"
    top = "cudnn-linux-x86_64-9.10.2.21_cuda12-archive"
    with tarfile.open(archive, "r:xz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        tar.extractall(tmp_path / "x", filter="data")
    assert members[f"{top}/lib/libcudnn.so.9"].linkname == "libcudnn.so.9.10.2"
    assert members[f"{top}/lib/libcudnn.so"].linkname == "libcudnn.so.9"
    header = (tmp_path / "x" / top / "include" / "cudnn_version.h").read_text(encoding="utf-8")
    assert "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 10\n#define CUDNN_PATCHLEVEL 2\n" in header
    get = ctypes.CDLL(str(tmp_path / "x" / top / "lib" / "libcudnn.so.9")).cudnnGetVersion
    get.restype = ctypes.c_size_t
    assert get() == 91002
    assert cudnn_archive("9.10.2", "12", tmp_path / "x").read_bytes() == archive.read_bytes()
    with pytest.raises(ConfigError, match="no build for CUDA 13"):
        cudnn_archive_name("9.10.2", "13")
