"""Checks of the settings that install from NVIDIA's files rather than packages: ``cuda.method: runfile`` and
``cudnn.method: archive``.

NVIDIA names the files after what they hold, and the checks read those names where the URL is written in the
fleet file (an ``{env: NAME}`` URL is read only on the controller at run time; the roles assert the same there):

* the CUDA runfile ``cuda_<toolkit version>_<driver version>_linux.run`` (``cuda_12.8.1_570.124.06_linux.run``,
  https://developer.nvidia.com/cuda-downloads);
* the cuDNN archive ``cudnn-linux-x86_64-<cuDNN version>_cuda<CUDA major>-archive.tar.xz``
  (``cudnn-linux-x86_64-9.10.2.21_cuda12-archive.tar.xz``, https://developer.download.nvidia.com/compute/cudnn/redist/cudnn/linux-x86_64/).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from gpuprov.fleet.hostcheck import HostCheck

#: NVIDIA's CUDA runfile name: group 1 the toolkit version, group 2 the driver it bundles.
RUNFILE_NAME = re.compile(r"^cuda_(\d+\.\d+\.\d+)_(\d+\.\d+(?:\.\d+)?)_linux\.run$")
#: NVIDIA's cuDNN archive name: group 1 the cuDNN version (four parts), group 2 the CUDA major it is built for.
#: roles/cudnn/vars/main.yml (``__cudnn_archive_name``) reads the same name on the host.
CUDNN_ARCHIVE_NAME = re.compile(r"^cudnn-linux-x86_64-(\d+\.\d+\.\d+(?:\.\d+)?)_cuda(\d+)-archive\.tar\.xz$")


def file_name(url: Any) -> str | None:
    """The last path segment of ``url`` (``https://h/p/cuda_12.8.1_570.124.06_linux.run`` ->
    ``cuda_12.8.1_570.124.06_linux.run``), or None for an ``{env: NAME}`` reference or no URL."""
    if not isinstance(url, str):
        return None
    return urlsplit(url).path.rsplit("/", maxsplit=1)[-1]


def check_nvidia_files(ctx: HostCheck, s: dict[str, Any]) -> None:
    """Report the problems of ``cuda.method: runfile`` and ``cudnn.method: archive`` in one host's merged
    settings ``s``: a missing URL or checksum, URL or checksum fields without their method, a runfile for another
    toolkit release, an archive for another cuDNN or CUDA major."""
    _check_runfile(ctx, s["cuda"])
    _check_archive(ctx, s["cudnn"], s["cuda"]["version"])


def _require(ctx: HostCheck, section: str, method: str, fields: dict[str, str], values: dict[str, Any]) -> None:
    for key, fix in fields.items():
        if values[key] is None:
            ctx.fail((section, key), f"{section} method {method} needs {section}.{key}", fix,
                     anchor=(section, "method"))


def _stray(ctx: HostCheck, section: str, method: str, values: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if values[key] is not None and values["method"] != method:
            ctx.fail((section, key), f"{section}.{key} is set but {section}.method is {values['method']}",
                     f"set {section}.method: {method} to install from it, or remove {section}.{key}")


def _check_runfile(ctx: HostCheck, cuda: dict[str, Any]) -> None:
    _stray(ctx, "cuda", "runfile", cuda, ("runfile_url", "runfile_sha256"))
    if cuda["method"] != "runfile" or cuda["version"] is None:
        return
    _require(ctx, "cuda", "runfile", {
        "runfile_url": "add the URL gpuprov downloads NVIDIA's cuda_<version>_<driver>_linux.run from (your mirror)",
        "runfile_sha256": "add the runfile's SHA-256 (`sha256sum cuda_<version>_<driver>_linux.run`)",
    }, cuda)
    version = cuda["version"]
    if version.count(".") != 2:
        ctx.fail(("cuda", "version"), f"a runfile installs one exact release, not CUDA {version}",
                 'give the release the runfile holds, e.g. "12.8.1" for cuda_12.8.1_570.124.06_linux.run')
        return
    name = file_name(cuda["runfile_url"])
    match = RUNFILE_NAME.match(name) if name else None
    if match and match[1] != version:
        ctx.fail(("cuda", "runfile_url"), f"{name} holds CUDA {match[1]}, but cuda.version is {version}",
                 f'point cuda.runfile_url at the CUDA {version} runfile, or set cuda.version: "{match[1]}"')


def _check_archive(ctx: HostCheck, cudnn: dict[str, Any], cuda: str | None) -> None:
    _stray(ctx, "cudnn", "archive", cudnn, ("archive_url", "archive_sha256"))
    if cudnn["method"] != "archive" or cudnn["version"] is None:
        return
    archive = "cudnn-linux-x86_64-<version>_cuda<major>-archive.tar.xz"
    _require(ctx, "cudnn", "archive", {
        "archive_url": f"add the URL of NVIDIA's {archive} (your mirror)",
        "archive_sha256": f"add the archive's SHA-256 (`sha256sum {archive}`)",
    }, cudnn)
    name = file_name(cudnn["archive_url"])
    if name is None:
        return
    match = CUDNN_ARCHIVE_NAME.match(name)
    if match is None:
        shown = f"{name} is not named" if name.strip(".") else "the URL does not end in a file named"
        ctx.fail(("cudnn", "archive_url"), f"{shown} like NVIDIA's cuDNN archive, so the CUDA major it "
                 "is built for is unknown", "keep NVIDIA's file name "
                 "cudnn-linux-x86_64-<version>_cuda<major>-archive.tar.xz on your mirror")
        return
    version, major = match[1], match[2]
    wanted = cudnn["version"]
    if version != wanted and not version.startswith(wanted + "."):
        ctx.fail(("cudnn", "archive_url"), f"{name} holds cuDNN {version}, but cudnn.version is {wanted}",
                 f'point cudnn.archive_url at the cuDNN {wanted} archive, or set cudnn.version: '
                 f'"{".".join(version.split(".")[:3])}"')
    if cuda is not None and cuda.split(".")[0] != major:
        ctx.fail(("cudnn", "archive_url"), f"{name} is built for CUDA {major}, but cuda.version is {cuda}",
                 f"use the _cuda{cuda.split('.')[0]}-archive build of cuDNN {wanted}")
