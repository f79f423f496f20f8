"""Helpers shared by the kernel/DKMS lab tests: a systemd lab container with DKMS and real headers,
the signed stand-in repository copied into it, and playbook runs through gpuprov.runner."""

from __future__ import annotations

import fcntl
import io
import os
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from gpuprov.lab.container_exec import exec_output
from gpuprov.lab.standin import PackageSpec, build_repository
from gpuprov.lab.standin.repo import key_fingerprint
from gpuprov.rolevars import with_role_variables
from gpuprov.runner import RunRequest, RunResult, new_run_dir, run_playbook

ROOT = Path(__file__).resolve().parents[2]
REPO_IN_CONTAINER = "/opt/gpuprov-standin"

PREPARE = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive
# systemd-tmpfiles cleans /tmp during boot, which breaks apt's signature check if apt runs first
systemctl is-system-running --wait >/dev/null 2>&1 || true
k=$(ls /boot | sed -n 's/^vmlinuz-//p' | sort | tail -n1)
apt-get update -qq || { sleep 2; apt-get update -qq; }
apt-get install -y -qq --no-install-recommends dkms gcc make libc6-dev openssl "linux-headers-$k" >/dev/null
echo "$k"
"""


def exec_ok(container: Any, script: str) -> str:
    """Run ``sh -c script`` in the container; assert it succeeded and return its output."""
    rc, text = exec_output(container, ["sh", "-c", script], user="")
    assert rc == 0, f"container command failed ({rc}): {script}\n{text}"
    return text


class LabHost:
    """A driver test's container and the state folder its runs keep their records in: shell commands, the failures
    of a run and the packages dpkg has installed."""

    def __init__(self, container: Any, state: Path) -> None:
        self.container, self.state = container, state

    @property
    def name(self) -> str:
        return str(self.container.name)

    def sh(self, script: str) -> str:
        return exec_ok(self.container, script)

    def failures(self, result: RunResult) -> str:
        """The failure messages of ``result`` on this host, joined."""
        return " ".join(str(f.get("msg", f)) for f in result.hosts[self.name].failures)

    def versions(self) -> dict[str, str]:
        """Installed packages: name -> version (dpkg's ``ii`` state)."""
        out = self.sh("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' || true")
        return {p[1]: p[2] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[0][1:] == "i"}


def wait_booted(container: Any, timeout_s: float = 120.0) -> None:
    """Wait until systemd in ``container`` reports ``running`` or ``degraded``. ``systemctl is-system-running
    --wait`` alone can return at once while the system bus is not up yet, and systemd-tmpfiles then cleans
    ``/tmp`` under the next command: apt's signature check fails with "Unknown error executing apt-key"."""
    deadline = time.monotonic() + timeout_s
    while True:
        rc, out = container.exec_run(["systemctl", "is-system-running"])
        if out.decode(errors="replace").strip() in ("running", "degraded"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{container.name}: systemd did not finish booting ({rc}, {out!r})")
        time.sleep(0.5)


#: Options every systemd test container runs with (unprivileged: SYS_ADMIN and NET_ADMIN, cgroups read-only).
SYSTEMD_RUN = {"command": "/lib/systemd/systemd", "detach": True, "cap_add": ["SYS_ADMIN", "NET_ADMIN"],
               "security_opt": ["seccomp=unconfined"], "tmpfs": {"/run": "", "/run/lock": ""},
               "volumes": {"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}}}
#: Undo what a first boot leaves in a container that is to become an image (each container then makes its own).
FIRST_BOOT_UNDO = "rm -f /etc/ssh/ssh_host_* && : > /etc/machine-id && rm -rf /tmp/* /var/tmp/*"


def dkms_image(image: str) -> str:
    """``image`` with :data:`PREPARE` done (dkms, gcc, make, the kernel's real headers), committed as
    ``gpuprov-test-dkms-<os>:<hash of the base image id and PREPARE>`` the first time and reused after.

    Every DKMS test starts from the same prepared state; installing those packages anew for each test
    (apt lists, ~70 packages, dpkg triggers) was repeated work. A flock makes concurrent test processes
    build it once; older tags of the same name are removed."""
    import hashlib

    import docker

    from gpuprov.lab import dockerenv
    from gpuprov.lab.images import cache_dir

    client = docker.from_env()
    base = client.images.get(image)
    os_name = base.labels.get("org.gpuprov.lab.os", "lab")
    repository = f"gpuprov-test-dkms-{os_name}"
    digest = hashlib.sha256(f"{base.id}\0{PREPARE}\0{FIRST_BOOT_UNDO}".encode()).hexdigest()[:12]
    ref = f"{repository}:{digest}"
    lock = cache_dir(os_name).parent / f"{repository}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if dockerenv.image_exists(client, ref):
            return ref
        container = client.containers.run(image, name=f"gpuprov-dkms-build-{uuid.uuid4().hex[:8]}", **SYSTEMD_RUN)
        try:
            wait_booted(container)
            exec_ok(container, PREPARE)
            exec_ok(container, FIRST_BOOT_UNDO)
            container.commit(repository=repository, tag=digest)
        finally:
            container.remove(force=True)
        dockerenv.remove_stale_tags(client, repository, keep={digest})
    return ref


@contextmanager
def dkms_container(image: str, label: str) -> Iterator[tuple[Any, str]]:
    """A running lab container with dkms, gcc, make and the real headers of its kernel (from
    :func:`dkms_image`); yields it and the kernel version (the container's "running" kernel for the roles:
    the real one is the host's)."""
    import docker

    client = docker.from_env()
    container = client.containers.run(dkms_image(image), name=f"gpuprov-{label}-{uuid.uuid4().hex[:8]}",
                                      **SYSTEMD_RUN)
    try:
        wait_booted(container)  # systemd-tmpfiles cleans /tmp during boot, which breaks apt's signature check
        kernel = exec_ok(container, "ls /boot | sed -n 's/^vmlinuz-//p' | sort | tail -n1").split()[-1]
        yield container, kernel
    finally:
        container.remove(force=True)


#: Inventory variables of a test container. gpuprov runs Ansible under mitogen's strategy
#: (gpuprov.ansible_settings), which carries the short connection name ``docker`` over its own transport: one
#: Python interpreter in the container for the whole run instead of a ``docker exec`` and a module copy per task.
#: The fully qualified ``community.docker.docker`` is not redirected and ran every task Ansible's way, which took
#: about twice the time and CPU of a converged nvidia_driver run (docs/ci.md).
CONTAINER_HOST: dict[str, str] = {"ansible_connection": "docker", "ansible_python_interpreter": "/usr/bin/python3"}

def plain_runner_env() -> dict[str, str]:
    """``envvars`` for a playbook run through ansible-runner's own API (Ansible's linear strategy, not gpuprov's
    runner): this interpreter's ansible-playbook and docker CLI on ``PATH``, the checkout's collection, facts only as
    ``ansible_facts``, and pipelining (one ``docker exec`` per task, as Molecule's runs; docs/ci.md)."""
    return {
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"),
        "ANSIBLE_INJECT_FACTS_AS_VARS": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "True",
    }


#: Port the stand-in repository is served on inside a test container (its own loopback).
REPO_PORT = 8472


def install_repository(container: Any, specs: list[PackageSpec], build_dir: Path) -> dict[str, str]:
    """Build a signed stand-in repository from ``specs``, serve it on the container's loopback and return
    the nvidia_driver variables that point the role at it (URL, key URL, key fingerprint), the way a site
    points the role at its mirror. Calls for one container reuse one signing key (``build_dir``'s parent).
    Also leaves a plain apt source for the same URL, as an earlier install would, for seeding states."""
    repo = build_repository(specs, build_dir, gnupg_home=build_dir.parent / "gnupg")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(repo.path), arcname=Path(REPO_IN_CONTAINER).name)
    container.put_archive(str(Path(REPO_IN_CONTAINER).parent), buffer.getvalue())
    url = f"http://127.0.0.1:{REPO_PORT}/"
    exec_ok(container, (
        f"cd {REPO_IN_CONTAINER} && (setsid nohup python3 -m http.server --bind 127.0.0.1 {REPO_PORT} "
        ">/dev/null 2>&1 &); for i in $(seq 50); do python3 -c \"import urllib.request as u; "
        f"u.urlopen('{url}Release')\" 2>/dev/null && break; sleep 0.2; done"
    ))
    # a hand-made source for the same URL, as an earlier install would leave (the role replaces it with its
    # own pinned deb822 source): tests seed their bad states with apt-get through it
    line = f"deb [signed-by={REPO_IN_CONTAINER}/{repo.key.name}] {url} ./"
    exec_ok(container, f"echo '{line}' > /etc/apt/sources.list.d/gpuprov-standin.list && apt-get update -qq")
    return {"nvidia_driver_cuda_repo_url": url, "nvidia_driver_cuda_repo_key_url": f"{url}{repo.key.name}",
            "nvidia_driver_cuda_repo_key_fingerprint": key_fingerprint(repo.key)}


def container_inventory(run_dir: Path, container: Any, **host_vars: Any) -> Path:
    """Write ``run_dir/inventory/hosts.yml``: ``container`` alone in the ``gpuprov`` group, with
    :data:`CONTAINER_HOST` and ``host_vars``; return its path."""
    inventory = run_dir / "inventory" / "hosts.yml"
    inventory.parent.mkdir(parents=True)
    hosts = {container.name: {**CONTAINER_HOST, **host_vars}}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpuprov": {"hosts": hosts}}}}), encoding="utf-8")
    return inventory


def run(container: Any, playbook: str, state: Path, extravars: dict[str, Any] | None = None,
        check: bool = False) -> RunResult:
    """Run ``playbooks/<playbook>`` on the container through gpuprov.runner (ansible-runner's API); fleet variables
    (``gpuprov_*``) in ``extravars`` reach the roles as gpuprov maps them (gpuprov.rolevars)."""
    run_dir = new_run_dir(state, Path(playbook).stem)
    inventory = container_inventory(run_dir, container)
    request = RunRequest(inventory=inventory, playbook=ROOT / "playbooks" / playbook,
                         run_dir=run_dir, check=check,
                         extravars=with_role_variables({k: str(v) for k, v in (extravars or {}).items()}))
    return run_playbook(request)


def task_results(result: RunResult, task: str) -> list[dict[str, Any]]:
    """``res`` of every per-item and per-host ok/failed event of ``task``, read from the run's job events."""
    import json

    out = []
    for path in sorted((result.artifact_dir / "job_events").glob("*.json")):
        event = json.loads(path.read_text(encoding="utf-8"))
        data = event.get("event_data", {})
        if data.get("task") == task and event.get("event") in (
            "runner_item_on_ok", "runner_item_on_failed", "runner_on_ok", "runner_on_failed",
        ):
            out.append(data.get("res", {}))
    return out
