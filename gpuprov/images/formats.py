"""Image formats read from their headers, in pure Python (no torch, no decoding): the signatures of
JPEG, PNG, GIF and DICOM, JPEG frame kind and EXIF orientation, PNG bit depth, and the pixel size an
image declares.

The declared size is what a decoder will allocate for, whatever the file's length: a 107 KB PNG can
declare 30000 x 30000 pixels and take 13 GB to decode (a decompression bomb). :func:`declared_size`
reads it so the decoder (:mod:`gpuprov.images.decode`) refuses such an image before decoding it.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib

DEFAULT_MAX_PIXELS = 89_478_485
"""Pixels an image may declare before it is refused undecoded: Pillow's ``Image.MAX_IMAGE_PIXELS``
(1 GiB / 4 bytes per pixel / 3, ``PIL/Image.py``), the limit past which Pillow warns of a
decompression bomb."""

_JPEG_SOI = b"\xff\xd8"
"""A JPEG's first two bytes, its start-of-image marker (ITU-T T.81, B.2.1)."""
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""A PNG's first eight bytes (PNG specification, 5.2)."""
_GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
"""A GIF's first six bytes, one per version."""
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""JPEG start-of-frame markers: SOF0..SOF15 less DHT (C4), JPG (C8) and DAC (CC) (ITU-T T.81, table B.1)."""


def is_jpeg(data: bytes) -> bool:
    """True for bytes that start as a JPEG (the start-of-image marker)."""
    return data[:2] == _JPEG_SOI


def is_png(data: bytes) -> bool:
    """True for bytes that start with the PNG signature."""
    return data[:8] == _PNG_SIGNATURE


def is_gif(data: bytes) -> bool:
    """True for bytes that start with a GIF signature (GIF87a or GIF89a)."""
    return data[:6] in _GIF_SIGNATURES


def jpeg_kind(data: bytes) -> str | None:
    """``"baseline"``, ``"progressive"`` or ``"other"`` (lossless, arithmetic) for JPEG bytes, else None.

    Reads markers up to the first start-of-frame; a truncated header still gives its kind if the
    SOF marker was reached.
    """
    if not is_jpeg(data):
        return None
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return "other"
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (0xC0, 0xC1):
            return "baseline"
        if marker == 0xC2:
            return "progressive"
        if marker in _SOF_MARKERS:
            return "other"
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        pos += 2 + length
    return "other"


def exif_orientation(data: bytes) -> int | None:
    """The EXIF orientation tag (1..8) of JPEG bytes, or None when absent or unreadable."""
    if not is_jpeg(data):
        return None
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker == 0xE1 and data[pos + 4 : pos + 10] == b"Exif\x00\x00":
            return _tiff_orientation(data[pos + 10 : pos + 2 + length])
        if marker == 0xDA:
            return None
        pos += 2 + length
    return None


def _tiff_orientation(tiff: bytes) -> int | None:
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return None
    order = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", tiff[4:8])
    if ifd + 2 > len(tiff):
        return None
    (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
    for i in range(count):
        entry = ifd + 2 + 12 * i
        if entry + 12 > len(tiff):
            return None
        tag, _kind, _n, value = struct.unpack(order + "HHIH", tiff[entry : entry + 10])
        if tag == 0x0112:
            return value if 1 <= value <= 8 else None
    return None


def is_dicom(data: bytes) -> bool:
    """True for a DICOM Part 10 file: a 128-byte preamble, then ``DICM`` (DICOM PS3.10, section 7.1)."""
    return data[128:132] == b"DICM"


def png_bit_depth(data: bytes) -> int | None:
    """The bit depth from a PNG's IHDR, or None when ``data`` is not a PNG."""
    if not is_png(data) or len(data) < 25:
        return None
    return data[24]


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a JPEG's start-of-frame (ITU-T T.81, B.2.2), None if not reached before the
    scan. Bytes between segments that are no marker are skipped, as libjpeg skips them ("extraneous bytes
    before marker") and decodes the image anyway."""
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):
            pos += 1
            continue
        marker = data[pos + 1]
        if marker in _SOF_MARKERS:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        if marker == 0xDA:  # start of scan before any frame header: not a decodable JPEG
            return None
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # TEM, RSTn, SOI: no length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        pos += 2 + length
    return None


#: DICOM's Deflated Explicit VR Little Endian transfer syntax (PS3.5, A.5): the whole data set is deflated.
_DEFLATED = b"1.2.840.10008.1.2.1.99"
#: The first bytes of a deflated data set inflated to read its size: the image attributes come early.
_DEFLATED_HEAD = 1 << 20


def _dicom_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height x frames)`` of a DICOM file from its Rows, Columns and NumberOfFrames, without its
    pixel data. A deflated data set is inflated only for its first :data:`_DEFLATED_HEAD` bytes (inflated
    whole, a few hundred KB of zeros can be gigabytes). None when pydicom is missing or cannot read it."""
    try:
        import pydicom
        from pydicom.filereader import read_dataset
    except ImportError:
        return None
    try:
        meta_end = 144 + struct.unpack("<I", data[140:144])[0]  # (0002,0000) group length, explicit VR UL
        if _DEFLATED in data[132:meta_end]:
            head = zlib.decompressobj(-zlib.MAX_WBITS).decompress(data[meta_end:], _DEFLATED_HEAD)
            ds = read_dataset(io.BytesIO(head), is_implicit_VR=False, is_little_endian=True,
                              stop_when=lambda tag, vr, length: tag > 0x00280011)  # fmt: skip
        else:
            ds = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True, force=True)
        rows, columns = int(ds.Rows), int(ds.Columns)
        frames = int(ds.get("NumberOfFrames") or 1)
    except Exception:  # a truncated or malformed header: the decoder reports it
        return None
    return columns, rows * max(1, frames)


def declared_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels that ``data`` declares, read from its header only; None when no
    reader knows the format (the decoder then says why it cannot decode it).

    JPEG (start-of-frame), PNG (IHDR) and DICOM (Rows, Columns, NumberOfFrames: the height counts every
    frame, as the decoder reads them all) are read here; other formats through Pillow's ``Image.open``,
    which parses the header without decoding. Raises Pillow's ``DecompressionBombError`` for an image
    past twice Pillow's ``Image.MAX_IMAGE_PIXELS`` (Pillow refuses to even open it).
    """
    if is_jpeg(data):
        return _jpeg_size(data)
    if is_dicom(data):
        return _dicom_size(data)
    if is_png(data) and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the caller compares the size
            with Image.open(io.BytesIO(data)) as im:
                width, height = im.size
                return int(width), int(height)
    except Image.DecompressionBombError:
        raise
    except Exception:  # any reader error: unknown or corrupt, the decoder reports it
        return None
