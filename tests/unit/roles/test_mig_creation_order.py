"""miglayout.creation_order: the order the mig_layout engine and the boot unit's nvidia-smi create GPU instances."""

from __future__ import annotations

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils.miglayout import creation_order


@pytest.mark.parametrize(("devices", "order"), [
    ({"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 1}, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    ({"1g.18gb": 1, "7g.141gb": 0, "1g.18gb+me": 1, "2g.35gb": 1}, ["2g.35gb", "1g.18gb", "1g.18gb+me"]),
    ({"7g.80gb": 1}, ["7g.80gb"]),
    ({}, []),
])  # fmt: skip
def test_largest_first_then_by_name_one_entry_per_instance(devices: dict[str, int], order: list[str]) -> None:
    assert creation_order(devices) == order
