"""Which driver methods `gpuprov validate` lets through: cuda-repo and distro are implemented by the
nvidia_driver role; ubuntu-drivers and runfile are refused before any host is touched (issue 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import Fleet
from gpuprov.fleet.checks import IMPLEMENTED_METHODS
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded


def _validate(os_name: str, driver: str) -> Fleet:
    text = (f"version: 1\nsettings:\n  os: {os_name}\n  gpus: {{model: L40S, count: 4}}\n"
            f"  driver: {driver}\nhosts:\n  gpu01: {{address: 10.0.0.11}}\n")
    return validate_loaded(load_text(text, "m.yml"), Path("m.yml"))


def test_distro_is_implemented_and_ubuntu_drivers_runfile_are_not() -> None:
    assert IMPLEMENTED_METHODS == ("cuda-repo", "distro")


def test_distro_on_debian12_at_debians_branch_validates() -> None:
    fleet = _validate("debian12", '{method: distro, branch: "535"}')
    settings = fleet.hosts["gpu01"].settings
    assert settings["driver"]["method"] == "distro" and settings["driver"]["branch"] == "535"


@pytest.mark.parametrize(("os_name", "driver"), [
    ("ubuntu2204", "{method: ubuntu-drivers}"),
    ("ubuntu2204", '{method: runfile, version: "580.95.05", runfile_url: "https://m.example.com/d.run", '
                   "runfile_sha256: " + "a" * 64 + "}"),
])
def test_unimplemented_method_is_refused_naming_the_implemented_ones(os_name: str, driver: str) -> None:
    with pytest.raises(FleetValidationError) as info:
        _validate(os_name, driver)
    messages = [str(p) for p in info.value.problems if p.path == "settings.driver.method"]
    assert any("is not implemented yet" in m and "cuda-repo or distro" in m for m in messages), messages
