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
