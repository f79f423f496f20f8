"""What a worker does with a batch of decoded images: built-in tasks and user models.

* ``stats`` - per-image size and per-channel mean/std (computed at the working size).
* ``thumbnail`` - aspect-preserving resize (long side ``size``) re-encoded as JPEG (on the GPU
  where torchvision can), written atomically under ``OUT/thumbs/<hash[:2]>/<hash>.jpg``.
* a model file - TorchScript (``.pt``/``.pts``/``.torchscript``), an exported program (``.pt2``, from
  ``torch.export.save``: the one ``torch.compile`` can compile, :mod:`gpuprov.images.compiled`) or ONNX
  (``.onnx``, needs onnxruntime): centre crop, resize, normalise, forward; the row keeps the top-5 classes.

Every task returns one JSON-able row per input, in input order. Output files are named by the
input's content hash and written to a temporary file then renamed, so a task processed twice
(after a worker was killed) leaves exactly one file with the same content.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import socket
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.images.compiled import EXPORTED_SUFFIXES, CompileChoice, CompiledStep, cache_root, compile_mode
from gpuprov.images.decode import Decoded
from gpuprov.images.fused import resize_normalise
from gpuprov.images.lazy_torch import torch_modules
from gpuprov.images.memory import check_budget
from gpuprov.images.parent_death import process_exists
from gpuprov.images.transforms import to_unit

BUILTIN_TASKS = ("stats", "thumbnail")
#: the ``path`` of a synthetic item (never a real file name: not absolute)
PROBE_PATH = "<probe>"
TORCHSCRIPT_SUFFIXES = (".pt", ".pts", ".pth", ".torchscript", ".jit")
CUDNN_AUTOTUNE_ENV = "GPUPROV_IMAGES_CUDNN_AUTOTUNE"
"""``1``: cuDNN autotunes a model's convolutions (``torch.backends.cudnn.benchmark``), ``0``: its heuristics pick
them; unset: :func:`cudnn_autotune` decides."""


log = logging.getLogger(__name__)


def writer_tag(pid: int | None = None) -> str:
    """``<host>-<pid>``: names the writer in temporary file names, so a dead writer's leftovers can be found."""
    return f"{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    The file gets mode ``0666`` less the process umask, as ``open()`` would give it (``mkstemp``
    alone makes it ``0600``). The temporary file is ``.<name>.<host>-<pid>.<random>.tmp``; a writer
    killed mid-write (kill -9) leaves it behind, and :func:`sweep_temp_files` removes it once that
    process is known dead.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{writer_tag()}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~process_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def process_umask() -> int:
    """The process umask: the ``Umask:`` line of ``/proc/self/status`` (Linux >= 4.7), else set and reset."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no other way to read it; cached, so this runs once
    os.umask(mask)
    return mask


def sweep_temp_files(out: Path, pid: int | None = None) -> int:
    """Remove the temporary files that dead writers of this host left under ``out``; returns how many.

    With ``pid``, only that process's files: call it only for a process that has exited (the supervisor
    does, before restarting a worker). Without, every file of this host whose writer process no longer
    exists (a run starting after a ``kill -9`` of the last one). Files of live processes, and of other
    hosts sharing ``out``, are kept: their tags name another host or a running process.
    """
    host = re.escape(socket.gethostname())
    tag = re.compile(rf"\.{host}-(\d+)\.[^.]+\.tmp$")
    removed = 0
    for tmp in out.rglob(f".*.{writer_tag(pid) if pid is not None else socket.gethostname() + '-*'}.*.tmp"):
        m = tag.search(tmp.name)
        if m is None or (pid is None and process_exists(int(m.group(1)))):
            continue
        tmp.unlink(missing_ok=True)
        removed += 1
    if removed:
        log.info("removed %d temporary file(s) of dead writers under %s", removed, out)
    return removed


@dataclass
class Item:
    """One input in a batch: queue task id, source path, content hash and decoded pixels."""

    task_id: str
    path: str
    sha256: str
    decoded: Decoded


class ImageTask(Protocol):
    """A task: ``process`` maps a batch of items to one row each (may raise OOM; the worker backs off)."""

    name: str
    size: int

    def process(self, items: Sequence[Item]) -> list[dict[str, Any]]: ...


def _shape(item: Item) -> dict[str, int]:
    _, h, w = item.decoded.pixels.shape
    return {"width": int(w), "height": int(h)}


class StatsTask:
    """Per-image width, height and per-channel mean/std in [0,1]."""

    name = "stats"

    def __init__(self, size: int = 256) -> None:
        self.size = size

    def process(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        check_budget(len(items), self.size)
        rows = []
        for item in items:
            x = to_unit(item.decoded, self.size, crop=False)[0]
            flat = x.reshape(3, -1)
            rows.append(
                {
                    **_shape(item),
                    "mean": [round(float(v), 6) for v in flat.mean(dim=1).tolist()],
                    "std": [round(float(v), 6) for v in flat.std(dim=1).tolist()],
                }
            )
        return rows


class ThumbnailTask:
    """Aspect-preserving JPEG thumbnails named by content hash, written atomically under ``out``."""

    name = "thumbnail"

    def __init__(self, out: Path, size: int = 256, quality: int = 85) -> None:
        self.out = out
        self.size = size
        self.quality = quality

    def process(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        torch, torchvision = torch_modules()
        check_budget(len(items), self.size)
        rows = []
        for item in items:
            x = to_unit(item.decoded, self.size, crop=False)[0]
            pix = x.mul(255.0).round_().clamp_(0, 255).to(torch.uint8)
            encoded = torchvision.io.encode_jpeg(pix, quality=self.quality)
            rel = Path("thumbs") / item.sha256[:2] / f"{item.sha256}.jpg"
            if item.path != PROBE_PATH:  # a warm-up or batch-size probe leaves no file behind
                atomic_write(self.out / rel, bytes(encoded.cpu().numpy().tobytes()))
            rows.append(
                {**_shape(item), "thumb": str(rel), "thumb_width": int(pix.shape[2]), "thumb_height": int(pix.shape[1])}
            )
        return rows


class ModelTask:
    """A TorchScript, exported (``.pt2``) or ONNX classifier: normalised ``size``^2 centre crops in, top-5 classes
    out. ``compile`` is ``--compile`` (:mod:`gpuprov.images.compiled`): an exported model on a GPU runs compiled
    for the full batch once :meth:`build_compiled` has built it. ``autotune``: cuDNN times its convolution
    algorithms for each new shape (:func:`cudnn_autotune`)."""

    name = "model"

    def __init__(self, path: Path, device: str, *, size: int = 224, half: bool | None = None, optimize: bool = True,
                 compile: str = "off", autotune: bool = True) -> None:  # fmt: skip
        torch, _ = torch_modules()
        self.size = size
        self.device = device
        self.half = device != "cpu" if half is None else half
        self.autotune = autotune
        self.onnx: Any = None
        self.module: Any = None
        self.full_batch: int | None = None
        self.compiled: CompiledStep | None = None
        self.compile_choice = compile_mode(compile, device, path.suffix in EXPORTED_SUFFIXES, torch)
        if not path.is_file():
            raise ConfigError(f"--model {path}: no such file")
        info = path.stat()  # the model file's path, size and modification time name its build and probe
        self.model_key = f"{path.resolve()}|{info.st_size}|{info.st_mtime_ns}"
        if path.suffix == ".onnx":
            self.half = False
            self.onnx = _onnx_session(path, device)
        elif path.suffix in EXPORTED_SUFFIXES:
            try:
                module = torch.export.load(str(path)).module().to(device)
            except Exception as exc:  # a bad archive raises RuntimeError, KeyError, ValueError, ...
                raise ConfigError(f"--model {path}: not a torch.export program ({type(exc).__name__}: {exc})") from exc
            if device != "cpu":
                torch.backends.cudnn.benchmark = autotune
            # exported in eval mode already (an exported program refuses .eval())
            self.module = (module.half() if self.half else module).to(memory_format=torch.channels_last)
        else:
            try:
                module = torch.jit.load(str(path), map_location=device)
            except (RuntimeError, ValueError) as exc:
                raise ConfigError(f"--model {path}: not a TorchScript file: {exc}") from exc
            module.eval()
            if device != "cpu":
                torch.backends.cudnn.benchmark = autotune
            if self.half:
                module = module.half()
            module = module.to(memory_format=torch.channels_last)
            self.module = inference_module(module) if optimize else module

    @property
    def probe_key(self) -> str:
        """What the memory a batch of this task needs depends on (the model file, input side, dtype and whether
        cuDNN autotunes, which picks convolution algorithms with other workspaces): the key under which
        :func:`~gpuprov.images.memory.auto_batch` keeps its probe's result."""
        return f"model|{self.model_key}|{self.size}|{self.half}|autotune={self.autotune}"

    def build_kernel(self) -> None:
        """Compile the fused crop+resize kernel now, on one small synthetic image, so that a worker's start-up
        shows the compile apart from the batch probe (Triton compiles a kernel on its first launch; the batch
        probe would otherwise pay for it). Nothing on a CPU, where the kernel does not run. A kernel that
        cannot be built is logged once and the reference path serves (:func:`resize_normalise`)."""
        if self.device == "cpu":
            return
        torch, _ = torch_modules()
        resize_normalise([synthetic_items(1, self.device, 64, 64)[0].decoded], self.size, half=self.half)
        torch.cuda.synchronize()

    def build_compiled(self, batch: int) -> None:
        """Compile the model for ``batch`` images where :attr:`compile_choice` says so, and run it once (the build,
        paid before the worker is ready; cached per machine). A failure is logged once and the model runs eager:
        :attr:`compile_choice` then names the failure."""
        choice = self.compile_choice
        if choice.mode is None or self.module is None:
            return
        torch, _ = torch_modules()
        step = CompiledStep(self.module, choice.mode, torch)
        dtype = torch.float16 if self.half else torch.float32
        example = torch.zeros((batch, 3, self.size, self.size), dtype=dtype, device=self.device)
        if step.build(example.contiguous(memory_format=torch.channels_last), cache_root(), self.model_key):
            self.compiled = step
        else:
            self.compile_choice = CompileChoice(None, choice.requested, f"failed: {step.failure}")

    def set_full_batch(self, batch: int) -> None:
        """The worker's batch size: shorter batches are then padded to a few fixed sizes (:meth:`padded_size`)."""
        self.full_batch = batch

    def padded_size(self, n: int) -> int:
        """The size a batch of ``n`` runs at: with cuDNN autotuning on, every new batch size costs a
        search over convolution algorithms (seconds for ResNet-50 at batch 1024), so a job's last,
        shorter batch in each worker is padded up - to the next power of two up to 128, then to the
        next multiple of 128, never beyond the worker's full batch. ``n`` itself when no full
        batch is set (CPU, ONNX) or ``n`` is the full batch."""
        full = self.full_batch
        if full is None or n >= full or self.onnx is not None:
            return n
        bucket = 1 << (n - 1).bit_length() if n <= 128 else -(-n // 128) * 128
        return min(full, bucket)

    def forward(self, batch: Any) -> Any:
        torch, _ = torch_modules()
        if self.onnx is not None:
            name = self.onnx.get_inputs()[0].name
            return torch.from_numpy(self.onnx.run(None, {name: batch.float().contiguous().cpu().numpy()})[0])
        n = int(batch.shape[0])
        size = self.padded_size(n)
        if size > n:
            batch = torch.cat([batch, batch.new_zeros((size - n, *batch.shape[1:]))]).contiguous(
                memory_format=torch.channels_last
            )
        with torch.inference_mode():
            step = self.compiled if self.compiled is not None and self.compiled.fits(batch) else self.module
            out = step(batch)
        if not isinstance(out, torch.Tensor):
            raise ConfigError(
                f"--model: forward returned {type(out).__name__}; a classifier must return one tensor of "
                "logits (batch, classes) - export the model with that single output"
            )
        return out[:n]

    def process(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        torch, _ = torch_modules()
        check_budget(len(items), self.size)
        batch = resize_normalise([item.decoded for item in items], self.size, half=self.half)
        logits = self.forward(batch).float()
        scores, classes = torch.softmax(logits.reshape(len(items), -1), dim=1).topk(min(5, logits[0].numel()))
        pairs = zip(classes.cpu().tolist(), scores.cpu().tolist(), strict=True)
        return [
            {**_shape(item), "top5": [[int(c), round(float(s), 6)] for c, s in zip(cs, ss, strict=True)]}
            for item, (cs, ss) in zip(items, pairs, strict=True)
        ]


def cudnn_autotune(follow: bool) -> bool:
    """Whether a model task on a GPU lets cuDNN autotune its convolutions (``torch.backends.cudnn.benchmark``):
    :data:`CUDNN_AUTOTUNE_ENV` ``1`` or ``0`` where set, else ``follow``. Autotuning times every algorithm once
    per new shape - seconds for ResNet-50 at a full batch, paid in each worker's batch probe and warm-up - for a
    forward a few per cent faster afterwards: a service (``--follow``) runs long enough to gain it back, a job
    measured faster end to end without it (docs/benchmarks.md).

    Raises:
        ConfigError: the variable is set to anything else (exit 2).
    """
    raw = os.environ.get(CUDNN_AUTOTUNE_ENV, "").strip()
    if not raw:
        return follow
    if raw not in ("0", "1"):
        raise ConfigError(f"{CUDNN_AUTOTUNE_ENV}={raw!r}: use 1 (cuDNN autotunes its convolutions) or 0 (its "
                          "heuristics pick them), or unset it")
    return raw == "1"


def inference_module(module: Any) -> Any:
    """A TorchScript module frozen and optimised for inference, or ``module`` as it is where that fails.

    ``torch.jit.optimize_for_inference`` freezes the module (parameters become constants) and folds
    each BatchNorm into the convolution before it (and constant add/mul), so an eval-mode
    ResNet-50 runs 53 fewer kernels per forward (one per convolution). The module must already be in eval mode, on
    its device, in its dtype and memory format: a frozen module's constants no longer follow ``.half()``
    or ``.to()``. Models that cannot be frozen (e.g. with attributes changed in ``forward``) are
    used unfrozen; the reason is logged.
    """
    torch, _ = torch_modules()
    try:
        with warnings.catch_warnings():  # torch 2.10+ marks TorchScript deprecated in favour of torch.compile
            warnings.filterwarnings("ignore", category=FutureWarning, module="torch.jit")
            return torch.jit.optimize_for_inference(module)
    except Exception as exc:  # TorchScript raises RuntimeError and others for modules it cannot freeze
        log.warning("model not frozen for inference (%s): it runs as loaded", exc)
        return module


def _onnx_session(path: Path, device: str) -> Any:
    try:
        onnxruntime = importlib.import_module("onnxruntime")
    except ImportError as exc:
        raise EnvironmentMissing(f"--model {path}: ONNX models need onnxruntime (pip install onnxruntime-gpu)") from exc
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device != "cpu" else ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(str(path), providers=providers)


def make_task(name: str | None, model: Path | None, out: Path, device: str, *, size: int | None = None,
              compile: str = "off", autotune: bool = True) -> ImageTask:  # fmt: skip
    """The task for ``--task NAME`` or ``--model PATH`` (exactly one; ``compile``: ``--compile`` and ``autotune``:
    cuDNN's autotuning, for a model); raises :class:`ConfigError`."""
    if (name is None) == (model is None):
        raise ConfigError("give exactly one of --task NAME or --model PATH")
    if model is not None:
        return ModelTask(model, device, size=size or 224, compile=compile, autotune=autotune)
    if name == "stats":
        return StatsTask(size or 256)
    if name == "thumbnail":
        return ThumbnailTask(out, size or 256)
    raise ConfigError(f"--task {name}: unknown task; choose one of {', '.join(BUILTIN_TASKS)}")


def synthetic_items(n: int, device: str, height: int = 1080, width: int = 1440) -> list[Item]:
    """``n`` random ``height`` x ``width`` images on ``device`` for warm-up, batch-size probing and
    benchmarks; their ``path`` is :data:`PROBE_PATH`, so tasks write no output file for them."""
    torch, _ = torch_modules()
    pixels = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, device=device)
    return [Item(f"probe-{i}", PROBE_PATH, "0" * 64, Decoded(pixels, 255.0)) for i in range(n)]
