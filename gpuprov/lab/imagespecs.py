"""What each lab base image is: its Debian suite, apt sources and, for a stand-in, the Ubuntu it is dressed as.

Four images exist (:data:`SPECS`):

* ``debian12`` - Debian 12 (bookworm), itself;
* ``ubuntu2004`` - STAND-IN for Ubuntu 20.04 (focal): a Debian 11 (bullseye) userland, glibc 2.31 as focal's;
* ``ubuntu2204`` - STAND-IN for Ubuntu 22.04 (jammy): a Debian 12 (bookworm) userland, glibc 2.36 (jammy: 2.35);
* ``ubuntu2404`` - STAND-IN for Ubuntu 24.04 (noble): a Debian 13 (trixie) userland, glibc 2.41 (noble: 2.39).

A stand-in carries Ubuntu's ``/etc/os-release`` (:func:`os_release`) and ``/etc/lsb-release``
(:func:`lsb_release`), its apt sources where that Ubuntu release keeps them (one-line ``/etc/apt/sources.list``
up to 22.04, deb822 ``/etc/apt/sources.list.d/ubuntu.sources`` from 24.04) but pointing at the Debian suite
it really is, and says what it really is in ``/etc/gpuprov-standin`` and the image label
``org.gpuprov.lab.standin`` (:attr:`StandIn.note`). The glibc versions are libc6's in each release
(https://packages.debian.org/trixie/libc6, https://packages.ubuntu.com/noble/libc6 and so on).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprov.exceptions import ConfigError

#: apt sources files by format: deb822 (``Types:``/``URIs:`` paragraphs) or one-line (``deb URI SUITE ...``).
SOURCES_FORMATS = ("deb822", "one-line")


@dataclass(frozen=True)
class StandIn:
    """The Ubuntu release a stand-in image is dressed as.

    ``release`` is ``VERSION_ID`` ("22.04"), ``point`` the point release named in ``VERSION`` ("22.04.5"),
    ``codename`` ``VERSION_CODENAME`` ("jammy"), ``title`` the release name ("Jammy Jellyfish"), ``userland``
    what the image really is ("Debian 12 (bookworm)") and ``glibc`` the userland's glibc against the release's
    (``("2.36", "2.35")``).
    """

    release: str
    point: str
    codename: str
    title: str
    userland: str
    glibc: tuple[str, str]

    @property
    def note(self) -> str:
        """One line saying what the image really is (``/etc/gpuprov-standin``, image label)."""
        mine, theirs = self.glibc
        return (
            f"gpuprov lab stand-in for Ubuntu {self.release} ({self.codename}): this is a {self.userland} userland "
            f"(glibc {mine}; {self.codename} has {theirs}) with Ubuntu {self.release} /etc/os-release and "
            f"/etc/lsb-release. Packages, kernel and apt sources are Debian's."
        )


@dataclass(frozen=True)
class ImageSpec:
    """What one lab image is built from (every field feeds the recipe hash).

    ``components`` are the apt components enabled in the image; ``sources_format`` is one of
    :data:`SOURCES_FORMATS` and ``sources_file`` the file it is written to; ``standin`` is ``None`` or the Ubuntu
    release the userland is dressed as.
    """

    os_name: str
    suite: str
    components: tuple[str, ...]
    sources_format: str
    sources_file: str
    standin: StandIn | None = None

    @property
    def standin_note(self) -> str:
        """:attr:`StandIn.note`, or ``""`` for an image that is what it says."""
        return self.standin.note if self.standin else ""


_DEBIAN_SOURCES = "/etc/apt/sources.list.d/debian.sources"
_ONE_LINE = "/etc/apt/sources.list"
_UBUNTU_SOURCES = "/etc/apt/sources.list.d/ubuntu.sources"
_BULLSEYE = ("main", "contrib", "non-free")
_BOOKWORM_ON = ("main", "contrib", "non-free", "non-free-firmware")

SPECS: dict[str, ImageSpec] = {
    "debian12": ImageSpec("debian12", "bookworm", _BOOKWORM_ON, "deb822", _DEBIAN_SOURCES),
    "ubuntu2004": ImageSpec(
        "ubuntu2004", "bullseye", _BULLSEYE, "one-line", _ONE_LINE,
        StandIn("20.04", "20.04.6", "focal", "Focal Fossa", "Debian 11 (bullseye)", ("2.31", "2.31")),
    ),
    "ubuntu2204": ImageSpec(
        "ubuntu2204", "bookworm", _BOOKWORM_ON, "one-line", _ONE_LINE,
        StandIn("22.04", "22.04.5", "jammy", "Jammy Jellyfish", "Debian 12 (bookworm)", ("2.36", "2.35")),
    ),
    "ubuntu2404": ImageSpec(
        "ubuntu2404", "trixie", _BOOKWORM_ON, "deb822", _UBUNTU_SOURCES,
        StandIn("24.04", "24.04.3", "noble", "Noble Numbat", "Debian 13 (trixie)", ("2.41", "2.39")),
    ),
}  # fmt: skip


def spec_for(os_name: str) -> ImageSpec:
    """The :class:`ImageSpec` of ``os_name`` (a key of :data:`SPECS`); ConfigError (exit 2) otherwise."""
    try:
        return SPECS[os_name]
    except KeyError:
        raise ConfigError(f"unknown lab OS {os_name!r}: choose one of {', '.join(sorted(SPECS))}") from None


def os_release(standin: StandIn) -> str:
    """``/etc/os-release`` of the Ubuntu release ``standin`` is dressed as, fields as Ubuntu writes them, after a
    comment line saying it is a stand-in. Ansible reads ``ID``/``VERSION_ID``/``VERSION_CODENAME`` from it
    (``ansible_distribution`` Ubuntu, ``ansible_distribution_version`` 22.04, ``..._release`` jammy)."""
    return "\n".join([
        "# gpuprov lab STAND-IN, not Ubuntu: see /etc/gpuprov-standin for what this userland really is.",
        f'PRETTY_NAME="Ubuntu {standin.point} LTS"',
        'NAME="Ubuntu"',
        f'VERSION_ID="{standin.release}"',
        f'VERSION="{standin.point} LTS ({standin.title})"',
        f"VERSION_CODENAME={standin.codename}",
        "ID=ubuntu",
        "ID_LIKE=debian",
        'HOME_URL="https://www.ubuntu.com/"',
        'SUPPORT_URL="https://help.ubuntu.com/"',
        'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"',
        'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"',
        f"UBUNTU_CODENAME={standin.codename}",
        "",
    ])  # fmt: skip


def lsb_release(standin: StandIn) -> str:
    """``/etc/lsb-release`` of the Ubuntu release ``standin`` is dressed as."""
    return (
        f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={standin.release}\nDISTRIB_CODENAME={standin.codename}\n"
        f'DISTRIB_DESCRIPTION="Ubuntu {standin.point} LTS"\n'
    )
