"""An admin's own playbook uses the gpuprov.gpu collection, as built by ``ansible-galaxy collection build``.

The tarball is installed into a temporary collections path (``ansible-galaxy collection install -p``); the
playbook names the roles by full name (``roles: [gpuprov.gpu.nouveau, gpuprov.gpu.nvidia_driver]``) and sets
only role variables (no fleet file, no ``gpuprov_*`` variable). ansible-playbook runs it through
ansible-runner's API with that path first and no sys.path scan (``ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=False``),
so neither the checkout nor an installed wheel can stand in for the tarball; every task event's path says so.
Ansible's other settings stay its defaults, pipelining off among them (gpuprov's own runs and the Molecule
scenarios pipeline): the roles also work where each module is copied to the host before it runs.
A DKMS lab container serves the stand-in CUDA repository on its loopback: the first run converges (the
driver set installed, pinned and held, the module built), the second changes nothing.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.lab.standin.catalogue import DEBIAN_REVISION, driver_packages
from tests.collection_build import build_and_install
from tests.integration.kernel_lab import dkms_container, exec_ok, install_repository

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
V535 = "535.183.01"
PLAYBOOK = [{
    "name": "Prepare my GPU servers",
    "hosts": "gpu",
    "become": True,
    "gather_facts": False,
    "roles": ["gpuprov.gpu.nouveau", "gpuprov.gpu.nvidia_driver"],
}]


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A collections path holding only gpuprov.gpu, installed from the tarball built from this checkout."""
    path = build_and_install(tmp_path_factory.mktemp("galaxy"))
    installed = path / "ansible_collections" / "gpuprov" / "gpu"
    assert (installed / "roles" / "nvidia_driver" / "tasks" / "main.yml").is_file()
    assert (installed / "plugins" / "modules" / "kernel_dkms_info.py").is_file()
    return path


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("own-playbook")
    with dkms_container(lab_images["debian12"], "own-playbook") as (container, kernel):
        repo_vars = install_repository(container, driver_packages("535", V535, DEBIAN_REVISION, flavours=("",)),
                                       tmp / "repo")
        yield {"container": container, "kernel": kernel, "repo_vars": repo_vars, "tmp": tmp}


def _play(host: dict[str, Any], collections: Path, label: str) -> Any:
    import ansible_runner

    private = host["tmp"] / label
    (private / "project").mkdir(parents=True)
    (private / "project" / "site.yml").write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False), encoding="utf-8")
    role_vars = {"nvidia_driver_branch": "535", "nvidia_driver_running_kernel": host["kernel"],
                 **host["repo_vars"]}
    inventory = {"gpu": {"hosts": {host["container"].name: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
        **role_vars}}}}
    (private / "inventory").mkdir()
    (private / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return ansible_runner.run(
        private_data_dir=str(private), playbook="site.yml", quiet=True, suppress_env_files=True,
        # the tarball's install first; then this environment's site-packages, for the docker connection plugin
        # (community.docker, from the `ansible` package) the lab reaches its containers with
        envvars={"ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(collections), sysconfig.get_paths()["purelib"]]),
                 "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
                 "ANSIBLE_NOCOLOR": "1",
                 "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
    )


def _failures(runner: Any) -> str:
    return " | ".join(str(e["event_data"].get("res", {}).get("msg", ""))[:400] for e in runner.events
                      if e.get("event") == "runner_on_failed")


def _task_paths(runner: Any) -> set[str]:
    return {e["event_data"]["task_path"].rsplit(":", 1)[0] for e in runner.events
            if e.get("event") == "playbook_on_task_start" and e["event_data"].get("task_path")}


def test_own_playbook_converges_then_changes_nothing(host: dict[str, Any], collections: Path) -> None:
    name = host["container"].name
    first = _play(host, collections, "first")
    assert first.status == "successful", _failures(first)
    installed = collections / "ansible_collections" / "gpuprov" / "gpu" / "roles"
    paths = _task_paths(first)
    playbook = str(host["tmp"] / "first" / "project" / "site.yml")  # where a role's implicit tasks point
    assert paths and [p for p in paths if p != playbook and not Path(p).is_relative_to(installed)] == []
    assert first.stats["changed"].get(name, 0) > 0
    held = exec_ok(host["container"], "apt-mark showhold").split()
    assert "nvidia-dkms-535" in held and "nvidia-driver-535" in held, held
    status = exec_ok(host["container"], "dkms status nvidia")
    assert V535 in status and host["kernel"] in status and "installed" in status, status
    assert exec_ok(host["container"], "cat /etc/modprobe.d/*nouveau*").count("blacklist nouveau") == 1
    second = _play(host, collections, "second")
    assert second.status == "successful", _failures(second)
    assert second.stats["changed"].get(name, 0) == 0, [
        e["event_data"]["task"] for e in second.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")]
