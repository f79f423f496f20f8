"""Fixtures: the mock library built once per session, and pynvml bound to it in this process.

pynvml loads ``libnvidia-ml.so.1`` once into ``pynvml.nvmlLib``; binding that to the mock's path lets
every test run in-process. The mock reads its profile at each first ``nvmlInit``, so a test switches
profile through ``GPUPROV_MOCK_NVML_CONF`` and shuts NVML down afterwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from gpuprov.lab.mocknvml import bind_pynvml, build_library, compile_profile


@pytest.fixture(scope="session")
def mock_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the mock once; skip the tests when no C compiler is installed."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    return build_library(tmp_path_factory.mktemp("mocknvml-lib"))


@pytest.fixture(scope="session")
def _bound_pynvml(mock_library: Path) -> ModuleType:
    return bind_pynvml(mock_library)


@pytest.fixture
def use_profile(
    _bound_pynvml: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str | Path], ModuleType]]:
    """Return a function that selects a profile for the next ``nvmlInit`` and returns pynvml."""

    def select(profile: str | Path) -> ModuleType:
        conf = tmp_path / "mock-nvml.conf"
        conf.write_text(compile_profile(profile), encoding="utf-8")
        monkeypatch.setenv("GPUPROV_MOCK_NVML_CONF", str(conf))
        module: ModuleType = pynvml
        return module

    yield select
    # Leave NVML shut down for the next test, whatever this one did.
    while True:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            break


@pytest.fixture
def nvml(use_profile: Callable[[str | Path], ModuleType]) -> Callable[[str | Path], ModuleType]:
    """Return a function that selects a profile, runs ``nvmlInit`` and returns pynvml."""

    def init(profile: str | Path) -> ModuleType:
        module = use_profile(profile)
        module.nvmlInit()
        bound: ModuleType = module
        return bound

    return init
