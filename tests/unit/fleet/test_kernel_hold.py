"""Fleet-file side of ``kernel.hold``: default false, merged per layer like any setting, a boolean or an error that
names the field, and rendered as the hwe_kernel, nvidia_driver and verify roles' own variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded
from gpuprov.render import flatten
from gpuprov.rolevars import role_variables, with_role_variables

FLEET = """version: 1
settings: {os: ubuntu2204, gpus: {model: T4, count: 1}}
groups:
  held: {settings: {kernel: {hold: true}}}
hosts:
  gpu01: {address: 10.0.0.11}
  gpu02: {address: 10.0.0.12, groups: [held]}
  gpu03: {address: 10.0.0.13, groups: [held], settings: {kernel: {hold: false}}}
"""
ROLE_VARS = ("hwe_kernel_hold", "nvidia_driver_kernel_hold", "verify_kernel_hold")


def test_kernel_hold_defaults_false_merges_per_layer_and_reaches_the_roles() -> None:
    fleet = validate_loaded(load_text(FLEET, "t.yml"), Path("t.yml"), check_files=False)
    seen = {}
    for name, host in fleet.hosts.items():
        flat = flatten(host.settings)
        rendered = role_variables(flat)
        seen[name] = (flat["gpuprov_kernel_hold"], *(rendered[v] for v in ROLE_VARS))
    assert seen == {"gpu01": (False,) * 4, "gpu02": (True,) * 4, "gpu03": (False,) * 4}
    # `gpuprov apply -e gpuprov_kernel_hold=true` is mapped the same way; an explicit role variable wins
    assert {k: v for k, v in with_role_variables({"gpuprov_kernel_hold": "true"}).items() if k in ROLE_VARS} == (
        dict.fromkeys(ROLE_VARS, "true"))
    assert with_role_variables({"gpuprov_kernel_hold": "true", "hwe_kernel_hold": "false"})["hwe_kernel_hold"] == (
        "false")


@pytest.mark.parametrize(("value", "path", "problem"), [
    ('{hold: "yes"}', "settings.kernel.hold", "true or false"),
    ("true", "settings.kernel", "expected a mapping"),
    ("{hold: true, pin: 6.8}", "settings.kernel.pin", "pin"),
])
def test_kernel_settings_errors_name_the_field(value: str, path: str, problem: str) -> None:
    text = FLEET.replace("settings: {os: ubuntu2204,", f"settings: {{kernel: {value}, os: ubuntu2204,", 1)
    with pytest.raises(FleetValidationError) as caught:
        validate_loaded(load_text(text, "t.yml"), Path("t.yml"), check_files=False)
    problems = {p.path: f"{p.problem} - {p.fix}" for p in caught.value.problems}
    assert list(problems) == [path], problems
    assert problem in problems[path]
