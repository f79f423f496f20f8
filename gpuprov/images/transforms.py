"""Decoded images to the model's input batch: centre crop, resize and ImageNet normalisation, per image
or in batched kernels.

Per image (:func:`to_unit`), the centre square is cut out (a view, no copy) and resized with antialiasing
to ``size`` x ``size``; :func:`crop_resize_batch` does the same for a whole batch in a few kernels
(``torchvision.ops.roi_align`` over padded canvases). :func:`normalise` then normalises the batch with
ImageNet mean and std in one step and makes it ``channels_last`` (and fp16 when asked). Images are
(3,H,W) tensors (:class:`~gpuprov.images.decode.Decoded`); batches are (N,3,size,size); sizes and sides
are in pixels. The fused Triton kernel (:mod:`gpuprov.images.fused`) computes the same as
``normalise(crop_resize_batch(...))``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from gpuprov.images.decode import Decoded
from gpuprov.images.lazy_torch import torch_modules

MEAN = (0.485, 0.456, 0.406)
"""ImageNet's per-channel mean (R, G, B) of pixel values in [0,1]."""
STD = (0.229, 0.224, 0.225)
"""ImageNet's per-channel standard deviation (R, G, B) of pixel values in [0,1]."""


def centre_square(height: int, width: int) -> tuple[int, int, int]:
    """``(top, left, side)`` in pixels of the largest centred square of a ``height`` x ``width`` image."""
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side


def to_unit(dec: Decoded, size: int, *, crop: bool = True) -> Any:
    """One image as float32 (1,3,size,size) in [0,1]: centre square (if ``crop``) resized with antialias."""
    torch, _ = torch_modules()
    img = dec.pixels
    _, h, w = img.shape
    if crop:
        top, left, s = centre_square(h, w)
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
            top, left, side = centre_square(ih, iw)
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
