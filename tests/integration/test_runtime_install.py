"""The runtime install runs what the roles do: gpuprov's wheel, installed with no extras into a new virtual
environment (what `pip install gpuprov` gives an admin), resolves every module, action, filter, test and lookup
plugin that its playbooks and roles name, and every playbook passes ``--syntax-check`` there.

The test environment itself carries the test extras (the ``ansible`` package with its collections among them),
so a role that names a plugin only those bring would pass every other test and fail on a real fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("runtime_plugins.py")

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def runtime_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding gpuprov's wheel and its runtime dependencies only; returns its python."""
    work = tmp_path_factory.mktemp("runtime")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(work.glob("gpuprov-*.whl"))
    venv.create(work / "venv", with_pip=True)
    python = work / "venv" / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, check=False, timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    return python


@pytest.fixture(scope="module")
def report(runtime_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("runtime-cwd")  # not the checkout: its gpuprov/ must not shadow the wheel's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    proc = subprocess.run([str(runtime_env), str(CHECKER)], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_runtime_install_has_no_test_extras(runtime_env: Path) -> None:
    listed = subprocess.run([str(runtime_env), "-m", "pip", "list", "--format", "json"], capture_output=True,
                            text=True, check=True).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert {"gpuprov", "ansible-core", "ansible-runner"} <= names
    assert not names & {"ansible", "molecule", "ansible-lint", "pytest", "torch", "docker"}, names


def test_the_lab_names_its_extra_in_the_runtime_install(runtime_env: Path, tmp_path: Path) -> None:
    """The runtime install has no Docker SDK: `gpuprov lab` says which extra brings it (exit 4, no traceback)."""
    gpuprov = runtime_env.with_name("gpuprov")
    proc = subprocess.run([str(gpuprov), "lab", "images"], cwd=tmp_path, capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "pip install 'gpuprov[lab]'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_runtime_install_runs_playbooks(runtime_env: Path, tmp_path: Path) -> None:
    """What a run imports (ansible-runner; psutil, which ends what a run leaves behind after Ctrl-C) comes with
    the runtime install."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    code = "import gpuprov.engine, gpuprov.proctree, gpuprov.runner; print(gpuprov.runner.__file__)"
    proc = subprocess.run([str(runtime_env), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert Path(proc.stdout.strip()).is_relative_to(runtime_env.parents[1]), proc.stdout  # the wheel's, not ours


def test_every_plugin_the_roles_name_resolves(report: dict[str, Any], runtime_env: Path) -> None:
    # the wheel's copy of the collection
    assert Path(report["collection_dir"]).is_relative_to(runtime_env.parents[1]), report["collection_dir"]
    assert report["unresolved"] == []
    # every kind was really looked at: a checker that finds nothing to check cannot fail
    assert all(count > 0 for count in report["checked"].values()), report["checked"]


def test_every_playbook_passes_syntax_check(report: dict[str, Any]) -> None:
    playbooks = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml"))
    assert sorted(report["syntax"]) == playbooks
    failed = {name: r for name, r in report["syntax"].items() if r["rc"] != 0}
    assert failed == {}
