"""The ``nvml_facts`` module and action plugin, run by ansible-runner over a local connection.

The target Python is the system's ``/usr/bin/python3`` where it lacks pynvml (so the test proves the action
plugin ships the controller's copy), else this interpreter. Without the C mock the host has no NVML and the
fact must say so without failing; with the mock built, the h200x2 and xid79 profiles must come back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.facts import FACTS_PLAY, FactsEvents
from gpuprov.runner import RunRequest, run_playbook


def target_python() -> str:
    system = Path("/usr/bin/python3")
    if system.exists() and subprocess.run([str(system), "-c", "import pynvml"], capture_output=True,
                                          check=False).returncode != 0:
        return str(system)
    import sys

    return sys.executable


def run_module(tmp_path: Path, *, check: bool = False) -> tuple[dict[str, Any] | None, Any]:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    host = {"ansible_connection": "local", "ansible_python_interpreter": target_python()}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"gpuprov": {"hosts": {"localhost": host}}}),
                                         encoding="utf-8")
    playbook = tmp_path / "facts.yml"
    playbook.write_text(yaml.safe_dump(FACTS_PLAY, sort_keys=False), encoding="utf-8")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    events = FactsEvents()
    result = run_playbook(RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir,
                                     check=check), on_event=events)
    return events.facts.get("localhost"), result


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME so the remote temporary directory (~/.ansible/tmp) can be checked for leftovers."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _leftovers(home: Path) -> list[str]:
    tmp = home / ".ansible" / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_module_without_nvml(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, check: bool) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "empty"))  # no libnvidia-ml.so.1 to find
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real NVIDIA driver; the no-NVML shape is covered by the fake")
    facts, result = run_module(tmp_path, check=check)
    assert result.rc == 0 and result.failed_hosts == []
    assert result.hosts["localhost"].changed == 0
    assert facts is not None
    assert facts["available"] is False and facts["error_name"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert _leftovers(home) == []


@pytest.fixture(scope="module")
def mock_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        from gpuprov.lab.mocknvml import build_library
    except ImportError as exc:
        pytest.skip(f"gpuprov.lab.mocknvml is not there yet ({exc})")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the mock NVML")
    out = tmp_path_factory.mktemp("mocknvml")
    build_library(out)
    return out


@pytest.mark.parametrize("profile", ["h200x2", "xid79"])
def test_module_on_mock(profile: str, mock_lib: Path, tmp_path: Path, home: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.lab.mocknvml import mock_environment

    env = mock_environment(mock_lib, profile, tmp_path / "conf")
    for key in ("LD_LIBRARY_PATH", "GPUPROV_MOCK_NVML_CONF"):
        monkeypatch.setenv(key, env[key])
    facts, result = run_module(tmp_path)
    assert result.rc == 0 and result.hosts["localhost"].changed == 0
    assert facts is not None and facts["available"] is True
    if profile == "h200x2":
        assert facts["count"] == 2 and facts["gpus"][1]["pci_bus_id_sysfs"] == "0000:00:07.0"
        assert facts["gpus"][0]["bar1_total_bytes"] == 274877906944
    else:
        assert facts["lost_gpus"] == [1] and facts["gpus"][1]["error_name"] == "NVML_ERROR_GPU_IS_LOST"
    assert _leftovers(home) == []
    assert os.environ["HOME"] == str(home)
