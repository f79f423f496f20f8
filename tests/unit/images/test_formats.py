"""Header reading (gpuprov.images.formats): format kinds and the pixel size an image declares."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import pytest
from PIL import Image

from gpuprov.images.formats import DEFAULT_MAX_PIXELS, declared_size, exif_orientation, jpeg_kind, png_bit_depth


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
