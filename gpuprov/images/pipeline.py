"""Decode, resize and normalise image batches on one device, with OOM backoff and an automatic batch size.

torch and torchvision are optional for gpuprov (the ``images`` extra) and imported lazily here, so
the rest of gpuprov never pays for them; at the boundary they are typed ``Any``.

Decoding: baseline (sequential) JPEGs go to the GPU in one batched nvJPEG call
(``torchvision.io.decode_jpeg(list, device="cuda")``); progressive JPEG (which nvJPEG's hardware path
does not take), PNG (8 and 16 bit), DICOM (uncompressed, through pydicom; 16-bit medical images)
and every other format are decoded on a CPU thread pool into pinned memory and copied
asynchronously. EXIF orientation is applied on both paths. On a machine
without a GPU the same code runs with the device ``cpu`` (CI).

Per image, the centre square is cut out (a view, no copy) and resized with antialiasing to
``size`` x ``size``; the batch is then normalised with ImageNet mean and std in one step and made
``channels_last`` (and fp16 when asked).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuprov.images.formats import DEFAULT_MAX_PIXELS, declared_size, is_dicom, jpeg_kind, png_bit_depth

log = logging.getLogger(__name__)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
AUTO_PROBE_BATCH = 8
AUTO_HEADROOM = 0.8
"""Fraction of free device memory the automatic batch may plan to use (the rest is headroom)."""
AUTO_MAX_BATCH = 1024
CPU_DEFAULT_BATCH = 32
MEM_BUDGET_ENV = "GPUPROV_IMAGES_MEM_BUDGET"
"""Bytes one batch may use, estimated; above it the batch raises :class:`BudgetExceeded` (tests, CPU)."""

T = TypeVar("T")
R = TypeVar("R")


def torch_modules() -> tuple[Any, Any]:
    """``(torch, torchvision)``, imported on first use; raises EnvironmentMissing without the extra."""
    try:
        import torch

        torchvision = importlib.import_module("torchvision")
    except ImportError as exc:
        from gpuprov.exceptions import EnvironmentMissing

        raise EnvironmentMissing("gpuprov images needs torch and torchvision: pip install 'gpuprov[images]'") from exc
    return torch, torchvision


# --- decoding ------------------------------------------------------------------------------------


class DecodeError(ValueError):
    """An image could not be decoded (corrupt, truncated, unknown format); the message says why."""


@dataclass
class Decoded:
    """One decoded image on the device: ``pixels`` (C,H,W; uint8 or, for 16-bit sources, int32 0..65535)."""

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
    if data[:6] in (b"GIF87a", b"GIF89a"):  # torchvision decodes every frame; the pixel limit counted one
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

    torch, _ = torch_modules()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            img = ImageOps.exif_transpose(im)
            if img.mode in ("I;16", "I;16B", "I"):
                arr = np.asarray(img, dtype=np.int32)
                return Decoded(torch.from_numpy(arr.copy()).unsqueeze(0).expand(3, -1, -1).contiguous(), 65535.0)
            arr = np.asarray(img.convert("RGB"))
            return Decoded(torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous(), 255.0)
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

    torch, _ = torch_modules()
    try:
        import pydicom
    except ImportError as exc:
        raise DecodeError("DICOM needs pydicom: pip install 'gpuprov[images]'") from exc
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
        grey = torch.from_numpy(np.clip(pixels, 0, top).astype(np.int32))
        return Decoded(grey.unsqueeze(0).expand(3, -1, -1).contiguous(), float(top))
    if bits <= 8:
        rgb = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.uint8)).permute(2, 0, 1).contiguous()
        return Decoded(rgb, 255.0)
    rgb = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.int32)).permute(2, 0, 1).contiguous()
    return Decoded(rgb, float((1 << bits) - 1))


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
        from gpuprov.exceptions import ConfigError

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

    def decode(self, blobs: Sequence[bytes]) -> list[Decoded | DecodeError]:
        """Decode every blob; a failure is returned in its place as a :class:`DecodeError`. An image that
        declares more than ``max_pixels`` pixels is refused before any decoding (:func:`over_pixel_limit`);
        formats that only Pillow reads (TIFF, BMP, ...) also stop at Pillow's own refusal, twice
        ``PIL.Image.MAX_IMAGE_PIXELS``, which this leaves as it is."""
        torch, torchvision = torch_modules()
        out: list[Decoded | DecodeError | None] = [over_pixel_limit(b, self.max_pixels) for b in blobs]
        gpu_idx = [i for i, b in enumerate(blobs)
                   if out[i] is None and self.device != "cpu" and jpeg_kind(b) == "baseline"]  # fmt: skip
        on_gpu = set(gpu_idx)
        cpu_idx = [i for i in range(len(blobs)) if i not in on_gpu and out[i] is None]
        futures = {i: self.pool.submit(_decode_cpu_pinned, blobs[i], self.device != "cpu") for i in cpu_idx}
        if gpu_idx and self.nvimgcodec is not None:
            decoded = self._decode_nvimgcodec([blobs[i] for i in gpu_idx])
            for i, dec in zip(gpu_idx, decoded, strict=True):
                if dec is None:  # corrupt or refused: the CPU path decodes it or gives the reason
                    futures[i] = self.pool.submit(_decode_cpu_pinned, blobs[i], True)
                else:
                    out[i] = dec
        elif gpu_idx:
            ImageReadMode = torchvision.io.ImageReadMode
            raws = [torch.frombuffer(bytearray(blobs[i]), dtype=torch.uint8) for i in gpu_idx]
            try:
                imgs = torchvision.io.decode_jpeg(
                    raws, mode=ImageReadMode.RGB, device=self.device, apply_exif_orientation=True
                )
                for i, img in zip(gpu_idx, imgs, strict=True):
                    out[i] = Decoded(img, 255.0)
            except RuntimeError:
                # one bad JPEG fails the whole nvJPEG batch: decode each on the CPU to find it
                for i in gpu_idx:
                    futures[i] = self.pool.submit(_decode_cpu_pinned, blobs[i], True)
        for i, fut in futures.items():
            try:
                dec = fut.result()
            except DecodeError as exc:
                out[i] = exc
                continue
            except (ValueError, RuntimeError, OSError, IndexError, TypeError) as exc:  # a decoder's own bug
                if is_oom(exc):
                    raise
                out[i] = DecodeError(f"cannot decode image: {type(exc).__name__}: {exc}")
                continue
            out[i] = Decoded(dec.pixels.to(self.device, non_blocking=True), dec.max_value)
        return [o if o is not None else DecodeError("not decoded") for o in out]


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


# --- resize + normalise --------------------------------------------------------------------------


def to_unit(dec: Decoded, size: int, *, crop: bool = True) -> Any:
    """One image as float32 (1,3,size,size) in [0,1]: centre square (if ``crop``) resized with antialias."""
    torch, _ = torch_modules()
    img = dec.pixels
    _, h, w = img.shape
    if crop:
        s = min(h, w)
        top, left = (h - s) // 2, (w - s) // 2
        img = img[:, top : top + s, left : left + s]
        out_hw = (size, size)
    else:
        scale = min(1.0, size / max(h, w))  # never enlarge
        out_hw = (max(1, round(h * scale)), max(1, round(w * scale)))
    x = img.unsqueeze(0).to(torch.float32).mul_(1.0 / dec.max_value)
    return torch.nn.functional.interpolate(x, size=out_hw, mode="bilinear", antialias=True, align_corners=False)


CANVAS_BYTES = 1 << 30
"""Most bytes one padded canvas of :func:`crop_resize_batch` may take (1 GiB; a chunk is cut at it)."""
MAX_SAMPLING = 8
"""Cap on roi_align's samples per output pixel and axis (a 5640 px photo to 224 would ask for 17)."""
SAMPLE_SPACING = 1.5
"""Most source pixels between two of roi_align's samples along an axis: ``ceil(crop / (1.5 * size))``
samples per output pixel and axis. Against antialiased ``interpolate`` on the benchmark's 120 real
photo crops (256-500 px to 224): mean absolute difference 0.0017 of full scale at 1.5 px, 0.0015 at
1 px, which takes 9 samples where 1.5 px takes 4 and made the resize 2.2x slower (docs/benchmarks.md)."""


def sampling_ratio(side: int, size: int) -> int:
    """Bilinear samples per output pixel and axis for a ``side`` px square resized to ``size`` px: one
    sample at most every :data:`SAMPLE_SPACING` source pixels, at most :data:`MAX_SAMPLING`."""
    return min(MAX_SAMPLING, max(1, math.ceil(side / (SAMPLE_SPACING * size))))


def padded_canvas(imgs: Sequence[Any], dtype: Any) -> Any:
    """Images (3,h,w) of one device, padded into one (N,3,H,W) ``dtype`` tensor in a few batched kernels.

    ``torch.nested.as_nested_tensor`` packs the images into one buffer and ``to_padded_tensor`` pads
    them with zeros to the largest height and width; then the row below and the column right of each
    smaller image repeat its last row and column (two indexed copies for the whole canvas), so a
    bilinear sample up to half a pixel past an image's edge sees that edge, as when the image is alone,
    not the padding. Sources of several dtypes (8-bit and 16-bit) are packed as int32.
    """
    torch, _ = torch_modules()
    device = imgs[0].device
    src = torch.uint8 if all(img.dtype == torch.uint8 for img in imgs) else torch.int32
    with warnings.catch_warnings():  # strided nested tensors are "prototype"; jagged ones take one ragged dim
        warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors", category=UserWarning)
        packed = torch.nested.as_nested_tensor([img if img.dtype == src else img.to(src) for img in imgs])
    canvas = torch.nested.to_padded_tensor(packed.to(dtype), 0.0)
    _, _, h, w = canvas.shape
    for axis, limit in ((1, h), (2, w)):
        short = [(j, int(img.shape[axis])) for j, img in enumerate(imgs) if int(img.shape[axis]) < limit]
        if not short:
            continue
        which = to_device([j for j, _ in short], torch.int64, device)
        edge = to_device([n for _, n in short], torch.int64, device)
        if axis == 1:
            canvas[which, :, edge, :] = canvas[which, :, edge - 1, :]
        else:
            canvas[which, :, :, edge] = canvas[which, :, :, edge - 1]
    return canvas


def to_device(values: Sequence[Any], dtype: Any, device: Any) -> Any:
    """A small host list as a tensor on ``device`` without waiting for the device: a copy from pinned
    memory, queued on the current stream (a pageable copy would synchronise with every kernel before)."""
    torch, _ = torch_modules()
    host = torch.tensor(values, dtype=dtype)
    if torch.device(device).type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def crop_resize_batch(decs: Sequence[Decoded], size: int) -> Any:
    """Centre squares of every image resized to ``size`` in batched kernels: (N,3,size,size) float32 in [0,1].

    The per-image path (:func:`to_unit`, one interpolate per image) costs ~100 us of Python and
    kernel launches per image, which at batch 1024 on an H200 took longer than ResNet-50 itself
    (docs/benchmarks.md). Here images are sorted by size and packed into padded canvases
    (:func:`padded_canvas`, at most :data:`CANVAS_BYTES` per canvas), and one
    ``torchvision.ops.roi_align`` per canvas cuts and resizes every centre square: each output pixel
    averages ``ceil(crop / (SAMPLE_SPACING * size))``^2 bilinear samples (capped at
    :data:`MAX_SAMPLING`), a box filter close to antialiased bilinear resizing (see
    :data:`SAMPLE_SPACING`). Canvases are fp16 on CUDA for 8-bit sources (exact for
    0..255), fp32 otherwise. A canvas holds images of one bit depth and one sampling ratio only, so an
    image's result does not depend on the other images of its batch (a retried image gets the same
    scores). The kernels launched per canvas do not grow with the number of images.
    """
    torch, torchvision = torch_modules()
    if not decs:
        raise ValueError("crop_resize_batch needs at least one image")
    device = decs[0].pixels.device
    out = torch.empty((len(decs), 3, size, size), dtype=torch.float32, device=device)

    def kind(i: int) -> tuple[bool, int]:
        """What one canvas must share: 16-bit source (fp32 canvas) and the sampling ratio, so that an image's
        result does not depend on the other images of its batch."""
        _, ih, iw = decs[i].pixels.shape
        return decs[i].max_value > 255 or device.type == "cpu", sampling_ratio(min(int(ih), int(iw)), size)

    kinds = [kind(i) for i in range(len(decs))]
    order = sorted(range(len(decs)), key=lambda i: (kinds[i], tuple(decs[i].pixels.shape[1:])))
    chunk: list[int] = []

    def flush() -> None:
        if not chunk:
            return
        wide, ratio = kinds[chunk[0]]
        dtype = torch.float32 if wide else torch.float16
        canvas = padded_canvas([decs[i].pixels for i in chunk], dtype)
        boxes: list[tuple[float, float, float, float, float]] = []  # one host-to-device copy per canvas
        scale: list[float] = []
        for j, i in enumerate(chunk):
            _, ih, iw = decs[i].pixels.shape
            side = min(ih, iw)
            top, left = (ih - side) // 2, (iw - side) // 2
            boxes.append((j, left, top, left + side, top + side))
            scale.append(1.0 / decs[i].max_value)
        box_t = to_device(boxes, torch.float32, device).to(dtype)
        units = torchvision.ops.roi_align(canvas, box_t, output_size=(size, size), sampling_ratio=ratio, aligned=True)
        index = to_device(chunk, torch.int64, device)
        scale_t = to_device(scale, torch.float32, device).view(-1, 1, 1, 1)
        out.index_copy_(0, index, units.float().mul_(scale_t))
        chunk.clear()

    rows = cols = 0  # the current chunk's canvas height and width
    for i in order:
        _, ih, iw = (int(n) for n in decs[i].pixels.shape)
        too_big = (len(chunk) + 1) * 3 * max(rows, ih) * max(cols, iw) * 4 > CANVAS_BYTES
        if chunk and (too_big or kinds[i] != kinds[chunk[0]]):
            flush()
            rows = cols = 0
        chunk.append(i)
        rows, cols = max(rows, ih), max(cols, iw)
    flush()
    return out


def normalise(units: Sequence[Any] | Any, *, half: bool) -> Any:
    """Normalise (N,3,S,S) in [0,1] - one tensor, or a list of (1,3,S,S) stacked first - with ImageNet
    mean and std into one channels_last batch (fp16 if ``half``)."""
    torch, _ = torch_modules()
    batch = units if isinstance(units, torch.Tensor) else torch.cat(list(units), dim=0)
    mean = torch.tensor(MEAN, device=batch.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=batch.device).view(1, 3, 1, 1)
    batch = (batch - mean) / std
    if half:
        batch = batch.half()
    return batch.contiguous(memory_format=torch.channels_last)


# --- OOM backoff and automatic batch size ---------------------------------------------------------


class BudgetExceeded(MemoryError):
    """A batch's estimated memory exceeds ``$GPUPROV_IMAGES_MEM_BUDGET``: handled like CUDA OOM."""


def check_budget(n: int, size: int, bytes_per_pixel: int = 4 * 64) -> None:
    """Raise :class:`BudgetExceeded` if ``n`` images of ``size``^2 would exceed the configured budget.

    The estimate (``bytes_per_pixel`` per input pixel for activations) stands in for device memory
    on CPU, so the backoff path can be tested without a GPU.
    """
    budget = os.environ.get(MEM_BUDGET_ENV)
    if budget and n * 3 * size * size * bytes_per_pixel > int(budget):
        raise BudgetExceeded(f"batch of {n} exceeds the memory budget of {budget} bytes")


def is_oom(exc: BaseException) -> bool:
    """True for CUDA/CPU out-of-memory errors and :class:`BudgetExceeded`."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch
    except ImportError:
        return False
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_memory() -> None:
    """Return cached CUDA memory to the driver after an out-of-memory error (nothing on CPU)."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Backoff:
    """Runs ``fn`` over items in chunks of the current batch size, halving it on OOM and retrying.

    ``batch`` only shrinks (a later call keeps the smaller size); an OOM at batch size 1 is raised.
    """

    def __init__(self, batch: int) -> None:
        self.batch = max(1, batch)
        self.halvings = 0

    def run(self, items: Sequence[T], fn: Callable[[Sequence[T]], list[R]]) -> list[R]:
        results: list[R] = []
        pos = 0
        while pos < len(items):
            chunk = items[pos : pos + self.batch]
            try:
                results.extend(fn(chunk))
            except (MemoryError, RuntimeError) as exc:
                if not is_oom(exc) or self.batch == 1:
                    raise
                self.batch = max(1, self.batch // 2)
                self.halvings += 1
                log.warning("out of memory at batch %d: halving to %d (%s)", len(chunk), self.batch, exc)
                release_memory()
                continue
            pos += len(chunk)
        return results


def auto_batch(device: str, probe: Callable[[int], object], *, free_bytes: int | None = None, share: int = 1) -> int:
    """A safe maximum batch: run ``probe(AUTO_PROBE_BATCH)``, read the peak memory, scale with headroom.

    On CUDA: ``per_image = (max_memory_allocated after the probe - allocated before) / probe batch``
    and ``batch = floor(free / share * AUTO_HEADROOM / per_image)`` (``share``: worker processes on the
    device, which split its free memory), rounded down to a multiple of 8 and
    capped at ``AUTO_MAX_BATCH``. On CPU there is no allocator peak: the result is
    ``CPU_DEFAULT_BATCH`` (or what the memory budget allows).
    """
    torch, _ = torch_modules()
    if device == "cpu":
        batch = CPU_DEFAULT_BATCH
        while batch > 1:
            try:
                probe(batch) if os.environ.get(MEM_BUDGET_ENV) else None
                break
            except MemoryError:
                batch //= 2
        return batch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    probe(AUTO_PROBE_BATCH)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    per_image = max(1, peak // AUTO_PROBE_BATCH)
    if free_bytes is None:
        free_bytes, _total = torch.cuda.mem_get_info()
    batch = int(free_bytes // max(1, share) * AUTO_HEADROOM // per_image)
    batch = min(AUTO_MAX_BATCH, max(AUTO_PROBE_BATCH, batch - batch % 8))
    log.info(
        "auto batch: %d bytes/image at probe %d, %d free -> batch %d", per_image, AUTO_PROBE_BATCH, free_bytes, batch
    )
    return batch
