"""The cuda role's driver check (roles/cuda/tasks/driver.yml): one assert for "a driver is installed" and "the
driver meets each toolkit's floor", run here as Ansible would, item by item (its when, loop, label, the first
failing condition and the fail_msg), rendered with the filters and tests it uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.plugins.test.core import version_compare
from ansible_collections.gpuprov.gpu.plugins.filter.cuda_matrix import cuda_min_driver, cuda_toolkit_driver
from jinja2 import StrictUndefined
from jinja2.nativetypes import NativeEnvironment

ROLE = Path(__file__).resolve().parents[3] / "roles" / "cuda"
TASK = next(task for task in yaml.safe_load((ROLE / "tasks" / "driver.yml").read_text(encoding="utf-8"))
            if task["name"] == "driver | Assert the driver meets each toolkit's minimum from the compatibility matrix")


def _env() -> NativeEnvironment:
    env = NativeEnvironment(undefined=StrictUndefined)
    env.filters["bool"] = lambda value: value is True or str(value).lower() in ("true", "yes", "1")
    env.filters["gpuprov.gpu.cuda_min_driver"] = cuda_min_driver
    env.filters["gpuprov.gpu.cuda_toolkit_driver"] = cuda_toolkit_driver
    env.tests["version"] = version_compare
    return env


def _run(driver: str, toolkits: list[str], check_mode: bool = False) -> list[tuple[str, str]] | None:
    """The assert's failures as (item label, message), [] when every item passes, None when the task is skipped."""
    env = _env()
    ctx: dict[str, Any] = {"__cuda_driver": driver, "__cuda_toolkits": toolkits, "__cuda_driver_source": "NVML",
                           "cuda_driver_check": True, "ansible_check_mode": check_mode,
                           "ansible_facts": {"gpuprov_gpus": {"available": False,
                                                              "error_name": "NVML_ERROR_LIBRARY_NOT_FOUND"}}}

    def render(text: str, **extra: Any) -> Any:
        return env.from_string(text).render({**ctx, **extra})

    if not all(render("{{ (" + cond + ") }}") for cond in TASK["when"]):
        return None
    args = TASK["ansible.builtin.assert"]
    failures = []
    for item in render(TASK["loop"]):
        for cond in args["that"]:  # assert stops at the first condition that fails
            if not render("{{ (" + cond + ") }}", item=item):
                failures.append((str(render(TASK["loop_control"]["label"], item=item)),
                                 str(render(args["fail_msg"], item=item)).strip()))
                break
    return failures


def test_a_missing_driver_fails_once_whatever_the_number_of_toolkits() -> None:
    failures = _run("", ["12.8", "12.4"])
    assert failures is not None and len(failures) == 1
    label, message = failures[0]
    assert label == "driver"
    assert message.startswith("No NVIDIA driver found (NVML: NVML_ERROR_LIBRARY_NOT_FOUND;")
    assert "cuda_driver_check false" in message


def test_a_driver_below_a_toolkits_floor_names_that_toolkit() -> None:
    failures = _run("535.261.03", ["13.0", "12.8"])
    assert failures is not None and len(failures) == 1
    label, message = failures[0]
    assert label == "13.0"
    assert message.startswith("CUDA 13.0 needs driver 580.65.06 or newer")
    assert "the driver is 535.261.03 (NVML)" in message


@pytest.mark.parametrize(("driver", "check_mode", "expected"), [
    ("580.105.08", False, []),  # every floor met
    ("", True, None),  # check mode before the driver role installed anything: not asserted
    ("580.105.08", True, []),  # check mode with a driver: asserted
])
def test_when_the_assert_runs(driver: str, check_mode: bool, expected: list[tuple[str, str]] | None) -> None:
    assert _run(driver, ["13.0", "12.8"], check_mode) == expected
