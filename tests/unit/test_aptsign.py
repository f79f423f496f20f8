"""Signing a flat repository: the key is generated once per GNUPGHOME, wherever that home lies."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuprov.aptsign import key_fingerprint, release_text, sign

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg not installed")


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    (repo / "Packages").write_text("Package: x\nVersion: 1\n", encoding="utf-8")
    (repo / "Release").write_text(release_text(repo, ["Packages"], origin="test"), encoding="utf-8")
    return repo


def test_a_home_past_the_socket_path_limit_signs_and_keeps_its_key(tmp_path: Path) -> None:
    """gpg-agent cannot bind a socket under a 150-byte GNUPGHOME (unix(7): 107 bytes): signing still works,
    the key stays in that home, a second signing reuses it, and no agent is left running there."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "gnupg"
    assert len(str(deep)) > 107
    repo = _repo(tmp_path)
    first = key_fingerprint(sign(repo, deep, "test <t@gpuprov.invalid>"))
    second = key_fingerprint(sign(repo, deep, "test <t@gpuprov.invalid>"))
    assert first == second
    assert len(first) == 40
    assert (deep / "pubring.kbx").is_file()
    assert deep.stat().st_mode & 0o777 == 0o700
    verify = subprocess.run(["gpgv", "--keyring", str(repo / "key.gpg"), str(repo / "InRelease")],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
    agents = subprocess.run(["ps", "-ww", "-e", "-o", "args="], capture_output=True, text=True, check=True).stdout
    assert str(deep) not in agents


def test_without_a_home_each_signing_has_its_own_key(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    first = key_fingerprint(sign(repo, None, "test <t@gpuprov.invalid>"))
    second = key_fingerprint(sign(repo, None, "test <t@gpuprov.invalid>"))
    assert first != second
