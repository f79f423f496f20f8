"""What the cuda, cudnn and nccl roles leave on a lab host, read from the files themselves.

Per host (molecule.yml): debian12 runs CUDA 12.8 (+12.2 side by side), cuDNN 9.8.0, NCCL 2.26.2 under the
h200x2 profile; the ubuntu2004 stand-in CUDA 11.8, cuDNN 8.9.7, NCCL 2.16.5 under v100x4, where apt's
candidates (+cuda12.2, +cuda12.0) are the wrong builds; the "files" host (debian12, h200x2) CUDA 12.8.1 from
NVIDIA's runfile and cuDNN 9.10.2 from NVIDIA's archive, no packages and no NCCL. SONAMEs are read by parsing the
ELF dynamic section here (the images have no binutils); the libraries are also loaded with ctypes in the container.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

import pytest

LIBDIR = "/usr/lib/x86_64-linux-gnu"

EXPECTED: dict[str, dict[str, Any]] = {
    "gpuprov-cuda-debian12": {
        "cuda": {"12.8": "V12.8.93", "12.2": "V12.2.140"}, "default": "12.8",
        "cudnn": ("9.8.0", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12", "9.8.0.87-1", 90800),
        "nccl": ("2.26.2", "2.26.2-1+cuda12.8", 22602),
        "refused": "CUDA 12.8 needs driver 525.60.13 or newer",
    },
    "gpuprov-cuda-ubuntu2004": {
        "cuda": {"11.8": "V11.8.89"}, "default": "11.8",
        "cudnn": ("8.9.7", "libcudnn8", "libcudnn8-dev", "8.9.7.29-1+cuda11.8", 8907),
        "nccl": ("2.16.5", "2.16.5-1+cuda11.8", 21605),
        "refused": "CUDA 13.0 needs driver 580.65.06 or newer",
    },
    "gpuprov-cuda-files": {
        "cuda": {"12.8": "V12.8.93"}, "default": "12.8",
        "runfile": ("12.8.1", "cuda_12.8.1_570.124.06_linux.run"),
        "archive": ("9.10.2", "cudnn-linux-x86_64-9.10.2.21_cuda12-archive.tar.xz", 91002),
        "refused": "CUDA 12.8 needs driver 525.60.13 or newer",
    },
}


def soname(elf: bytes) -> str | None:
    """DT_SONAME of a little-endian ELF64 shared library (None when it has none)."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1, "not a little-endian ELF64 file"
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", elf, pos)
            if tag == 14:  # DT_SONAME
                end = elf.index(b"\0", strtab + value)
                return elf[strtab + value:end].decode()
    return None


def macros(text: str, prefix: str, names: tuple[str, ...]) -> str:
    return ".".join(re.search(rf"(?m)^#define {prefix}{n}\s+(\d+)\s*$", text).group(1) for n in names)  # type: ignore[union-attr]


def selection(host: Any, package: str) -> str:
    """``<db:Status-Abbrev>|<version>``: ``hi |2.26.2-1+cuda12.8`` for held and installed."""
    return host.check_output(f"dpkg-query --show --showformat='${{db:Status-Abbrev}}|${{Version}}' {package}")


def in_cache(host: Any, name: str) -> bool:
    """Whether ``ldconfig -p`` maps SONAME ``name`` to LIBDIR (listed as /lib/... on a merged-/usr system)."""
    cache = host.check_output("ldconfig -p")
    return re.search(rf"(?m)^\s*{re.escape(name)} \(libc6,x86-64\) => (/usr)?/lib/x86_64-linux-gnu/{re.escape(name)}$",
                     cache) is not None


def held(host: Any) -> set[str]:
    return set(host.check_output("apt-mark showhold").split())


@pytest.fixture()
def want(host: Any) -> dict[str, Any]:
    return EXPECTED[host.backend.get_hostname()]


def test_nvcc_reports_each_toolkit(host: Any, want: dict[str, Any]) -> None:
    for version, nvcc in want["cuda"].items():
        out = host.check_output(f"/usr/local/cuda-{version}/bin/nvcc --version")
        lines = out.splitlines()
        assert lines[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
        assert re.fullmatch(r"Copyright \(c\) 2005-20\d\d NVIDIA Corporation", lines[1])
        assert re.fullmatch(r"Built on \w{3}_\w{3}_{1,2}\d{1,2}_\d\d:\d\d:\d\d_P[SD]T_20\d\d", lines[2])
        assert lines[3] == f"Cuda compilation tools, release {version}, {nvcc}"
        assert lines[4].startswith(f"Build cuda_{version}.r{version}/compiler.")


def test_toolkits_pinned_and_held_never_the_cuda_meta(host: Any, want: dict[str, Any]) -> None:
    if "runfile" in want:
        pytest.skip("toolkit from the runfile: test_runfile_installed_the_toolkit_only")
    holds = held(host)
    for version in want["cuda"]:
        package = "cuda-toolkit-" + version.replace(".", "-")
        assert selection(host, package).startswith("hi |"), package
        assert package in holds
    assert not host.package("cuda").is_installed


def test_usr_local_cuda_is_the_default_toolkit(host: Any, want: dict[str, Any]) -> None:
    link = host.file("/usr/local/cuda")
    assert link.is_symlink
    assert link.linked_to == f"/usr/local/cuda-{want['default']}"
    # selected manually, so a newer toolkit's package cannot move it
    assert "link currently points to" in host.check_output("update-alternatives --display cuda")
    assert "manual mode" in host.check_output("update-alternatives --display cuda")


def test_login_shell_path_finds_the_default_nvcc(host: Any, want: dict[str, Any]) -> None:
    script = host.file("/etc/profile.d/cuda.sh")
    assert script.mode == 0o644 and script.user == "root"
    assert "/usr/local/cuda/bin" in script.content_string
    out = host.check_output("env -i HOME=/root bash -lc 'command -v nvcc; nvcc --version'")
    assert out.splitlines()[0] == "/usr/local/cuda/bin/nvcc"
    assert f"release {want['default']}, " in out


def test_linker_path_and_cache_have_the_default_cudart(host: Any, want: dict[str, Any]) -> None:
    conf = host.file("/etc/ld.so.conf.d/gpuprov-cuda.conf")
    assert "\n/usr/local/cuda/lib64\n" in conf.content_string
    major = want["default"].split(".")[0]
    cache = host.check_output("ldconfig -p")
    assert f"libcudart.so.{major} (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.{major}" in cache
    real = host.file(f"/usr/local/cuda/lib64/libcudart.so.{major}").linked_to
    assert soname(host.file(real).content) == f"libcudart.so.{major}"
    code = host.check_output(
        "python3 -c \"import ctypes; v = ctypes.c_int(); "
        f"ctypes.CDLL('libcudart.so.{major}').cudaRuntimeGetVersion(ctypes.byref(v)); print(v.value)\"")
    minor = want["default"].split(".")[1]
    assert int(code) == int(major) * 1000 + int(minor) * 10


def test_cudnn_files_are_the_build_for_the_installed_cuda(host: Any, want: dict[str, Any]) -> None:
    if "archive" in want:
        pytest.skip("cuDNN from the archive: test_cudnn_archive_unpacked_into_the_toolkit")
    version, runtime, dev, pkg_version, code = want["cudnn"]
    major = version.split(".")[0]
    for package in (runtime, dev):
        assert selection(host, package) == f"hi |{pkg_version}"
    assert {runtime, dev} <= held(host)
    link = host.file(f"{LIBDIR}/libcudnn.so.{major}")
    assert link.linked_to == f"{LIBDIR}/libcudnn.so.{version}"
    assert soname(host.file(link.linked_to).content) == f"libcudnn.so.{major}"
    header = host.file("/usr/include/cudnn_version.h").content_string
    assert macros(header, "CUDNN_", ("MAJOR", "MINOR", "PATCHLEVEL")) == version
    assert in_cache(host, f"libcudnn.so.{major}")
    loaded = host.check_output(
        f"python3 -c \"import ctypes; f = ctypes.CDLL('libcudnn.so.{major}').cudnnGetVersion; "
        "f.restype = ctypes.c_size_t; print(f())\"")
    assert int(loaded) == code


def test_nccl_files_are_the_build_for_the_installed_cuda(host: Any, want: dict[str, Any]) -> None:
    if "nccl" not in want:
        pytest.skip("no NCCL on this host")
    version, pkg_version, code = want["nccl"]
    for package in ("libnccl2", "libnccl-dev"):
        assert selection(host, package) == f"hi |{pkg_version}"
    assert {"libnccl2", "libnccl-dev"} <= held(host)
    link = host.file(f"{LIBDIR}/libnccl.so.2")
    assert link.linked_to == f"{LIBDIR}/libnccl.so.{version}"
    assert soname(host.file(link.linked_to).content) == "libnccl.so.2"
    assert macros(host.file("/usr/include/nccl.h").content_string, "NCCL_", ("MAJOR", "MINOR", "PATCH")) == version
    assert in_cache(host, "libnccl.so.2")
    loaded = host.check_output(
        "python3 -c \"import ctypes; v = ctypes.c_int(); "
        "ctypes.CDLL('libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(v.value)\"")
    assert int(loaded) == code


def test_toolkit_above_the_driver_is_refused_before_install(host: Any, want: dict[str, Any]) -> None:
    text = host.file("/var/lib/gpuprov-molecule/cuda-refused.txt").content_string
    assert "NOT REFUSED" not in text
    assert "Assert the driver meets each toolkit's minimum" in text
    assert want["refused"] in text
    if "13.0" in want["refused"]:
        assert not host.file("/usr/local/cuda-13.0").exists
        assert not host.package("cuda-toolkit-13-0").is_installed


def test_repository_is_one_pinned_deb822_source(host: Any, want: dict[str, Any]) -> None:
    if "runfile" in want:
        assert host.check_output("grep -rl 127.0.0.1:8472 /etc/apt/ || true") == ""  # files only: no apt source
        return
    sources = host.check_output("grep -rl 127.0.0.1:8472 /etc/apt/sources.list.d/ /etc/apt/sources.list || true")
    assert sources.split() == ["/etc/apt/sources.list.d/cuda-gpuprov.sources"]
    text = host.file("/etc/apt/sources.list.d/cuda-gpuprov.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/cuda-gpuprov.gpg" in text


def sha256(host: Any, path: str) -> str:
    return host.check_output(f"sha256sum {path}").split()[0]


def test_runfile_installed_the_toolkit_only(host: Any, want: dict[str, Any]) -> None:
    if "runfile" not in want:
        pytest.skip("toolkit from packages")
    release, name = want["runfile"]
    record = json.loads(host.file("/usr/local/cuda-12.8/gpuprov-runfile.json").content_string)
    served = sha256(host, f"/opt/gpuprov-standin/files/{name}")
    assert record == {"version": release, "sha256": served}
    assert json.loads(host.file("/usr/local/cuda-12.8/version.json").content_string)["cuda"]["version"] == release
    log = host.file("/var/log/cuda-installer.log").content_string
    assert "--silent --toolkit --toolkitpath=/usr/local/cuda-12.8 --no-man-page --override" in log
    assert "--driver" not in log
    assert host.check_output("dpkg-query --show --showformat='${Package}\\n' 'cuda-*' 'libcudnn*' || true") == ""
    assert not host.file("/var/tmp/gpuprov-cuda").exists or not host.file(f"/var/tmp/gpuprov-cuda/{name}").exists


def test_cudnn_archive_unpacked_into_the_toolkit(host: Any, want: dict[str, Any]) -> None:
    if "archive" not in want:
        pytest.skip("cuDNN from packages")
    version, name, code = want["archive"]
    lib = host.file("/usr/local/cuda-12.8/lib64/libcudnn.so.9")
    assert lib.is_symlink
    assert lib.linked_to == f"/usr/local/cuda-12.8/targets/x86_64-linux/lib/libcudnn.so.{version}"
    assert soname(host.file(lib.linked_to).content) == "libcudnn.so.9"
    assert host.file(lib.linked_to).user == "root"
    header = host.file("/usr/local/cuda-12.8/include/cudnn_version.h").content_string
    assert macros(header, "CUDNN_", ("MAJOR", "MINOR", "PATCHLEVEL")) == version
    assert "libcudnn.so.9 (libc6,x86-64) => /usr/local/cuda/lib64/libcudnn.so.9" in host.check_output("ldconfig -p")
    loaded = host.check_output(
        "python3 -c \"import ctypes; f = ctypes.CDLL('libcudnn.so.9').cudnnGetVersion; "
        "f.restype = ctypes.c_size_t; print(f())\"")
    assert int(loaded) == code
    record = json.loads(host.file("/usr/local/cuda-12.8/gpuprov-cudnn.json").content_string)
    assert record == {"version": version, "sha256": sha256(host, f"/opt/gpuprov-standin/files/{name}"),
                      "archive": name,
                      "files": ["include/cudnn.h", "include/cudnn_version.h", "lib64/libcudnn.so",
                                "lib64/libcudnn.so.9", f"lib64/libcudnn.so.{version}"]}
    assert not host.file("/var/tmp/gpuprov-cudnn").exists
