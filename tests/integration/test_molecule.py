"""Every Molecule scenario under molecule/ runs its full sequence (check on a fresh host, converge,
idempotence, verify) on the lab base images.

Each run starts from nothing: Molecule's ephemeral directory (its state file says whether instances exist)
is a new short temporary directory, and containers left by an earlier interrupted run under the
scenario's platform names are removed first. Without that, a state file from another checkout of a
directory with the same name makes Molecule skip ``create`` and converge against containers that are gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import pytest
import yaml

from gpuprov.lab.images import IMAGE_PREFIX

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))

pytestmark = [pytest.mark.molecule, pytest.mark.lab]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, lab_images: dict[str, str]) -> None:
    config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text(encoding="utf-8"))
    client = docker.from_env()
    for platform in config["platforms"]:
        image = platform["image"].partition(":")[0]
        if image.startswith(IMAGE_PREFIX):
            lab_images[image.removeprefix(IMAGE_PREFIX)]  # builds (or reuses) the lab image the platform runs
        for stale in client.containers.list(all=True, filters={"name": platform["name"]}):
            if stale.name == platform["name"]:
                stale.remove(force=True)
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
               NO_COLOR="1", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0")
    # a short path: scenarios keep a GnuPG home there, and gpg-agent's sockets must fit in 108 bytes
    with tempfile.TemporaryDirectory(prefix="gpuprov-mol-", dir="/tmp", ignore_cleanup_errors=True) as ephemeral:
        env["MOLECULE_EPHEMERAL_DIRECTORY"] = ephemeral
        proc = subprocess.run([str(bindir / "molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False, timeout=1500)
    assert proc.returncode == 0, f"molecule test -s {scenario} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}"
