"""Signing a flat apt repository (``deb [signed-by=KEY] URL ./``): the Release file, its OpenPGP signatures
(``InRelease``, ``Release.gpg``) and the exported public key, with GnuPG.

Used by the offline bundle (``gpuprov bundle``) and by the lab's stand-in repositories. The secret key lives
in a private GNUPGHOME (mode 0700) that the caller names and keeps (reused on rebuilds, so one fingerprint
serves every repository signed with it), or in a throwaway one removed after signing.

gpg-agent listens on sockets inside GNUPGHOME, and a Unix socket path is limited to 107 bytes
(``sun_path`` in unix(7)); a GNUPGHOME deep in a long path is therefore reached through a short symbolic
link in the system's temporary directory for the duration of the call.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpuprov.exceptions import ConfigError, EnvironmentMissing

KEY_NAME = "key.gpg"

#: Longest socket name gpg-agent creates in its home (``S.gpg-agent.browser``) plus the separator.
_SOCKET_SUFFIX = len("/S.gpg-agent.browser")

#: ``sizeof(sun_path) - 1`` on Linux (unix(7)).
_SUN_PATH_MAX = 107


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise EnvironmentMissing(f"{name} not found: install {package} to sign the repository")
    return found


def _run(argv: list[str], cwd: Path) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"{Path(argv[0]).name} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def release_text(repo: Path, files: Iterable[str], origin: str) -> str:
    """A flat repository's Release file with MD5Sum/SHA256 entries (hash, size in bytes, name) for ``files``."""
    date = email.utils.formatdate(usegmt=True)
    lines = [f"Origin: {origin}", f"Label: {origin}", "Suite: ./", "Codename: ./", f"Date: {date}",
             "Architectures: all amd64"]
    for field_name, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field_name}:")
        for name in files:
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def gpg_home(path: Path | None) -> Iterator[str]:
    """The ``--homedir`` to pass gpg for GNUPGHOME ``path`` (created 0700), or a throwaway one when ``None``.

    The path yielded is short enough for gpg-agent's sockets; on leaving, the agent started there is stopped
    (and a throwaway home removed), so no agent outlives the call."""
    with tempfile.TemporaryDirectory(prefix="gpuprov-gpg-") as tmp:
        home = tmp
        if path is not None:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            home = str(path.absolute())
            if len(os.fsencode(home)) + _SOCKET_SUFFIX > _SUN_PATH_MAX:
                link = Path(tmp) / "h"
                link.symlink_to(path.absolute())
                home = str(link)
        try:
            yield home
        finally:
            gpgconf = shutil.which("gpgconf")
            if gpgconf:
                subprocess.run([gpgconf, "--homedir", home, "--kill", "all"], capture_output=True, check=False)


def sign(repo: Path, gnupg_home: Path | None, uid: str, expiry: str = "1y") -> Path:
    """Sign ``repo/Release`` (writing ``InRelease`` and ``Release.gpg``) and export the public key as
    ``repo/key.gpg``; return that key's path.

    The secret key is the one in ``gnupg_home``, generated there (RSA 3072, signing only, user id ``uid``,
    expiring after ``expiry`` in gpg's notation) when it holds none; without ``gnupg_home`` a throwaway key.

    Raises:
        EnvironmentMissing: gpg is not installed.
        ConfigError: gpg failed (its message).
    """
    gpg = _tool("gpg", "gnupg")
    with gpg_home(gnupg_home) as home:
        base = [gpg, "--batch", "--quiet", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", ""]
        have = subprocess.run([*base, "--list-secret-keys", "--with-colons"], capture_output=True, text=True,
                              check=False).stdout
        if "\nsec:" not in "\n" + have:
            _run([*base, "--quick-gen-key", uid, "rsa3072", "sign", expiry], cwd=repo)
        for stale in ("InRelease", "Release.gpg", KEY_NAME):
            (repo / stale).unlink(missing_ok=True)
        _run([*base, "--clearsign", "-o", "InRelease", "Release"], cwd=repo)
        _run([*base, "--detach-sign", "-o", "Release.gpg", "Release"], cwd=repo)
        _run([*base, "--export", "-o", KEY_NAME], cwd=repo)
    return repo / KEY_NAME


def key_fingerprint(key: Path) -> str:
    """The primary key fingerprint (40 upper-case hex digits) of the single public key in ``key``.

    Raises:
        EnvironmentMissing: gpg is not installed.
        ConfigError: ``key`` holds no OpenPGP key, or gpg failed.
    """
    gpg = _tool("gpg", "gnupg")
    with gpg_home(None) as home:
        out = _run([gpg, "--batch", "--homedir", home, "--with-colons", "--show-keys", str(key)], cwd=key.parent)
    fingerprints = [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]
    if not fingerprints:
        raise ConfigError(f"{key}: no OpenPGP key found")
    return fingerprints[0].upper()
