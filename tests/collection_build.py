"""Build the gpuprov.gpu collection tarball from this checkout and install it into a collections path, as an
admin would (``ansible-galaxy collection build``, then ``install -p``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def galaxy(*args: str, cwd: Path) -> str:
    """Run ``ansible-galaxy ARGS`` from this environment; returns its stdout, asserts exit 0."""
    # without the sys.path scan, the checkout's own link to the collection does not count as installed
    env = dict(os.environ, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-galaxy")), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def build_and_install(work: Path) -> Path:
    """Build the tarball into ``work`` and install it under ``work/collections``; returns that collections path
    (``<it>/ansible_collections/gpuprov/gpu`` is the installed collection)."""
    galaxy("collection", "build", "--output-path", str(work), str(ROOT), cwd=work)
    (tarball,) = work.glob("gpuprov-gpu-*.tar.gz")
    galaxy("collection", "install", "--offline", "--no-deps", "-p", str(work / "collections"), str(tarball), cwd=work)
    return work / "collections"
