"""Image bytes to decoded images on one device: baseline JPEGs in one batched GPU call, every other
format on a CPU thread pool.

Baseline (sequential) JPEGs go to the GPU in one batched nvJPEG call
(``torchvision.io.decode_jpeg(list, device="cuda")``, or nvImageCodec, see :class:`Decoder`); progressive
JPEG (which nvJPEG's hardware path does not take), PNG (8 and 16 bit), DICOM (uncompressed, through
pydicom; 16-bit medical images) and every other format are decoded on a CPU thread pool into pinned
memory and copied asynchronously. EXIF orientation is applied on both paths. On a machine without a GPU
the same code runs with the device ``cpu`` (CI). Formats are told apart by their headers
(:mod:`gpuprov.images.formats`), and an image declaring more pixels than the limit is refused before
decoding.

A decoded image is :class:`Decoded`: ``pixels`` (3,H,W) on the device, uint8 with ``max_value`` 255, or
int32 with the full-scale value of a deeper source. :func:`decode_split` retries a batch that runs out
of device memory in halves.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuprov.exceptions import ConfigError
from gpuprov.images.formats import DEFAULT_MAX_PIXELS, declared_size, is_dicom, is_gif, jpeg_kind, png_bit_depth
from gpuprov.images.lazy_torch import INSTALL_HINT, torch_modules
from gpuprov.images.memory import is_oom, release_memory

log = logging.getLogger(__name__)


class DecodeError(ValueError):
    """An image could not be decoded (corrupt, truncated, unknown format); the message says why."""


@dataclass
class Decoded:
    """One decoded image on the device: ``pixels`` (C,H,W), C = 3 (RGB), uint8 or, for sources of more than
    8 bits, int32; ``max_value`` is the value of full scale (255.0; 65535.0 for 16-bit images,
    2**BitsStored - 1 for DICOM)."""

    pixels: Any
    max_value: float


def _decode_cpu(data: bytes) -> Decoded:
    """Decode any supported format on the CPU (RGB, EXIF orientation applied)."""
    torch, torchvision = torch_modules()
    ImageReadMode = torchvision.io.ImageReadMode

    if not data:
        raise DecodeError("empty file (0 bytes)")
    if is_dicom(data):
        return _decode_dicom(data)
    if is_gif(data):  # torchvision decodes every frame; the pixel limit counted one
        return _decode_pil(data, ValueError("GIF is read through Pillow, first frame only"))
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        depth16 = png_bit_depth(data) == 16
        img = torchvision.io.decode_image(raw, mode=ImageReadMode.RGB, apply_exif_orientation=True)
    except (RuntimeError, ValueError) as exc:
        return _decode_pil(data, exc)
    if img.dtype == torch.uint16 or depth16:
        return Decoded(img.to(torch.int32), 65535.0)
    return Decoded(img, 255.0)


def _decode_pil(data: bytes, first: Exception) -> Decoded:
    """Fallback for formats torchvision does not read (TIFF, BMP ...) through Pillow."""
    import io

    import numpy as np
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            img = ImageOps.exif_transpose(im)
            if img.mode in ("I;16", "I;16B", "I"):
                return Decoded(_grey_to_rgb(np.asarray(img, dtype=np.int32).copy()), 65535.0)
            return Decoded(_hwc_to_chw(np.asarray(img.convert("RGB")).copy()), 255.0)
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as exc:
        raise DecodeError(f"cannot decode image: {first}; Pillow: {exc}") from exc


def _decode_dicom(data: bytes) -> Decoded:
    """First frame of a DICOM file through pydicom, as 3 channels.

    Grey images (MONOCHROME1/2) are repeated to 3 channels with ``max_value`` 2**BitsStored - 1;
    PALETTE COLOR goes through its lookup table to 16-bit RGB;
    signed pixels (PixelRepresentation 1) are shifted by 2**(BitsStored - 1) so 0 is the minimum;
    MONOCHROME1 is inverted so bright means dense as in MONOCHROME2. Modality rescale and windowing
    are not applied (the model sees stored values). Compressed transfer syntaxes need pydicom's
    optional decoders (pylibjpeg, gdcm); without them the file fails with pydicom's reason.
    """
    import io

    import numpy as np

    try:
        import pydicom
    except ImportError as exc:
        raise DecodeError(f"DICOM needs pydicom: {INSTALL_HINT}") from exc
    try:
        ds = pydicom.dcmread(io.BytesIO(data))
        arr = ds.pixel_array
        frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
        samples = int(getattr(ds, "SamplesPerPixel", 1))
    except Exception as exc:  # pydicom raises many types for bad or unsupported files
        raise DecodeError(f"cannot decode DICOM: {exc}") from exc
    if frames > 1:
        arr = arr[0]
    bits = int(ds.BitsStored)
    if str(getattr(ds, "PhotometricInterpretation", "")) == "PALETTE COLOR":
        from pydicom.pixels.processing import apply_color_lut

        arr, samples, bits = apply_color_lut(arr, ds), 3, 16  # palette entries are 16-bit (PS3.3 C.7.6.3.1.5)
    if samples == 1:
        pixels = arr.astype(np.int64)
        if int(getattr(ds, "PixelRepresentation", 0)) == 1:
            pixels = pixels + (1 << (bits - 1))
        top = (1 << bits) - 1
        if str(getattr(ds, "PhotometricInterpretation", "")) == "MONOCHROME1":
            pixels = top - pixels
        return Decoded(_grey_to_rgb(np.clip(pixels, 0, top).astype(np.int32)), float(top))
    if bits <= 8:
        return Decoded(_hwc_to_chw(np.ascontiguousarray(arr, dtype=np.uint8)), 255.0)
    return Decoded(_hwc_to_chw(np.ascontiguousarray(arr, dtype=np.int32)), float((1 << bits) - 1))


def _grey_to_rgb(grey: Any) -> Any:
    """A (H,W) numpy array as a contiguous (3,H,W) tensor of its dtype, the one channel repeated."""
    torch, _ = torch_modules()
    return torch.from_numpy(grey).unsqueeze(0).expand(3, -1, -1).contiguous()


def _hwc_to_chw(rgb: Any) -> Any:
    """A (H,W,3) numpy array as a contiguous (3,H,W) tensor of its dtype (channels first)."""
    torch, _ = torch_modules()
    return torch.from_numpy(rgb).permute(2, 0, 1).contiguous()


JPEG_DECODERS = ("auto", "torchvision", "nvimgcodec")
"""``jpeg`` choices of :class:`Decoder` for baseline JPEGs on a GPU (see :func:`nvimgcodec_decoder`)."""


def nvimgcodec_decoder(threads: int) -> Any | None:
    """An nvImageCodec decoder that prefers the GPU's hardware JPEG engines, or None without the package.

    nvImageCodec (``pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg``, optional) reaches the NVJPG
    engines of A100/H100/H200 through nvJPEG's hardware backend. Backends in order: hardware, then
    GPU (SM) decode; an image both refuse comes back None and goes to the CPU path. On an H200 with
    driver 580 its hardware backend decoded 18,500 img/s in one process against torchvision's
    27,600 (docs/benchmarks.md). Raises nothing: any import or init failure logs and
    gives None (the caller keeps torchvision).
    """
    try:
        nvimgcodec = importlib.import_module("nvidia.nvimgcodec")
        backends = [nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY),
                    nvimgcodec.Backend(nvimgcodec.BackendKind.GPU_ONLY)]  # fmt: skip
        return nvimgcodec.Decoder(max_num_cpu_threads=max(1, threads), backends=backends)
    except Exception as exc:  # ImportError, or its init failing on this driver/GPU
        log.info("nvImageCodec unavailable (%s): baseline JPEGs go to torchvision's nvJPEG", exc)
        return None


class Decoder:
    """Decodes batches of image bytes onto ``device`` (``"cuda"`` or ``"cpu"``); see the module docstring.

    ``jpeg`` picks the baseline-JPEG decoder on a GPU: ``torchvision`` (nvJPEG batched decode, the
    default), ``nvimgcodec`` (nvImageCodec, hardware JPEG engines first; :class:`ConfigError` if missing)
    or ``auto`` (nvImageCodec when importable, else torchvision). torchvision stays the default because
    it was faster on an H200 in every configuration measured (docs/benchmarks.md, 2026-12-01; its
    batched decode already keeps the NVJPG engines 17-40 % busy). :attr:`jpeg` says which one is in use
    (``cpu`` on a CPU).
    """

    def __init__(
        self, device: str, threads: int = 4, *, jpeg: str = "torchvision", max_pixels: int = DEFAULT_MAX_PIXELS
    ) -> None:
        if jpeg not in JPEG_DECODERS:
            raise ConfigError(f"jpeg decoder {jpeg!r}: choose one of {', '.join(JPEG_DECODERS)}")
        self.device = device
        self.max_pixels = max_pixels
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="decode")
        self.nvimgcodec: Any = None
        self.jpeg = "cpu" if device == "cpu" else "torchvision"
        if device != "cpu" and jpeg != "torchvision":
            self.nvimgcodec = nvimgcodec_decoder(threads)
            if self.nvimgcodec is None and jpeg == "nvimgcodec":
                raise ConfigError("jpeg decoder nvimgcodec: pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg")
            if self.nvimgcodec is not None:
                self.jpeg = "nvimgcodec"

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def warm(self, count: int) -> None:
        """Decode ``count`` copies of one synthetic baseline JPEG (:data:`WARM_SIDE` pixels square, 4:2:0) as one
        batch, and drop them: a decoder's first batch on a GPU makes nvJPEG's handle and its buffers for the batch's
        images (host and device memory, allocated outside torch's caches); seconds when several workers start at
        once (docs/benchmarks.md). Later batches of up to ``count`` images as large or smaller find the buffers
        made; a larger batch grows them. Nothing on a CPU. Never raises: a warm-up that fails (out of memory, say)
        is logged, and the first real batch pays."""
        if self.device == "cpu" or count < 1:
            return
        try:
            self.decode([warm_jpeg()] * count)
        except Exception as exc:  # only a warm-up: the real batches decode, or fail, on their own
            log.info("JPEG decoder not warmed up: %s: %s", type(exc).__name__, exc)

    def _decode_nvimgcodec(self, blobs: Sequence[bytes]) -> list[Decoded | None]:
        """Baseline JPEGs through nvImageCodec on torch's current stream; None where one failed."""
        torch, _ = torch_modules()
        nvimgcodec = importlib.import_module("nvidia.nvimgcodec")
        params = nvimgcodec.DecodeParams(apply_exif_orientation=True, color_spec=nvimgcodec.ColorSpec.SRGB)
        stream = torch.cuda.current_stream().cuda_stream
        imgs = self.nvimgcodec.decode([nvimgcodec.CodeStream(b) for b in blobs], params=params, cuda_stream=stream)
        out: list[Decoded | None] = []
        for img in imgs:
            if img is None or img.shape[2] != 3:
                out.append(None)
                continue
            # (H,W,3) interleaved on the device; a (3,H,W) view, consumed by copies that read strides
            out.append(Decoded(torch.as_tensor(img, device="cuda").permute(2, 0, 1), 255.0))
        return out

    def decode(self, blobs: Sequence[bytes], *, gpu_decode: bool = True) -> list[Decoded | DecodeError]:
        """Decode every blob; a failure is returned in its place as a :class:`DecodeError`. An image that
        declares more than ``max_pixels`` pixels is refused before any decoding (:func:`over_pixel_limit`);
        formats that only Pillow reads (TIFF, BMP, ...) also stop at Pillow's own refusal, twice
        ``PIL.Image.MAX_IMAGE_PIXELS``, which this leaves as it is. ``gpu_decode`` False decodes baseline JPEGs on
        the CPU too, then copies them to the device. Raises out-of-memory from the GPU decoder or the copy (the CPU
        decodes not yet started are cancelled first)."""
        out: list[Decoded | DecodeError | None] = [over_pixel_limit(b, self.max_pixels) for b in blobs]
        on_device = gpu_decode and self.device != "cpu"
        gpu_idx = [i for i, b in enumerate(blobs) if out[i] is None and on_device and jpeg_kind(b) == "baseline"]
        on_gpu = set(gpu_idx)
        cpu_idx = [i for i in range(len(blobs)) if i not in on_gpu and out[i] is None]
        futures = {i: self.pool.submit(_decode_cpu_pinned, blobs[i], self.device != "cpu") for i in cpu_idx}
        try:
            self._decode_gpu(blobs, gpu_idx, out, futures)
            for i, fut in futures.items():
                out[i] = self._collect(fut)
        except BaseException:
            for fut in futures.values():
                fut.cancel()
            raise
        return [o if o is not None else DecodeError("not decoded") for o in out]

    def _decode_gpu(self, blobs: Sequence[bytes], gpu_idx: list[int], out: list[Decoded | DecodeError | None],
                    futures: dict[int, Future[Decoded]]) -> None:  # fmt: skip
        """Decode ``blobs[i]`` for each ``i`` of ``gpu_idx`` on the device into ``out``; an image the GPU decoder
        refuses, or every image of a batch that holds a bad JPEG, goes to the CPU instead (into ``futures``).
        Raises out-of-memory (a batch too large, not a bad JPEG)."""
        if not gpu_idx:
            return
        if self.nvimgcodec is not None:
            decoded = self._decode_nvimgcodec([blobs[i] for i in gpu_idx])
            for i, dec in zip(gpu_idx, decoded, strict=True):
                if dec is None:  # corrupt or refused: the CPU path decodes it or gives the reason
                    futures[i] = self.pool.submit(_decode_cpu_pinned, blobs[i], True)
                else:
                    out[i] = dec
            return
        torch, torchvision = torch_modules()
        raws = [torch.frombuffer(bytearray(blobs[i]), dtype=torch.uint8) for i in gpu_idx]
        try:
            imgs = torchvision.io.decode_jpeg(
                raws, mode=torchvision.io.ImageReadMode.RGB, device=self.device, apply_exif_orientation=True
            )
        except RuntimeError as exc:
            if is_oom(exc):  # the batch does not fit: decode_split halves it, warm() logs it
                raise
            # one bad JPEG fails the whole nvJPEG batch: decode each on the CPU to find it
            for i in gpu_idx:
                futures[i] = self.pool.submit(_decode_cpu_pinned, blobs[i], True)
            return
        for i, img in zip(gpu_idx, imgs, strict=True):
            out[i] = Decoded(img, 255.0)

    def _collect(self, fut: Future[Decoded]) -> Decoded | DecodeError:
        """A CPU decode's result copied to the device, or its :class:`DecodeError`; raises out-of-memory."""
        try:
            dec = fut.result()
        except DecodeError as exc:
            return exc
        except (ValueError, RuntimeError, OSError, IndexError, TypeError) as exc:  # a decoder's own bug
            if is_oom(exc):
                raise
            return DecodeError(f"cannot decode image: {type(exc).__name__}: {exc}")
        return Decoded(dec.pixels.to(self.device, non_blocking=True), dec.max_value)

WARM_SIDE = 512
"""Side in pixels of the JPEG :meth:`Decoder.warm` decodes: as large as most ImageNet-like photos (256-500 px)."""


def warm_jpeg(side: int = WARM_SIDE) -> bytes:
    """A baseline JPEG (quality 90, 4:2:0) of ``side`` x ``side`` colour gradients: it compresses like a photo,
    not like noise."""
    torch, torchvision = torch_modules()
    ramp = torch.arange(side, dtype=torch.int32)
    shift = torch.tensor([0, 85, 170], dtype=torch.int32)[:, None, None]
    pixels = ((ramp[None, :, None] + 2 * ramp[None, None, :] + shift) % 256).to(torch.uint8)
    return bytes(torchvision.io.encode_jpeg(pixels, quality=90).numpy())


def over_pixel_limit(data: bytes, max_pixels: int) -> DecodeError | None:
    """The error for an image that declares more than ``max_pixels`` pixels (a decompression bomb, or
    just too large to decode safely), None for one within the limit or of unknown size."""
    from PIL import Image

    try:
        size = declared_size(data)
    except Image.DecompressionBombError as exc:
        return DecodeError(f"refused before decoding: Pillow: {exc}")
    if size is None or size[0] * size[1] <= max_pixels:
        return None
    width, height = size
    return DecodeError(
        f"refused before decoding: the image declares {width}x{height} = {width * height} pixels, over the limit "
        f"of {max_pixels} (--max-pixels; a decompression bomb, or raise the limit for real images this large)"
    )


def _decode_cpu_pinned(data: bytes, pin: bool) -> Decoded:
    dec = _decode_cpu(data)
    return Decoded(dec.pixels.pin_memory(), dec.max_value) if pin else dec


def decode_split(decoder: Decoder, blobs: list[bytes]) -> list[Decoded | DecodeError]:
    """``decoder.decode(blobs)``; on out-of-memory, each half on its own (recursively); an image that alone does
    not fit the GPU decoder is decoded on the CPU and copied, and one whose pixels do not fit the device either is a
    :class:`DecodeError` (recorded as failed, the rest goes on).

    The batch size is probed with 1.5-megapixel images (:func:`~gpuprov.images.memory.auto_batch`); a batch
    of 12-megapixel photos decodes to 8x as many bytes, and the next batch decodes while this one is
    processed.
    """
    try:
        return list(decoder.decode(blobs))
    except (RuntimeError, MemoryError) as exc:
        if not is_oom(exc):
            raise
        release_memory()
        if len(blobs) == 1:  # too large for the GPU decoder's buffers: the CPU decodes it, if the copy fits
            try:
                return list(decoder.decode(blobs, gpu_decode=False))
            except (RuntimeError, MemoryError) as alone:
                if not is_oom(alone):
                    raise
                release_memory()
                return [DecodeError(f"out of device memory decoding this image alone: {alone}")]
        half = len(blobs) // 2
        log.warning("out of memory decoding %d images: decoding them in halves", len(blobs))
        return decode_split(decoder, blobs[:half]) + decode_split(decoder, blobs[half:])
