"""NVIDIA compatibility matrix: typed, cached queries over the collection's ``plugins/plugin_utils/matrix.yml``.

The numbers live in the YAML file, one row per CUDA toolkit, cuDNN release, NCCL release, GPU model, driver
branch, OS and MIG profile table (:mod:`gpuprov.mig_profiles`), each citing the NVIDIA page it comes from
(``source``) and whether it was checked against that page (``verified``). :func:`load_matrix` parses the
file once per process (cached), so validating a 100-host fleet costs one parse.

Versions are strings: drivers ``"550.54.14"`` (branch ``"550"``), CUDA ``"12.4"``; cuDNN and NCCL rows
match a requested version on ``major.minor``. Malformed data raises :class:`MatrixError`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from ansible_collections.gpuprov.gpu.plugins.plugin_utils import cuda_drivers

from gpuprov.exceptions import GpuprovError
from gpuprov.matrix_rows import (
    BRANCH_KIND_NAMES,
    HOST_ARCHES,
    CudaRelease,
    CudnnBuild,
    CudnnRelease,
    DriverBranch,
    GpuModel,
    NcclRelease,
    OpenModules,
    OsEntry,
)
from gpuprov.mig_profiles import MigGeometry, mig_geometries

__all__ = ["BRANCH_KIND_NAMES", "HOST_ARCHES", "INSTALL_METHODS", "CudaRelease", "CudnnBuild", "CudnnRelease",
           "DriverBranch", "GpuModel", "Matrix", "MatrixError", "NcclRelease", "OpenModules", "OsEntry", "branch_of",
           "load_matrix", "major_minor", "matrix_from_text", "model_key", "version_key"]

INSTALL_METHODS = ("cuda-repo", "distro", "ubuntu-drivers", "runfile")
_Row = TypeVar("_Row")


class MatrixError(GpuprovError):
    """The packaged matrix file is missing or malformed (a gpuprov bug, not a user error). Exit 4."""

    exit_code = 4


def version_key(version: str) -> tuple[int, ...]:
    """``"535.104.05"`` -> ``(535, 104, 5)`` for ordering (the collection's rule: non-numeric parts count as 0)."""
    return tuple(cuda_drivers.version_key(version))


def major_minor(version: str) -> str:
    """``"12.4.1"`` -> ``"12.4"``; ``"12"`` stays ``"12"``."""
    return ".".join(version.split(".")[:2])


def branch_of(driver_version: str) -> str:
    """Branch of a driver version: ``"535.104.05"`` -> ``"535"``."""
    return driver_version.split(".", maxsplit=1)[0]


#: Words NVML puts before the model in a product name.
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO"})


def model_key(model: str) -> str:
    """Normalised GPU model name for lookups: case, spaces, ``-`` and ``_`` ignored (``rtx 3090`` = ``RTX-3090``)."""
    return re.sub(r"[\s_-]", "", model).upper()


@dataclass(frozen=True)
class Matrix:
    """The whole matrix with typed queries; build it with :func:`load_matrix`."""

    minor_compat_floor: dict[str, str]
    branches: dict[str, DriverBranch]
    open_first_branch: str
    open_default_branch: str
    cuda: dict[str, CudaRelease]
    cudnn: dict[str, CudnnRelease]
    nccl: dict[str, NcclRelease]
    gpus: dict[str, GpuModel]
    os: dict[str, OsEntry]
    mig: dict[str, MigGeometry]
    raw: dict[str, Any] = field(repr=False, compare=False)
    _gpu_keys: dict[str, str] = field(repr=False, compare=False, default_factory=dict)

    # -- lookups ---------------------------------------------------------------------------------
    def gpu(self, model: str) -> GpuModel | None:
        """The GPU row for ``model`` (spelling-tolerant, see :func:`model_key`), or None."""
        name = self._gpu_keys.get(model_key(model))
        return self.gpus[name] if name else None

    def gpu_for_nvml_name(self, name: str) -> GpuModel | None:
        """The GPU row for an NVML/nvidia-smi product name, or None when no row matches.

        Vendor words are dropped ("NVIDIA H200" -> H200, "NVIDIA GeForce RTX 3090" -> RTX-3090), then the
        exact model wins, else the longest model name that starts the product name ("Tesla
        V100-PCIE-32GB" -> V100-PCIe).
        """
        words = [w for w in name.split() if w.upper() not in _VENDOR_WORDS]
        key = model_key(" ".join(words))
        exact = self._gpu_keys.get(key)
        if exact:
            return self.gpus[exact]
        prefixes = [k for k in self._gpu_keys if key.startswith(k)]
        return self.gpus[self._gpu_keys[max(prefixes, key=len)]] if prefixes else None

    def mig_geometry(self, model: str) -> MigGeometry | None:
        """The MIG profiles of GPU ``model`` (spelling-tolerant), or None for a model without MIG."""
        gpu = self.gpu(model)
        return self.mig.get(gpu.model) if gpu else None

    def cuda_release(self, version: str) -> CudaRelease | None:
        """The CUDA row for ``version`` (matched on major.minor), or None."""
        return self.cuda.get(major_minor(version))

    def cudnn_release(self, version: str) -> CudnnRelease | None:
        """The cuDNN row whose major.minor equals ``version``'s, or None."""
        return _by_major_minor(self.cudnn, version)

    def nccl_release(self, version: str) -> NcclRelease | None:
        """The NCCL row whose major.minor equals ``version``'s, or None."""
        return _by_major_minor(self.nccl, version)

    # -- driver / CUDA ---------------------------------------------------------------------------
    def toolkit_driver(self, cuda: str) -> str | None:
        """Driver version CUDA ``cuda`` shipped with (full compatibility), or None when unknown."""
        release = self.cuda_release(cuda)
        return release.driver if release else None

    def min_driver(self, cuda: str) -> str | None:
        """Lowest driver that runs CUDA ``cuda`` at all (minor-version compatibility floor), or None."""
        release = self.cuda_release(cuda)
        if release is None:
            return None
        return str(cuda_drivers.min_driver(release.driver, self.minor_compat_floor.get(cuda.split(".", maxsplit=1)[0])))

    def branch_supports_cuda(self, branch: str, cuda: str) -> bool:
        """True when driver branch ``branch`` can run CUDA ``cuda`` (at least under minor compatibility)."""
        minimum = self.min_driver(cuda)
        return minimum is not None and int(branch) >= int(branch_of(minimum))

    # -- open kernel modules -----------------------------------------------------------------------
    def open_module_policy(self, model: str) -> OpenModules | None:
        """``unsupported``/``supported``/``required`` for ``model``'s architecture, or None if unknown."""
        gpu = self.gpu(model)
        return gpu.open_modules if gpu else None

    # -- libraries ---------------------------------------------------------------------------------
    def cudnn_build(self, cudnn: str, cuda: str) -> CudnnBuild | None:
        """The build of cuDNN ``cudnn`` that supports CUDA ``cuda`` (major.minor listed), or None."""
        release = self.cudnn_release(cudnn)
        if release is None:
            return None
        wanted = major_minor(cuda)
        return next((b for b in release.builds if wanted in b.cuda), None)

    def nccl_supports(self, nccl: str, cuda: str) -> bool:
        """True when NCCL ``nccl`` has a build for ``cuda``'s major version."""
        release = self.nccl_release(nccl)
        return release is not None and int(cuda.split(".", maxsplit=1)[0]) in release.cuda_majors

    # -- OS availability ---------------------------------------------------------------------------
    def os_has_branch(self, os_name: str, branch: str, method: str = "cuda-repo") -> bool | None:
        """Whether ``method`` can install ``branch`` on ``os_name``; None when the matrix does not know."""
        entry = self.os.get(os_name)
        if entry is None:
            return None
        if method == "cuda-repo":
            return branch in entry.cuda_repo_branches
        if method == "distro" and entry.distro_branches is not None:
            return branch in entry.distro_branches
        return None

    def os_has_cuda(self, os_name: str, cuda: str) -> bool:
        """Whether NVIDIA's repository publishes CUDA ``cuda`` for ``os_name``."""
        entry = self.os.get(os_name)
        if entry is None:
            return False
        key = version_key(major_minor(cuda))
        return version_key(entry.cuda_first) <= key <= version_key(entry.cuda_last)

    def fabric_manager_available(self, os_name: str, method: str) -> bool:
        """Whether gpuprov can install a matching Fabric Manager on ``os_name`` with driver ``method``."""
        entry = self.os.get(os_name)
        return entry is not None and method in entry.fabric_manager

    def branches_sorted(self) -> list[str]:
        """Known driver branches, oldest first."""
        return sorted(self.branches, key=int)


def _by_major_minor(table: dict[str, _Row], version: str) -> _Row | None:
    wanted = major_minor(version)
    for key, row in table.items():
        if major_minor(key) == wanted:
            return row
    return None


@functools.lru_cache(maxsize=1)
def load_matrix() -> Matrix:
    """Parse the collection's matrix file once per process and return the typed matrix.

    Raises :class:`MatrixError` when the file is missing or a row lacks a field.
    """
    try:
        return _build(cuda_drivers.load_raw())
    except (cuda_drivers.MatrixDataError, KeyError, TypeError, ValueError) as exc:
        raise MatrixError(f"cannot read the packaged compatibility matrix: {exc!r}") from exc


def matrix_from_text(text: str) -> Matrix:
    """The matrix that YAML ``text`` (a matrix.yml) describes, uncached (``gpuprov matrix update`` checks its
    result with it). Raises :class:`MatrixError` when the text is no YAML mapping or a row is malformed."""
    try:
        raw = yaml.safe_load(text)
        if not isinstance(raw, dict):
            raise TypeError("the matrix is not a mapping")
        return _build(raw)
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise MatrixError(f"the compatibility matrix is malformed: {exc!r}") from exc


def _checked_fields(row: dict[str, Any]) -> tuple[str, ...]:
    """A GPU row's ``checked`` list (every field when ``verified``); ValueError on a name that is no field."""
    fields = [f.name for f in dataclasses.fields(GpuModel) if f.name not in ("model", "verified", "source", "checked")]
    if row["verified"]:
        return tuple(fields)
    checked = tuple(str(name) for name in row.get("checked") or ())
    unknown = sorted(set(checked) - set(fields))
    if unknown:
        raise ValueError(f"gpus: {row['model']}: checked names {', '.join(unknown)}, which are no GPU fields")
    return checked


def _one_of(row: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = str(row.get(key, allowed[0]))
    if value not in allowed:
        raise ValueError(f"gpus: {row['model']}: {key} {value!r} is not one of {', '.join(allowed)}")
    return value


def _build(raw: dict[str, Any]) -> Matrix:
    gpus = {
        row["model"]: GpuModel(
            model=row["model"],
            architecture=row["architecture"],
            compute_capability=str(row["compute_capability"]),
            segment=row["segment"],
            min_branch=str(row["min_branch"]),
            max_branch=None if row["max_branch"] is None else str(row["max_branch"]),
            min_cuda=str(row["min_cuda"]),
            max_cuda=None if row["max_cuda"] is None else str(row["max_cuda"]),
            open_modules=row["open_modules"],
            mig=bool(row["mig"]),
            nvswitch_capable=bool(row["nvswitch_capable"]),
            tdp_watts=int(row["tdp_watts"]),
            verified=bool(row["verified"]),
            source=row["source"],
            checked=_checked_fields(row),
            host_arch=_one_of(row, "host_arch", HOST_ARCHES),
        )
        for row in raw["gpus"]
    }
    os_entries = {
        name: OsEntry(
            name=name,
            family=row["family"],
            cuda_repo_branches=tuple(row["cuda_repo_branches"]),
            cuda_first=row["cuda"]["first"],
            cuda_last=row["cuda"]["last"],
            distro_branches=None if row["distro_branches"] is None else tuple(row["distro_branches"]),
            fabric_manager=tuple(row["fabric_manager"]),
            verified=bool(row["verified"]),
            source=row["source"],
        )
        for name, row in raw["os"].items()
    }
    return Matrix(
        mig=mig_geometries(raw["mig"], {g.model for g in gpus.values() if g.mig}),
        minor_compat_floor={str(k): str(v) for k, v in raw["minor_compat_floor"].items()},
        branches={
            row["branch"]: DriverBranch(row["branch"], row["kind"], bool(row["verified"]), row["source"],
                                        str(row["eol"]) if row.get("eol") else None)
            for row in raw["driver_branches"]
        },
        open_first_branch=str(raw["open_modules"]["first_branch"]),
        open_default_branch=str(raw["open_modules"]["default_branch"]),
        cuda={
            row["version"]: CudaRelease(
                row["version"], row["driver"], row["branch"], bool(row["verified"]), row["source"]
            )
            for row in raw["cuda"]
        },
        cudnn={
            row["version"]: CudnnRelease(
                version=row["version"],
                builds=tuple(
                    CudnnBuild(int(b["cuda_major"]), tuple(b["cuda"]), str(b["min_driver"]))
                    for b in row["builds"]
                ),
                verified=bool(row["verified"]),
                source=row["source"],
            )
            for row in raw["cudnn"]
        },
        nccl={
            row["version"]: NcclRelease(row["version"], tuple(row["cuda"]), bool(row["verified"]), row["source"])
            for row in raw["nccl"]
        },
        gpus=gpus,
        os=os_entries,
        raw=raw,
        _gpu_keys={model_key(name): name for name in gpus},
    )

