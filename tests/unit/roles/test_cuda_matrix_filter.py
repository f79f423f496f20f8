"""The cuda_matrix filter plugin: the driver floors the cuda role asserts come from gpuprov's matrix."""

from __future__ import annotations

from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter import cuda_matrix

from gpuprov.matrix import load_matrix


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    return cuda_matrix


@pytest.mark.parametrize(("cuda", "floor"), [("11.8", "450.80.02"), ("12.8", "525.60.13"), ("12.8.1", "525.60.13"),
                                             ("13.0", "580.65.06"), ("11.4", "450.80.02")])
def test_min_driver_is_the_matrix_floor(plugin: ModuleType, cuda: str, floor: str) -> None:
    filters = plugin.FilterModule().filters()
    assert filters["cuda_min_driver"](cuda) == floor == load_matrix().min_driver(cuda)


def test_toolkit_driver_is_the_release_driver(plugin: ModuleType) -> None:
    filters = plugin.FilterModule().filters()
    assert filters["cuda_toolkit_driver"]("12.8") == "570.26"


def test_unknown_cuda_is_an_error_not_a_pass(plugin: ModuleType) -> None:
    filters = plugin.FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match="not in gpuprov's compatibility matrix"):
        filters["cuda_min_driver"]("10.2")
