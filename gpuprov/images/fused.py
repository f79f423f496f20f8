"""Centre crop, resize and normalise of a batch of 8-bit images in one Triton kernel on the GPU.

:func:`gpuprov.images.transforms.crop_resize_batch` followed by :func:`~gpuprov.images.transforms.normalise`
is the reference: it packs the decoded images into padded fp16 canvases, runs
``torchvision.ops.roi_align`` per canvas, scales, normalises in float32 and converts to an fp16
channels_last batch - about ten passes over the batch in memory. On one H200 that was 18.5 ms per batch
of 1024 images of 256-500 px (docs/benchmarks.md), a fifth of a worker's GPU time per image. Here one
kernel reads every image where the decoder left it (concatenated into one flat byte buffer), takes the
same bilinear samples as ``roi_align(aligned=True)`` with the same sampling ratio per image, averages them
in float32, normalises with the ImageNet mean and std and writes the fp16 (or float32) channels_last
batch the model takes.

Triton is the compiler torch itself uses for its generated kernels (``torch.compile``) and comes with
torch's Linux wheels; a kernel is compiled on its first launch (about 1 s, then cached in
``TRITON_CACHE_DIR``, default ``~/.triton/cache``); its launcher is built with the host's C compiler
against the Python headers (``gcc`` and ``python3-dev``, which the image_workers role installs).
:func:`available` says whether this path can run; callers fall back to the reference where it cannot.
With ``TRITON_INTERPRET=1`` set before the import, the kernel runs on CPU tensors in Triton's interpreter
(the unit tests compare it with the reference that way).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from gpuprov.images.decode import Decoded
from gpuprov.images.lazy_torch import torch_modules
from gpuprov.images.memory import is_oom
from gpuprov.images.transforms import (
    MEAN,
    STD,
    centre_square,
    crop_resize_batch,
    normalise,
    sampling_ratio,
    to_device,
)

log = logging.getLogger(__name__)

try:  # an optional dependency: torch's Linux wheels carry it, others may not
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None
    tl = None
except Exception as exc:  # a damaged install (a shared library missing or unreadable): the reference path serves
    log.warning("Triton cannot be imported (%s: %s): images are cropped and resized without its kernel",
                type(exc).__name__, exc)
    triton = None
    tl = None

BLOCK = 256
"""Output pixels per Triton program (each program writes all three channels of its pixels)."""

MAX_SIZE = 4095
"""Largest output side the kernel takes: its grid's second dimension, ``cdiv(size**2, BLOCK)``, must stay
within CUDA's 65,535 (larger sizes take the reference path)."""

META_COLUMNS = 8
"""Per-image int64 row: output row, offset of the image in the flat buffer (bytes), height, width, crop
top, crop left, crop side (pixels), sampling ratio (samples per output pixel and axis)."""


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def hash_compiler() -> None:
    """Compute what Triton keys its kernel cache with on a first launch that needs no GPU: a SHA-256 of its own
    compiler, whose shared library (``libtriton.so``) is about 500 MB (0.4 s on one CI core), then kept for the
    process. Done early, the kernel's first launch (:meth:`~gpuprov.images.tasks.ModelTask.build_kernel`) only
    looks its cache up: the fork server does it once for all the workers it forks
    (:func:`gpuprov.images.worker.preload`), a worker started on its own in a thread beside loading its model
    (``hashlib`` lets other threads run while it hashes). Does nothing where Triton, or this part of it
    (``triton.runtime.cache.triton_key``, Triton 3), is missing; never raises (a failure is logged, and the kernel's
    first launch meets it again and falls back, see :func:`resize_normalise`)."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except ImportError:
        return
    except Exception as exc:  # a damaged install, one without its compiler library: the first launch says so
        log.info("Triton's compiler not hashed ahead: %s: %s", type(exc).__name__, exc)


def available(device: Any) -> bool:
    """Whether :func:`crop_resize_normalise` can run for tensors on ``device``: Triton importable and
    the device a CUDA device (or any device under Triton's interpreter)."""
    torch, _ = torch_modules()
    if triton is None:
        return False
    return interpreted() or torch.device(device).type == "cuda"


if triton is not None:

    @triton.jit
    def _bilinear(src, i00, i01, i10, i11, w00, w01, w10, w11, mask):  # type: ignore[no-untyped-def]
        """One channel's bilinear sample: the four taps ``src[i..]`` weighted by ``w..``, in float32."""
        return (
            w00 * tl.load(src + i00, mask=mask, other=0).to(tl.float32)
            + w01 * tl.load(src + i01, mask=mask, other=0).to(tl.float32)
            + w10 * tl.load(src + i10, mask=mask, other=0).to(tl.float32)
            + w11 * tl.load(src + i11, mask=mask, other=0).to(tl.float32)
        )

    @triton.jit
    def _axis_taps(start, index, bin_size, step, i, n):  # type: ignore[no-untyped-def]
        """Along one axis, sample ``i`` of output pixels ``index``: the two source pixels around it and
        the weight of the second, as ``roi_align(aligned=True)`` takes them - the box starts half a pixel
        before ``start``, samples sit at the centres of ``step``-wide sub-bins, and positions are clamped
        to ``0 .. n - 1`` (the edge pixel repeats)."""
        pos = tl.maximum(start - 0.5 + index * bin_size + (i + 0.5) * step, 0.0)
        low = pos.to(tl.int32)
        edge = low >= n - 1
        low = tl.where(edge, n - 1, low)
        high = tl.where(edge, n - 1, low + 1)
        frac = tl.where(edge, 0.0, pos - low.to(tl.float32))
        return low, high, frac

    @triton.jit
    def _crop_resize_normalise_kernel(  # type: ignore[no-untyped-def]  # Triton reads annotations as its own
        src,
        meta,
        out,
        mean0,
        mean1,
        mean2,
        inv_std0,
        inv_std1,
        inv_std2,
        SIZE: tl.constexpr,
        BLOCK: tl.constexpr,
        COLS: tl.constexpr,
    ):
        """Grid (images, cdiv(SIZE*SIZE, BLOCK)); ``src`` uint8 flat (C,H,W) images, ``meta`` int64
        (images, META_COLUMNS), ``out`` (N,SIZE,SIZE,3) fp16/fp32 (channels_last memory of (N,3,S,S))."""
        img = tl.program_id(0)
        row = tl.load(meta + img * COLS + 0)
        base = tl.load(meta + img * COLS + 1)
        h = tl.load(meta + img * COLS + 2).to(tl.int32)
        w = tl.load(meta + img * COLS + 3).to(tl.int32)
        top = tl.load(meta + img * COLS + 4).to(tl.float32)
        left = tl.load(meta + img * COLS + 5).to(tl.float32)
        side = tl.load(meta + img * COLS + 6).to(tl.float32)
        ratio = tl.load(meta + img * COLS + 7).to(tl.int32)
        pix = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = pix < SIZE * SIZE
        py = (pix // SIZE).to(tl.float32)
        px = (pix % SIZE).to(tl.float32)
        bin_size = side / SIZE
        step = bin_size / ratio.to(tl.float32)
        plane = h.to(tl.int64) * w
        acc0 = tl.zeros((BLOCK,), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK,), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
        for iy in range(0, ratio):
            y_low, y_high, ly = _axis_taps(top, py, bin_size, step, iy, h)
            for ix in range(0, ratio):
                x_low, x_high, lx = _axis_taps(left, px, bin_size, step, ix, w)
                w00 = (1.0 - ly) * (1.0 - lx)
                w01 = (1.0 - ly) * lx
                w10 = ly * (1.0 - lx)
                w11 = ly * lx
                i00 = base + y_low.to(tl.int64) * w + x_low
                i01 = base + y_low.to(tl.int64) * w + x_high
                i10 = base + y_high.to(tl.int64) * w + x_low
                i11 = base + y_high.to(tl.int64) * w + x_high
                acc0 += _bilinear(src, i00, i01, i10, i11, w00, w01, w10, w11, mask)
                acc1 += _bilinear(src + plane, i00, i01, i10, i11, w00, w01, w10, w11, mask)
                acc2 += _bilinear(src + 2 * plane, i00, i01, i10, i11, w00, w01, w10, w11, mask)
        unit = 1.0 / (ratio * ratio).to(tl.float32) / 255.0
        dst = out + (row * (SIZE * SIZE) + pix) * 3
        kind = out.dtype.element_ty
        tl.store(dst + 0, ((acc0 * unit - mean0) * inv_std0).to(kind), mask=mask)
        tl.store(dst + 1, ((acc1 * unit - mean1) * inv_std1).to(kind), mask=mask)
        tl.store(dst + 2, ((acc2 * unit - mean2) * inv_std2).to(kind), mask=mask)


def crop_resize_normalise(decs: Sequence[Decoded], size: int, *, half: bool) -> Any:
    """Centre squares of 8-bit RGB images resized to ``size`` and normalised, in one kernel launch.

    ``decs``: decoded images on one device, each ``pixels`` (3,H,W) uint8 (any strides; contiguous ones
    are not copied but for their concatenation into one flat buffer) with ``max_value`` 255. Returns
    (N,3,size,size) in channels_last memory, fp16 if ``half`` else float32, ImageNet-normalised - the
    same function as ``normalise(crop_resize_batch(decs, size), half=half)`` computed in float32 (on a GPU
    the reference samples in fp16 and differs by up to 0.74 at sharp edges; this kernel by 0.00011 from
    the float32 reference, docs/benchmarks.md). Raises ``ValueError`` for an
    empty list or an image that is not 8-bit RGB, ``RuntimeError`` where Triton cannot compile or launch
    (no C compiler, no GPU; see :func:`available`).
    """
    torch, _ = torch_modules()
    if not decs:
        raise ValueError("crop_resize_normalise needs at least one image")
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"crop_resize_normalise: size {size} is outside 1..{MAX_SIZE}")
    if triton is None:
        raise RuntimeError("triton is not installed")
    device = decs[0].pixels.device
    rows: list[list[int]] = []
    offset = 0
    for n, dec in enumerate(decs):
        c, h, w = (int(v) for v in dec.pixels.shape)
        if not kernel_takes(dec):
            raise ValueError(
                f"image {n}: crop_resize_normalise takes non-empty 8-bit RGB (3,H,W) uint8, not "
                f"{tuple(dec.pixels.shape)} {dec.pixels.dtype}"
            )
        top, left, side = centre_square(h, w)
        rows.append([n, offset, h, w, top, left, side, sampling_ratio(side, size)])
        offset += c * h * w
    flat = torch.cat([dec.pixels.reshape(-1) for dec in decs])
    meta = torch.tensor(rows, dtype=torch.int64)
    if device.type == "cuda":
        meta = meta.pin_memory().to(device, non_blocking=True)
    dtype = torch.float16 if half else torch.float32
    out = torch.empty((len(decs), size, size, 3), dtype=dtype, device=device)
    grid = (len(decs), triton.cdiv(size * size, BLOCK))
    _crop_resize_normalise_kernel[grid](
        flat, meta, out, *MEAN, *(1.0 / s for s in STD), SIZE=size, BLOCK=BLOCK, COLS=META_COLUMNS
    )
    return out.permute(0, 3, 1, 2)


class KernelState:
    """Whether the kernel is tried in this process: :attr:`failed` holds the first compile or launch
    failure's reason, after which the reference serves."""

    failed: str | None = None


KERNEL = KernelState()


def kernel_takes(dec: Decoded) -> bool:
    """True for the images the kernel takes: (3,H,W) uint8 with full scale 255, H and W >= 1 (an empty
    image goes to the reference path, which raises for it alone)."""
    torch, _ = torch_modules()
    shape = tuple(int(v) for v in dec.pixels.shape)
    rgb = len(shape) == 3 and shape[0] == 3 and min(shape) > 0
    return rgb and dec.pixels.dtype == torch.uint8 and dec.max_value == 255


def resize_normalise(decs: Sequence[Decoded], size: int, *, half: bool) -> Any:
    """The model's input batch: (N,3,size,size) channels_last, fp16 if ``half``, ImageNet-normalised.

    8-bit RGB images go through the kernel (:func:`crop_resize_normalise`) where :func:`available`,
    the rest (16-bit sources, or every image where the kernel cannot run) through the reference
    ``normalise(crop_resize_batch(...))``, each image on its own path whatever its batch holds. If the
    kernel fails to compile or launch, the reason is logged once and the reference serves from then on
    in this process. Out-of-memory errors propagate (the caller halves the batch).
    """
    torch, _ = torch_modules()
    if not decs:
        raise ValueError("resize_normalise needs at least one image")
    if size < 1:
        raise ValueError(f"resize_normalise: size {size} must be >= 1")
    device = decs[0].pixels.device
    usable = KERNEL.failed is None and size <= MAX_SIZE and available(device)
    eight = [i for i, dec in enumerate(decs) if kernel_takes(dec)] if usable else []
    if eight:
        try:
            fast = crop_resize_normalise([decs[i] for i in eight], size, half=half)
        except Exception as exc:  # any compile or launch failure: log it and use the reference
            if is_oom(exc):
                raise
            KERNEL.failed = f"{type(exc).__name__}: {exc}"
            log.warning("fused crop+resize kernel unavailable, using roi_align: %s", KERNEL.failed)
            eight = []
    if not eight:
        return normalise(crop_resize_batch(decs, size), half=half)
    if len(eight) == len(decs):
        return fast
    chosen = set(eight)
    rest = [i for i in range(len(decs)) if i not in chosen]
    slow = normalise(crop_resize_batch([decs[i] for i in rest], size), half=half)
    out = fast.new_empty((len(decs), 3, size, size)).contiguous(memory_format=torch.channels_last)
    out.index_copy_(0, to_device(eight, torch.int64, device), fast)
    out.index_copy_(0, to_device(rest, torch.int64, device), slow)
    return out
