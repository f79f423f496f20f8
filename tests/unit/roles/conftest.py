"""Fixtures: the collection's modules and module_utils, imported by the names Ansible resolves them by."""

from __future__ import annotations

from types import ModuleType

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import findings, kernels, platform_report
from ansible_collections.gpuprov.gpu.plugins.modules import gpu_pci_info as gpu_pci_info_module
from ansible_collections.gpuprov.gpu.plugins.modules import initramfs_info as initramfs_info_module


@pytest.fixture(scope="session")
def kernels_utils() -> ModuleType:
    return kernels


@pytest.fixture(scope="session")
def initramfs_info() -> ModuleType:
    return initramfs_info_module


@pytest.fixture(scope="session")
def gpu_pci_info() -> ModuleType:
    return gpu_pci_info_module


@pytest.fixture(scope="session")
def findings_rules() -> ModuleType:
    return findings


@pytest.fixture(scope="session")
def platform_info() -> ModuleType:
    """platform_info's reading code: module_utils/platform_report.py (``collect``)."""
    return platform_report
