"""Declarative package specs and ``dpkg-deb --build``.

A :class:`PackageSpec` holds text files and symlinks only; a :class:`BinaryPackage` adds binary files (e.g.
shared libraries from :func:`gpuprov.lab.standin.sharedlib.shared_library`). :func:`build_deb` builds either.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuprov.exceptions import ConfigError, EnvironmentMissing

log = logging.getLogger(__name__)

NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
SCRIPTS = ("preinst", "postinst", "prerm", "postrm")


@dataclass(frozen=True)
class FileSpec:
    """One path in the package: a regular file (``content``, ``mode``) or a symlink (``link``)."""

    content: str = ""
    mode: int = 0o644
    link: str | None = None


@dataclass(frozen=True)
class PackageSpec:
    """A binary package: control fields (relationships as apt writes them, e.g. ``"dkms (>= 2.1)"``), files
    (absolute path -> :class:`FileSpec`) and maintainer scripts."""

    name: str
    version: str
    architecture: str = "all"
    depends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    description: str = "gpuprov test stand-in package"
    files: dict[str, FileSpec] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)

    def control(self) -> str:
        """The DEBIAN/control text."""
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            "Maintainer: gpuprov tests <tests@gpuprov.invalid>",
            "Section: misc",
            "Priority: optional",
        ]
        if self.depends:
            lines.append("Depends: " + ", ".join(self.depends))
        for label, values in (("Provides", self.provides), ("Conflicts", self.conflicts),
                              ("Replaces", self.replaces)):
            if values:
                lines.append(f"{label}: " + ", ".join(values))
        summary, _, rest = self.description.partition("\n")
        lines.append(f"Description: {summary}")
        lines.extend(" " + (line or ".") for line in rest.splitlines())
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class BinaryPackage:
    """A :class:`PackageSpec` plus binary files it ships (absolute path -> bytes, mode 0644)."""

    spec: PackageSpec
    binaries: Mapping[str, bytes] = field(default_factory=dict)


#: A stand-in package of either kind.
StandinPackage = PackageSpec | BinaryPackage


def spec_of(package: StandinPackage) -> PackageSpec:
    """The :class:`PackageSpec` of a stand-in package of either kind (name, version, control fields)."""
    return package.spec if isinstance(package, BinaryPackage) else package


def _check_path(spec: PackageSpec, kind: str, path: str) -> None:
    if not path.startswith("/") or ".." in Path(path).parts:
        raise ConfigError(f"stand-in package {spec.name}: {kind} path {path!r} must be absolute, without '..'")


def _validate(spec: PackageSpec, binaries: Mapping[str, bytes]) -> None:
    if not NAME.match(spec.name):
        raise ConfigError(f"stand-in package name {spec.name!r}: use lowercase letters, digits and + . -")
    if not spec.version[:1].isdigit():
        raise ConfigError(f"stand-in package {spec.name}: version {spec.version!r} must start with a digit")
    for path in spec.files:
        _check_path(spec, "file", path)
    for path in binaries:
        _check_path(spec, "binary", path)
    clash = set(spec.files) & set(binaries)
    if clash:
        raise ConfigError(f"stand-in package {spec.name}: {sorted(clash)} given as text and binary")
    for script in spec.scripts:
        if script not in SCRIPTS:
            raise ConfigError(f"stand-in package {spec.name}: unknown maintainer script {script!r}")


def stage(spec: PackageSpec, root: Path, binaries: Mapping[str, bytes] | None = None) -> None:
    """Write the package tree (DEBIAN/, the spec's files and ``binaries``) under ``root``.

    Raises:
        ConfigError: the spec is invalid (name, version, a path, a maintainer script), or a path is given
            both as a spec file and as a binary.
    """
    binaries = binaries or {}
    _validate(spec, binaries)
    debian = root / "DEBIAN"
    debian.mkdir(parents=True)
    (debian / "control").write_text(spec.control(), encoding="utf-8")
    for name, body in spec.scripts.items():
        script = debian / name
        script.write_text(body if body.startswith("#!") else "#!/bin/sh\nset -e\n" + body, encoding="utf-8")
        script.chmod(0o755)
    for path, file in sorted(spec.files.items()):
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if file.link is not None:
            target.symlink_to(file.link)
        else:
            target.write_text(file.content, encoding="utf-8")
            target.chmod(file.mode)
    for path, data in sorted(binaries.items()):
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o644)


def build_deb(package: StandinPackage, out_dir: Path) -> Path:
    """Build ``package`` into ``<out_dir>/<name>_<version without epoch>_<arch>.deb`` and return its path.

    Raises:
        EnvironmentMissing: dpkg-deb is not installed.
        ConfigError: the spec is invalid (see :func:`stage`) or dpkg-deb failed.
    """
    spec = spec_of(package)
    binaries = package.binaries if isinstance(package, BinaryPackage) else {}
    dpkg_deb = shutil.which("dpkg-deb")
    if dpkg_deb is None:
        raise EnvironmentMissing("dpkg-deb not found: install dpkg (Debian) to build stand-in packages")
    out_dir.mkdir(parents=True, exist_ok=True)
    version = spec.version.split(":", 1)[-1]
    deb = out_dir / f"{spec.name}_{version}_{spec.architecture}.deb"
    with tempfile.TemporaryDirectory(prefix="gpuprov-standin-") as tmp:
        root = Path(tmp) / "root"
        stage(spec, root, binaries)
        proc = subprocess.run(
            [dpkg_deb, "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            capture_output=True, text=True, check=False,
        )
    if proc.returncode != 0:
        raise ConfigError(f"dpkg-deb failed for {spec.name}: {proc.stderr.strip()}")
    log.debug("built %s", deb)
    return deb
