"""Find the Debian mirror this machine already uses, from its own apt sources.

The lab images point their apt sources at the same mirror as the build machine, so a build never
needs (and the repository never names) a mirror host. :func:`read_mirrors` reads, under an apt
configuration directory (``/etc/apt`` by default):

* ``sources.list`` and ``sources.list.d/*.list`` - one-line format,
  ``deb [opt=val ...] URI SUITE [COMPONENT ...]``;
* ``sources.list.d/*.sources`` - deb822 paragraphs with ``Types:``, ``URIs:``, ``Suites:``
  (``Enabled: no`` paragraphs are skipped).

Only ``deb`` entries with an ``http``, ``https`` or ``file`` URI whose suite is a Debian suite
(``bookworm``, ``bullseye-updates``, ``stable`` ...) count; third-party repositories (their suites are
``nodistro``, ``cloud-sdk-bookworm`` and the like) are ignored. The environment variables
``GPUPROV_LAB_MIRROR`` and ``GPUPROV_LAB_SECURITY_MIRROR`` override what the files say.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuprov.exceptions import EnvironmentMissing

log = logging.getLogger(__name__)

#: Debian code names and aliases a suite may start with (``<name>``, ``<name>-updates`` ...).
DEBIAN_SUITES = frozenset(
    {
        "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
        "oldoldstable", "oldstable", "stable", "testing", "unstable",
    }
)  # fmt: skip
_URI_SCHEMES = ("http://", "https://", "file:")


@dataclass(frozen=True)
class AptSource:
    """One ``deb`` entry: ``uri`` (no trailing slash), ``suite``, ``components`` and where it came from."""

    uri: str
    suite: str
    components: tuple[str, ...]
    origin: str


@dataclass(frozen=True)
class Mirrors:
    """The Debian archive mirror and the security mirror (``None`` when the machine has none)."""

    debian: str
    security: str | None


def parse_one_line(text: str, origin: str = "<text>") -> list[AptSource]:
    """Parse one-line format sources (``sources.list``); ``deb-src`` and comments are skipped."""
    found: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        line = re.sub(r"\[[^]]*\]", " ", line)  # drop [arch=amd64 signed-by=...] options
        fields = line.split()
        if len(fields) < 3 or fields[0] != "deb":
            continue
        found.append(AptSource(fields[1].rstrip("/"), fields[2], tuple(fields[3:]), origin))
    return found


def _deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    """Yield each deb822 paragraph as {lower-cased field: value}; continuation lines are joined."""
    fields: dict[str, str] = {}
    key: str | None = None
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif raw[0] in " \t" and key is not None:
            fields[key] += " " + raw.strip()
        elif ":" in raw:
            name, _, value = raw.partition(":")
            key = name.strip().lower()
            fields[key] = value.strip()


def parse_deb822(text: str, origin: str = "<text>") -> list[AptSource]:
    """Parse deb822 sources (``*.sources``): one :class:`AptSource` per URI x suite of ``deb`` paragraphs."""
    found: list[AptSource] = []
    for para in _deb822_paragraphs(text):
        if "deb" not in para.get("types", "").split():
            continue
        if para.get("enabled", "yes").lower() in {"no", "false", "0"}:
            continue
        components = tuple(para.get("components", "").split())
        for uri in para.get("uris", "").split():
            for suite in para.get("suites", "").split():
                found.append(AptSource(uri.rstrip("/"), suite, components, origin))
    return found


def read_sources(apt_dir: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every ``deb`` entry under ``apt_dir``, in apt's reading order (sources.list first, then by name).

    Files other than ``*.list`` and ``*.sources`` (``*.disabled``, ``*.save``) are ignored; a missing
    directory gives an empty list.
    """
    found: list[AptSource] = []
    main = apt_dir / "sources.list"
    if main.is_file():
        found += parse_one_line(main.read_text(encoding="utf-8", errors="replace"), str(main))
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            if path.suffix == ".list":
                found += parse_one_line(text, str(path))
            elif path.suffix == ".sources":
                found += parse_deb822(text, str(path))
    return found


def _suite_kind(suite: str) -> str | None:
    """``"security"``, ``"archive"`` or ``None`` (not a Debian suite)."""
    if "/" in suite:  # buster/updates: the security layout before bullseye
        base, _, rest = suite.partition("/")
        return "security" if base in DEBIAN_SUITES and rest == "updates" else None
    base, _, pocket = suite.partition("-")
    if base not in DEBIAN_SUITES:
        return None
    return "security" if pocket == "security" else "archive"


def pick_mirrors(sources: list[AptSource]) -> tuple[str | None, str | None]:
    """The first Debian archive URI and the first Debian security URI in ``sources`` (each may be None)."""
    debian: str | None = None
    security: str | None = None
    for source in sources:
        if not source.uri.startswith(_URI_SCHEMES):
            continue
        kind = _suite_kind(source.suite)
        if kind == "archive" and debian is None:
            debian = source.uri
        elif kind == "security" and security is None:
            security = source.uri
    return debian, security


def read_mirrors(apt_dir: Path = Path("/etc/apt"), environ: Mapping[str, str] | None = None) -> Mirrors:
    """The machine's Debian mirrors, from ``GPUPROV_LAB_MIRROR``/``GPUPROV_LAB_SECURITY_MIRROR`` or apt.

    Raises :class:`~gpuprov.exceptions.EnvironmentMissing` (exit 4) when no Debian archive mirror is
    configured anywhere.
    """
    env = os.environ if environ is None else environ
    debian, security = pick_mirrors(read_sources(apt_dir))
    debian = env.get("GPUPROV_LAB_MIRROR") or debian
    security = env.get("GPUPROV_LAB_SECURITY_MIRROR") or security
    if not debian:
        raise EnvironmentMissing(
            f"no Debian mirror found in the apt sources under {apt_dir} (sources.list, "
            "sources.list.d/*.list or *.sources): add the machine's Debian mirror there, or set "
            "GPUPROV_LAB_MIRROR=<URL of a Debian archive mirror> for the lab image build"
        )
    log.debug("lab mirrors: debian=%s security=%s", debian, security)
    return Mirrors(debian.rstrip("/"), security.rstrip("/") if security else None)
