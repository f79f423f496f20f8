"""The lab state directory: location, mode, key pair, known_hosts and the recorded layout."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gpuprov.exceptions import ConfigError
from gpuprov.lab import state
from gpuprov.lab.state import LabHost


def test_state_dir_from_environment(tmp_path: Path) -> None:
    assert state.state_dir({"GPUPROV_STATE_DIR": str(tmp_path)}) == tmp_path / "lab"


def test_state_dir_default() -> None:
    assert state.state_dir({}) == Path.home() / ".local" / "state" / "gpuprov" / "lab"


def test_ensure_state_dir_is_0700(tmp_path: Path) -> None:
    lab = state.ensure_state_dir(tmp_path / "a" / "lab")
    assert stat.S_IMODE(lab.stat().st_mode) == 0o700
    lab.chmod(0o755)
    state.ensure_state_dir(lab)
    assert stat.S_IMODE(lab.stat().st_mode) == 0o700


def test_keypair_is_ed25519_private_0600_and_stable(tmp_path: Path) -> None:
    public = state.ensure_keypair(tmp_path)
    private = state.key_path(tmp_path)
    assert public.startswith("ssh-ed25519 ") and public.endswith(" gpuprov-lab")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    raw = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert public.split()[:2] == raw.decode().split()
    assert state.ensure_keypair(tmp_path) == public  # kept, not regenerated


def test_known_hosts_lines_bracket_the_port() -> None:
    keys = "ssh-ed25519 AAAAC3Nza root@lab-debian12-1\necdsa-sha2-nistp256 AAAAE2 root@x\ngarbage\n"
    assert state.known_hosts_lines(22201, keys) == [
        "[127.0.0.1]:22201 ssh-ed25519 AAAAC3Nza",
        "[127.0.0.1]:22201 ecdsa-sha2-nistp256 AAAAE2",
    ]


def test_write_known_hosts_replaces_and_is_0600(tmp_path: Path) -> None:
    state.write_known_hosts(tmp_path, ["a", "b"])
    path = state.write_known_hosts(tmp_path, ["c"])
    assert path.read_text() == "c\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_hosts_round_trip(tmp_path: Path) -> None:
    hosts = [LabHost("gpuprov-lab-1", "lab-debian12-1", "debian12", 22201)]
    assert state.load_hosts(tmp_path) == []
    state.save_hosts(tmp_path, hosts)
    assert state.load_hosts(tmp_path) == hosts


def test_corrupt_hosts_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "hosts.json").write_text("{not json")
    with pytest.raises(ConfigError, match="lab down --purge"):
        state.load_hosts(tmp_path)
