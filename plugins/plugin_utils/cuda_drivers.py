# Copyright: gpuprov contributors
# Apache-2.0
"""The compatibility matrix (``plugin_utils/matrix.yml``, NVIDIA's numbers with their sources) as the
collection carries it, and the one rule for the driver a CUDA toolkit needs.

Two readers: the cuda role's filters (``plugins/filter/cuda_matrix.py``), in any play that has the
collection, and the gpuprov package (``gpuprov.matrix`` builds its typed tables from :func:`load_raw`).

Public API::

    load_raw() -> dict                   # matrix.yml parsed once per process; raises MatrixDataError
    cuda_drivers(raw, cuda: str) -> (toolkit driver, minimum driver) | None
    min_driver(toolkit_driver: str, floor: str | None) -> str
    version_key(version: str) -> tuple   # "550.54.14" -> (550, 54, 14), for comparisons

Must stay importable on Python 3.8 and without Ansible: it needs PyYAML only, which ansible-core requires.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

MATRIX_FILE = Path(__file__).with_name("matrix.yml")


class MatrixDataError(Exception):
    """matrix.yml is missing or is not a YAML mapping."""


@functools.lru_cache(maxsize=1)
def load_raw() -> Any:
    """:data:`MATRIX_FILE` parsed (a mapping: ``cuda``, ``cudnn``, ``nccl``, ``gpus``, ...), once per process.

    Raises:
        MatrixDataError: the file cannot be read or parsed, or is not a mapping.
    """
    try:
        # libyaml's loader where PyYAML has it: the same document, ten times faster than the Python one
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(MATRIX_FILE.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, yaml.YAMLError) as exc:
        raise MatrixDataError(f"cannot read the compatibility matrix {MATRIX_FILE}: {exc!r}") from exc
    if not isinstance(raw, dict):
        raise MatrixDataError(f"the compatibility matrix {MATRIX_FILE} is not a mapping")
    return raw


def version_key(version: str) -> tuple[int, ...]:
    """Turn ``"535.104.05"`` into ``(535, 104, 5)`` for ordering; non-numeric parts count as 0."""
    return tuple(int(part) if part.isdigit() else 0 for part in str(version).split("."))


def cuda_drivers(raw: Any, cuda: str) -> tuple[str, str] | None:
    """``(toolkit driver, minimum driver)`` of CUDA ``cuda`` (matched on major.minor) in the parsed matrix
    ``raw``, or None when the matrix has no such CUDA."""
    wanted = ".".join(str(cuda).split(".")[:2])
    for row in raw.get("cuda") or []:
        if str(row["version"]) == wanted:
            floor = (raw.get("minor_compat_floor") or {}).get(wanted.split(".", maxsplit=1)[0])
            driver = str(row["driver"])
            return driver, min_driver(driver, None if floor is None else str(floor))
    return None


def min_driver(toolkit_driver: str, floor: str | None) -> str:
    """Lowest driver that runs a CUDA toolkit at all: its major's minor-version compatibility ``floor``, or the
    driver the toolkit shipped with (``toolkit_driver``) when there is no floor or the floor is higher
    (CUDA Compatibility guide, "Minor Version Compatibility")."""
    if floor is None or version_key(toolkit_driver) < version_key(floor):
        return toolkit_driver
    return floor
