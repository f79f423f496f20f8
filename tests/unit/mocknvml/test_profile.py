"""Profile loading, inheritance and compilation to the flat format the C library reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab.mocknvml import compile_profile, list_profiles, load_profile

EXPECTED = {
    "h200x2",
    "a100x8-nvswitch",
    "rtx3090x4",
    "v100x4",
    "pcie-downtrained",
    "pcie-idle-downclock",
    "above4g-off",
    "no-devices",
    "xid79",
    "ecc-uncorrectable",
    "persistence-off",
    "mig-pending",
    "driver-mismatch",
    "driver-not-loaded",
    "no-gpu",
    "heterogeneous-ordering",
}


def _conf(text: str) -> dict[str, str]:
    lines = (line for line in text.splitlines() if line and not line.startswith("#"))
    return dict(line.split("=", 1) for line in lines)


def test_every_expected_profile_ships() -> None:
    assert set(list_profiles()) >= EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_profile_compiles(name: str) -> None:
    conf = _conf(compile_profile(name))
    assert conf["profile"] == name
    count = int(conf["gpu.count"])
    for index in range(count):
        assert f"gpu.{index}.uuid" in conf
        assert f"gpu.{index}.pci.bus_id" in conf
    assert all("\n" not in v for v in conf.values())


def test_errors_compile_to_bang_names() -> None:
    conf = _conf(compile_profile("h200x2"))
    assert conf["gpu.0.fan_speed"] == "!NOT_SUPPORTED"
    assert conf["gpu.1.numa_node"] == "!NOT_SUPPORTED"
    assert conf["init.result"] == "SUCCESS"
    assert _conf(compile_profile("driver-mismatch"))["init.result"] == "!LIB_RM_VERSION_MISMATCH"


def test_inheritance_all_gpus_and_overrides() -> None:
    resolved = load_profile("ecc-uncorrectable")
    assert resolved["system"]["driver_version"] == "580.159.04"
    assert resolved["gpus"][0]["ecc_errors"]["volatile"]["uncorrected"] == 0
    assert resolved["gpus"][1]["ecc_errors"]["volatile"]["uncorrected"] == 2
    assert resolved["gpus"][1]["name"] == "NVIDIA H200"
    off = load_profile("persistence-off")
    assert [g["persistence_mode"] for g in off["gpus"]] == [0, 0]


def test_child_gpus_inherit_base_gpu_defaults() -> None:
    gpus = load_profile("heterogeneous-ordering")["gpus"]
    assert [g["name"] for g in gpus] == ["DGX Display"] + ["NVIDIA A100-SXM4-80GB"] * 4
    assert gpus[0]["ecc_errors"] == {"error": "NOT_SUPPORTED"}  # an error replaces a mapping whole
    assert gpus[1]["ecc_errors"]["volatile"]["uncorrected"] == 0


def test_topology_pairs() -> None:
    conf = _conf(compile_profile("a100x8-nvswitch"))
    assert conf["topology.default"] == "50"
    assert conf["topology.0.1"] == "20"


def test_yaml_path_and_sibling_base(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("base: h200x2\nall_gpus: {fan_speed: 40}\n", encoding="utf-8")
    (tmp_path / "child.yaml").write_text("base: mine\ngpu_overrides: {1: {lost: query}}\n", encoding="utf-8")
    conf = _conf(compile_profile(tmp_path / "child.yaml"))
    assert conf["gpu.0.fan_speed"] == "40"
    assert conf["gpu.1.lost"] == "query"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus: 1\n", "unknown keys"),
        ("base: h200x2\ninit: NOPE\n", "unknown init result"),
        ("base: h200x2\nall_gpus: {fan_speed: {error: NOPE}}\n", "unknown NVML error"),
        ("base: h200x2\ngpu_overrides: {5: {fan_speed: 1}}\n", "out of range"),
        ("base: h200x2\nall_gpus: {name: [a, b]}\n", "lists are not supported"),
        ("base: h200x2\ntopology: {zero: 1}\n", "expected 'default'"),
        ("base: loop\n", "loop"),
    ],
)
def test_bad_profiles_raise_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        compile_profile(path)


def test_unknown_profile_name() -> None:
    with pytest.raises(ConfigError, match="not found"):
        compile_profile("no-such-profile")
