"""Real photographs for tests and benchmarks, fetched from Debian packages at test time, never committed.

:func:`fetch_package` downloads one ``.deb`` with ``apt-get download`` (the machine's own apt sources,
so the repository never names a mirror host) into a cache outside the repository
(``$GPUPROV_IMAGES_CACHE`` or ``$XDG_CACHE_HOME/gpuprov/images``) and unpacks it with ``dpkg-deb -x``. When
``apt-get download`` is unavailable or fails, the file is fetched from the Debian mirror that
:func:`gpuprov.lab.mirrors.read_mirrors` finds in the apt sources, at the package's ``Filename``.

:func:`real_images` sorts what the packages hold into the sets the tests need: every JPEG, the
progressive ones, the EXIF-rotated ones, 8-bit and 16-bit PNGs, and the large photos.

Packages: ``forensics-samples-files`` (phone JPEGs, some progressive or EXIF-rotated),
``mate-backgrounds`` (photos up to 5640x3172), ``libjxl-testdata`` (PNG, 16-bit PNG).

16-bit medical images come from PyPI instead: :func:`dicom_images` downloads the ``pydicom-data``
wheel (pydicom's own test files, :data:`PYDICOM_DATA`) with pip into the same cache and keeps the
uncompressed 16-bit DICOM files (MR, CT, radiographs).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from gpuprov import resources
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.images.formats import exif_orientation, jpeg_kind, png_bit_depth

log = logging.getLogger(__name__)

PACKAGES = ("forensics-samples-files", "mate-backgrounds", "libjxl-testdata")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
PYDICOM_DATA = "pydicom-data==1.0.0"
"""The PyPI distribution with pydicom's test DICOM files (34 MB wheel, 80 files)."""
_UNCOMPRESSED = ("1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2")
"""Implicit VR little endian, explicit VR little endian, explicit VR big endian (DICOM PS3.5 annex A)."""


def cache_dir() -> Path:
    """Where packages are downloaded and unpacked: ``$GPUPROV_IMAGES_CACHE``, else ``images`` in gpuprov's
    cache directory (:func:`gpuprov.resources.cache_dir`)."""
    env = os.environ.get("GPUPROV_IMAGES_CACHE")
    return Path(env) if env else resources.cache_dir() / "images"


def fetch_package(name: str, cache: Path | None = None) -> Path:
    """Download and unpack Debian package ``name`` once; returns the unpacked tree.

    Raises :class:`EnvironmentMissing` when apt, dpkg-deb or a Debian mirror is missing or the
    download fails.
    """
    root = (cache or cache_dir()) / name
    done = root / ".unpacked"
    if done.exists():
        return root
    if shutil.which("dpkg-deb") is None:
        raise EnvironmentMissing("dpkg-deb is needed to unpack the test image packages (apt-get install dpkg)")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        deb = _download(name, Path(tmp))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True)
    done.write_text(name + "\n")
    return root


def _download(name: str, dest: Path) -> Path:
    if shutil.which("apt-get"):
        proc = subprocess.run(["apt-get", "download", name], cwd=dest, capture_output=True, text=True, check=False)
        debs = sorted(dest.glob(f"{name}_*.deb"))
        if proc.returncode == 0 and debs:
            return debs[0]
        log.info("apt-get download %s failed (%s); trying the mirror directly", name, proc.stderr.strip())
    from gpuprov.lab.mirrors import read_mirrors

    filename = _apt_filename(name)
    url = f"{read_mirrors().debian}/{filename}"
    target = dest / Path(filename).name
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, target.open("wb") as out:
            shutil.copyfileobj(resp, out)
    except OSError as exc:
        raise EnvironmentMissing(f"cannot download {name} from {url}: {exc}") from exc
    return target


def _apt_filename(name: str) -> str:
    if shutil.which("apt-cache") is None:
        raise EnvironmentMissing(f"apt-cache is needed to locate {name} in the Debian archive")
    proc = subprocess.run(["apt-cache", "show", name], capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("Filename:"):
            return line.split(":", 1)[1].strip()
    raise EnvironmentMissing(f"apt does not know package {name}: run apt-get update")


@dataclass
class RealImages:
    """Image paths from the packages, sorted by what the tests need."""

    jpeg: list[Path] = field(default_factory=list)
    progressive: list[Path] = field(default_factory=list)
    exif_rotated: list[Path] = field(default_factory=list)
    png: list[Path] = field(default_factory=list)
    png16: list[Path] = field(default_factory=list)
    large: list[Path] = field(default_factory=list)
    """Photos of at least 12 megapixels or 5000 pixels wide (by file size, >= 2 MB JPEG)."""


def real_images(packages: tuple[str, ...] = PACKAGES, cache: Path | None = None) -> RealImages:
    """Fetch ``packages`` (cached) and sort their images; see :class:`RealImages`."""
    found = RealImages()
    for name in packages:
        root = fetch_package(name, cache)
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in _IMAGE_SUFFIXES):
            head = path.read_bytes()[: 1 << 16]
            if path.suffix.lower() == ".png":
                depth = png_bit_depth(head)
                if depth == 16:
                    found.png16.append(path)
                elif depth is not None:
                    found.png.append(path)
                continue
            kind = jpeg_kind(head)
            if kind is None:
                continue
            found.jpeg.append(path)
            if kind == "progressive":
                found.progressive.append(path)
            if exif_orientation(head) not in (None, 1):
                found.exif_rotated.append(path)
            if path.stat().st_size >= 2_000_000:
                found.large.append(path)
    return found


def dicom_images(cache: Path | None = None, requirement: str = PYDICOM_DATA) -> list[Path]:
    """Uncompressed 16-bit DICOM files (BitsAllocated 16) from the ``pydicom-data`` wheel, sorted.

    The wheel is downloaded once with ``python -m pip download --no-deps`` (PyPI or the configured
    index) and unpacked under ``<cache>/pydicom-data``. Raises :class:`EnvironmentMissing` when pip
    cannot download it or pydicom (the ``images`` extra) is not installed.
    """
    try:
        import pydicom
    except ImportError as exc:
        raise EnvironmentMissing("reading DICOM needs pydicom: pip install 'gpuprov[images]'") from exc
    root = (cache or cache_dir()) / "pydicom-data"
    done = root / ".unpacked"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                 "-d", tmp, requirement],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            wheels = sorted(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                raise EnvironmentMissing(f"cannot download {requirement} with pip: {proc.stderr.strip()[-500:]}")
            with zipfile.ZipFile(wheels[0]) as whl:
                whl.extractall(root)
        done.write_text(requirement + "\n")
    found = []
    for path in sorted(root.rglob("*.dcm")):
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
            syntax = str(ds.file_meta.TransferSyntaxUID)
            bits = int(ds.BitsAllocated)
        except Exception:  # a header pydicom cannot read is simply not part of the set
            continue
        if bits == 16 and syntax in _UNCOMPRESSED and "Rows" in ds:
            found.append(path)
    return found
