"""Reading the machine's Debian mirror from apt sources (deb822 and one-line), from fixture files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab.mirrors import parse_deb822, parse_one_line, pick_mirrors, read_mirrors, read_sources

# Mirror hosts in these fixtures are reserved example names (RFC 2606), never a real mirror.
DEB822 = """\
Types: deb
# a comment inside the paragraph
URIs: http://mirror.example.test/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://security.example.test/debian-security
Suites: bookworm-security
Components: main
"""

THIRD_PARTY = """\
Types: deb
URIs: https://vendor.example.test/node_20.x
Suites: nodistro
Components: main
"""

ONE_LINE = """\
# the archive
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://archive.example.test/debian bullseye main contrib
deb-src http://archive.example.test/debian bullseye main
deb http://archive.example.test/debian-security bullseye-security main  # trailing comment
deb https://vendor.example.test/apt cloud-sdk-bullseye main
"""


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def test_parse_deb822_expands_uris_and_suites() -> None:
    sources = parse_deb822(DEB822)
    assert [(s.uri, s.suite) for s in sources] == [
        ("http://mirror.example.test/debian", "bookworm"),
        ("http://mirror.example.test/debian", "bookworm-updates"),
        ("http://security.example.test/debian-security", "bookworm-security"),
    ]
    assert sources[0].components == ("main",)


def test_parse_deb822_skips_disabled_and_deb_src_only() -> None:
    text = "Types: deb-src\nURIs: http://a.example.test/debian\nSuites: bookworm\n\n"
    text += "Enabled: no\nTypes: deb\nURIs: http://b.example.test/debian\nSuites: bookworm\n"
    assert parse_deb822(text) == []


def test_parse_one_line_drops_options_comments_and_deb_src() -> None:
    sources = parse_one_line(ONE_LINE)
    assert [(s.uri, s.suite, s.components) for s in sources] == [
        ("http://archive.example.test/debian", "bullseye", ("main", "contrib")),
        ("http://archive.example.test/debian-security", "bullseye-security", ("main",)),
        ("https://vendor.example.test/apt", "cloud-sdk-bullseye", ("main",)),
    ]


def test_read_mirrors_deb822(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list.d/debian.sources": DEB822, "sources.list.d/a-node.sources": THIRD_PARTY})
    mirrors = read_mirrors(apt, environ={})
    assert mirrors.debian == "http://mirror.example.test/debian"
    assert mirrors.security == "http://security.example.test/debian-security"


def test_read_mirrors_one_line(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list": ONE_LINE})
    mirrors = read_mirrors(apt, environ={})
    assert mirrors.debian == "http://archive.example.test/debian"
    assert mirrors.security == "http://archive.example.test/debian-security"


def test_read_sources_ignores_disabled_files(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {
            "sources.list.d/debian.sources.disabled-by-farm": DEB822,
            "sources.list.d/old.list.save": ONE_LINE,
            "sources.list.d/vendor.list": "deb https://vendor.example.test/apt stable-vendor main\n",
        },
    )
    assert [s.uri for s in read_sources(apt)] == ["https://vendor.example.test/apt"]


def test_old_security_layout_and_security_only() -> None:
    sources = parse_one_line("deb http://s.example.test/debian-security buster/updates main\n")
    assert pick_mirrors(sources) == (None, "http://s.example.test/debian-security")


def test_no_debian_mirror_raises_with_fix(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list.d/node.sources": THIRD_PARTY})
    with pytest.raises(EnvironmentMissing) as err:
        read_mirrors(apt, environ={})
    assert "GPUPROV_LAB_MIRROR" in err.value.message
    assert err.value.exit_code == 4


def test_environment_overrides_files(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list": ONE_LINE})
    mirrors = read_mirrors(apt, environ={"GPUPROV_LAB_MIRROR": "http://override.example.test/debian/"})
    assert mirrors.debian == "http://override.example.test/debian"
    assert mirrors.security == "http://archive.example.test/debian-security"


def test_missing_apt_dir_gives_no_sources(tmp_path: Path) -> None:
    assert read_sources(tmp_path / "nowhere") == []
