"""Import the role-local Ansible modules of roles/gpuprov_common the way Ansible would resolve them.

Ansible finds `ansible.module_utils.gpuprov_kernels` in the role's module_utils/ and the modules in
library/; here both are loaded from their files so the tests exercise the shipped code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

COMMON = Path(__file__).resolve().parents[3] / "roles" / "gpuprov_common"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("ansible.module_utils.gpuprov_kernels", COMMON / "module_utils" / "gpuprov_kernels.py")


@pytest.fixture(scope="session")
def kernels_utils() -> ModuleType:
    return sys.modules["ansible.module_utils.gpuprov_kernels"]


@pytest.fixture(scope="session")
def initramfs_info() -> ModuleType:
    return _load("gpuprov_initramfs_info", COMMON / "library" / "initramfs_info.py")


@pytest.fixture(scope="session")
def gpu_pci_info() -> ModuleType:
    return _load("gpuprov_gpu_pci_info", COMMON / "library" / "gpu_pci_info.py")


_load("ansible.module_utils.gpuprov_findings", COMMON / "module_utils" / "gpuprov_findings.py")
# platform_info imports it (after gpuprov_findings, which it imports): without it here these tests passed only
# when another test file of the same process had loaded it first
_load("ansible.module_utils.gpuprov_health", COMMON / "module_utils" / "gpuprov_health.py")


@pytest.fixture(scope="session")
def findings_rules() -> ModuleType:
    return sys.modules["ansible.module_utils.gpuprov_findings"]


@pytest.fixture(scope="session")
def platform_info() -> ModuleType:
    return _load("gpuprov_platform_info", COMMON / "library" / "platform_info.py")
