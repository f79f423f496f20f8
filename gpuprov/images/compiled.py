"""The compiled model step: ``torch.compile`` of an exported model for the worker's full batch, its build cached
once per machine, with the eager model as the fallback.

``--compile`` (:data:`COMPILE_MODES`): ``off``; ``default`` or ``reduce-overhead`` (``torch.compile``'s modes: the
second also records the model as a CUDA graph, replayed for each batch); ``auto`` (the default) is ``default``
for an exported model (``.pt2``, ``torch.export``) on a GPU and ``off`` on a CPU (compiling takes minutes there
and is not what a CPU run is for) and for TorchScript, which ``torch.compile`` cannot compile (export the model
with ``torch.export.save`` to get the compiled path). :func:`compile_mode` decides.

The compiled module is built for one shape, the worker's full batch (``dynamic=False``): other sizes (the batch
probe, a job's last short batch, a batch halved after an out-of-memory error) run the eager module, so a job
never waits for a compile in its middle. The build (``torch.compile``'s first call) happens before the worker
reports ready, in its ``compile`` start-up phase (:mod:`gpuprov.images.startup`).

Caches (:func:`configure_caches`): PyTorch's persistent caches - Inductor's FX graph cache and AOTAutograd cache
(``TORCHINDUCTOR_FX_GRAPH_CACHE``, ``TORCHINDUCTOR_AUTOGRAD_CACHE``) under ``TORCHINDUCTOR_CACHE_DIR``, Triton's
kernels under ``TRITON_CACHE_DIR`` - go under one gpuprov cache folder (:data:`CACHE_ENV`, else
``$XDG_CACHE_HOME/gpuprov`` or ``~/.cache/gpuprov``; the image_workers role's units use
``/var/cache/gpuprov-worker``). The first build of a model, shape and mode on a machine holds a lock on
``<cache>/compile.lock`` (``flock``) and leaves a marker ``<cache>/built-<key>`` when it succeeded, so of the
workers that start together one compiles while the others wait, then they load what it cached side by side: the
build is paid once per machine and model, not per worker or job. The modular caches on disk are enough on one machine
(https://docs.pytorch.org/tutorials/recipes/torch_compile_caching_configuration_tutorial.html); PyTorch's
"Mega-Cache" (``torch.compiler.save_cache_artifacts``) is for carrying them to other machines and is not used.

A compile that fails (no compiler, an operator Inductor cannot lower, out of memory) is logged in one line and
the worker goes on with the eager module; it never fails the job.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError

log = logging.getLogger(__name__)

COMPILE_MODES = ("auto", "off", "default", "reduce-overhead")
"""The choices of ``--compile``."""
EXPORTED_SUFFIXES = (".pt2",)
"""Model files ``torch.export.load`` reads (``torch.export.save``): the models the compiled path can take."""
CACHE_ENV = "GPUPROV_IMAGES_CACHE_DIR"
"""The folder of the workers' compile caches (see the module docstring)."""
COMPILE_ENV = "GPUPROV_IMAGES_COMPILE"
"""The default of ``gpuprov images run --compile`` (one of :data:`COMPILE_MODES`)."""


@dataclass(frozen=True)
class CompileChoice:
    """What a worker does about compiling: ``mode`` (``default``, ``reduce-overhead``, or None: eager), the
    ``requested`` option and the ``reason`` for ``mode``, one short phrase."""

    mode: str | None
    requested: str
    reason: str


def may_compile(model: str | Path | None, requested: str) -> bool:
    """Whether a worker of ``model`` with ``--compile requested`` may ``torch.compile`` it: an exported (``.pt2``)
    model with compile not ``off``. Such a worker points the compile caches before importing torch
    (:func:`configure_caches`)."""
    return model is not None and requested != "off" and Path(model).suffix in EXPORTED_SUFFIXES


def check_compile_option(requested: str, model: Path | None) -> None:
    """Raise :class:`ConfigError` (exit 2) for a ``--compile`` that is not one of :data:`COMPILE_MODES`, or a
    compile mode asked for by name (``default``, ``reduce-overhead``) with a model ``torch.compile`` cannot
    take (a TorchScript or ONNX file, a built-in task)."""
    if requested not in COMPILE_MODES:
        raise ConfigError(f"--compile {requested}: expected one of {', '.join(COMPILE_MODES)}")
    if requested in ("auto", "off") or (model is not None and model.suffix in EXPORTED_SUFFIXES):
        return
    what = f"--model {model}" if model is not None else "a built-in --task"
    raise ConfigError(
        f"--compile {requested}: {what} cannot be compiled; torch.compile takes an exported model "
        "(torch.export.save(torch.export.export(model, (example,)), 'model.pt2')), or use --compile auto"
    )


def compile_mode(requested: str, device: str, exported: bool, torch: Any) -> CompileChoice:
    """What ``--compile requested`` means for a worker on ``device`` (``cuda`` or ``cpu``) with a model that is
    ``exported`` (a ``.pt2`` file) or not, given the ``torch`` module: ``auto`` compiles (mode ``default``) an
    exported model on a GPU where ``torch.compile`` exists; a mode given by name compiles wherever the model is
    exported (a CPU too: tests, or a user who asks); everything else runs eager."""
    if requested == "off":
        return CompileChoice(None, requested, "--compile off")
    if not exported:
        return CompileChoice(None, requested, "not an exported .pt2 model")
    if not callable(getattr(torch, "compile", None)):
        return CompileChoice(None, requested, f"torch {getattr(torch, '__version__', '?')} has no torch.compile")
    if requested == "auto":
        if device == "cpu":
            return CompileChoice(None, requested, "a CPU run")
        return CompileChoice("default", requested, "auto on a GPU")
    return CompileChoice(requested, requested, f"--compile {requested}")


def cache_root() -> Path:
    """The gpuprov compile cache folder: ``$GPUPROV_IMAGES_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpuprov``, else
    ``~/.cache/gpuprov``."""
    if given := os.environ.get(CACHE_ENV):
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuprov"


def configure_caches(root: Path | None = None) -> Path:
    """Point PyTorch's persistent compile caches under ``root`` (default :func:`cache_root`; created, mode 0700
    when new) for this process and the processes it starts, unless already set in the environment:
    ``TORCHINDUCTOR_CACHE_DIR=root/inductor``, ``TRITON_CACHE_DIR=root/triton``, ``TORCHINDUCTOR_FX_GRAPH_CACHE=1``,
    ``TORCHINDUCTOR_AUTOGRAD_CACHE=1``. Call it before torch is imported (Inductor reads its flags then).
    Returns ``root``. A root that cannot be created is logged and left to PyTorch's own defaults."""
    root = root or cache_root()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("compile cache %s cannot be created (%s); PyTorch's default cache folders are used", root, exc)
        return root
    for name, value in (("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor")), ("TRITON_CACHE_DIR", str(root / "triton")),
                        ("TORCHINDUCTOR_FX_GRAPH_CACHE", "1"), ("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")):  # fmt: skip
        os.environ.setdefault(name, value)
    return root


@contextlib.contextmanager
def build_lock(root: Path, key: str = "") -> Iterator[None]:
    """Hold ``flock`` on ``root/compile.lock`` for the first build of ``key`` (a model, shape and mode) on this
    machine: the workers starting together wait for it. Once a build of ``key`` succeeded (the marker
    ``root/built-<key>`` exists, written when the body ends without an error) the lock is let go at once, so the
    later workers load the cached build side by side. Without a writable ``root`` no lock is taken."""
    try:
        fd = os.open(root / "compile.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    marker = root / f"built-{key}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if key and marker.exists():
            os.close(fd)  # built before: the caches serve it, no need to queue
            fd = -1
        yield
        if key and fd >= 0:
            with contextlib.suppress(OSError):
                marker.touch()
    finally:
        if fd >= 0:
            os.close(fd)  # closing the descriptor releases the lock


class CompiledStep:
    """The compiled forward of ``module`` (eval mode, on its device, dtype and memory format) for one batch shape.

    :meth:`build` compiles and runs it once on zeros of the full batch; :meth:`__call__` runs it. ``ready`` is
    False until a build succeeded and after one failed (the reason in ``failure``)."""

    def __init__(self, module: Any, mode: str, torch: Any) -> None:
        self.module = module
        self.mode = mode
        self.torch = torch
        self.shape: tuple[int, ...] | None = None
        self.fn: Any = None
        self.failure: str | None = None

    @property
    def ready(self) -> bool:
        return self.fn is not None

    def build(self, example: Any, root: Path, model_key: str = "") -> bool:
        """Compile for ``example``'s shape (a ``(batch, 3, size, size)`` tensor) and run it once, under
        :func:`build_lock` keyed by ``model_key`` (what identifies the model file), the shape, dtype, mode, device
        and torch version. Returns whether it worked; on any error logs one line, keeps the reason in ``failure``
        and leaves the step unready (the caller runs the eager module)."""
        torch = self.torch
        device = torch.cuda.get_device_name(example.device) if example.is_cuda else "cpu"
        key = hashlib.sha256(
            f"{model_key}|{tuple(example.shape)}|{example.dtype}|{self.mode}|{device}|{torch.__version__}".encode()
        ).hexdigest()
        try:
            with build_lock(root, key):
                fn = torch.compile(self.module, mode=self.mode, dynamic=False)
                with torch.inference_mode():
                    self._mark_step()
                    fn(example)
                if example.is_cuda:
                    torch.cuda.synchronize()
        except Exception as exc:  # Inductor and Triton raise many kinds (BackendCompilerFailed, OOM, ...)
            self.failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            log.warning("torch.compile (mode %s) failed, running the model uncompiled: %s", self.mode, self.failure)
            return False
        self.fn, self.shape = fn, tuple(example.shape)
        return True

    def fits(self, batch: Any) -> bool:
        """Whether ``batch`` has the shape the step was built for."""
        return self.fn is not None and tuple(batch.shape) == self.shape

    def __call__(self, batch: Any) -> Any:
        self._mark_step()
        return self.fn(batch)

    def _mark_step(self) -> None:
        # CUDA graphs (reduce-overhead) reuse their output buffers: a new step tells them the last outputs are done
        if self.mode == "reduce-overhead":
            self.torch.compiler.cudagraph_mark_step_begin()
