"""The cuda_matrix filter plugin: the driver floors the cuda role asserts come from the matrix the collection
carries, the same file and rule as gpuprov's, with or without the gpuprov package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import ansible
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter import cuda_matrix

from gpuprov.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[3]


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


def test_filter_runs_without_the_gpuprov_package(tmp_path: Path) -> None:
    """An admin's controller with ansible-core and the collection only: the filter reads the collection's matrix."""
    site = Path(ansible.__file__).resolve().parents[1]
    script = (
        "import importlib.util, sys; sys.path[:0] = sys.argv[1:]\n"
        "assert importlib.util.find_spec('gpuprov') is None, 'gpuprov is importable'\n"
        "from ansible_collections.gpuprov.gpu.plugins.filter.cuda_matrix import FilterModule\n"
        "f = FilterModule().filters(); print(f['cuda_min_driver']('12.8'), f['cuda_toolkit_driver']('12.8'))\n"
    )
    # -S: no site-packages .pth files, so neither the editable gpuprov nor its collection link is on the path
    proc = subprocess.run([sys.executable, "-S", "-c", script, str(site), str(ROOT / ".collections")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["525.60.13", "570.26"]
