"""A flat apt repository (``deb [signed-by=KEY] file:/DIR ./``) signed with a throwaway GPG key.

The key is generated per build in a private temporary GNUPGHOME that is removed (and its gpg-agent
stopped) after signing, so no secret key outlives the build and none is ever committed; only the
public key (``key.gpg``) is copied to the host under test. The index is ``dpkg-scanpackages`` (dpkg-dev); the Release
file is written here with the hashes apt checks.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.standin.deb import PackageSpec, build_deb

log = logging.getLogger(__name__)

KEY_NAME = "key.gpg"
KEY_UID = "gpuprov stand-in repository (test only) <standin@gpuprov.invalid>"


@dataclass(frozen=True)
class Repository:
    """A built repository: its directory, the public key file and the packages it holds."""

    path: Path
    key: Path
    packages: tuple[str, ...]

    def source_line(self, path: str | None = None, key: str | None = None) -> str:
        """The one-line apt source for this repository, as seen at ``path``/``key`` on the host."""
        return f"deb [signed-by={key or self.key}] file:{path or self.path} ./"


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise EnvironmentMissing(f"{name} not found: install {package} to build the stand-in repository")
    return found


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise ConfigError(f"{Path(argv[0]).name} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def release_text(repo: Path, files: Iterable[str], origin: str = "gpuprov-standin") -> str:
    """A flat repository's Release file with MD5Sum/SHA256 entries for ``files``."""
    date = email.utils.formatdate(usegmt=True)
    lines = [f"Origin: {origin}", f"Label: {origin}", "Suite: ./", "Codename: ./", f"Date: {date}",
             "Architectures: all amd64"]
    for field_name, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field_name}:")
        for name in files:
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def index(repo: Path) -> None:
    """Write Packages, Packages.gz and Release for the .deb files in ``repo``."""
    scan = _tool("dpkg-scanpackages", "dpkg-dev")
    packages = _run([scan, "--multiversion", "."], cwd=repo)
    (repo / "Packages").write_text(packages, encoding="utf-8")
    (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    (repo / "Release").write_text(release_text(repo, ["Packages", "Packages.gz"]), encoding="utf-8")


def sign(repo: Path, gnupg_home: Path | None = None) -> Path:
    """Sign Release (InRelease, Release.gpg) and export the public key as ``key.gpg``.

    Without ``gnupg_home`` a throwaway key is generated in a temporary GNUPGHOME removed afterwards;
    with it (a private directory, e.g. a lab's state dir) the key found there is reused, or generated
    once, so several repositories and rebuilds share one fingerprint.
    """
    gpg = _tool("gpg", "gnupg")
    with tempfile.TemporaryDirectory(prefix="gpuprov-standin-gpg-") as tmp:
        home = str(gnupg_home) if gnupg_home is not None else tmp
        if gnupg_home is not None:
            gnupg_home.mkdir(mode=0o700, parents=True, exist_ok=True)
        base = [gpg, "--batch", "--quiet", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", ""]
        try:
            have = subprocess.run([*base, "--list-secret-keys", "--with-colons"], capture_output=True, text=True,
                                  check=False).stdout
            if "\nsec:" not in "\n" + have:
                _run([*base, "--quick-gen-key", KEY_UID, "rsa3072", "sign", "1y"], cwd=repo)
            for stale in ("InRelease", "Release.gpg", KEY_NAME):
                (repo / stale).unlink(missing_ok=True)
            _run([*base, "--clearsign", "-o", "InRelease", "Release"], cwd=repo)
            _run([*base, "--detach-sign", "-o", "Release.gpg", "Release"], cwd=repo)
            _run([*base, "--export", "-o", KEY_NAME], cwd=repo)
        finally:
            gpgconf = shutil.which("gpgconf")
            if gpgconf:
                subprocess.run([gpgconf, "--homedir", home, "--kill", "all"], capture_output=True, check=False)
    return repo / KEY_NAME


def key_fingerprint(key: Path) -> str:
    """The primary key fingerprint (40 upper-case hex digits) of the single public key in ``key``."""
    gpg = _tool("gpg", "gnupg")
    with tempfile.TemporaryDirectory(prefix="gpuprov-standin-gpg-") as home:
        out = _run([gpg, "--batch", "--homedir", home, "--with-colons", "--show-keys", str(key)], cwd=key.parent)
    fingerprints = [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]
    if not fingerprints:
        raise ConfigError(f"{key}: no OpenPGP key found")
    return fingerprints[0].upper()


def build_repository(specs: Iterable[PackageSpec], repo: Path, gnupg_home: Path | None = None) -> Repository:
    """Build every spec into ``repo``, index and sign it (see :func:`sign` for ``gnupg_home``).

    Raises:
        EnvironmentMissing: dpkg-deb, dpkg-scanpackages or gpg is missing.
        ConfigError: a spec is invalid or a tool failed.
    """
    repo.mkdir(parents=True, exist_ok=True)
    names = []
    for spec in specs:
        build_deb(spec, repo)
        names.append(spec.name)
    index(repo)
    key = sign(repo, gnupg_home)
    log.info("stand-in repository %s: %d packages", repo, len(names))
    return Repository(path=repo, key=key, packages=tuple(names))
