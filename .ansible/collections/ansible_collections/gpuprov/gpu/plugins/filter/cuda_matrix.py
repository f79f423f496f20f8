# Copyright: gpuprov contributors
# Apache-2.0
"""Filters over the compatibility matrix the collection carries (``plugins/plugin_utils/matrix.yml``).

The cuda role asserts the host's driver against the matrix; the numbers and the rule come from
``plugin_utils/cuda_drivers.py``, which gpuprov's own matrix queries use too, so any play that has the
collection can run the role, with or without the gpuprov package.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.cuda_drivers import MatrixDataError, cuda_drivers, load_raw


def _drivers(cuda: Any) -> tuple[str, str]:
    try:
        found = cuda_drivers(load_raw(), str(cuda))
    except MatrixDataError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if found is None:
        raise AnsibleFilterError(f"CUDA {cuda} is not in gpuprov's compatibility matrix (gpuprov matrix)")
    return found


def cuda_min_driver(cuda: str) -> str:
    """Lowest driver that runs CUDA ``cuda`` (major.minor[.patch]) at all: the matrix's minor-version
    compatibility floor, or the toolkit's own driver when that is lower. Raises on an unknown CUDA."""
    return _drivers(cuda)[1]


def cuda_toolkit_driver(cuda: str) -> str:
    """Driver CUDA ``cuda`` shipped with (full compatibility, PTX JIT included). Raises on an unknown CUDA."""
    return _drivers(cuda)[0]


class FilterModule:
    """cuda_min_driver, cuda_toolkit_driver (gpuprov.gpu.cuda_min_driver in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"cuda_min_driver": cuda_min_driver, "cuda_toolkit_driver": cuda_toolkit_driver}
