"""roles/cuda/filter_plugins/cuda_matrix.py: the driver floors the cuda role asserts come from gpuprov's matrix."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

from gpuprov.matrix import load_matrix

PLUGIN = Path(__file__).resolve().parents[3] / "roles" / "cuda" / "filter_plugins" / "cuda_matrix.py"


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuprov_cuda_matrix_filter", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("cuda", "floor"), [("11.8", "450.80.02"), ("12.8", "525.60.13"), ("12.8.1", "525.60.13"),
                                             ("13.0", "580.65.06"), ("11.4", "450.80.02")])
def test_min_driver_is_the_matrix_floor(plugin: ModuleType, cuda: str, floor: str) -> None:
    filters = plugin.FilterModule().filters()
    assert filters["gpuprov_cuda_min_driver"](cuda) == floor == load_matrix().min_driver(cuda)


def test_toolkit_driver_is_the_release_driver(plugin: ModuleType) -> None:
    filters = plugin.FilterModule().filters()
    assert filters["gpuprov_cuda_toolkit_driver"]("12.8") == "570.26"


def test_unknown_cuda_is_an_error_not_a_pass(plugin: ModuleType) -> None:
    filters = plugin.FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match="not in gpuprov's compatibility matrix"):
        filters["gpuprov_cuda_min_driver"]("10.2")
