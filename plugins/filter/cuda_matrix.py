# Copyright: gpuprov contributors
# Apache-2.0
"""Filters that read gpuprov's compatibility matrix (gpuprov/data/matrix.yml) on the controller.

The cuda role asserts the host's driver against the matrix. The matrix ships inside the gpuprov
package that runs the play (gpuprov.runner, Molecule and a plain ``ansible-playbook`` all run in the
environment where gpuprov is installed, since the inventory is rendered by it), so the role calls
``gpuprov.matrix`` instead of keeping a copy of its numbers that could drift.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def _matrix() -> Any:
    try:
        from gpuprov.matrix import load_matrix
    except ImportError as exc:  # pragma: no cover - only without gpuprov on the controller
        raise AnsibleFilterError(
            "the cuda role reads the compatibility matrix through the gpuprov package; run it from the "
            f"environment gpuprov is installed in ({exc})"
        ) from exc
    return load_matrix()


def cuda_min_driver(cuda: str) -> str:
    """Lowest driver that runs CUDA ``cuda`` (major.minor[.patch]) at all: the matrix's minor-version
    compatibility floor, or the toolkit's own driver when that is lower. Raises on an unknown CUDA."""
    found = _matrix().min_driver(str(cuda))
    if found is None:
        raise AnsibleFilterError(f"CUDA {cuda} is not in gpuprov's compatibility matrix (gpuprov matrix)")
    return str(found)


def cuda_toolkit_driver(cuda: str) -> str:
    """Driver CUDA ``cuda`` shipped with (full compatibility, PTX JIT included). Raises on an unknown CUDA."""
    found = _matrix().toolkit_driver(str(cuda))
    if found is None:
        raise AnsibleFilterError(f"CUDA {cuda} is not in gpuprov's compatibility matrix (gpuprov matrix)")
    return str(found)


class FilterModule:
    """cuda_min_driver, cuda_toolkit_driver (gpuprov.gpu.cuda_min_driver in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"cuda_min_driver": cuda_min_driver, "cuda_toolkit_driver": cuda_toolkit_driver}
