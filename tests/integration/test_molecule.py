"""Every Molecule scenario under molecule/ runs its full sequence (check on a fresh host, converge,
idempotence, verify) on the lab base images."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))

pytestmark = [pytest.mark.molecule, pytest.mark.lab]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, lab_images: dict[str, str]) -> None:
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
               NO_COLOR="1", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(bindir / "molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=1500)
    assert proc.returncode == 0, f"molecule test -s {scenario} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}"
