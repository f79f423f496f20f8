"""Stand-ins of NVIDIA's files for sites that take files rather than packages: the CUDA runfile and the cuDNN
archive, named as NVIDIA names them.

* :func:`cuda_runfile` writes ``cuda_<X.Y.Z>_<driver>_linux.run``, a self-extracting archive
  (:mod:`gpuprov.lab.standin.selfextract`) whose ``cuda-installer`` takes the runfile's options (``--silent``,
  ``--toolkit``, ``--toolkitpath=DIR``, ``--installpath=DIR``, ``--no-man-page``, ``--override``, ``--no-drm``,
  ``--no-opengl-libs``, ``--tmpdir=DIR``; https://docs.nvidia.com/cuda/cuda-installation-guide-linux/#runfile-installation)
  and installs the stand-in toolkit only: ``bin/nvcc`` answering ``--version`` in NVIDIA's format,
  ``version.json``, a real ELF ``libcudart.so.X.Y.Z`` under ``targets/x86_64-linux/lib`` with the ``lib64`` and
  ``include`` links real toolkits have. It refuses ``--driver``, and ``--silent`` without ``--toolkit`` (which
  selects the driver too), so a test sees a role that would install the driver fail. Like NVIDIA's, it logs to
  ``/var/log/cuda-installer.log`` (``$GPUPROV_STANDIN_INSTALLER_LOG`` where a test runs it), with its options.
* :func:`cudnn_archive` writes ``cudnn-linux-x86_64-<version>_cuda<major>-archive.tar.xz`` with NVIDIA's layout:
  one top directory of that name holding ``include/cudnn_version.h`` (CUDNN_MAJOR/MINOR/PATCHLEVEL),
  ``include/cudnn.h``, ``lib/libcudnn.so.<M.m.p>`` (a real ELF, SONAME ``libcudnn.so.<M>``) with its
  ``libcudnn.so.<M>`` and ``libcudnn.so`` links, and ``LICENSE``.
"""

from __future__ import annotations

import io
import lzma
import tarfile
import tempfile
from pathlib import Path

from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin.selfextract import self_extracting_archive
from gpuprov.lab.standin.sharedlib import shared_library
from gpuprov.lab.standin.toolkit import CUDNN_HEADER, NVCC
from gpuprov.lab.standin.toolkit_releases import CUDNN_RELEASES, cuda_release, version_code

#: The driver each stand-in runfile is named after (NVIDIA's runfile bundles that driver; the stand-in has
#: none): cuda_11.8.0_520.61.05_linux.run, cuda_12.8.1_570.124.06_linux.run.
RUNFILE_DRIVERS = {"11.8": "520.61.05", "12.8": "570.124.06"}

#: The stand-in ``cuda-installer`` (format fields: ``release`` X.Y.Z and ``default`` the default toolkit path).
INSTALLER = """\
#!/bin/sh
# gpuprov stand-in of NVIDIA's cuda-installer for CUDA {release}: takes the runfile's options and installs the
# stand-in toolkit only; it has no driver to install.
set -eu
silent=0 toolkit=0 path={default}
for arg in "$@"; do
  case "$arg" in
    --silent) silent=1 ;;
    --toolkit) toolkit=1 ;;
    --toolkitpath=*) path=${{arg#--toolkitpath=}} ;;
    --installpath=*) path=${{arg#--installpath=}} ;;
    --no-man-page|--override|--no-drm|--no-opengl-libs|--tmpdir=*) ;;
    --help|-h)
      echo "Usage: cuda_{release}_linux.run --silent --toolkit [--toolkitpath=DIR] [--no-man-page] [--override]"
      exit 0 ;;
    --driver)
      echo "gpuprov stand-in runfile: --driver given; this stand-in installs no driver" >&2
      exit 1 ;;
    *)
      echo "gpuprov stand-in runfile: unknown option $arg" >&2
      exit 1 ;;
  esac
done
if [ "$silent" != 1 ]; then
  echo "gpuprov stand-in runfile: the interactive installer is not simulated; pass --silent" >&2
  exit 1
fi
if [ "$toolkit" != 1 ]; then
  echo "gpuprov stand-in runfile: --silent without --toolkit selects the driver too; pass --toolkit" >&2
  exit 1
fi
mkdir -p "$path"
cp -a toolkit/. "$path/"
echo "gpuprov stand-in: installed CUDA {release} toolkit to $path ($*)" \
  >> "${{GPUPROV_STANDIN_INSTALLER_LOG:-/var/log/cuda-installer.log}}"
"""


def runfile_name(cuda: str) -> str:
    """NVIDIA's runfile name for stand-in CUDA ``cuda`` (major.minor): ``cuda_12.8.1_570.124.06_linux.run``.

    Raises:
        ConfigError: no stand-in runfile for ``cuda``.
    """
    if cuda not in RUNFILE_DRIVERS:
        raise ConfigError(f"stand-in CUDA runfile {cuda}: offered are {', '.join(RUNFILE_DRIVERS)}")
    return f"cuda_{cuda_release(cuda).package.split('-')[0]}_{RUNFILE_DRIVERS[cuda]}_linux.run"


def cuda_runfile(cuda: str, out_dir: Path) -> Path:
    """Write the stand-in runfile of CUDA ``cuda`` ("12.8") into ``out_dir`` (named by :func:`runfile_name`)
    and return its path.

    Raises:
        ConfigError: no stand-in runfile for ``cuda``, or gcc failed.
        EnvironmentMissing: gcc is not installed (the runtime library is compiled).
    """
    name = runfile_name(cuda)
    rel = cuda_release(cuda)
    release = rel.package.split("-")[0]
    soname, real = f"libcudart.so.{rel.major}", f"libcudart.so.{rel.cudart}"
    cudart_c = f"int cudaRuntimeGetVersion(int *v) {{ *v = {version_code(rel.version, (1000, 10))}; return 0; }}\n"
    with tempfile.TemporaryDirectory(prefix="gpuprov-runfile-") as tmp:
        folder = Path(tmp)
        top = folder / "toolkit"
        target = top / "targets" / "x86_64-linux"
        for sub in ("bin", "targets/x86_64-linux/lib", "targets/x86_64-linux/include"):
            (top / sub).mkdir(parents=True)
        nvcc = top / "bin" / "nvcc"
        nvcc.write_text(NVCC.format(version=rel.version, nvcc=rel.nvcc, built=rel.built, build=rel.build,
                                    year=rel.year), encoding="utf-8")
        nvcc.chmod(0o755)
        (top / "version.json").write_text('{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "'
                                          + release + '"\n   }\n}\n', encoding="utf-8")
        (target / "lib" / real).write_bytes(shared_library(soname, cudart_c))
        (target / "lib" / soname).symlink_to(real)
        (target / "include" / "cuda_runtime_api.h").write_text(
            f"/* gpuprov stand-in of cuda_runtime_api.h for CUDA {release} */\n"
            f"#define CUDART_VERSION {version_code(rel.version, (1000, 10))}\n", encoding="utf-8")
        (top / "lib64").symlink_to("targets/x86_64-linux/lib")
        (top / "include").symlink_to("targets/x86_64-linux/include")
        (folder / "cuda-installer").write_text(
            INSTALLER.format(release=release, default=f"/usr/local/cuda-{rel.version}"), encoding="utf-8")
        return self_extracting_archive(folder, "cuda-installer", out_dir / name,
                                       f"gpuprov stand-in CUDA {release} runfile (toolkit only)")


def cudnn_archive_name(version: str, cuda_major: str) -> str:
    """NVIDIA's archive name: ``cudnn-linux-x86_64-9.10.2.21_cuda12-archive.tar.xz`` for ("9.10.2", "12").

    Raises:
        ConfigError: no stand-in cuDNN ``version`` built for CUDA ``cuda_major``.
    """
    if version not in CUDNN_RELEASES or cuda_major not in CUDNN_RELEASES[version][1]:
        raise ConfigError(f"stand-in cuDNN {version} has no build for CUDA {cuda_major}")
    return f"cudnn-linux-x86_64-{CUDNN_RELEASES[version][0]}_cuda{cuda_major}-archive.tar.xz"


def cudnn_archive(version: str, cuda_major: str, out_dir: Path) -> Path:
    """Write the stand-in cuDNN archive of ``version`` ("9.10.2") for CUDA ``cuda_major`` ("12") into ``out_dir``
    (named by :func:`cudnn_archive_name`) and return its path. The same arguments give the same bytes.

    Raises:
        ConfigError: no such stand-in build, or gcc failed.
        EnvironmentMissing: gcc is not installed (the library is compiled).
    """
    name = cudnn_archive_name(version, cuda_major)
    top = name.removesuffix(".tar.xz")
    major, minor, patch = version.split(".")
    scale = 1000 if int(major) < 9 else 10000
    soname, real = f"libcudnn.so.{major}", f"libcudnn.so.{version}"
    code = version_code(version, (scale, 100, 1))
    source = f"#include <stddef.h>\nsize_t cudnnGetVersion(void) {{ return {code}; }}\n"
    files: list[tuple[str, bytes | None, str | None, int]] = [
        ("include/cudnn_version.h", CUDNN_HEADER.format(version=version, major=major, minor=minor, patch=patch,
                                                        scale=scale).encode(), None, 0o644),
        ("include/cudnn.h", f'/* gpuprov stand-in of cudnn.h for cuDNN {version} */\n#include "cudnn_version.h"\n'
         .encode(), None, 0o644),
        (f"lib/{real}", shared_library(soname, source), None, 0o755),
        (f"lib/{soname}", None, real, 0o777),
        ("lib/libcudnn.so", None, soname, 0o777),
        ("LICENSE", f"gpuprov stand-in of NVIDIA cuDNN {version}: test data, no NVIDIA code.\n".encode(), None, 0o644),
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in ("", "/include", "/lib"):
            info = tarfile.TarInfo(top + directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data, link, mode in files:
            info = tarfile.TarInfo(f"{top}/{path}")
            info.mode = mode
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out = out_dir / name
    out.write_bytes(lzma.compress(buffer.getvalue(), format=lzma.FORMAT_XZ))
    return out
