"""The fused crop+resize+normalise kernel against the reference path, run in Triton's CPU interpreter.

``TRITON_INTERPRET`` is read when a kernel is defined, so the comparisons run in a child Python with it
set; the fallback rules run here, with the kernel replaced.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("triton")

from gpuprov.images import fused, transforms  # noqa: E402
from gpuprov.images.decode import Decoded  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

INTERPRETED = textwrap.dedent(
    """
    import json, sys
    import torch
    from gpuprov.images import fused, transforms
    from gpuprov.images.decode import Decoded

    assert fused.available("cpu")
    g = torch.Generator().manual_seed(int(sys.argv[1]))
    size = 16
    # sides below, at and far above size; sampling ratios 1, 2 and 4; tall, wide and square
    shapes = [(16, 16), (20, 31), (40, 25), (9, 50), (100, 80), (3, 3)]
    decs = [Decoded(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g), 255.0) for h, w in shapes]
    # an interleaved (H,W,3) buffer seen as (3,H,W), as nvImageCodec hands images over
    hwc = torch.randint(0, 256, (30, 22, 3), dtype=torch.uint8, generator=g)
    decs.append(Decoded(hwc.permute(2, 0, 1), 255.0))
    # a 16-bit image: not the kernel's, served by the reference inside resize_normalise
    wide = Decoded(torch.randint(0, 65536, (3, 24, 24), dtype=torch.int32, generator=g), 65535.0)
    out = {"ratios": [fused.sampling_ratio(min(h, w), size) for h, w in shapes]}
    for half in (False, True):
        ref = transforms.normalise(transforms.crop_resize_batch(decs, size), half=half).float()
        got = fused.crop_resize_normalise(decs, size, half=half)
        out[f"layout_{half}"] = [got.is_contiguous(memory_format=torch.channels_last), str(got.dtype), list(got.shape)]
        out[f"err_{half}"] = (got.float() - ref).abs().max().item()
        out[f"finite_{half}"] = bool(torch.isfinite(got).all())
    mixed = [decs[0], wide, decs[4]]
    both = fused.resize_normalise(mixed, size, half=False)
    alone = [fused.resize_normalise([d], size, half=False)[0] for d in mixed]
    out["mixed_vs_alone"] = max((both[i] - a).abs().max().item() for i, a in enumerate(alone))
    ref = transforms.normalise(transforms.crop_resize_batch(mixed, size), half=False)
    out["mixed_vs_reference"] = (both - ref).abs().max().item()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("seed", [1, 2])
def test_kernel_matches_the_reference_in_the_interpreter(seed: int) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, "-c", INTERPRETED, str(seed)]
    proc = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["ratios"] == [1, 1, 2, 1, 4, 1]
    # on the CPU the reference samples in float32 too: the same function to float rounding
    assert res["err_False"] < 1e-5, res
    # fp16 output: one rounding of values within about +-2.7 (ImageNet-normalised)
    assert res["err_True"] < 4e-3, res
    assert res["layout_False"] == [True, "torch.float32", [7, 3, 16, 16]]
    assert res["layout_True"] == [True, "torch.float16", [7, 3, 16, 16]]
    assert res["finite_False"] and res["finite_True"]
    # an image's result does not depend on its batch: 8-bit ones on the kernel, the 16-bit one not
    assert res["mixed_vs_alone"] == 0.0, res
    assert res["mixed_vs_reference"] < 1e-5, res


COMPILE = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from gpuprov.images import fused

    sig = {"src": "*u8", "meta": "*i64", "out": "*" + __import__("sys").argv[1], "mean0": "fp32", "mean1": "fp32",
           "mean2": "fp32", "inv_std0": "fp32", "inv_std1": "fp32", "inv_std2": "fp32",
           "SIZE": "constexpr", "BLOCK": "constexpr", "COLS": "constexpr"}
    consts = {"SIZE": 224, "BLOCK": fused.BLOCK, "COLS": fused.META_COLUMNS}
    compiled = triton.compile(ASTSource(fn=fused._crop_resize_normalise_kernel, signature=sig, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32))
    print(len(compiled.asm["cubin"]))
    """
)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_kernel_compiles_for_hopper_without_a_gpu(dtype: str, tmp_path: Any) -> None:
    """The interpreter runs Python; the GPU path lowers the kernel through Triton's compiler, which is
    stricter. Triton's wheel carries ptxas, so the H100/H200 (sm_90) machine code is built here."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    env.pop("TRITON_INTERPRET", None)
    argv = [sys.executable, "-c", COMPILE, dtype]
    proc = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip().splitlines()[-1]) > 1000, "no machine code came out"


def _decs() -> list[Decoded]:
    g = torch.Generator().manual_seed(3)
    return [Decoded(torch.randint(0, 256, (3, 20, 30), dtype=torch.uint8, generator=g), 255.0) for _ in range(3)]


def test_a_kernel_that_cannot_run_falls_back_once_and_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def broken(decs: Any, size: int, *, half: bool) -> Any:
        calls.append(len(decs))
        raise RuntimeError("Failed to find C compiler")

    monkeypatch.setattr(fused, "available", lambda device: True)
    monkeypatch.setattr(fused, "crop_resize_normalise", broken)
    monkeypatch.setattr(fused.KERNEL, "failed", None)
    decs = _decs()
    ref = transforms.normalise(transforms.crop_resize_batch(decs, 8), half=False)
    with caplog.at_level(logging.WARNING, logger="gpuprov.images.fused"):
        first = fused.resize_normalise(decs, 8, half=False)
        second = fused.resize_normalise(decs, 8, half=False)
    assert torch.equal(first, ref) and torch.equal(second, ref)
    assert calls == [3], "after the first failure the kernel is not tried again"
    assert fused.KERNEL.failed is not None and "C compiler" in fused.KERNEL.failed
    assert [r.getMessage() for r in caplog.records if "fused" in r.getMessage()] == [
        "fused crop+resize kernel unavailable, using roi_align: RuntimeError: Failed to find C compiler"
    ]


def test_out_of_memory_in_the_kernel_is_raised_for_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(decs: Any, size: int, *, half: bool) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(fused, "available", lambda device: True)
    monkeypatch.setattr(fused, "crop_resize_normalise", oom)
    monkeypatch.setattr(fused.KERNEL, "failed", None)
    with pytest.raises(torch.OutOfMemoryError):
        fused.resize_normalise(_decs(), 8, half=False)
    assert fused.KERNEL.failed is None, "an OOM says nothing about the kernel: it stays in use"


def test_cpu_without_the_interpreter_uses_the_reference() -> None:
    if fused.interpreted():
        pytest.skip("TRITON_INTERPRET is set for this whole run")
    assert not fused.available("cpu")
    decs = _decs()
    ref = transforms.normalise(transforms.crop_resize_batch(decs, 8), half=False)
    assert torch.equal(fused.resize_normalise(decs, 8, half=False), ref)


def test_bad_input_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="at least one image"):
        fused.resize_normalise([], 8, half=False)
    gray = Decoded(torch.zeros((1, 8, 8), dtype=torch.uint8), 255.0)
    with pytest.raises(ValueError, match=r"image 0: .*8-bit RGB"):
        fused.crop_resize_normalise([gray], 8, half=False)
    empty = Decoded(torch.zeros((3, 5, 0), dtype=torch.uint8), 255.0)
    with pytest.raises(ValueError, match=r"image 0: .*non-empty"):
        fused.crop_resize_normalise([empty], 8, half=False)
    for size in (0, fused.MAX_SIZE + 1):
        with pytest.raises(ValueError, match=r"outside 1\.\.4095"):
            fused.crop_resize_normalise(_decs(), size, half=False)


def test_what_the_kernel_cannot_take_goes_to_the_reference_without_disabling_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty image (its own error, from the reference) and an output side beyond the kernel's grid
    limit take the reference path; the kernel stays in use for the next batch."""
    seen: list[int] = []

    def kernel(decs: Any, size: int, *, half: bool) -> Any:
        seen.append(len(decs))
        return transforms.normalise(transforms.crop_resize_batch(decs, size), half=half)

    monkeypatch.setattr(fused, "available", lambda device: True)
    monkeypatch.setattr(fused, "crop_resize_normalise", kernel)
    monkeypatch.setattr(fused.KERNEL, "failed", None)
    empty = Decoded(torch.zeros((3, 5, 0), dtype=torch.uint8), 255.0)
    with pytest.raises(RuntimeError):
        fused.resize_normalise([*_decs(), empty], 8, half=False)
    assert seen == [3] and fused.KERNEL.failed is None
    monkeypatch.setattr(fused, "MAX_SIZE", 4)
    fused.resize_normalise(_decs(), 8, half=False)
    assert seen == [3], "a size beyond the grid limit is not sent to the kernel"
    with pytest.raises(ValueError, match="size 0"):
        fused.resize_normalise(_decs(), 0, half=False)


def test_hash_compiler_leaves_tritons_cache_key_computed_for_the_first_launch() -> None:
    """What a kernel's first launch would hash (Triton's compiler, ~500 MB) is kept in the process afterwards, so the
    fork server's children and a worker's kernel phase find it done; a child Python, so the key is not yet there."""
    code = textwrap.dedent("""
        from triton.runtime.cache import triton_key
        from gpuprov.images import fused
        assert triton_key.cache_info().currsize == 0
        fused.hash_compiler()
        assert triton_key.cache_info().currsize == 1
        triton_key()
        print(triton_key.cache_info().hits)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "1"


def test_hash_compiler_never_raises(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """It runs in a thread of its own (a traceback there would only be noise in the run's log): a compiler library
    that cannot be read is logged, and left to the kernel's first launch, which falls back to the reference."""
    from triton.runtime import cache

    def missing() -> str:
        raise FileNotFoundError(2, "No such file or directory", "libtriton.so")

    monkeypatch.setattr(cache, "triton_key", missing)
    with caplog.at_level(logging.INFO, logger="gpuprov.images.fused"):
        fused.hash_compiler()
    assert "Triton's compiler not hashed ahead: FileNotFoundError" in caplog.text
    # a damaged install whose module fails to import with something other than ImportError
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", None)  # `from ... import` then raises ImportError
    fused.hash_compiler()
    def unreadable(name: str) -> object:
        raise OSError(5, "Input/output error")

    broken = type(sys)("triton.runtime.cache")
    broken.__getattr__ = unreadable  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", broken)
    with caplog.at_level(logging.INFO, logger="gpuprov.images.fused"):
        fused.hash_compiler()
    assert "Triton's compiler not hashed ahead: OSError" in caplog.text


def test_a_triton_that_fails_to_import_leaves_the_reference_path(tmp_path: Path) -> None:
    """A damaged Triton whose import raises something other than ImportError (here OSError, as a shared library that
    cannot be read gives): the module still imports, says why once, and reports the kernel unavailable, so the
    workers take the reference crop-resize instead of failing to start."""
    fake = tmp_path / "triton"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise OSError(5, 'Input/output error', 'libtriton.so')\n", encoding="utf-8")
    code = "from gpuprov.images import fused; print(fused.triton is None, fused.available('cpu'))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "False"]
    assert "Triton cannot be imported (OSError: [Errno 5] Input/output error: 'libtriton.so')" in proc.stderr
