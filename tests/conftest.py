"""Shared fixtures: Docker availability and the lab base images (built once, cached by recipe hash)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
from xdist_groups import group_of, group_seconds

#: the private redis-server fixture ``redis_url`` (tests/conftest_redis.py) for every test that asks for it
pytest_plugins = ["conftest_redis"]

# `gpuprov images run` leaves a fork server behind for the next run (gpuprov.images.forkserver), which the next test's
# run would then use: each test's runs start their own workers unless the test asks for a fork server itself
# (tests/unit/images/test_forkserver.py, the chaos test's forked case)
os.environ["GPUPROV_IMAGES_KEEP_WARM"] = "0"


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


class LabImages(dict[str, str]):
    """Lab OS -> image reference, each image built (or reused) when a test first asks for it: a session builds
    only the images its tests use."""

    def __missing__(self, os_name: str) -> str:
        from gpuprov.lab.images import ensure_image

        self[os_name] = ref = ensure_image(os_name)
        return ref


@pytest.fixture(scope="session")
def lab_images(docker_available: None) -> dict[str, str]:
    """The lab base images by OS (:class:`LabImages`: built or reused on first use)."""
    return LabImages()



def _group(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    scenario = callspec.params.get("scenario") if callspec is not None else None
    return group_of(item.path.relative_to(item.config.rootpath).as_posix(), scenario)


#: Seconds assumed per test of a group no CI run has timed yet, by its marks: Molecule, slow lab, other lab, the rest.
UNTIMED_SECONDS = {"molecule": 600.0, "slow-lab": 400.0, "lab": 150.0, "": 0.0}


def _untimed(item: pytest.Item) -> float:
    marks = {mark.name for mark in item.iter_markers()}
    kind = "molecule" if "molecule" in marks else "slow-lab" if {"lab", "slow"} <= marks else (
        "lab" if "lab" in marks else "")
    return UNTIMED_SECONDS[kind]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the groups (tests/xdist_groups.py) longest first - by the seconds a CI run measured
    (tests/data/ci-group-seconds.json), else by :data:`UNTIMED_SECONDS` - so under pytest-xdist the long ones start
    at once and the short ones fill the gaps. A serial run takes the same order."""
    measured = group_seconds()
    groups = {item.nodeid: _group(item) for item in items}
    seconds: dict[str, float] = {}
    for item in items:
        group = groups[item.nodeid]
        seconds[group] = measured[group] if group in measured else seconds.get(group, 0.0) + _untimed(item)
    items.sort(key=lambda item: -seconds[groups[item.nodeid]])  # stable: each file keeps its own order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduler with tests/xdist_groups.py's groups as scopes: a group runs on one worker,
    in collection order. (xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks into node ids, which
    pytest 9.2's structured node ids no longer take.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path, _, rest = nodeid.partition("::")
            scenario = rest.split("[", 1)[1].rstrip("]") if "[" in rest else None
            return group_of(path, scenario)

    return GroupScheduling(config, log)
