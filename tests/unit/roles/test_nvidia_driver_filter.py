"""The nvidia_driver_packages filter: the role's package names come from the collection's one rule, and a
branch or flavour the rule does not know fails instead of naming packages that do not exist."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuprov.gpu.plugins.filter.nvidia_driver import FilterModule
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_packages

FILTER = FilterModule().filters()["nvidia_driver_packages"]


@pytest.mark.parametrize("flavour", ["proprietary", "open", "server", "auto"])
def test_names_are_the_rules(flavour: str) -> None:
    assert FILTER("580", flavour) == driver_packages("580", flavour)


def test_server_takes_the_server_userland() -> None:
    assert FILTER("570", "server") == {
        "meta": "nvidia-driver-570-server", "dkms": "nvidia-dkms-570-server",
        "userland": ["libnvidia-compute-570-server", "nvidia-utils-570-server", "nvidia-compute-utils-570-server"],
        "fabric_manager": "nvidia-fabricmanager-570"}


@pytest.mark.parametrize(("branch", "flavour", "message"), [
    ("", "open", "branch '' is not a driver branch"),
    (None, "open", "branch None is not a driver branch"),
    ("580", "Open", "flavour 'Open' is not one of proprietary, open, server, auto"),
    ("580", None, "flavour None is not one of"),
])
def test_an_unknown_branch_or_flavour_fails(branch: str, flavour: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        FILTER(branch, flavour)
