"""Parity of the NVML facts with a real 2x H200 host (tests/data/real-h200/, captured with the device tool).

Three comparisons, field for field:

1. the collector on :class:`nvml_fake.FakeNvml` fed from the recorded h200x2 fixture vs the real ``facts.json``
   (needs nothing but pynvml's Python module);
2. the collector through pynvml on the C mock NVML with the ``h200x2`` profile vs the real ``facts.json``
   (skipped with a reason when the mock cannot be built);
3. on the real host itself, the ``nvml_facts`` module run through ansible-runner (``module-facts.json``) vs
   ``gpuprov facts --json`` (``facts.json``): the remote path and the local path give the same fact.

Fields left out, and why (:data:`EXCLUDED`, :data:`NOT_IN_CAPTURE`, :data:`NOT_RECORDED_IN_FIXTURE`):

* ``gpus[*].live`` - temperature, power draw, utilisation, memory and BAR1 in use, P-state: they change
  from one second to the next.
* ``gpus[*].uuid``, ``gpus[*].serial`` - the fixture's were replaced with neutral values (fixture README);
  the device's real ones differ by design.
* for the fake only: ``gpus[*].nvlink.links[*].version``, ``gpus[*].nvlink.links[*].remote_device_type``,
  ``gpus[*].nvlink.nvswitch_present`` and ``nvswitch_present`` - the fixture did not record
  nvmlDeviceGetNvLinkVersion / nvmlDeviceGetNvLinkRemoteDeviceType, so the fake answers NOT_SUPPORTED.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import nvml
from nvml_fake import FakeNvml

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "data" / "real-h200"

#: Never compared: live values and the identities anonymised in the fixture.
EXCLUDED = ("gpus[*].live*", "gpus[*].uuid", "gpus[*].serial")

#: Read by the collector since the capture was taken (2026-11-30), so missing from facts.json: each GPU's fabric
#: registration. The same capture's nvidia-smi-q.xml reports it (state Completed, status Success on both GPUs);
#: the fake answers from that file, and tests/unit/test_facts.py asserts the mock's h200x2 profile says the same.
NOT_IN_CAPTURE = ("gpus[*].fabric*",)

#: Not compared against the fake, because the fixture holds no reading for them.
NOT_RECORDED_IN_FIXTURE = (
    "gpus[*].nvlink.links[*].version",
    "gpus[*].nvlink.links[*].remote_device_type",
    "gpus[*].nvlink.nvswitch_present",
    "nvswitch_present",
)


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """``{"a": [{"b": 1}]}`` -> ``{"a[0].b": 1}``; empty containers stay as leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{path}[{index}]"))
        return out
    return {path: value}


def _excluded(path: str, patterns: tuple[str, ...]) -> bool:
    # fnmatch reads "[*]" as a character class, so both sides spell "any index" as "#".
    generic = re.sub(r"\[\d+\]", "#", path)
    return any(fnmatch.fnmatchcase(generic, pattern.replace("[*]", "#")) for pattern in patterns)


def differences(expected: dict[str, Any], actual: dict[str, Any], patterns: tuple[str, ...]) -> list[str]:
    """Every leaf that differs between the two facts, outside ``patterns``, as readable lines."""
    left, right = flatten(expected), flatten(actual)
    lines = []
    for path in sorted(set(left) | set(right)):
        if _excluded(path, patterns):
            continue
        if left.get(path, "<missing>") != right.get(path, "<missing>"):
            lines.append(f"{path}: real {left.get(path, '<missing>')!r} != {right.get(path, '<missing>')!r}")
    return lines


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REAL / "facts.json").read_text(encoding="utf-8"))
    assert data["available"] is True and data["count"] == 2
    return data


def test_fake_from_fixture_matches_real_host(real: dict[str, Any], tmp_path: Path) -> None:
    # The fixture's probe.txt: /proc/driver/nvidia/version says 580.159.04 (the loaded module).
    (tmp_path / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "module" / "nvidia" / "version").write_text("580.159.04\n", encoding="utf-8")
    facts = nvml.collect(FakeNvml(), sysfs_root=str(tmp_path))
    diff = differences(real, facts, EXCLUDED + NOT_RECORDED_IN_FIXTURE + NOT_IN_CAPTURE)
    assert not diff, "fake (fixture) vs real H200:\n" + "\n".join(diff)


def test_exclusions_are_narrow(real: dict[str, Any]) -> None:
    """The comparison must still cover the fields that matter (guards against an over-broad pattern)."""
    compared = [p for p in flatten(real) if not _excluded(p, EXCLUDED + NOT_RECORDED_IN_FIXTURE)]
    for needle in ("gpus[0].bar1_total_bytes", "gpus[1].pcie.gen_max", "gpus[0].pci_bus_id", "driver_version",
                   "cuda_driver_version", "gpus[0].cpu_affinity[31]", "gpus[1].nvlink.links[17].active",
                   "gpus[0].ecc.uncorrected_volatile", "gpus[0].power_limit_w", "cuda_arch_bin"):
        assert needle in compared


def test_module_on_real_host_matches_local_facts(real: dict[str, Any]) -> None:
    module = json.loads((REAL / "module-facts.json").read_text(encoding="utf-8"))
    check = json.loads((REAL / "module-facts-check.json").read_text(encoding="utf-8"))
    for run in (module, check):
        assert run["status"] == "successful" and run["rc"] == 0 and run["changed"] == 0
        assert run["target_python"] == "/usr/bin/python3"  # a Python without pynvml: the plugin shipped it
        diff = differences(real, run["facts"], ("gpus[*].live*",))
        assert not diff, "module vs gpuprov facts on the real host:\n" + "\n".join(diff)


def test_real_host_values(real: dict[str, Any]) -> None:
    """What the real H200 pair reported, spelled out (see README.md beside the data)."""
    assert real["driver_version"] == "580.159.04" and real["kernel_module_version"] == "580.159.04"
    assert real["nvml_version"] == "13.580.159.04" and real["cuda_driver_version"] == "13.0"
    assert real["cuda_arch_bin"] == "9.0" and real["nvswitch_present"] is True
    for gpu in real["gpus"]:
        assert gpu["bar1_total_bytes"] == 256 * 1024**3
        assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "gen_gpu_max": 5, "width_current": 16,
                               "width_max": 16}
        assert gpu["numa_node"] is None and gpu["errors"] == {}
        assert {link["remote_device_type"] for link in gpu["nvlink"]["links"]} == {"switch"}


def test_mock_h200x2_matches_real_host(real: dict[str, Any], tmp_path: Path) -> None:
    try:
        from gpuprov.lab.mocknvml import build_library, mock_environment
    except ImportError as exc:
        pytest.skip(f"gpuprov.lab.mocknvml is not there yet ({exc})")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    lib = build_library(tmp_path / "lib")
    env = mock_environment(lib.parent, "h200x2", tmp_path / "conf")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / ".collections")])  # this checkout's collection
    script = ("import json, pynvml; from ansible_collections.gpuprov.gpu.plugins.module_utils import nvml; "
              "print(json.dumps(nvml.collect(pynvml, sysfs_root=%r)))")
    sysfs = tmp_path / "sys"
    (sysfs / "module" / "nvidia").mkdir(parents=True)
    (sysfs / "module" / "nvidia" / "version").write_text("580.159.04\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", script % str(sysfs)], env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    diff = differences(real, json.loads(proc.stdout), EXCLUDED + NOT_IN_CAPTURE)
    assert not diff, "mock NVML (profile h200x2) vs real H200:\n" + "\n".join(diff)
