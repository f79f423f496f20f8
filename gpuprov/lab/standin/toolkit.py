"""Stand-ins for the CUDA toolkit, cuDNN and NCCL packages of NVIDIA's CUDA network repository.

Names, version strings and dependencies follow developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64
(ubuntu2004, ubuntu2204, ubuntu2404, debian12):

* ``cuda-toolkit-X-Y`` (``12.8.1-1``): a meta depending on ``cuda-nvcc-X-Y``, ``cuda-cudart-X-Y`` and
  ``cuda-toolkit-X-Y-config-common``. It never depends on a driver (the ``cuda`` / ``cuda-X-Y`` metas do).
  ``cuda-nvcc-X-Y`` ships ``/usr/local/cuda-X.Y/bin/nvcc``, a script printing ``nvcc --version`` in
  NVIDIA's exact format; ``cuda-cudart-X-Y`` ships a real ELF ``libcudart.so.X.Y.Z`` (SONAME
  ``libcudart.so.X``) under ``targets/x86_64-linux/lib`` with the ``lib64`` link real toolkits have;
  the config-common package registers ``/usr/local/cuda`` and ``/usr/local/cuda-X`` with
  update-alternatives (priority ``X*10+Y``) as NVIDIA's packages do, and ships ``version.json``.
* ``libcudnn9-cuda-12`` / ``libcudnn9-dev-cuda-12`` (``9.8.0.87-1``) from cuDNN 9 on; before,
  ``libcudnn8`` / ``libcudnn8-dev`` with the CUDA build in the version (``8.9.7.29-1+cuda11.8``).
  The library is ``/usr/lib/x86_64-linux-gnu/libcudnn.so.<M.m.p>`` with SONAME ``libcudnn.so.<M>``;
  the dev package ships ``/usr/include/x86_64-linux-gnu/cudnn_version_v<M>.h`` (CUDNN_MAJOR/MINOR/
  PATCHLEVEL) and ``/usr/include/cudnn_version.h`` pointing at it (NVIDIA uses an alternative there).
* ``libnccl2`` / ``libnccl-dev`` at ``2.26.2-1+cuda12.8``: ``libnccl.so.2.26.2`` (SONAME
  ``libnccl.so.2``) and ``/usr/include/nccl.h`` with NCCL_MAJOR/MINOR/PATCH; dev depends on the exact
  runtime version, as NVIDIA's does.

The shared libraries are compiled from C (:func:`gpuprov.lab.standin.sharedlib.shared_library`); each exports
the library's real version call (``cudaRuntimeGetVersion``, ``cudnnGetVersion``, ``ncclGetVersion``), so
tests can read SONAMEs with readelf and load them with ctypes. Packages that ship one are
:class:`~gpuprov.lab.standin.deb.BinaryPackage`; :func:`gpuprov.lab.standin.repo.build_repository` builds both kinds
into one signed repository. The release data comes from :mod:`gpuprov.lab.standin.toolkit_releases`.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuprov.exceptions import ConfigError
from gpuprov.lab.standin.deb import BinaryPackage, FileSpec, PackageSpec, StandinPackage
from gpuprov.lab.standin.sharedlib import shared_library
from gpuprov.lab.standin.toolkit_releases import (
    CUDA_RELEASES,
    CUDNN_RELEASES,
    NCCL_RELEASES,
    cuda_release,
    version_code,
)

#: Where Debian and Ubuntu packages put x86-64 libraries.
LIBDIR = "/usr/lib/x86_64-linux-gnu"

#: The stand-in ``nvcc`` script (format fields: a :class:`~gpuprov.lab.standin.toolkit_releases.CudaRelease`'s
#: ``version``, ``nvcc``, ``built``, ``build`` and ``year``).
NVCC = """\
#!/bin/sh
# gpuprov stand-in for nvcc {version}: prints what NVIDIA's nvcc prints; compiles nothing.
case "$1" in
  --version|-V)
    cat <<'EOF'
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-{year} NVIDIA Corporation
Built on {built}
Cuda compilation tools, release {version}, V{nvcc}
Build {build}
EOF
    ;;
  *)
    echo "nvcc fatal   : gpuprov stand-in nvcc only answers --version" >&2
    exit 1
    ;;
esac
"""

#: What dh_makeshlibs gives a shared-library package: the dynamic linker cache is refreshed on configure.
LDCONFIG = 'if [ "$1" = configure ]; then ldconfig; fi\n'

#: The config-common package's maintainer scripts (format fields: ``version`` major.minor, ``major``,
#: ``priority`` ``X*10+Y``).
ALTERNATIVES_POSTINST = """\
if [ "$1" = configure ]; then
    update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-{version} {priority}
    update-alternatives --install /usr/local/cuda-{major} cuda-{major} /usr/local/cuda-{version} {priority}
fi
"""

ALTERNATIVES_PRERM = """\
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cuda /usr/local/cuda-{version}
    update-alternatives --remove cuda-{major} /usr/local/cuda-{version}
fi
"""


def cuda_toolkit(cuda: str) -> list[StandinPackage]:
    """``cuda-toolkit-X-Y`` and what it depends on, for CUDA ``cuda`` ("12.8").

    Raises:
        ConfigError: no stand-in data for ``cuda``, or gcc failed.
        EnvironmentMissing: gcc is not installed (the shared library is compiled here).
    """
    rel = cuda_release(cuda)
    root = f"/usr/local/cuda-{rel.version}"
    nvcc_pkg = f"{rel.nvcc}-1"
    cudart_pkg = f"{rel.cudart}-1"
    config = f"cuda-toolkit-{rel.dashed}-config-common"
    soname = f"libcudart.so.{rel.major}"
    real = f"libcudart.so.{rel.cudart}"
    code = version_code(rel.version, (1000, 10))
    cudart_c = f"int cudaRuntimeGetVersion(int *v) {{ *v = {code}; return 0; }}\n"
    libdir = f"{root}/targets/x86_64-linux/lib"
    version_json = ('{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "'
                    + rel.package.split("-")[0] + '"\n   }\n}\n')
    fmt = {"version": rel.version, "major": rel.major, "priority": int(rel.major) * 10 + int(rel.version.split(".")[1])}
    return [
        PackageSpec(
            name=f"cuda-toolkit-{rel.dashed}", version=rel.package, architecture="amd64",
            depends=(f"cuda-nvcc-{rel.dashed} (>= {nvcc_pkg})", f"cuda-cudart-{rel.dashed} (>= {cudart_pkg})",
                     f"{config} (>= {rel.package})"),
            description=f"gpuprov stand-in CUDA Toolkit {rel.version} meta-package",
        ),
        PackageSpec(
            name=f"cuda-nvcc-{rel.dashed}", version=nvcc_pkg, architecture="amd64",
            description=f"gpuprov stand-in CUDA nvcc {rel.version}",
            files={f"{root}/bin/nvcc": FileSpec(NVCC.format(version=rel.version, nvcc=rel.nvcc, built=rel.built,
                                                            build=rel.build, year=rel.year), 0o755)},
        ),
        BinaryPackage(
            PackageSpec(
                name=f"cuda-cudart-{rel.dashed}", version=cudart_pkg, architecture="amd64",
                depends=(f"{config} (>= {rel.package})",),
                description=f"gpuprov stand-in CUDA Runtime native Libraries {rel.version}",
                files={f"{libdir}/{soname}": FileSpec(link=real),
                       f"{root}/lib64": FileSpec(link="targets/x86_64-linux/lib")},
            ),
            {f"{libdir}/{real}": shared_library(soname, cudart_c)},
        ),
        PackageSpec(
            name=config, version=rel.package, architecture="all",
            description=f"gpuprov stand-in common config package for CUDA Toolkit {rel.version}",
            files={f"{root}/version.json": FileSpec(version_json)},
            scripts={"postinst": ALTERNATIVES_POSTINST.format(**fmt), "prerm": ALTERNATIVES_PRERM.format(**fmt)},
        ),
    ]


CUDNN_HEADER = """\
/* gpuprov stand-in of cudnn_version.h for cuDNN {version} */
#ifndef CUDNN_VERSION_H_
#define CUDNN_VERSION_H_

#define CUDNN_MAJOR {major}
#define CUDNN_MINOR {minor}
#define CUDNN_PATCHLEVEL {patch}

#define CUDNN_VERSION (CUDNN_MAJOR * {scale} + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

#endif /* CUDNN_VERSION_H */
"""


def cudnn_packages(version: str, cuda: str) -> list[StandinPackage]:
    """Runtime and dev packages of cuDNN ``version`` ("9.8.0") built for ``cuda``.

    ``cuda`` is a CUDA major ("12") for cuDNN 9 and later, a major.minor ("11.8") for cuDNN 8.

    Raises:
        ConfigError: unknown release or build, or gcc failed.
        EnvironmentMissing: gcc is not installed (the shared library is compiled here).
    """
    if version not in CUDNN_RELEASES or cuda not in CUDNN_RELEASES[version][1]:
        raise ConfigError(f"stand-in cuDNN {version} has no build for CUDA {cuda}")
    full = CUDNN_RELEASES[version][0]
    major, minor, patch = version.split(".")
    legacy = int(major) < 9
    suffix = "" if not legacy else f"+cuda{cuda}"
    runtime = f"libcudnn{major}" if legacy else f"libcudnn{major}-cuda-{cuda}"
    dev = f"libcudnn{major}-dev" if legacy else f"libcudnn{major}-dev-cuda-{cuda}"
    pkg_version = f"{full}-1{suffix}"
    scale = 1000 if legacy else 10000
    soname = f"libcudnn.so.{major}"
    real = f"libcudnn.so.{version}"
    code = version_code(version, (scale, 100, 1))
    source = f"#include <stddef.h>\nsize_t cudnnGetVersion(void) {{ return {code}; }}\n"
    header = f"/usr/include/x86_64-linux-gnu/cudnn_version_v{major}.h"
    return [
        BinaryPackage(
            PackageSpec(name=runtime, version=pkg_version, architecture="amd64",
                        description=f"gpuprov stand-in cuDNN {version} runtime libraries for CUDA {cuda}",
                        files={f"{LIBDIR}/{soname}": FileSpec(link=real)}, scripts={"postinst": LDCONFIG}),
            {f"{LIBDIR}/{real}": shared_library(soname, source)},
        ),
        PackageSpec(
            name=dev, version=pkg_version, architecture="amd64", depends=(f"{runtime} (= {pkg_version})",),
            description=f"gpuprov stand-in cuDNN {version} development headers for CUDA {cuda}",
            files={header: FileSpec(CUDNN_HEADER.format(version=version, major=major, minor=minor, patch=patch,
                                                        scale=scale)),
                   "/usr/include/cudnn_version.h": FileSpec(link=f"x86_64-linux-gnu/cudnn_version_v{major}.h"),
                   f"{LIBDIR}/libcudnn.so": FileSpec(link=soname)},
        ),
    ]


NCCL_HEADER = """\
/* gpuprov stand-in of nccl.h for NCCL {version} (built for CUDA {cuda}) */
#ifndef NCCL_H_
#define NCCL_H_

#define NCCL_MAJOR {major}
#define NCCL_MINOR {minor}
#define NCCL_PATCH {patch}
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE {code}
#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

typedef enum {{ ncclSuccess = 0 }} ncclResult_t;
ncclResult_t ncclGetVersion(int *version);

#endif /* NCCL_H_ */
"""


def nccl_packages(version: str, cuda: str) -> list[StandinPackage]:
    """``libnccl2`` and ``libnccl-dev`` at ``<version>-1+cuda<cuda>`` ("2.26.2", "12.8").

    Raises:
        ConfigError: unknown release or build, or gcc failed.
        EnvironmentMissing: gcc is not installed (the shared library is compiled here).
    """
    if cuda not in NCCL_RELEASES.get(version, ()):
        raise ConfigError(f"stand-in NCCL {version} has no build for CUDA {cuda}")
    major, minor, patch = version.split(".")
    pkg_version = f"{version}-1+cuda{cuda}"
    code = version_code(version, (10000, 100, 1))
    real = f"libnccl.so.{version}"
    source = f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n"
    return [
        BinaryPackage(
            PackageSpec(name="libnccl2", version=pkg_version, architecture="amd64",
                        description=f"gpuprov stand-in NVIDIA Collective Communication Library (NCCL) Runtime\n"
                                    f"NCCL {version} built for CUDA {cuda}.",
                        files={f"{LIBDIR}/libnccl.so.2": FileSpec(link=real)}, scripts={"postinst": LDCONFIG}),
            {f"{LIBDIR}/{real}": shared_library("libnccl.so.2", source)},
        ),
        PackageSpec(
            name="libnccl-dev", version=pkg_version, architecture="amd64", depends=(f"libnccl2 (= {pkg_version})",),
            description=f"gpuprov stand-in NCCL development files\nNCCL {version} built for CUDA {cuda}.",
            files={"/usr/include/nccl.h": FileSpec(NCCL_HEADER.format(version=version, cuda=cuda, major=major,
                                                                      minor=minor, patch=patch, code=code)),
                   f"{LIBDIR}/libnccl.so": FileSpec(link="libnccl.so.2")},
        ),
    ]


def lab_toolkit_packages(cuda: Iterable[str] = ("11.8", "12.2", "12.8", "13.0")) -> list[StandinPackage]:
    """Toolkits ``cuda`` (major.minor each) with every cuDNN and NCCL build offered for them (what a lab
    repository serves).

    Raises:
        ConfigError: no stand-in data for a toolkit of ``cuda``, or gcc failed.
        EnvironmentMissing: gcc is not installed.
    """
    wanted = list(cuda)
    majors = {c.split(".")[0] for c in wanted}
    out: list[StandinPackage] = []
    for version in wanted:
        out.extend(cuda_toolkit(version))
    for cudnn, (_, builds) in CUDNN_RELEASES.items():
        for build in builds:
            if build in majors or build in wanted:
                out.extend(cudnn_packages(cudnn, build))
    for nccl, nccl_builds in NCCL_RELEASES.items():
        for build in nccl_builds:
            if build.split(".")[0] in majors:
                out.extend(nccl_packages(nccl, build))
    return out


def lab_toolkit_packages_for(os_name: str) -> list[StandinPackage]:
    """:func:`lab_toolkit_packages` for the stand-in toolkits NVIDIA publishes for ``os_name`` ("debian12",
    "ubuntu2404" ...), per the compatibility matrix's OS rows (CUDA 13.0 is not published for Ubuntu 20.04).

    Raises:
        ConfigError: the matrix has no such OS, or gcc failed.
        EnvironmentMissing: gcc is not installed.
    """
    from gpuprov.matrix import load_matrix

    matrix = load_matrix()
    if os_name not in matrix.os:
        raise ConfigError(f"stand-in CUDA repository: no OS {os_name!r} in the compatibility matrix")
    return lab_toolkit_packages([c for c in CUDA_RELEASES if matrix.os_has_cuda(os_name, c)])
