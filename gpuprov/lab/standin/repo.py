"""A flat apt repository (``deb [signed-by=KEY] file:/DIR ./``) signed with a throwaway GPG key.

The key is generated per build in a private temporary GNUPGHOME that is removed (and its gpg-agent
stopped) after signing, so no secret key outlives the build and none is ever committed; only the
public key (``key.gpg``) is copied to the host under test. The index is ``dpkg-scanpackages`` (dpkg-dev); the
Release file and its signatures are :mod:`gpuprov.aptsign`'s, which the offline bundle uses too.
"""

from __future__ import annotations

import gzip
import logging
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuprov.aptsign import KEY_NAME, key_fingerprint, release_text, sign
from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.lab.standin.deb import StandinPackage, build_deb, spec_of

log = logging.getLogger(__name__)

__all__ = ["KEY_NAME", "Repository", "build_repository", "index", "key_fingerprint"]

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


def index(repo: Path) -> None:
    """Write Packages, Packages.gz and Release for the .deb files in ``repo``."""
    scan = _tool("dpkg-scanpackages", "dpkg-dev")
    packages = _run([scan, "--multiversion", "."], cwd=repo)
    (repo / "Packages").write_text(packages, encoding="utf-8")
    (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    (repo / "Release").write_text(release_text(repo, ["Packages", "Packages.gz"], origin="gpuprov-standin"),
                                      encoding="utf-8")


def build_repository(packages: Iterable[StandinPackage], repo: Path, gnupg_home: Path | None = None) -> Repository:
    """Build every package (text or binary) into ``repo``, index and sign every .deb there (``gnupg_home`` as
    for :func:`gpuprov.aptsign.sign`). ``packages`` of the result names the packages built, in order.

    Raises:
        EnvironmentMissing: dpkg-deb, dpkg-scanpackages or gpg is missing.
        ConfigError: a spec is invalid or a tool failed.
    """
    repo.mkdir(parents=True, exist_ok=True)
    names = []
    for package in packages:
        build_deb(package, repo)
        names.append(spec_of(package).name)
    index(repo)
    key = sign(repo, gnupg_home, KEY_UID)
    log.info("stand-in repository %s: %d packages", repo, len(names))
    return Repository(path=repo, key=key, packages=tuple(names))
