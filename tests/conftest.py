"""Shared fixtures: Docker availability and the lab base images (built once, cached by recipe hash)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

#: the private redis-server fixture ``redis_url`` (tests/conftest_redis.py) for every test that asks for it
pytest_plugins = ["conftest_redis"]


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=60).returncode == 0


@pytest.fixture(scope="session")
def docker_available() -> None:
    """Skip the test with a reason when no Docker engine answers (run `bash .ci/setup` first)."""
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("CI must run the lab tests, but no Docker engine answers (bash .ci/setup starts dockerd)")
        pytest.skip("no Docker engine: run `bash .ci/setup` (installs docker.io and starts dockerd)")


@pytest.fixture(scope="session")
def lab_images(docker_available: None) -> dict[str, str]:
    """Build (or reuse) the lab base images; returns os name -> image reference."""
    from gpuprov.lab.images import ensure_image

    return {name: ensure_image(name) for name in ("debian12", "ubuntu2004")}


#: Test files that use the lab's own containers (``gpuprov-lab-N``, or containers carrying the lab label, which
#: ``gpuprov lab down`` removes): run one after another, on one worker, when the suite runs in parallel.
SHARED_LAB_FILES = frozenset({"test_lab.py", "test_apply_lab.py", "test_lab_hardware.py", "test_doctor_lab.py",
                              "test_verify_lab.py"})


def xdist_group_of(item: pytest.Item) -> str:
    """The pytest-xdist group an item runs in: the shared-lab files together, each Molecule scenario alone,
    every other test file as a whole (its module-scoped fixtures - a converged container - are built once)."""
    name = item.path.name
    if name in SHARED_LAB_FILES:
        return "shared-lab"
    callspec = getattr(item, "callspec", None)
    if name == "test_molecule.py" and callspec is not None:
        return f"molecule-{callspec.params['scenario']}"
    return item.path.relative_to(item.config.rootpath).as_posix()


def _weight(item: pytest.Item) -> int:
    """Rough cost class, heaviest first: Molecule scenarios and slow lab tests, other lab tests, the rest."""
    marks = {mark.name for mark in item.iter_markers()}
    return 3 if "molecule" in marks else 2 if {"lab", "slow"} <= marks else 1 if "lab" in marks else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n N --dist loadgroup``), put each item in its :func:`xdist_group_of` group and order
    the groups heaviest first, so the long ones start at once and the short ones fill the gaps."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
    items.sort(key=lambda item: -_weight(item))  # stable: each file's own order is kept
