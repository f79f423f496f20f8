"""Every Molecule scenario under molecule/ runs its full sequence (check on a fresh host, converge,
idempotence, verify) on the lab base images.

Each run starts from nothing: Molecule's ephemeral directory (its state file says whether instances exist)
is the test's own temporary directory, and containers left by an earlier interrupted run under the
scenario's platform names are removed first. Without that, a state file from another checkout of a
directory with the same name makes Molecule skip ``create`` and converge against containers that are gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))

pytestmark = [pytest.mark.molecule, pytest.mark.lab]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, lab_images: dict[str, str], tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text(encoding="utf-8"))
    client = docker.from_env()
    for platform in config["platforms"]:
        for stale in client.containers.list(all=True, filters={"name": platform["name"]}):
            if stale.name == platform["name"]:
                stale.remove(force=True)
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
               NO_COLOR="1", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0",
               MOLECULE_EPHEMERAL_DIRECTORY=str(tmp_path / "molecule"))
    proc = subprocess.run([str(bindir / "molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=1500)
    assert proc.returncode == 0, f"molecule test -s {scenario} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}"
