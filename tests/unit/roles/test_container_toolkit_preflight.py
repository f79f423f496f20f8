"""The container_toolkit role's preflight (tasks_from: preflight) over a local connection: one host_state read
decides the cgroup mode and where libnvidia-ml.so.1 is, on fixture trees (a cgroup root, a driver root), so the
cases a lab container cannot show run here: a hybrid and a legacy hierarchy, a driver root other than ``/`` that
holds the library, and ``container_toolkit_check_driver: false`` on a host without any driver.

Each case is an inventory host of its own (all of them this machine), so one playbook run serves them all. The
role's read of the host's own library directories and of ``ldconfig -p`` runs against this machine: where it has
an NVIDIA driver the refusal names its directories, else it says the host has none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.runner import RunRequest, RunResult, run_playbook

pytestmark = pytest.mark.skipif(not Path("/usr/bin/dpkg-query").exists(), reason="host_state reads dpkg (Debian)")

CASES = {
    # host: (cgroup file made under the cgroup root, what the driver root holds as libnvidia-ml.so.1, check_driver)
    "unified": ("cgroup.controllers", "library", True),
    "hybrid": ("unified/cgroup.controllers", "library", True),
    "refused": ("cgroup.controllers", None, True),
    "unchecked": (None, None, False),
    "dirs_as_text": ("cgroup.controllers", "library", True),  # the directories as one comma-separated string
    "no_linker_cache": ("cgroup.controllers", "library", True),  # `ldconfig -p` fails
    "dangling": ("cgroup.controllers", "dangling", True),  # the link's target is gone (a half-removed driver)
    # a link with an absolute target, read inside the root as the toolkit reads it: the root's own file
    "absolute_link": ("cgroup.controllers", "absolute", True),
    # an absolute target that only this machine has (not under the root): dangling to the toolkit
    "host_only_link": ("cgroup.controllers", "host_only", True),
    "a_directory": ("cgroup.controllers", "directory", True),
    "no_dirs": ("cgroup.controllers", "library", True),  # container_toolkit_driver_lib_dirs: []
    "null_dirs": ("cgroup.controllers", "library", True),  # container_toolkit_driver_lib_dirs: [null]
    # the linker's cache names the host's library in a directory with a space, after a line that is not UTF-8, one
    # that names no path, another library whose name ends in libnvidia-ml.so.1 and the 32-bit library
    "spaced_cache": ("cgroup.controllers", None, True),
}
FAILING = ("refused", "no_linker_cache", "dangling", "host_only_link", "a_directory", "no_dirs", "null_dirs",
           "spaced_cache")


@pytest.fixture(scope="module")
def preflight(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    """One run of the preflight over every case; returns the result and the folder of the cases' trees and of
    the decisions each host wrote (``<host>.json``)."""
    tmp = tmp_path_factory.mktemp("ctk-preflight")
    hosts: dict[str, dict[str, Any]] = {}
    for name, (cgroup_file, library, check_driver) in CASES.items():
        cgroup = tmp / name / "cgroup"
        cgroup.mkdir(parents=True)
        if cgroup_file:
            (cgroup / cgroup_file).parent.mkdir(parents=True, exist_ok=True)
            (cgroup / cgroup_file).write_text("cpu memory\n", encoding="utf-8")
        root = tmp / name / "driver"
        (root / "usr" / "lib64").mkdir(parents=True)
        lib = root / "usr" / "lib64" / "libnvidia-ml.so.1"
        if library == "library":  # a link to the versioned file, as the driver installs it
            (root / "usr" / "lib64" / "libnvidia-ml.so.580.95.05").write_bytes(b"\x7fELF")
            lib.symlink_to("libnvidia-ml.so.580.95.05")
        elif library == "dangling":
            lib.symlink_to("libnvidia-ml.so.580.95.05")
        elif library == "absolute":
            (root / "usr" / "lib64" / "libnvidia-ml.so.580.95.05").write_bytes(b"\x7fELF")
            lib.symlink_to("/usr/lib64/libnvidia-ml.so.580.95.05")
        elif library == "host_only":
            (tmp / name / "libnvidia-ml.so.580.95.05").write_bytes(b"\x7fELF")
            lib.symlink_to(tmp / name / "libnvidia-ml.so.580.95.05")
        elif library == "directory":
            lib.mkdir()
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
                       "container_toolkit_cgroup_root": str(cgroup), "container_toolkit_driver_root": str(root),
                       # as the fleet file's variables arrive: strings
                       "container_toolkit_check_driver": str(check_driver).lower()}
    hosts["dirs_as_text"]["container_toolkit_driver_lib_dirs"] = "usr/lib/x86_64-linux-gnu, usr/lib64"
    fake = tmp / "no_linker_cache" / "bin"
    fake.mkdir()
    (fake / "ldconfig").write_text("#!/bin/sh\necho 'ldconfig: Can not open cache file /etc/ld.so.cache' >&2\n"
                                   "exit 1\n", encoding="utf-8")
    (fake / "ldconfig").chmod(0o755)
    hosts["no_linker_cache"]["preflight_env"] = {"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin"}
    hosts["no_dirs"]["container_toolkit_driver_lib_dirs"] = []
    hosts["null_dirs"]["container_toolkit_driver_lib_dirs"] = [None]
    fake = tmp / "spaced_cache" / "bin"
    fake.mkdir()
    (fake / "ldconfig").write_bytes(b"#!/bin/sh\nprintf '3 libs found in cache\\n"
                                    b"\\tlibx.so (libc6,x86-64) => /opt/caf\\351/libx.so\\n"
                                    b"\\tlibnvidia-ml.so.1 (libc6,x86-64) =>   \\n"  # no path: not a directory
                                    b"\\tcompat-libnvidia-ml.so.1 (libc6,x86-64) => /opt/compat/libnvidia-ml.so.1\\n"
                                    b"\\tlibnvidia-ml.so.1 (libc6) => /usr/lib/i386-linux-gnu/libnvidia-ml.so.1\\n"
                                    b"\\tlibnvidia-ml.so.1 (libc6,x86-64) => "
                                    b"/opt/nvidia driver/lib/libnvidia-ml.so.1\\n'\n")
    (fake / "ldconfig").chmod(0o755)
    hosts["spaced_cache"]["preflight_env"] = {"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin"}
    inventory = tmp / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"gpuprov": {"hosts": hosts}}), encoding="utf-8")
    play = [{
        "name": "container_toolkit preflight",
        "hosts": "gpuprov",
        "gather_facts": False,
        "environment": "{{ preflight_env | default({}) }}",
        "tasks": [
            {"name": "Run the preflight", "ansible.builtin.include_role": {
                "name": "gpuprov.gpu.container_toolkit", "tasks_from": "preflight"}},
            {"name": "Write what it decided", "ansible.builtin.copy": {
                "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json", "mode": "0644",
                "content": "{{ {'cgroup_mode': container_toolkit_cgroup_mode, "
                           "'under_root': __container_toolkit_nvml_under_root | default(None)} | to_json }}"}},
        ],
    }]
    playbook = tmp / "preflight.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    run_dir = tmp / "run"
    run_dir.mkdir()
    return run_playbook(RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir)), tmp


def _decided(tmp: Path, host: str) -> dict[str, Any]:
    return dict(json.loads((tmp / f"{host}.json").read_text(encoding="utf-8")))


def _failure(result: RunResult, host: str) -> str:
    return " ".join(str(f.get("msg", f)) for f in result.hosts[host].failures)


def test_only_a_root_without_the_library_and_an_unreadable_cache_fail(preflight: tuple[RunResult, Path]) -> None:
    result, _ = preflight
    assert sorted(result.failed_hosts) == sorted(FAILING), {h: _failure(result, h) for h in CASES}
    # the preflight changes nothing: the one change per host is the test's own file
    assert {h: result.hosts[h].changed for h in CASES if h not in FAILING} == dict.fromkeys(
        [h for h in CASES if h not in FAILING], 1)


@pytest.mark.parametrize(("host", "mode"), [("unified", "unified"), ("hybrid", "hybrid"),
                                            ("dirs_as_text", "unified"), ("absolute_link", "unified")])
def test_the_cgroup_mode_and_the_library_under_the_driver_root(preflight: tuple[RunResult, Path], host: str,
                                                               mode: str) -> None:
    _, tmp = preflight
    decided = _decided(tmp, host)
    assert decided["cgroup_mode"] == mode
    assert decided["under_root"] == [f"{tmp}/{host}/driver/usr/lib64/libnvidia-ml.so.1"]


def test_the_refusal_names_where_it_looked(preflight: tuple[RunResult, Path]) -> None:
    result, tmp = preflight
    root = tmp / "refused" / "driver"
    message = _failure(result, "refused")
    assert f"config root {root} has no libnvidia-ml.so.1" in message
    assert f"{root}/usr/lib/x86_64-linux-gnu" in message and f"{root}/lib64" in message
    assert "host driver libraries are in" in message or "The host has no NVIDIA driver library either" in message


def test_check_driver_false_reads_no_driver_library(preflight: tuple[RunResult, Path]) -> None:
    _, tmp = preflight
    decided = _decided(tmp, "unchecked")  # no cgroup.controllers anywhere: cgroup v1
    assert decided["cgroup_mode"] == "legacy" and decided["under_root"] is None


def test_a_failing_linker_cache_read_names_the_command_and_its_error(preflight: tuple[RunResult, Path]) -> None:
    result, _ = preflight
    message = _failure(result, "no_linker_cache")
    assert "`ldconfig -p` failed (rc 1): ldconfig: Can not open cache file /etc/ld.so.cache" in message, message


@pytest.mark.parametrize("host", ["dangling", "host_only_link", "a_directory"])
def test_a_dangling_link_or_a_directory_is_not_the_library(preflight: tuple[RunResult, Path], host: str) -> None:
    result, tmp = preflight
    assert f"config root {tmp / host / 'driver'} has no libnvidia-ml.so.1" in _failure(result, host)


def test_no_library_directories_are_refused_by_name(preflight: tuple[RunResult, Path]) -> None:
    result, _ = preflight
    message = _failure(result, "no_dirs")
    assert "container_toolkit_driver_lib_dirs names no directory ([])" in message, message
    message = _failure(result, "null_dirs")
    assert "container_toolkit_driver_lib_dirs names no directory ([null])" in message, message


def test_the_linker_caches_paths_are_read_whole(preflight: tuple[RunResult, Path]) -> None:
    """A directory with a space in the cache is named whole; a line in another encoding does not fail the read; a
    library whose name only ends in libnvidia-ml.so.1, and the 32-bit library, are not the driver's."""
    result, _ = preflight
    message = _failure(result, "spaced_cache")
    assert "host driver libraries are in /opt/nvidia driver/lib; set container_toolkit_driver_root: /" in message, \
        message
