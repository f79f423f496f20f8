"""The MIG profile tables of the compatibility matrix (``mig`` in ``plugins/plugin_utils/matrix.yml``).

Each row there gives, for some GPU models, one GPU's compute and memory slices and per profile
``[compute slices, memory slices, most instances per GPU]``, from NVIDIA's MIG User Guide, "Supported MIG
Profiles" (the row's ``source``). :func:`mig_geometries` turns the rows into model -> :class:`MigGeometry`.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MigProfile:
    """A MIG GPU instance profile (``1g.10gb``): compute and memory slices of one instance, most instances per GPU."""

    name: str
    compute: int
    memory: int
    most: int


@dataclass(frozen=True)
class MigGeometry:
    """What one MIG GPU of ``models`` can be split into: its compute and memory slices and its profiles."""

    models: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]
    verified: bool
    source: str


def mig_geometries(rows: list[dict[str, Any]], mig_models: Set[str]) -> dict[str, MigGeometry]:
    """Model -> geometry from the matrix rows; each model must be one of ``mig_models`` (the GPU rows with
    ``mig: true``), listed once, and each of those must be listed (ValueError otherwise: a matrix bug)."""
    out: dict[str, MigGeometry] = {}
    for row in rows:
        profiles = {str(name): MigProfile(str(name), *(int(n) for n in numbers))
                    for name, numbers in row["profiles"].items()}
        geometry = MigGeometry(tuple(row["models"]), int(row["compute_slices"]), int(row["memory_slices"]),
                               profiles, bool(row["verified"]), row["source"])
        for model in geometry.models:
            if model not in mig_models or model in out:
                raise ValueError(f"mig: {model} is not a MIG GPU of the gpus section, or is listed twice")
            out[model] = geometry
    missing = sorted(mig_models - set(out))
    if missing:
        raise ValueError(f"mig: no profiles for the MIG GPUs {', '.join(missing)}")
    return out
