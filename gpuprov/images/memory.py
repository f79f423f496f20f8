"""Device memory per batch: out-of-memory detection, halving the batch on OOM, the automatic batch size
and the memory budget that stands in for device memory on a CPU (tests, CI).

Sizes are in bytes; a batch size is a number of images.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gpuprov.images.compiled import cache_root
from gpuprov.images.lazy_torch import torch_modules

log = logging.getLogger(__name__)

AUTO_PROBE_BATCH = 8
"""Images in the probe batch that :func:`auto_batch` measures."""
AUTO_HEADROOM = 0.8
"""Fraction of free device memory the automatic batch may plan to use (the rest is headroom)."""
AUTO_MAX_BATCH = 1024
"""Largest batch :func:`auto_batch` gives, images."""
CPU_DEFAULT_BATCH = 32
"""The automatic batch on a CPU, images (no allocator peak to measure there)."""
MEM_BUDGET_ENV = "GPUPROV_IMAGES_MEM_BUDGET"
"""Bytes one batch may use, estimated; above it the batch raises :class:`BudgetExceeded` (tests, CPU)."""

T = TypeVar("T")
R = TypeVar("R")


class BudgetExceeded(MemoryError):
    """A batch's estimated memory exceeds ``$GPUPROV_IMAGES_MEM_BUDGET``: handled like CUDA OOM."""


def check_budget(n: int, size: int, bytes_per_pixel: int = 4 * 64) -> None:
    """Raise :class:`BudgetExceeded` if ``n`` images of ``size``^2 pixels (3 channels) would exceed the
    budget of :data:`MEM_BUDGET_ENV` bytes; nothing when it is unset.

    The estimate (``n * 3 * size**2 * bytes_per_pixel`` bytes: ``bytes_per_pixel`` per input value for
    activations) stands in for device memory on CPU, so the backoff path can be tested without a GPU.
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
    """Runs ``fn`` over items in chunks of the current batch size (images), halving it on OOM and retrying.

    ``batch`` only shrinks (a later call keeps the smaller size); an OOM at batch size 1 is raised.
    """

    def __init__(self, batch: int) -> None:
        self.batch = max(1, batch)
        self.halvings = 0

    def run(self, items: Sequence[T], fn: Callable[[Sequence[T]], list[R]]) -> list[R]:
        """``fn`` over ``items`` in chunks of at most :attr:`batch` items; the chunks' results concatenated in order."""
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


def auto_batch(device: str, probe: Callable[[int], object], *, free_bytes: int | None = None, share: int = 1,
               cache_key: str | None = None, before_probe: Callable[[], object] | None = None) -> int:  # fmt: skip
    """A safe maximum batch: run ``probe(AUTO_PROBE_BATCH)``, read the peak memory, scale with headroom.

    On CUDA: ``per_image = (max_memory_allocated after the probe - allocated before) / probe batch``
    (bytes) and ``batch = floor(free / share * AUTO_HEADROOM / per_image)`` (``free``: ``free_bytes``,
    default the device's free memory; ``share``: worker processes on the device, which split its free
    memory), rounded down to a multiple of 8 and capped at ``AUTO_MAX_BATCH``. With ``cache_key`` (what the
    probe's memory depends on: the model file, input side, dtype) ``per_image`` is kept in the compile cache
    folder per key, GPU model and torch version, and a worker that finds it there skips the probe (its first
    batch of a new shape pays cuDNN's autotuning, seconds). ``before_probe`` is called just before a probe runs
    (to end other work on the device, whose allocations would count in the peak). On CPU there is no allocator
    peak: the result is ``CPU_DEFAULT_BATCH`` (or what the memory budget allows).
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
    record = _probe_record(cache_key, torch) if cache_key else None
    per_image = _read_per_image(record)
    if per_image is None:
        if before_probe is not None:
            before_probe()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        probe(AUTO_PROBE_BATCH)
        torch.cuda.synchronize()
        per_image = max(1, (torch.cuda.max_memory_allocated() - before) // AUTO_PROBE_BATCH)
        _write_per_image(record, per_image)
    if free_bytes is None:
        free_bytes, _total = torch.cuda.mem_get_info()
    batch = int(free_bytes // max(1, share) * AUTO_HEADROOM // per_image)
    batch = min(AUTO_MAX_BATCH, max(AUTO_PROBE_BATCH, batch - batch % 8))
    log.info(
        "auto batch: %d bytes/image at probe %d, %d free -> batch %d", per_image, AUTO_PROBE_BATCH, free_bytes, batch
    )
    return batch


def _probe_record(cache_key: str, torch: Any) -> Path:
    """The file that keeps the probe's bytes per image for ``cache_key`` on this GPU model and torch version."""
    gpu = torch.cuda.get_device_name()
    digest = hashlib.sha256(f"{cache_key}|{gpu}|{torch.__version__}".encode()).hexdigest()[:32]
    return cache_root() / f"probe-{digest}.json"


def _read_per_image(record: Path | None) -> int | None:
    """The bytes per image a previous probe recorded in ``record``; None when there is none or it is unreadable."""
    if record is None:
        return None
    try:
        value = json.loads(record.read_text(encoding="utf-8")).get("per_image_bytes")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _write_per_image(record: Path | None, per_image: int) -> None:
    """Keep ``per_image`` in ``record`` (written whole, then renamed in); a folder that cannot be written is
    logged and left: the next worker probes again."""
    if record is None:
        return
    tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    try:
        record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"per_image_bytes": per_image}), encoding="utf-8")
        tmp.replace(record)
    except OSError as exc:
        log.info("batch probe result not kept in %s: %s", record, exc)
