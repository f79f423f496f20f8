"""Run the lab hosts: systemd + sshd containers reachable as ``admin@127.0.0.1:PORT``.

:func:`up` makes the running lab match a layout (idempotent), :func:`status` reports each host and
:func:`down` removes the containers. Containers are named ``gpuprov-lab-<n>`` (n from 1), carry the
label :data:`LABEL_LAB`; a lab named by ``GPUPROV_LAB_NAME`` (:func:`lab_name`) names them
``gpuprov-lab-<name>-<n>`` and labels them :data:`LABEL_LAB_NAME` ``=<name>`` instead, so labs of different names
share one Docker engine and each ``up``/``status``/``down`` sees only its own (and an unnamed lab's, of this
version or an older one, never sees a named lab's). They run ``/lib/systemd/systemd`` unprivileged
(SYS_ADMIN and NET_ADMIN only, cgroups read-only) and publish sshd on ``127.0.0.1:<port>``. Each container
generates its SSH host keys at first start; :func:`up` collects them into the lab's known_hosts, so SSH
host-key checking stays on.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError, EnvironmentMissing, HostsFailed
from gpuprov.lab import dockerenv, hardware, images, repo, state
from gpuprov.lab.container_exec import exec_output
from gpuprov.lab.imagespecs import spec_for
from gpuprov.lab.ports import allocate_ports
from gpuprov.lab.state import LabHost

log = logging.getLogger(__name__)

CONTAINER_PREFIX = "gpuprov-lab-"
LABEL_LAB = "org.gpuprov.lab"
#: The label of a named lab's containers (value: the name); they do not carry :data:`LABEL_LAB`.
LABEL_LAB_NAME = "org.gpuprov.lab.name"
LABEL_HOST_OS = "org.gpuprov.lab.host-os"
DEFAULT_OSES = ("debian12", "ubuntu2404")
_LAB_NAME = re.compile(r"[a-z0-9]{1,16}")
#: Seconds to wait for systemd to finish booting and for sshd to accept the lab key.
BOOT_TIMEOUT_S = 120
SSH_TIMEOUT_S = 60


@dataclass(frozen=True)
class HostStatus:
    """What :func:`status` found for one host; ``state`` is Docker's (``running``, ``exited`` ...)
    or ``missing``; ``ssh_ok`` is whether ``ssh`` with the lab key and known_hosts ran ``true``;
    ``reason`` is ``""`` for a host that is up, else why it is not and what repairs it (:func:`diagnose`)."""

    name: str
    hostname: str
    os: str
    state: str
    port: int
    ssh_ok: bool
    reason: str = ""

    @property
    def up(self) -> bool:
        """Running and reachable over SSH."""
        return self.state == "running" and self.ssh_ok


def lab_name(environ: dict[str, str] | None = None) -> str:
    """The lab's name, ``GPUPROV_LAB_NAME`` (1-16 of a-z and 0-9), or ``""`` for the unnamed lab.

    Raises:
        ConfigError: ``GPUPROV_LAB_NAME`` is set to anything else (exit 2).
    """
    name = (os.environ if environ is None else environ).get("GPUPROV_LAB_NAME", "")
    if name and not _LAB_NAME.fullmatch(name):
        raise ConfigError(f"GPUPROV_LAB_NAME {name!r}: use 1-16 lower-case letters and digits, or leave it unset")
    return name


def container_prefix(name: str = "") -> str:
    """``gpuprov-lab-`` for the unnamed lab, ``gpuprov-lab-<name>-`` for lab ``name``."""
    return f"{CONTAINER_PREFIX}{name}-" if name else CONTAINER_PREFIX


def plan(hosts: int, oses: Sequence[str] = DEFAULT_OSES, name: str = "") -> list[tuple[str, str, str]]:
    """The layout for ``hosts`` hosts of lab ``name`` cycling over ``oses``: ``[(container, hostname, os), ...]``.

    Raises :class:`~gpuprov.exceptions.ConfigError` for fewer than one host or an unknown OS.
    """
    if hosts < 1:
        raise ConfigError(f"--hosts must be at least 1, got {hosts}")
    if not oses:
        raise ConfigError("give at least one --os")
    for os_name in oses:
        spec_for(os_name)
    return [
        (f"{container_prefix(name)}{n}", f"lab-{oses[(n - 1) % len(oses)]}-{n}", oses[(n - 1) % len(oses)])
        for n in range(1, hosts + 1)
    ]


def ssh_argv(host: LabHost, lab_dir: Path, command: str = "true", timeout_s: int = 5) -> list[str]:
    """The ``ssh`` command line that runs ``command`` on ``host`` as admin with strict host-key checking."""
    return [
        "ssh",
        "-F", "none",
        "-i", str(state.key_path(lab_dir)),
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={state.known_hosts_path(lab_dir)}",
        "-o", f"ConnectTimeout={timeout_s}",
        "-p", str(host.port),
        "admin@127.0.0.1",
        command,
    ]  # fmt: skip


def ssh_probe(host: LabHost, lab_dir: Path, timeout_s: int = 5) -> tuple[bool, str]:
    """``(ok, error)``: whether ``ssh`` to ``host`` ran ``true`` within ``timeout_s`` seconds (plus a margin),
    and ssh's last line of error output when it did not."""
    try:
        proc = subprocess.run(
            ssh_argv(host, lab_dir, timeout_s=timeout_s), capture_output=True, text=True, timeout=timeout_s + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"ssh did not finish within {timeout_s + 10} s"
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 0, (lines[-1] if lines else f"ssh exited {proc.returncode}")


def ssh_ok(host: LabHost, lab_dir: Path, timeout_s: int = 5) -> bool:
    """Whether ``ssh`` to ``host`` runs ``true`` within ``timeout_s`` seconds (plus a margin)."""
    return ssh_probe(host, lab_dir, timeout_s)[0]


def port_listening(port: int, address: str = "127.0.0.1", timeout_s: float = 2.0) -> bool:
    """Whether something accepts TCP connections on ``address:port`` (Docker's proxy for a published port)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _port_answers(port: int, tries: int = 3) -> bool:
    """Whether the port accepts a connection in any of ``tries`` probes 0.5 s apart (a loaded machine can miss
    one): a running host is restarted only when every probe fails."""
    for attempt in range(tries):
        if port_listening(port):
            return True
        if attempt + 1 < tries:
            time.sleep(0.5)
    return False


def diagnose(container: Any, host: LabHost, lab_dir: Path, ssh_error: str | None = None) -> str:
    """Why ``host`` (its ``container``, or ``None`` when missing) does not answer SSH, with the repair; ``""``
    when it does. Checked in order: container missing or not running, SSH port not published or not
    listening (Docker's port forwarding gone, e.g. after dockerd lost its session), sshd not active in the
    container, ssh itself refusing (key, host key) - with ``ssh_error`` when the caller has just probed SSH and
    it failed, so the host is not probed twice."""
    repair = "run `gpuprov lab up`"
    if container is None:
        return f"container {host.name} is missing: {repair}"
    if container.status != "running":
        return f"container {host.name} is {container.status}: {repair}"
    published = _port_of(container)
    if published is None:
        return f"{host.name} publishes no SSH port: {repair} (it recreates the container)"
    if not port_listening(published):
        return (f"nothing listens on 127.0.0.1:{published} (Docker's port forwarding for {host.name} is gone, "
                f"e.g. dockerd lost its terminal session): {repair} (it restarts the container)")
    code, active = _exec(container, "systemctl is-active ssh")
    if code != 0:
        return f"sshd is not running in {host.name} (systemctl is-active ssh: {active.strip() or code}): {repair}"
    if ssh_error is None:  # not probed by the caller yet
        ok, ssh_error = ssh_probe(host, lab_dir)
        if ok:
            return ""
    return f"ssh to 127.0.0.1:{host.port} failed: {ssh_error}"


def _lab_containers(client: Any, name: str) -> dict[str, Any]:
    """The containers of lab ``name`` (``""``: the unnamed lab), by container name."""
    selector = f"{LABEL_LAB_NAME}={name}" if name else LABEL_LAB
    return {c.name: c for c in client.containers.list(all=True, filters={"label": selector})}


def _port_of(container: Any) -> int | None:
    bindings = container.attrs.get("HostConfig", {}).get("PortBindings") or {}
    for binding in bindings.get("22/tcp") or []:
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    return None


def _exec(container: Any, command: str) -> tuple[int, str]:
    return exec_output(container, ["/bin/sh", "-c", command])


def _create(client: Any, name: str, hostname: str, os_name: str, port: int, image: str,
            lab_member: bool = True, lab: str = "") -> Any:
    """Start a lab-style container; only a ``lab_member`` carries :data:`LABEL_LAB` (``lab up``/``down``/``status``
    manage those), so a test's own container of the same kind is left alone by them."""
    log.info("creating %s (%s) on 127.0.0.1:%d from %s", name, hostname, port, image)
    return client.containers.run(
        image,
        name=name,
        hostname=hostname,
        detach=True,
        command=["/lib/systemd/systemd"],
        environment={"container": "docker"},
        cap_add=["SYS_ADMIN", "NET_ADMIN"],
        security_opt=["seccomp=unconfined"],
        tmpfs={"/run": "rw,mode=755", "/run/lock": "rw,mode=1777"},
        volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
        ports={"22/tcp": ("127.0.0.1", port)},
        labels={**(({LABEL_LAB_NAME: lab} if lab else {LABEL_LAB: "1"}) if lab_member else {}), LABEL_HOST_OS: os_name},
        stop_signal="SIGRTMIN+3",
    )


def _wait_booted(container: Any, timeout_s: int) -> str:
    """Wait until systemd says running/degraded and the host keys exist; return the host keys."""
    deadline = time.monotonic() + timeout_s
    last = ""
    hostname = container.attrs["Config"]["Hostname"]
    while time.monotonic() < deadline:
        container.reload()
        if container.status != "running":
            raise HostsFailed(f"{container.name} stopped while booting: {container.logs(tail=20)!r}", [hostname])
        _, last = _exec(container, "systemctl is-system-running; cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null")
        booted, _, host_keys = last.partition("\n")
        if booted.strip() in {"running", "degraded"} and "ssh-ed25519 " in host_keys:
            return host_keys
        time.sleep(1)
    raise HostsFailed(f"{container.name} did not finish booting in {timeout_s} s: {last.strip()}", [hostname])


def _authorize(container: Any, public_key: str) -> None:
    script = (
        "umask 077 && install -d -m 0700 -o admin -g admin /home/admin/.ssh && "
        f"printf '%s\\n' {shlex.quote(public_key)} > /home/admin/.ssh/authorized_keys && "
        "chown admin:admin /home/admin/.ssh/authorized_keys"
    )
    code, output = _exec(container, script)
    if code != 0:
        raise HostsFailed(
            f"could not install the lab key on {container.name}: {output}", [container.attrs["Config"]["Hostname"]]
        )


def _reconcile(existing: dict[str, Any], layout: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The running containers of ``layout`` that can be kept: lab containers outside it, or with another OS or
    host name, are removed; stopped ones started; running ones whose SSH port Docker no longer forwards
    restarted. Hosts missing from the result are to be created."""
    wanted = {name for name, _, _ in layout}
    for name, container in existing.items():
        if name not in wanted:
            log.info("removing %s (not in the layout)", name)
            container.remove(force=True)
    containers: dict[str, Any] = {}
    for name, hostname, os_name in layout:
        container = existing.get(name)
        if container is not None and (
            container.labels.get(LABEL_HOST_OS) != os_name or container.attrs["Config"]["Hostname"] != hostname
        ):
            container.remove(force=True)
            container = None
        if container is not None and container.status != "running":
            log.info("%s: starting the stopped container", name)
            try:
                container.start()
            except Exception as exc:  # port taken meanwhile, or a broken container: recreate it
                log.warning("could not start %s (%s); recreating it", name, exc)
                container.remove(force=True)
                container = None
        elif container is not None and (port := _port_of(container)) is not None and not _port_answers(port):
            # running, but Docker's forwarding of its SSH port is gone (its docker-proxy died): a restart
            # publishes the port again
            log.info("%s: nothing listens on 127.0.0.1:%d; restarting the container", name, port)
            try:
                container.restart(timeout=5)
            except Exception as exc:  # e.g. the port is taken meanwhile: recreate it, as for a failed start
                log.warning("could not restart %s (%s); recreating it", name, exc)
                container.remove(force=True)
                container = None
        if container is not None:
            containers[name] = container
    return containers


def up(
    hosts: int,
    oses: Sequence[str] = DEFAULT_OSES,
    *,
    profiles: Sequence[str] = (hardware.DEFAULT_PROFILE,),
    lab_dir: Path | None = None,
    client: Any = None,
    boot_timeout_s: int = BOOT_TIMEOUT_S,
) -> list[LabHost]:
    """Make the lab (:func:`lab_name`) run exactly ``hosts`` hosts cycling over ``oses``, and return them.

    Running hosts are kept, stopped ones started, missing ones (and ones whose OS changed)
    created from :func:`gpuprov.lab.images.ensure_image` (building the image if needed); lab
    containers numbered above ``hosts`` are removed. Waits for systemd and sshd, writes known_hosts
    and ``hosts.json`` in ``lab_dir``. Host n gets hardware profile ``profiles[n % len(profiles)]``
    (mock NVML + real nvidia-smi, :func:`gpuprov.lab.hardware.install`), installed on every call so a
    profile change is applied, and the signed stand-in NVIDIA repository served on its loopback
    (:func:`gpuprov.lab.repo.install`). Raises ConfigError, EnvironmentMissing (Docker, ssh, a C compiler or an
    image build tool missing) or HostsFailed (a host did not come up).
    """
    for profile in profiles:
        hardware.check_profile(profile)
    if shutil.which("ssh") is None:
        raise EnvironmentMissing("`ssh` is not on PATH: install the OpenSSH client (`apt-get install openssh-client`)")
    lab = lab_name()
    layout = plan(hosts, oses, lab)
    client = client or dockerenv.client()
    lab_dir = state.ensure_state_dir(lab_dir)
    public_key = state.ensure_keypair(lab_dir)
    refs = {os_name: images.ensure_image(os_name, client=client) for os_name in dict.fromkeys(oses)}
    containers = _reconcile(_lab_containers(client, lab), layout)
    used = {p for c in containers.values() if (p := _port_of(c)) is not None}
    missing = [item for item in layout if item[0] not in containers]
    for (container_name, hostname, os_name), port in zip(missing, allocate_ports(len(missing), reserved=used),
                                                         strict=True):
        containers[container_name] = _create(client, container_name, hostname, os_name, port, refs[os_name], lab=lab)
    lab_hosts: list[LabHost] = []
    known: list[str] = []
    for index, (name, hostname, os_name) in enumerate(layout):
        container = containers[name]
        container.reload()
        published = _port_of(container)
        if published is None:
            raise HostsFailed(f"{name} publishes no ssh port", [hostname])
        log.info("%s: waiting for systemd and the SSH host keys", hostname)
        host_keys = _wait_booted(container, boot_timeout_s)
        log.info("%s: installing the lab key", hostname)
        _authorize(container, public_key)
        profile = profiles[index % len(profiles)]
        log.info("%s: installing the simulated hardware (profile %s)", hostname, profile)
        hardware.install(container, os_name, profile)
        log.info("%s: serving the stand-in NVIDIA repository", hostname)
        repo.install(container, lab_dir, os_name)
        known += state.known_hosts_lines(published, host_keys)
        lab_hosts.append(LabHost(name, hostname, os_name, published, profile))
    state.write_known_hosts(lab_dir, known)
    state.save_hosts(lab_dir, lab_hosts)
    log.info("waiting for SSH with the lab key on %d host(s)", len(lab_hosts))
    _wait_ssh(lab_hosts, lab_dir, containers)
    return lab_hosts


def _wait_ssh(hosts: list[LabHost], lab_dir: Path, containers: dict[str, Any],
              timeout_s: int = SSH_TIMEOUT_S) -> None:
    """Wait until every host answers SSH; raise HostsFailed naming each host that does not and why."""
    deadline = time.monotonic() + timeout_s
    pending = list(hosts)
    while pending and time.monotonic() < deadline:
        pending = [h for h in pending if not ssh_ok(h, lab_dir)]
        if pending:
            time.sleep(1)
    if pending:
        reasons = [f"{h.hostname}: {diagnose(containers.get(h.name), h, lab_dir) or 'answers now'}" for h in pending]
        raise HostsFailed(f"SSH with the lab key did not work within {timeout_s} s: " + "; ".join(reasons),
                          sorted(h.hostname for h in pending))


def status(*, lab_dir: Path | None = None, client: Any = None) -> list[HostStatus]:
    """One :class:`HostStatus` per host of the last ``lab up`` plus any other lab container."""
    lab_dir = lab_dir or state.state_dir()
    client = client or dockerenv.client()
    existing = _lab_containers(client, lab_name())
    result: list[HostStatus] = []
    known = state.load_hosts(lab_dir)
    for host in known:
        container = existing.pop(host.name, None)
        result.append(_host_status(container, host, lab_dir))
    for name, container in sorted(existing.items()):  # lab containers this state dir does not know
        host = LabHost(name, container.attrs["Config"]["Hostname"], container.labels.get(LABEL_HOST_OS, "?"),
                       _port_of(container) or 0)
        result.append(_host_status(container, host, lab_dir))
    return result


def _host_status(container: Any, host: LabHost, lab_dir: Path) -> HostStatus:
    """One host's :class:`HostStatus`: one SSH probe when its container runs, and the reason when it is not up."""
    current = container.status if container is not None else "missing"
    reachable, error = ssh_probe(host, lab_dir) if current == "running" else (False, "")
    reason = "" if reachable else diagnose(container, host, lab_dir, error if current == "running" else None)
    return HostStatus(host.name, host.hostname, host.os, current, host.port, reachable, reason)


def down(*, purge: bool = False, lab_dir: Path | None = None, client: Any = None) -> list[str]:
    """Remove every lab container (returns their names); with ``purge`` delete the lab state dir too."""
    lab_dir = lab_dir or state.state_dir()
    client = client or dockerenv.client()
    removed = []
    for name, container in sorted(_lab_containers(client, lab_name()).items()):
        container.remove(force=True)
        removed.append(name)
    if purge and lab_dir.exists():
        shutil.rmtree(lab_dir)
    elif (lab_dir / "hosts.json").exists():
        (lab_dir / "hosts.json").unlink()
    return removed
