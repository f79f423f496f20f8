"""Format sniffing, decoding, resize/normalise, OOM backoff and the automatic batch size (CPU)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402

from gpuprov.images import decode, formats, memory, transforms  # noqa: E402
from gpuprov.images.decode import DecodeError, Decoder  # noqa: E402
from gpuprov.images.memory import Backoff, BudgetExceeded  # noqa: E402


def _jpeg(w: int = 64, h: int = 48, *, progressive: bool = False, orientation: int | None = None) -> bytes:
    im = Image.new("RGB", (w, h), (200, 30, 30))
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    im.save(buf, "JPEG", progressive=progressive, exif=exif.tobytes() if orientation else b"")
    return buf.getvalue()


def _png(mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (40, 30), 1000 if mode == "I;16" else (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


def test_an_image_over_the_pixel_limit_fails_alone_undecoded(bomb_png: Callable[[int, int], bytes]) -> None:
    """A 30000 x 30000 PNG of a few hundred bytes (a decompression bomb) fails with the reason, its batch's
    good image is decoded; the limit is the Decoder's (``--max-pixels``), Pillow's by default."""
    bomb, good = bomb_png(30000, 30000), _jpeg(64, 48)
    out = Decoder("cpu").decode([bomb, good])
    assert isinstance(out[0], DecodeError) and "declares 30000x30000 = 900000000 pixels" in str(out[0])
    assert not isinstance(out[1], DecodeError) and tuple(out[1].pixels.shape) == (3, 48, 64)
    small_limit = Decoder("cpu", max_pixels=64 * 48 - 1).decode([good])[0]
    assert isinstance(small_limit, DecodeError) and "over the limit of 3071 (--max-pixels" in str(small_limit)
    assert not isinstance(Decoder("cpu", max_pixels=64 * 48).decode([good])[0], DecodeError)


def test_an_animated_gif_decodes_its_first_frame_only() -> None:
    """torchvision would decode every frame (N x 3 x H x W, N times the memory the pixel limit counted)."""
    frames = [Image.new("RGB", (60, 40), (i * 20, 0, 0)) for i in range(12)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    (out,) = Decoder("cpu").decode([buf.getvalue()])
    assert not isinstance(out, DecodeError), out
    assert tuple(out.pixels.shape) == (3, 40, 60)


def test_decode_applies_exif_and_reports_corrupt() -> None:
    dec = Decoder("cpu", threads=2)
    try:
        ok, rotated, png16, bad, trunc = dec.decode(
            [_jpeg(), _jpeg(orientation=6), _png("I;16"), b"junk", _jpeg()[:200]]
        )
    finally:
        dec.close()
    assert not isinstance(ok, DecodeError) and tuple(ok.pixels.shape) == (3, 48, 64)
    assert not isinstance(rotated, DecodeError) and tuple(rotated.pixels.shape) == (3, 64, 48)
    assert not isinstance(png16, DecodeError) and png16.max_value == 65535.0
    assert int(png16.pixels.max()) == 1000
    assert isinstance(bad, DecodeError)
    assert isinstance(trunc, DecodeError)


def test_resize_and_normalise() -> None:
    dec = decode.Decoded(torch.full((3, 100, 200), 255, dtype=torch.uint8), 255.0)
    unit = transforms.to_unit(dec, 32)
    assert tuple(unit.shape) == (1, 3, 32, 32) and float(unit.max()) == pytest.approx(1.0)
    thumb = transforms.to_unit(dec, 50, crop=False)
    assert tuple(thumb.shape) == (1, 3, 25, 50)
    assert tuple(transforms.to_unit(dec, 400, crop=False).shape) == (1, 3, 100, 200)  # never enlarged
    batch = transforms.normalise([unit, unit], half=False)
    assert batch.is_contiguous(memory_format=torch.channels_last)
    assert float(batch[0, 0, 0, 0]) == pytest.approx((1 - 0.485) / 0.229, rel=1e-4)


def test_backoff_halves_on_oom_and_keeps_order() -> None:
    seen: list[int] = []

    def fn(chunk: Sequence[int]) -> list[int]:
        seen.append(len(chunk))
        if len(chunk) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return [x * 10 for x in chunk]

    b = Backoff(16)
    assert b.run(list(range(10)), fn) == [x * 10 for x in range(10)]
    assert b.batch == 2 and b.halvings == 3
    assert seen[:4] == [10, 8, 4, 2]


def test_backoff_raises_other_errors_and_oom_at_one() -> None:
    with pytest.raises(ValueError):
        Backoff(4).run([1, 2], lambda c: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(BudgetExceeded):
        Backoff(4).run([1, 2], lambda c: (_ for _ in ()).throw(BudgetExceeded("always")))


def test_budget_drives_oom_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.MEM_BUDGET_ENV, str(4 * 3 * 8 * 8 * 4 * 64))
    memory.check_budget(4, 8)
    with pytest.raises(BudgetExceeded):
        memory.check_budget(5, 8)
    assert memory.auto_batch("cpu", lambda n: memory.check_budget(n, 8)) == 4


def test_auto_batch_cpu_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(memory.MEM_BUDGET_ENV, raising=False)
    assert memory.auto_batch("cpu", lambda n: None) == memory.CPU_DEFAULT_BATCH


class FakeCuda:
    """torch.cuda's allocator counters as auto_batch reads them: each probe batch of n images allocates
    ``per_image * n`` bytes at its peak; ``free`` bytes are free."""

    def __init__(self, per_image: int, free: int) -> None:
        self.per_image, self.free, self.peak, self.probes = per_image, free, 0, 0

    def probe(self, n: int) -> None:
        self.probes += 1
        self.peak = self.per_image * n

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, fn in {"synchronize": lambda: None, "reset_peak_memory_stats": lambda: None,
                         "memory_allocated": lambda: 0, "max_memory_allocated": lambda: self.peak,
                         "mem_get_info": lambda: (self.free, 2 * self.free),
                         "get_device_name": lambda: "NVIDIA H200"}.items():  # fmt: skip
            monkeypatch.setattr(torch.cuda, name, fn)


def test_auto_batch_keeps_its_probe_per_model_and_skips_it_next_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUPROV_IMAGES_CACHE_DIR", str(tmp_path / "cache"))
    cuda = FakeCuda(per_image=1_000_000, free=2_000_000_000)
    cuda.install(monkeypatch)
    # 2e9 free / 2 processes * 0.8 headroom / 1e6 bytes per image = 800 images
    assert memory.auto_batch("cuda", cuda.probe, share=2, cache_key="model|a.pt|224|True") == 800
    assert cuda.probes == 1 and len(list((tmp_path / "cache").glob("probe-*.json"))) == 1
    cuda.free = 1_000_000_000  # other workers took memory since: the batch follows the free memory, unprobed
    assert memory.auto_batch("cuda", cuda.probe, share=2, cache_key="model|a.pt|224|True") == 400
    assert cuda.probes == 1
    cuda.per_image = 500_000  # another model file: probed and kept apart
    assert memory.auto_batch("cuda", cuda.probe, share=2, cache_key="model|b.pt|224|True") == 800
    assert memory.auto_batch("cuda", cuda.probe, share=2) == 800  # no key: probed every time
    assert cuda.probes == 3


def test_auto_batch_calls_before_probe_only_when_it_probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``before_probe`` runs before the probe's first allocation, and not at all when a record spares the probe."""
    monkeypatch.setenv("GPUPROV_IMAGES_CACHE_DIR", str(tmp_path / "cache"))
    cuda = FakeCuda(per_image=1_000_000, free=2_000_000_000)
    cuda.install(monkeypatch)
    order: list[str] = []

    def probe(n: int) -> None:
        order.append("probe")
        cuda.probe(n)

    key = "model|a.pt|224|True"
    assert memory.auto_batch("cuda", probe, share=2, cache_key=key, before_probe=lambda: order.append("before")) == 800
    assert order == ["before", "probe"]
    assert memory.auto_batch("cuda", probe, share=2, cache_key=key, before_probe=lambda: order.append("before")) == 800
    assert order == ["before", "probe"]  # the record was read: neither ran again


def test_auto_batch_probes_when_its_record_is_damaged_or_cannot_be_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("GPUPROV_IMAGES_CACHE_DIR", str(cache))
    cuda = FakeCuda(per_image=1_000_000, free=1_000_000_000)
    cuda.install(monkeypatch)
    memory.auto_batch("cuda", cuda.probe, cache_key="k")
    (record,) = cache.glob("probe-*.json")
    record.write_text("{not json", encoding="utf-8")
    assert memory.auto_batch("cuda", cuda.probe, cache_key="k") == 800 and cuda.probes == 2
    assert json.loads(record.read_text(encoding="utf-8")) == {"per_image_bytes": 1_000_000}
    monkeypatch.setenv("GPUPROV_IMAGES_CACHE_DIR", str(record / "not-a-folder"))
    assert memory.auto_batch("cuda", cuda.probe, cache_key="k") == 800 and cuda.probes == 3


def test_crop_resize_batch_keeps_order_and_scale() -> None:
    """Constant images of many sizes (1 px tall to wide, 8 and 16 bit) come out in input order at their value."""
    import torch

    shapes = [(40, 60), (1, 161), (300, 20), (64, 64), (17, 500), (224, 224), (5, 5)]
    decs = []
    for n, (h, w) in enumerate(shapes):
        if n % 3 == 2:
            decs.append(decode.Decoded(torch.full((3, h, w), 1000 * (n + 1), dtype=torch.int32), 65535.0))
        else:
            decs.append(decode.Decoded(torch.full((3, h, w), 30 * (n + 1), dtype=torch.uint8), 255.0))
    out = transforms.crop_resize_batch(decs, 32)
    assert tuple(out.shape) == (len(shapes), 3, 32, 32)
    for dec, unit in zip(decs, out, strict=True):
        expected = float(dec.pixels.flatten()[0]) / dec.max_value
        assert torch.allclose(unit, torch.full_like(unit, expected), atol=1e-5)


def test_crop_resize_batch_matches_per_image_resize() -> None:
    """Batched roi_align resizing stays within 2% mean absolute difference of antialiased interpolate."""
    import torch

    gen = torch.Generator().manual_seed(3)
    decs = []
    for h, w in [(480, 640), (300, 200), (100, 90), (229, 333)]:
        base = torch.rand((3, h // 32 + 2, w // 32 + 2), generator=gen)  # smooth content, like photos
        img = torch.nn.functional.interpolate(base[None], size=(h, w), mode="bilinear")[0]
        decs.append(decode.Decoded((img * 255).round().to(torch.uint8), 255.0))
    batched = transforms.crop_resize_batch(decs, 64)
    for dec, unit in zip(decs, batched, strict=True):
        single = transforms.to_unit(dec, 64)[0]
        assert (unit - single).abs().mean().item() < 0.02


def test_jpeg_decoder_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.exceptions import ConfigError

    assert Decoder("cpu").jpeg == "cpu"
    assert Decoder("cuda").jpeg == "torchvision"  # the default; __init__ touches no CUDA
    with pytest.raises(ConfigError, match="choose one of"):
        Decoder("cuda", jpeg="dali")
    monkeypatch.setattr(decode, "nvimgcodec_decoder", lambda threads: None)  # package absent
    assert Decoder("cuda", jpeg="auto").jpeg == "torchvision"
    with pytest.raises(ConfigError, match="nvidia-nvimgcodec"):
        Decoder("cuda", jpeg="nvimgcodec")
    monkeypatch.setattr(decode, "nvimgcodec_decoder", lambda threads: object())
    assert Decoder("cuda", jpeg="auto").jpeg == "nvimgcodec"


def test_nvimgcodec_decoder_is_none_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = decode.importlib.import_module

    def no_nvimgcodec(name: str) -> object:
        if name.startswith("nvidia.nvimgcodec"):
            raise ImportError(name)
        return real(name)

    monkeypatch.setattr(decode.importlib, "import_module", no_nvimgcodec)
    assert decode.nvimgcodec_decoder(2) is None


def test_padded_canvas_repeats_each_images_last_row_and_column() -> None:
    """Images of several sizes and dtypes in one canvas: each at its place, its edge repeated once past it."""
    import torch

    gen = torch.Generator().manual_seed(1)
    imgs = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen) for h, w in [(5, 7), (4, 9), (6, 6)]]
    imgs.append(torch.randint(0, 65536, (3, 3, 3), dtype=torch.int32, generator=gen))
    canvas = transforms.padded_canvas(imgs, torch.float32)
    assert tuple(canvas.shape) == (4, 3, 6, 9)
    for j, img in enumerate(imgs):
        _, h, w = img.shape
        assert torch.equal(canvas[j, :, :h, :w], img.float())
        if h < 6:
            assert torch.equal(canvas[j, :, h, :w], img[:, h - 1].float())
        if w < 9:
            assert torch.equal(canvas[j, :, : h + 1, w], canvas[j, :, : h + 1, w - 1])


def test_an_images_resize_does_not_depend_on_its_batch() -> None:
    """Each image comes out the same alone as in a batch of other sizes, bit depths and sampling ratios."""
    import torch

    gen = torch.Generator().manual_seed(5)
    decs = [decode.Decoded(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen), 255.0)
            for h, w in [(300, 500), (100, 90), (700, 640), (33, 41)]]  # fmt: skip
    decs.append(decode.Decoded(torch.randint(0, 65536, (3, 120, 80), dtype=torch.int32, generator=gen), 65535.0))
    together = transforms.crop_resize_batch(decs, 32)
    for dec, unit in zip(decs, together, strict=True):
        assert torch.equal(transforms.crop_resize_batch([dec], 32)[0], unit)


def test_warm_jpeg_is_a_baseline_photo_like_jpeg_the_gpu_path_takes() -> None:
    blob = decode.warm_jpeg()
    assert formats.jpeg_kind(blob) == "baseline"  # the batched nvJPEG path, not the CPU pool
    assert len(blob) < 100_000  # gradients compress like a photo (noise would not)
    (img,) = Decoder("cpu").decode([blob])
    assert not isinstance(img, DecodeError) and tuple(img.pixels.shape) == (3, decode.WARM_SIDE, decode.WARM_SIDE)


def test_decoder_warm_decodes_one_batch_on_a_gpu_and_never_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    batches: list[list[bytes]] = []
    cpu = Decoder("cpu")
    monkeypatch.setattr(cpu, "decode", batches.append)
    cpu.warm(8)
    assert batches == []  # nothing to make on a CPU
    gpu = Decoder("cuda")  # __init__ touches no CUDA
    monkeypatch.setattr(gpu, "decode", batches.append)
    gpu.warm(8)
    assert len(batches) == 1 and len(batches[0]) == 8 and all(formats.jpeg_kind(b) == "baseline" for b in batches[0])

    def out_of_memory(blobs: list[bytes]) -> None:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(gpu, "decode", out_of_memory)
    with caplog.at_level("INFO", logger="gpuprov.images.decode"):
        gpu.warm(8)
    assert "JPEG decoder not warmed up: RuntimeError: CUDA out of memory" in caplog.text
