"""Header reading (gpuprov.images.formats): format kinds and the pixel size an image declares."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import pytest
from PIL import Image

from gpuprov.images.formats import (
    DEFAULT_MAX_PIXELS,
    declared_size,
    exif_orientation,
    is_gif,
    is_jpeg,
    is_png,
    jpeg_kind,
    png_bit_depth,
)


def _save(fmt: str, size: tuple[int, int] = (64, 48), mode: str = "RGB", **kwargs: object) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, 1000 if mode == "I;16" else (200, 30, 30)).save(buf, fmt, **kwargs)
    return buf.getvalue()


def _jpeg(*, progressive: bool = False, orientation: int | None = None) -> bytes:
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    return _save("JPEG", progressive=progressive, exif=exif.tobytes() if orientation else b"")


def test_sniffing() -> None:
    assert jpeg_kind(_jpeg()) == "baseline"
    assert jpeg_kind(_jpeg(progressive=True)) == "progressive"
    assert jpeg_kind(b"not a jpeg") is None
    assert exif_orientation(_jpeg(orientation=6)) == 6
    assert exif_orientation(_jpeg()) is None
    assert png_bit_depth(_save("PNG")) == 8
    assert png_bit_depth(_save("PNG", mode="I;16")) == 16
    assert [(is_jpeg(b), is_png(b), is_gif(b)) for b in (_jpeg(), _save("PNG"), _save("GIF"), b"BM")] == [
        (True, False, False), (False, True, False), (False, False, True), (False, False, False)]  # fmt: skip


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF"])
def test_declared_size_of_every_format(fmt: str) -> None:
    assert declared_size(_save(fmt, (70, 33))) == (70, 33)
    assert declared_size(_save("JPEG", (70, 33), progressive=True)) == (70, 33)


def test_declared_size_reads_headers_without_decoding(bomb_png: Callable[[int, int], bytes]) -> None:
    bomb = bomb_png(30000, 30000)
    assert len(bomb) < 1000 and declared_size(bomb) == (30000, 30000)
    jpeg = bytearray(_jpeg())
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5 : sof + 9] = struct.pack(">HH", 40000, 50000)  # height, width
    assert declared_size(bytes(jpeg)) == (50000, 40000)
    assert declared_size(b"") is None and declared_size(b"not an image") is None


def test_a_format_pillow_refuses_to_open_raises_its_bomb_error() -> None:
    bmp = bytearray(_save("BMP"))
    bmp[18:26] = struct.pack("<ii", 60000, 60000)  # BITMAPINFOHEADER width, height: past twice the limit
    with pytest.raises(Image.DecompressionBombError):
        declared_size(bytes(bmp))


def test_the_default_limit_is_pillows() -> None:
    assert DEFAULT_MAX_PIXELS == Image.MAX_IMAGE_PIXELS


def test_junk_before_the_frame_header_does_not_hide_the_size() -> None:
    """libjpeg skips bytes that are no marker ("extraneous bytes before marker") and decodes the image anyway."""
    jpeg = bytearray(_jpeg())
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5 : sof + 9] = struct.pack(">HH", 12000, 13000)
    assert declared_size(bytes(jpeg[:sof] + b"\x00\x17" + jpeg[sof:])) == (13000, 12000)


def _dicom(rows: int, columns: int, frames: int, *, deflated: bool) -> bytes:
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import DeflatedExplicitVRLittleEndian, ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.TransferSyntaxUID = DeflatedExplicitVRLittleEndian if deflated else ExplicitVRLittleEndian
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # secondary capture
    meta.MediaStorageSOPInstanceUID = generate_uid()
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Rows, ds.Columns, ds.NumberOfFrames = rows, columns, frames
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = bytes(rows * columns * frames)
    buf = io.BytesIO()
    pydicom.dcmwrite(buf, ds, enforce_file_format=True)
    return buf.getvalue()


def test_dicom_size_counts_every_frame_and_reads_a_deflated_set_without_inflating_it() -> None:
    assert declared_size(_dicom(30, 40, 3, deflated=False)) == (40, 90)
    bomb = _dicom(4000, 4000, 1, deflated=True)  # 16 MB of pixels in a few KB
    assert len(bomb) < 100_000 and declared_size(bomb) == (4000, 4000)
