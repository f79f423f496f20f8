"""The execution strategy a run uses: mitogen's where the package is installed, Ansible's linear otherwise or
when GPUPROV_STRATEGY says so; the same setting reaches ansible-runner's environment and the rendered
ansible.cfg."""

from __future__ import annotations

import configparser
import importlib.util
import logging
from pathlib import Path

import pytest

from gpuprov import ansible_settings
from gpuprov.ansible_settings import ansible_cfg_text, strategy_env
from gpuprov.exceptions import ConfigError
from gpuprov.runner import run_env


def test_mitogen_strategy_from_the_installed_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROV_STRATEGY", raising=False)
    env = strategy_env("mitogen")
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    plugins = Path(env["ANSIBLE_STRATEGY_PLUGINS"])
    assert (plugins / "mitogen_linear.py").is_file()
    assert run_env()["ANSIBLE_STRATEGY"] == ("mitogen_linear" if ansible_settings.DEFAULT_STRATEGY == "mitogen"
                                             else run_env().get("ANSIBLE_STRATEGY"))


def test_linear_sets_nothing_and_the_environment_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert strategy_env("linear") == {}
    monkeypatch.setenv("GPUPROV_STRATEGY", "linear")
    assert "ANSIBLE_STRATEGY" not in run_env() and "ANSIBLE_STRATEGY_PLUGINS" not in run_env()
    monkeypatch.setenv("GPUPROV_STRATEGY", "mitogen")
    assert run_env()["ANSIBLE_STRATEGY"] == "mitogen_linear"


def test_without_mitogen_installed_the_run_is_linear(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ansible_mitogen" else
                        real(name, *a))
    with caplog.at_level(logging.INFO, logger="gpuprov.ansible_settings"):
        assert strategy_env("mitogen") == {}
    assert "mitogen package is not installed" in caplog.text


def test_an_unknown_strategy_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_STRATEGY", "free")
    with pytest.raises(ConfigError, match="GPUPROV_STRATEGY='free' is not a strategy gpuprov runs - use one of "
                                          "linear, mitogen") as info:
        run_env()
    assert info.value.exit_code == 2


@pytest.mark.parametrize("name", ["linear", "mitogen"])
def test_ansible_cfg_carries_the_strategy(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("GPUPROV_STRATEGY", name)
    cfg = configparser.ConfigParser()
    cfg.read_string(ansible_cfg_text(Path("/collections")))
    defaults = cfg["defaults"]
    assert defaults.get("strategy") == strategy_env().get("ANSIBLE_STRATEGY")
    assert defaults.get("strategy_plugins") == strategy_env().get("ANSIBLE_STRATEGY_PLUGINS")
    assert cfg["ssh_connection"]["pipelining"] == "True"
