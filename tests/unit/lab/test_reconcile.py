"""``containers.up``/``status``/``down`` reconcile against a fake Docker client (no Docker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.lab import containers, hardware, images, repo, state

HOST_KEYS = "ssh-ed25519 AAAAC3Nza root@x\n"


class FakeContainer:
    def __init__(self, client: FakeClient, name: str, hostname: str, os_name: str, port: int, status: str) -> None:
        self.client, self.name, self.status = client, name, status
        self.labels = {containers.LABEL_LAB: "1", containers.LABEL_HOST_OS: os_name}
        self.attrs = {
            "Config": {"Hostname": hostname},
            "HostConfig": {"PortBindings": {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}},
        }

    def start(self) -> None:
        self.client.events.append(f"start {self.name}")
        self.status = "running"

    def remove(self, force: bool = False) -> None:
        self.client.events.append(f"remove {self.name}")
        del self.client.by_name[self.name]

    def reload(self) -> None:
        pass

    def restart(self, timeout: int = 10) -> None:
        self.client.events.append(f"restart {self.name}")
        self.client.dead_ports.discard(int(self.attrs["HostConfig"]["PortBindings"]["22/tcp"][0]["HostPort"]))

    def exec_run(self, argv: list[str], user: str = "") -> tuple[int, bytes]:
        return (0, b"active\n") if self.client.sshd_active else (3, b"inactive\n")

    def get_archive(self, path: str) -> tuple[list[bytes], dict[str, Any]]:
        import docker.errors

        raise docker.errors.NotFound(f"{path}: the stand-in keeps no files; its exec output is the streamed one")


class FakeContainers:
    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[FakeContainer]:
        key, has_value, value = (filters or {}).get("label", "").partition("=")
        return [c for c in self.client.by_name.values()
                if not key or (c.labels.get(key) == value if has_value else key in c.labels)]

    def run(self, image: str, *, name: str, hostname: str, ports: dict[str, Any], labels: dict[str, str],
            **_: Any) -> FakeContainer:  # fmt: skip
        self.client.events.append(f"create {name} {image} {ports['22/tcp'][1]}")
        c = FakeContainer(self.client, name, hostname, labels[containers.LABEL_HOST_OS], ports["22/tcp"][1], "running")
        c.labels = dict(labels)
        self.client.by_name[name] = c
        return c


class FakeClient:
    def __init__(self) -> None:
        self.by_name: dict[str, FakeContainer] = {}
        self.events: list[str] = []
        self.hardware: list[tuple[str, str, str]] = []
        self.dead_ports: set[int] = set()  # published, but nothing listens (Docker's proxy gone)
        self.sshd_active = True
        self.containers = FakeContainers(self)

    def add(self, n: int, os_name: str, port: int, status: str = "running") -> None:
        self.by_name[f"gpuprov-lab-{n}"] = FakeContainer(
            self, f"gpuprov-lab-{n}", f"lab-{os_name}-{n}", os_name, port, status
        )


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    monkeypatch.setattr(images, "ensure_image", lambda os_name, client=None: f"gpuprov-lab-{os_name}:hash")
    monkeypatch.setattr(containers, "_wait_booted", lambda container, timeout_s: HOST_KEYS)
    monkeypatch.setattr(containers, "_authorize", lambda container, key: None)
    monkeypatch.setattr(hardware, "install", lambda container, os_name, profile: container.client.hardware.append(
        (container.name, os_name, profile)))
    monkeypatch.setattr(repo, "install", lambda container, lab_dir, os_name: None)
    monkeypatch.setattr(containers, "_wait_ssh", lambda hosts, lab_dir, running: None)
    fake = FakeClient()
    monkeypatch.setattr(containers, "port_listening", lambda port: port not in fake.dead_ports)
    monkeypatch.setattr(containers, "ssh_probe", lambda host, lab_dir, timeout_s=5: (
        (host.port not in fake.dead_ports and fake.sshd_active), "Connection refused"))
    monkeypatch.setattr("gpuprov.lab.ports.port_is_free", lambda port, address="127.0.0.1": True)
    return fake


def test_fresh_lab_creates_hosts_on_the_lowest_ports(client: FakeClient, tmp_path: Path) -> None:
    hosts = containers.up(2, lab_dir=tmp_path, client=client)
    assert [(h.hostname, h.port) for h in hosts] == [("lab-debian12-1", 22201), ("lab-ubuntu2404-2", 22202)]
    assert client.events == [
        "create gpuprov-lab-1 gpuprov-lab-debian12:hash 22201",
        "create gpuprov-lab-2 gpuprov-lab-ubuntu2404:hash 22202",
    ]
    assert state.known_hosts_path(tmp_path).read_text().splitlines() == [
        "[127.0.0.1]:22201 ssh-ed25519 AAAAC3Nza",
        "[127.0.0.1]:22202 ssh-ed25519 AAAAC3Nza",
    ]
    assert state.load_hosts(tmp_path) == hosts


def test_rerun_keeps_running_starts_stopped_recreates_missing(client: FakeClient, tmp_path: Path) -> None:
    client.add(1, "debian12", 22201)
    client.add(2, "ubuntu2404", 22205, status="exited")
    client.add(4, "debian12", 22207)  # beyond --hosts 3: removed
    hosts = containers.up(3, lab_dir=tmp_path, client=client)
    assert client.events == [
        "remove gpuprov-lab-4",
        "start gpuprov-lab-2",
        "create gpuprov-lab-3 gpuprov-lab-debian12:hash 22202",
    ]
    assert [h.port for h in hosts] == [22201, 22205, 22202]


def test_a_named_lab_leaves_the_unnamed_lab_alone(client: FakeClient, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    client.add(1, "debian12", 22201)  # the unnamed lab's host, on a port that is then taken
    monkeypatch.setattr("gpuprov.lab.ports.port_is_free", lambda port, address="127.0.0.1": port != 22201)
    monkeypatch.setenv("GPUPROV_LAB_NAME", "ci1")
    hosts = containers.up(1, ["ubuntu2204"], lab_dir=tmp_path, client=client)
    assert client.events == ["create gpuprov-lab-ci1-1 gpuprov-lab-ubuntu2204:hash 22202"]
    labels = client.by_name["gpuprov-lab-ci1-1"].labels
    assert labels[containers.LABEL_LAB_NAME] == "ci1" and containers.LABEL_LAB not in labels  # unseen by unnamed labs
    assert [r.name for r in containers.status(lab_dir=tmp_path, client=client)] == [h.name for h in hosts]
    assert containers.down(lab_dir=tmp_path, client=client) == ["gpuprov-lab-ci1-1"]
    assert set(client.by_name) == {"gpuprov-lab-1"}


def test_os_change_recreates_the_host(client: FakeClient, tmp_path: Path) -> None:
    client.add(1, "ubuntu2404", 22201)
    containers.up(1, ["debian12"], lab_dir=tmp_path, client=client)
    assert client.events == ["remove gpuprov-lab-1", "create gpuprov-lab-1 gpuprov-lab-debian12:hash 22201"]


def test_status_reports_missing_and_unknown_hosts(client: FakeClient, tmp_path: Path) -> None:
    containers.up(2, lab_dir=tmp_path, client=client)
    client.by_name["gpuprov-lab-2"].remove()
    client.add(7, "debian12", 22299, status="exited")
    rows = containers.status(lab_dir=tmp_path, client=client)
    assert [(r.name, r.state, r.up) for r in rows] == [
        ("gpuprov-lab-1", "running", True),
        ("gpuprov-lab-2", "missing", False),
        ("gpuprov-lab-7", "exited", False),
    ]
    assert rows[0].reason == ""
    assert rows[1].reason == "container gpuprov-lab-2 is missing: run `gpuprov lab up`"
    assert rows[2].reason == "container gpuprov-lab-7 is exited: run `gpuprov lab up`"


def test_status_says_when_the_ssh_port_is_gone_or_sshd_is_down(client: FakeClient, tmp_path: Path) -> None:
    containers.up(2, lab_dir=tmp_path, client=client)
    client.dead_ports.add(22201)
    rows = containers.status(lab_dir=tmp_path, client=client)
    assert not rows[0].up and rows[1].up
    assert "nothing listens on 127.0.0.1:22201" in rows[0].reason and "gpuprov lab up" in rows[0].reason
    client.dead_ports.clear()
    client.sshd_active = False
    rows = containers.status(lab_dir=tmp_path, client=client)
    assert all("sshd is not running" in r.reason for r in rows), rows


def test_up_restarts_a_running_host_whose_port_vanished(client: FakeClient, tmp_path: Path) -> None:
    """Docker's port forwarding of a running container can die with dockerd's session: up restarts that host
    (which publishes the port again) and leaves the healthy one alone."""
    client.add(1, "debian12", 22201)
    client.add(2, "ubuntu2404", 22202)
    client.dead_ports.add(22202)
    hosts = containers.up(2, lab_dir=tmp_path, client=client)
    assert client.events == ["restart gpuprov-lab-2"]
    assert [h.port for h in hosts] == [22201, 22202] and not client.dead_ports


def test_down_removes_containers_and_purge_removes_state(client: FakeClient, tmp_path: Path) -> None:
    lab_dir = tmp_path / "lab"
    containers.up(2, lab_dir=lab_dir, client=client)
    assert containers.down(lab_dir=lab_dir, client=client) == ["gpuprov-lab-1", "gpuprov-lab-2"]
    assert state.key_path(lab_dir).exists() and not (lab_dir / "hosts.json").exists()
    containers.down(purge=True, lab_dir=lab_dir, client=client)
    assert not lab_dir.exists()


def test_hardware_profiles_cycle_over_hosts_and_are_reinstalled(client: FakeClient, tmp_path: Path) -> None:
    hosts = containers.up(3, ["debian12"], profiles=["h200x2", "xid79"], lab_dir=tmp_path, client=client)
    assert [h.profile for h in hosts] == ["h200x2", "xid79", "h200x2"]
    assert client.hardware == [("gpuprov-lab-1", "debian12", "h200x2"), ("gpuprov-lab-2", "debian12", "xid79"),
                               ("gpuprov-lab-3", "debian12", "h200x2")]
    client.hardware.clear()
    containers.up(1, ["debian12"], profiles=["no-devices"], lab_dir=tmp_path, client=client)
    assert client.hardware == [("gpuprov-lab-1", "debian12", "no-devices")]
    assert state.load_hosts(tmp_path)[0].profile == "no-devices"


def test_unknown_profile_is_a_usage_error(client: FakeClient, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such mock NVML profile"):
        containers.up(1, ["debian12"], profiles=["h900x9"], lab_dir=tmp_path, client=client)
    assert client.events == []


def test_up_recreates_a_host_whose_restart_fails(client: FakeClient, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    client.add(1, "debian12", 22201)
    client.dead_ports.add(22201)

    def refuse(timeout: int = 10) -> None:
        raise RuntimeError("port is already allocated")

    monkeypatch.setattr(client.by_name["gpuprov-lab-1"], "restart", refuse)
    containers.up(1, ["debian12"], lab_dir=tmp_path, client=client)
    assert client.events[0] == "remove gpuprov-lab-1" and client.events[1].startswith("create gpuprov-lab-1 ")
