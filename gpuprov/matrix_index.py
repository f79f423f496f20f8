"""What a CUDA repository's ``Packages`` index says about CUDA toolkits and driver branches (the input of
``gpuprov matrix update``).

NVIDIA's repository (``https://developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64/``, or a site's
mirror of it) keeps every release of every toolkit: ``cuda-toolkit-X-Y`` at ``X.Y.Z-1`` (``X.Y.0`` is the GA
release, later ``Z`` the updates), and the ``cuda-runtime-X-Y`` meta package at the same version, which depends
on ``cuda-drivers (>= <driver>)``: the driver that toolkit release ships with, the "Toolkit Driver Version" of
table 3 of the CUDA release notes. The driver branches are the ``cuda-drivers-<branch>`` packages, and from
branch 590 (whose packages carry no branch in their names) NVIDIA's ``nvidia-driver-pinning-<branch>`` packages.

Public API::

    read_index(source: str) -> list[Packages]   # URL (through gpuprov.mirrorfetch) or local file/folder
    index_facts(paragraphs) -> IndexFacts       # the toolkits' GA releases and drivers, the driver branches

Both raise :class:`~gpuprov.exceptions.ConfigError` (exit 2) on input that cannot be read or is no index.
"""

from __future__ import annotations

import gzip
import http.client
import re
import urllib.error
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from debian.deb822 import Packages
from debian.debian_support import Version

from gpuprov import mirrorfetch
from gpuprov.exceptions import ConfigError, GpuprovError
from gpuprov.matrix import version_key
from gpuprov.redact import redact_credentials

#: A toolkit release's packages: the toolkit itself and the metas NVIDIA versions the same way.
_TOOLKIT = re.compile(r"^cuda-(?:toolkit-|runtime-)?(\d+)-(\d+)$")
#: The packages that carry a toolkit release's driver dependency, most specific first.
_CARRIERS = ("cuda-runtime-{}", "cuda-{}")
#: Driver packages such a dependency names (``cuda-drivers``, ``cuda-drivers-580``, ``nvidia-driver-580-open``).
_DRIVER = re.compile(r"^(?:cuda-drivers|nvidia-driver|nvidia-open)(?:-\d+)?(?:-open|-server)?$")
_BRANCH = re.compile(r"^(?:cuda-drivers|nvidia-driver-pinning)-(\d+)$")
_INDEX_NAMES = ("Packages.gz", "Packages")


@dataclass(frozen=True)
class ToolkitRelease:
    """The first release of CUDA ``version`` (``"12.8"``) that the index carries.

    ``package`` is its Debian version (``"12.8.0-1"``), ``ga`` whether that is the GA release (``X.Y.0``), and
    ``driver`` the driver version its ``cuda-runtime-X-Y`` (or ``cuda-X-Y``) package depends on, or None when no
    such dependency is in the index.
    """

    version: str
    package: str
    ga: bool
    driver: str | None


@dataclass(frozen=True)
class IndexFacts:
    """The CUDA toolkits of an index (``"12.8"`` -> its first release) and its driver branches, oldest first."""

    toolkits: dict[str, ToolkitRelease]
    branches: tuple[str, ...]


def read_index(source: str) -> list[Packages]:
    """The package paragraphs (amd64 and all) of the ``Packages`` index at ``source``.

    ``source`` is an ``http(s)://`` URL of the index file (``.../Packages`` or ``.../Packages.gz``) or of the
    repository folder (ending in ``/``: ``Packages.gz``, else ``Packages``, as :func:`gpuprov.mirrorfetch.fetch_index`
    reads a mirror), or a local index file (gzip-compressed or not) or folder holding one.

    Raises:
        ConfigError: the URL or file cannot be read (the message shows the URL with its password redacted), or
            the content is no Debian ``Packages`` index.
    """
    if re.match(r"^https?://", source):
        return _paragraphs(_fetch(source), redact_credentials(source))
    path = Path(source)
    if path.is_dir():
        found = [path / name for name in _INDEX_NAMES if (path / name).is_file()]
        if not found:
            raise ConfigError(f"--packages {source}: the folder holds no Packages or Packages.gz - name the index "
                              "file, or the folder of a flat repository")
        path = found[0]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--packages {source}: cannot read it ({exc.strerror or exc}) - name a readable "
                          "Packages file, or the repository URL") from None
    return _paragraphs(data, source)


def _fetch(url: str) -> bytes:
    shown = redact_credentials(url)
    if url.endswith("/"):
        try:
            paragraphs = mirrorfetch.fetch_index(url)
        except GpuprovError as exc:
            raise ConfigError(f"--packages {shown}: {exc.message} - check the URL and the network") from None
        return "".join(f"{p.dump()}\n" for p in paragraphs).encode()
    try:
        return mirrorfetch.fetch(url)
    except (OSError, urllib.error.URLError, ValueError, http.client.HTTPException) as exc:
        raise ConfigError(f"--packages {shown}: cannot read it ({redact_credentials(str(exc))}) - check the URL "
                          "and the network") from None


def _paragraphs(data: bytes, shown: str) -> list[Packages]:
    not_index = f"--packages {shown}: this is not a Debian Packages index"
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(f"{not_index} (a broken gzip file: {exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{not_index} (not UTF-8 text)") from None
    paragraphs = list(Packages.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False))
    for number, paragraph in enumerate(paragraphs, start=1):
        if "Package" not in paragraph or "Version" not in paragraph:
            raise ConfigError(f"{not_index} (paragraph {number} has no Package and Version fields) - name the "
                              "Packages file of NVIDIA's CUDA repository or of its mirror")
        try:
            Version(paragraph["Version"])
            for group in paragraph.relations["depends"] or []:
                for relation in group:
                    if relation.get("version"):
                        Version(relation["version"][1])
        except ValueError as exc:
            raise ConfigError(f"{not_index} (paragraph {number}, {paragraph['Package']}: {exc}) - name the "
                              "Packages file of NVIDIA's CUDA repository or of its mirror") from None
    if not paragraphs:
        raise ConfigError(f"{not_index} (it lists no package)")
    return [p for p in paragraphs if p.get("Architecture", "amd64") in ("amd64", "all")]


def index_facts(paragraphs: Iterable[Packages]) -> IndexFacts:
    """The toolkits (their first release and its driver dependency) and driver branches of an index.

    Raises:
        ConfigError: the index has no CUDA toolkit packages (``cuda-toolkit-X-Y``, ``cuda-runtime-X-Y``,
            ``cuda-X-Y``): it is not a CUDA repository's.
    """
    by_name: dict[str, list[Packages]] = {}
    for paragraph in paragraphs:
        by_name.setdefault(paragraph["Package"], []).append(paragraph)
    releases: dict[str, list[Version]] = {}
    branches = set()
    for name, found in by_name.items():
        toolkit, branch = _TOOLKIT.match(name), _BRANCH.match(name)
        if toolkit:
            releases.setdefault(f"{toolkit[1]}.{toolkit[2]}", []).extend(Version(p["Version"]) for p in found)
        elif branch:
            branches.add(branch[1])
    if not releases:
        raise ConfigError("--packages: the index has no CUDA toolkit packages (cuda-toolkit-X-Y, cuda-runtime-X-Y) - "
                          "name the index of NVIDIA's CUDA repository for one OS, or of your mirror of it")
    toolkits = {}
    for cuda in sorted(releases, key=version_key):
        first = min(releases[cuda])
        upstream = first.upstream_version or ""
        toolkits[cuda] = ToolkitRelease(cuda, str(first), upstream == f"{cuda}.0",
                                        _driver_of(by_name, cuda.replace(".", "-"), upstream))
    return IndexFacts(toolkits, tuple(sorted(branches, key=int)))


def _driver_of(by_name: dict[str, list[Packages]], dashed: str, upstream: str) -> str | None:
    """The highest driver version that a carrier package of release ``upstream`` depends on (``>=`` or ``=``)."""
    for carrier in _CARRIERS:
        drivers = [
            str(Version(relation["version"][1]).upstream_version)
            for paragraph in by_name.get(carrier.format(dashed), [])
            if Version(paragraph["Version"]).upstream_version == upstream
            for group in paragraph.relations["depends"] or []
            for relation in group
            if _DRIVER.match(relation["name"]) and relation.get("version") and relation["version"][0] in (">=", "=")
        ]
        if drivers:
            return max(drivers, key=version_key)
    return None
