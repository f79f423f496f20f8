"""Tests for ``gpuprov render``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuprov.cli.__main__ import main

ROOT = Path(__file__).resolve().parents[3]


def test_render_writes_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inv"
    assert main(["render", str(ROOT / "inventory" / "example.yml"), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    hosts = yaml.safe_load((out / "hosts.yml").read_text())
    assert set(hosts["all"]["children"]["gpuprov"]["hosts"]) == {"hgx01", "hgx02", "inf01", "v100a"}
    assert hosts["all"]["children"]["hgx_h100"]["vars"]["ansible_group_priority"] == 1
    group_all = yaml.safe_load((out / "group_vars" / "all" / "gpuprov.yml").read_text())
    assert group_all["gpuprov_reboot_allowed"] is False  # schema default rendered fleet-wide
    assert group_all["gpuprov_os"] == "ubuntu2204"
    host = yaml.safe_load((out / "host_vars" / "hgx02.yml").read_text())
    assert host["gpuprov_mig_layout"] == "all-1g.10gb"
    assert host["gpuprov_driver_flavour"] == "open"


def test_render_bad_file_exits_2_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = ROOT / "tests" / "data" / "bad" / "cuda124_driver470.yml"
    assert main(["render", str(bad), "-o", str(tmp_path / "inv")]) == 2
    assert f"{bad}:10: groups.old.settings.driver.branch: " in capsys.readouterr().out
    assert not (tmp_path / "inv").exists()


def test_render_requires_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(ROOT / "inventory" / "example.yml")]) == 2
