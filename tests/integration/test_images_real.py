"""Real photographs from Debian packages (fetched at test time, cached, never committed).

EXIF-rotated and progressive phone JPEGs, PNG and 16-bit PNG decode; corrupt and truncated files
made from real ones are recorded as failed while the rest of the batch continues.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image, ImageOps

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.images.decode import DecodeError, Decoder
from gpuprov.images.formats import exif_orientation
from tests.photos import RealImages, dicom_images, real_images


@pytest.fixture(scope="module")
def real() -> RealImages:
    try:
        return real_images()
    except EnvironmentMissing as exc:
        pytest.skip(f"cannot fetch the test image packages: {exc}")


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    return Decoder("cpu", threads=2)


def _shape(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        w, h = ImageOps.exif_transpose(im).size
    return h, w


def test_sets_are_present(real: RealImages) -> None:
    assert real.progressive and real.exif_rotated and real.png and real.png16 and real.large


def test_exif_rotated_and_progressive(real: RealImages, decoder: Decoder) -> None:
    paths = real.exif_rotated[:2] + real.progressive[:3]
    for path, dec in zip(paths, decoder.decode([p.read_bytes() for p in paths]), strict=True):
        assert not isinstance(dec, DecodeError), f"{path}: {dec}"
        assert tuple(dec.pixels.shape[1:]) == _shape(path), path
    rotated = real.exif_rotated[0]
    assert exif_orientation(rotated.read_bytes()[:65536]) in range(2, 9)


def test_png_and_16bit(real: RealImages, decoder: Decoder) -> None:
    paths = real.png[:2] + real.png16[:2]
    decoded = decoder.decode([p.read_bytes() for p in paths])
    for dec in decoded:
        assert not isinstance(dec, DecodeError)
    assert [d.max_value for d in decoded if not isinstance(d, DecodeError)] == [255.0, 255.0, 65535.0, 65535.0]


def test_corrupt_and_truncated_real_files_fail_alone(real: RealImages, decoder: Decoder) -> None:
    good = real.jpeg[0].read_bytes()
    truncated = real.large[0].read_bytes()
    truncated = truncated[: len(truncated) // 3]
    corrupt = bytearray(good)
    corrupt[2:2000] = b"\x00" * 1998
    out = decoder.decode([good, truncated, bytes(corrupt)])
    assert not isinstance(out[0], DecodeError)
    assert isinstance(out[1], DecodeError) and isinstance(out[2], DecodeError)


@pytest.fixture(scope="module")
def dicoms() -> list[Path]:
    try:
        return dicom_images()
    except EnvironmentMissing as exc:
        pytest.skip(f"cannot fetch pydicom-data: {exc}")


def test_dicom_16bit_decodes_to_stored_values(dicoms: list[Path], decoder: Decoder) -> None:
    """Every uncompressed 16-bit DICOM of pydicom-data decodes at its size; unsigned MONOCHROME2 pixels
    come through unchanged (first frame), with max_value 2**BitsStored - 1."""
    import numpy as np
    import pydicom

    assert len(dicoms) >= 10  # MR, CT, radiographs, ultrasound, multi-frame, big endian
    checked = 0
    for path, dec in zip(dicoms, decoder.decode([p.read_bytes() for p in dicoms]), strict=True):
        assert not isinstance(dec, DecodeError), f"{path.name}: {dec}"
        ds = pydicom.dcmread(path)
        assert tuple(dec.pixels.shape) == (3, ds.Rows, ds.Columns), path.name
        if ds.PhotometricInterpretation == "MONOCHROME2" and ds.PixelRepresentation == 0:
            frame = ds.pixel_array if int(getattr(ds, "NumberOfFrames", 1) or 1) == 1 else ds.pixel_array[0]
            assert np.array_equal(dec.pixels[0].numpy(), frame.astype(np.int32)), path.name
            assert dec.max_value == float((1 << ds.BitsStored) - 1)
            checked += 1
    assert checked >= 5
