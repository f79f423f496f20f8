"""gpuprov.role_code loads the roles' shared Python once, under the names Ansible's modules import."""

from __future__ import annotations

import sys

import pytest

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.role_code import library, module_utils


def test_module_utils_are_registered_for_ansible_imports() -> None:
    findings = module_utils("gpuprov_findings")
    assert sys.modules["ansible.module_utils.gpuprov_findings"] is findings
    assert module_utils("gpuprov_findings") is findings
    assert findings.norm_bus("00000000:3B:00.0") == "0000:3b:00.0"


def test_library_module_uses_the_shared_helpers() -> None:
    platform = library("platform_info", needs=("gpuprov_findings",))
    assert platform.norm_bus is module_utils("gpuprov_findings").norm_bus


def test_missing_file_is_an_environment_error() -> None:
    with pytest.raises(EnvironmentMissing, match="reinstall gpuprov"):
        module_utils("no_such_module")
    assert "ansible.module_utils.no_such_module" not in sys.modules
