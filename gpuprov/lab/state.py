"""The lab state directory: SSH key pair, known_hosts and the recorded host layout.

Layout of ``$GPUPROV_STATE_DIR/lab`` (default ``~/.local/state/gpuprov/lab``, mode 0700)::

    id_ed25519        private key (OpenSSH format, 0600) used as ``admin`` on every lab host
    id_ed25519.pub    its public key, installed as /home/admin/.ssh/authorized_keys
    known_hosts       ``[127.0.0.1]:PORT <type> <key>`` lines collected from each container
    hosts.json        the layout ``lab up`` made: [{"name", "hostname", "os", "port"}, ...]
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gpuprov import resources
from gpuprov.exceptions import ConfigError

KEY_COMMENT = "gpuprov-lab"


@dataclass(frozen=True)
class LabHost:
    """One lab host: container ``name`` (``gpuprov-lab-N``), ``hostname`` (also its inventory name),
    lab ``os`` (``debian12``, ``ubuntu2404`` ...), the 127.0.0.1 TCP ``port`` its sshd is published on and
    the mock NVML ``profile`` that is its GPU hardware (:mod:`gpuprov.lab.hardware`)."""

    name: str
    hostname: str
    os: str
    port: int
    profile: str = "h200x2"


def state_dir(environ: dict[str, str] | None = None) -> Path:
    """``lab/`` in gpuprov's state directory (:func:`gpuprov.resources.state_dir`; not created)."""
    return resources.state_dir(environ) / "lab"


def ensure_state_dir(path: Path | None = None) -> Path:
    """Create the lab state directory (and parents) and force its mode to 0700; returns it."""
    path = path or state_dir()
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def key_path(lab_dir: Path) -> Path:
    """Path of the lab's private key."""
    return lab_dir / "id_ed25519"


def known_hosts_path(lab_dir: Path) -> Path:
    """Path of the lab's known_hosts file."""
    return lab_dir / "known_hosts"


def ensure_keypair(lab_dir: Path) -> str:
    """Create the ed25519 key pair in ``lab_dir`` unless it exists; return the public key line."""
    private, public = key_path(lab_dir), key_path(lab_dir).with_suffix(".pub")
    if not private.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        public.unlink(missing_ok=True)
    if not public.exists():
        loaded = serialization.load_ssh_private_key(private.read_bytes(), password=None)
        line = loaded.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        public.write_text(f"{line.decode()} {KEY_COMMENT}\n", encoding="utf-8")
    return public.read_text(encoding="utf-8").strip()


def known_hosts_lines(port: int, host_keys: str, address: str = "127.0.0.1") -> list[str]:
    """known_hosts lines ``[address]:port <type> <base64>`` for each ``<type> <base64> [comment]`` line."""
    lines = []
    for raw in host_keys.splitlines():
        fields = raw.split()
        if len(fields) >= 2 and fields[0].startswith(("ssh-", "ecdsa-")):
            lines.append(f"[{address}]:{port} {fields[0]} {fields[1]}")
    return lines


def write_known_hosts(lab_dir: Path, lines: list[str]) -> Path:
    """Replace the lab's known_hosts with ``lines`` (mode 0600); returns its path."""
    path = known_hosts_path(lab_dir)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return path


def save_hosts(lab_dir: Path, hosts: list[LabHost]) -> None:
    """Record the layout of the last ``lab up`` in ``hosts.json``."""
    (lab_dir / "hosts.json").write_text(json.dumps([asdict(h) for h in hosts], indent=2) + "\n", "utf-8")


def load_hosts(lab_dir: Path) -> list[LabHost]:
    """The layout recorded by the last ``lab up`` ([] when none); ConfigError if the file is corrupt."""
    path = lab_dir / "hosts.json"
    if not path.exists():
        return []
    try:
        return [LabHost(**item) for item in json.loads(path.read_text("utf-8"))]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is corrupt ({exc}): run `gpuprov lab down --purge`, then `lab up`") from exc
