"""One worker process per device, fed by the shared queue (its supervisor: :mod:`gpuprov.images.supervisor`).

The process is pinned to one device (:mod:`gpuprov.images.slots`) and runs its loop in stages, most in
threads of their own (:mod:`gpuprov.images.stages`). It is started as ``python -m gpuprov.images.worker``
and reads its :class:`WorkerConfig` as one JSON line from stdin (not from argv, which ``ps`` shows to every
user: the queue URL may carry a password); events go to stdout as JSON lines (``start``,
``progress``, ``error``, ``exit``), and the exit code says whether a restart can help.

Guarantees: a worker claims ``batch`` tasks with a lease, a thread renews the leases while it works,
output files are written atomically under names derived from the input's content hash, and result
rows go to the queue's idempotent :meth:`complete`. ``kill -9`` of a worker loses nothing (its
leases expire and another worker takes the tasks) and duplicates nothing (one row per task, one
file per content hash). The supervisor restarts a worker that died, and at the end the CLI writes the
manifest (:mod:`gpuprov.images.manifest`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpuprov.exceptions import EXIT_ENVIRONMENT, EXIT_USAGE, EnvironmentMissing, GpuprovError
from gpuprov.images.compiled import configure_caches, may_compile
from gpuprov.images.decode import Decoder
from gpuprov.images.forkserver import PIDFD_ENV, say_exit
from gpuprov.images.formats import DEFAULT_MAX_PIXELS
from gpuprov.images.fused import hash_compiler
from gpuprov.images.lazy_torch import torch_modules
from gpuprov.images.memory import Backoff, auto_batch
from gpuprov.images.parent_death import sigterm_on_parent_death
from gpuprov.images.queue import QueueLost, QueueMissing, QueueUnavailable, open_queue
from gpuprov.images.slots import Slot, self_check
from gpuprov.images.stages import STAGE_KEYS, Committer, LeaseKeeper, claims, decode_ahead, prefetch, process_batch
from gpuprov.images.startup import Startup
from gpuprov.images.tasks import ImageTask, cudnn_autotune, make_task, synthetic_items

log = logging.getLogger(__name__)

EXIT_QUEUE_DOWN = 75
"""A worker's exit code when the queue's store cannot be reached (``EX_TEMPFAIL``): the supervisor restarts
it after a back-off (:mod:`gpuprov.images.supervisor`)."""
SUPERVISOR_ENV = "GPUPROV_SUPERVISOR_PID"
"""Environment variable with the supervisor's pid, which a worker checks once it has asked to die with it."""


def task_label(task: str | None, model: str | None) -> str:
    """What made a result row, as its ``task`` field records it: the built-in task's name, or
    ``model:<file name>`` for a user model."""
    return task or f"model:{Path(model or '').name}"


@dataclass
class WorkerConfig:
    """What one worker process needs; crosses the process boundary as JSON."""

    queue: str
    out: str
    task: str | None = None
    model: str | None = None
    batch: int | None = None  # None: auto
    size: int | None = None
    lease_s: float = 60.0
    threads: int = 4
    slot: Slot = field(default_factory=lambda: Slot("cpu0"))
    follow: bool = False  # keep waiting for new tasks when the queue is drained (a service)
    poll_s: float = 1.0  # how often an idle worker looks for new tasks, seconds
    jpeg: str = "torchvision"  # baseline JPEG decoder on a GPU: torchvision, nvimgcodec or auto (see Decoder)
    max_pixels: int = DEFAULT_MAX_PIXELS  # an image declaring more is failed undecoded (see Decoder)
    compile: str = "auto"  # torch.compile of an exported model: auto, off, default, reduce-overhead (compiled.py)


WARMUP_SIDE = 256
"""Side in pixels of the synthetic images a GPU worker runs one full batch of before it reports ready."""
DECODER_WARMUP_IMAGES = 256
"""Images in the JPEG decoder's warm-up batch (:meth:`Decoder.warm`). Most of its cost is fixed (nvJPEG's handle
and first call); a full batch's worth took longer with eight workers starting at once, and a smaller one leaves
more growth to the job's first batches (docs/benchmarks.md)."""


def _join(thread: threading.Thread) -> None:
    if thread.is_alive():
        thread.join()


def prepare(cfg: WorkerConfig, startup: Startup) -> tuple[str, ImageTask, Backoff, Decoder]:
    """A worker's start-up up to its first claim, each phase marked in ``startup`` as it ends (the phases:
    :mod:`gpuprov.images.startup`): import torch, open and check the device, make the task (load and freeze a
    model), build its kernel, probe the batch size, compile the model for that batch (``--compile``) and run the
    first batch, and beside it the JPEG decoder's first batch. Returns the device (``cuda`` or ``cpu``), the task,
    the batch size's :class:`Backoff` and the :class:`Decoder` (the caller closes it)."""
    if may_compile(cfg.model, cfg.compile):
        configure_caches()  # before torch is imported: Inductor reads its cache flags then
    torch_modules()
    startup.mark("imports")
    # the fused kernel's first launch (GPU model tasks) hashes Triton's compiler first: done beside the device's
    # and the model's set-up, not after them (nothing left to do in a worker the fork server forked)
    hashing = None
    if cfg.slot.uuid and cfg.model:
        hashing = threading.Thread(target=hash_compiler, name="hash-compiler", daemon=True)
        hashing.start()
    device = self_check(cfg.slot)
    startup.mark("device")
    decoder = Decoder(device, cfg.threads, jpeg=cfg.jpeg, max_pixels=cfg.max_pixels)
    # the decoder's first batch makes nvJPEG's handle and buffers (seconds with 8 workers starting at once): a
    # synthetic one now, in a thread beside the model's load and first batch, not in the job's first batch
    warming = threading.Thread(target=decoder.warm, args=(DECODER_WARMUP_IMAGES,), name="decode-warm", daemon=True)
    if device != "cpu":
        warming.start()
    try:
        task = make_task(cfg.task, Path(cfg.model) if cfg.model else None, Path(cfg.out), device, size=cfg.size,
                         compile=cfg.compile, autotune=cudnn_autotune(cfg.follow))  # fmt: skip
        startup.mark("model")
        if hashing is not None:
            hashing.join()
        build_kernel = getattr(task, "build_kernel", None)
        if build_kernel is not None:
            build_kernel()
        startup.mark("kernel")
        # a probe reads the allocator's peak: the decoder's batch must not run beside it
        batch = cfg.batch or auto_batch(device, lambda n: task.process(synthetic_items(n, device)),
                                        share=cfg.slot.share, cache_key=getattr(task, "probe_key", None),
                                        before_probe=lambda: _join(warming))  # fmt: skip
        startup.mark("probe")
        build_compiled = getattr(task, "build_compiled", None)
        if build_compiled is not None:
            build_compiled(batch)
        startup.mark("compile")
        backoff = Backoff(batch)
        # Warm up before the first claim: the first batch of a fresh process pays the lazy imports and kernel
        # set-up (seconds on a CPU), and a worker killed then must not have a task charged for it (a task
        # reclaimed alone after a crash is charged a crash of the worker holding it). On a GPU, cuDNN also
        # autotunes the full batch's shapes now, not in the first job's first batch.
        if device == "cpu":
            task.process(synthetic_items(1, device, 32, 32))
        else:
            backoff.run(synthetic_items(backoff.batch, device, WARMUP_SIDE, WARMUP_SIDE), task.process)
            set_full_batch = getattr(task, "set_full_batch", None)
            if set_full_batch is not None:
                set_full_batch(backoff.batch)
    except BaseException:  # a failed start leaves no thread inside nvJPEG, nor a decoder, as the process exits
        _join(warming)
        decoder.close()
        raise
    _join(warming)
    startup.mark("warmup")
    return device, task, backoff, decoder


def worker_main(cfg: WorkerConfig, emit: Callable[[dict[str, Any]], None], startup: Startup | None = None) -> None:
    """Process tasks until the queue is drained (with ``cfg.follow``: until the process is stopped).

    ``emit`` receives the events as JSON-able dicts: ``start`` once ready (worker name, device, batch size, and
    the ``startup`` marks: phase -> ``time.monotonic()`` at its end, see :mod:`gpuprov.images.startup`), one
    ``progress`` per batch written (counts so far, and the seconds per stage, see :mod:`gpuprov.images.stages`),
    and ``exit``. ``startup`` holds the marks made before this call (the process's start); without it the
    ``process`` phase ends now."""
    if startup is None:
        startup = Startup()
        startup.mark("process")
    device, task, backoff, decoder = prepare(cfg, startup)
    name = f"{os.uname().nodename}:{cfg.slot.name}:{os.getpid()}"
    try:
        queue = open_queue(cfg.queue, create=False)  # the run opened (or made) it before starting workers
    except QueueMissing as exc:
        raise QueueLost(
            "the queue is gone since the run started (a Redis server restarted without persistence, or the queue "
            "file was removed); its tasks are lost"
        ) from exc
    keeper = LeaseKeeper(queue, name, cfg.lease_s)
    keeper.start()
    timing = dict.fromkeys(STAGE_KEYS, 0.0)
    committer = Committer(queue, name, keeper, emit, timing)
    committer.start()
    startup.mark("queue")
    emit({"event": "start", "worker": name, "device": device, "uuid": cfg.slot.uuid, "batch": backoff.batch,
          "jpeg": decoder.jpeg, "startup": startup.marks, "compile": compile_report(task)})  # fmt: skip
    try:
        claimed = prefetch(claims(queue, name, lambda: backoff.batch, keeper, cfg.follow, cfg.poll_s, timing))
        batches = prefetch(decode_ahead(claimed, decoder, timing), depth=1)
        while True:
            t0 = time.perf_counter()
            ready = next(batches, None)
            timing["wait_s"] += time.perf_counter() - t0
            if ready is None:
                break
            ok, bad = process_batch(ready, task, backoff, timing, task_label(cfg.task, cfg.model))
            committer.put(ok, bad, [t.id for t, _ in ready.claimed.entries], backoff.batch)
        committer.close()
    finally:
        committer.close(check=False)
        keeper.stop.set()
        decoder.close()
        queue.close()
    emit({"event": "exit", "done": committer.done, "failed": committer.failed})


def compile_report(task: ImageTask) -> dict[str, Any] | None:
    """The ``compile`` of a worker's ``start`` event: ``{"mode", "requested", "reason"}`` of a model task
    (:class:`~gpuprov.images.compiled.CompileChoice`; ``mode`` None: eager), None for a built-in task."""
    choice = getattr(task, "compile_choice", None)
    return None if choice is None else {"mode": choice.mode, "requested": choice.requested, "reason": choice.reason}


PROFILE_ENV = "GPUPROV_IMAGES_PROFILE"
"""A folder: each worker then runs under cProfile and writes ``<folder>/worker-<pid>.prof`` (benchmarks)."""


def preload() -> None:
    """Import what a worker imports before it opens its device: torch and torchvision (:func:`torch_modules`) and
    the fused kernel's module (Triton), and hash Triton's compiler (:func:`~gpuprov.images.fused.hash_compiler`).
    The fork server calls it (:mod:`gpuprov.images.forkserver`). Raises
    :class:`EnvironmentMissing` where that initialised CUDA, which a forked child could not use."""
    torch, _ = torch_modules()
    hash_compiler()
    if torch.cuda.is_initialized():
        raise EnvironmentMissing("CUDA was initialised while importing what a worker needs; a fork server's children "
                                 "could not use it")  # fmt: skip


def die_with_supervisor() -> None:
    """Ask the kernel for SIGTERM when the supervisor's thread that started this process ends
    (``prctl(PR_SET_PDEATHSIG)``), then exit at once if the supervisor named in :data:`SUPERVISOR_ENV`
    already died before that request (this process's parent is then another one). A worker the fork server
    started (its parent is the server) watches the pidfd of its run that :data:`PIDFD_ENV` names instead, and sends
    itself SIGTERM when the run ends (at once if it already has)."""
    if (pidfd := os.environ.pop(PIDFD_ENV, None)) is not None:
        _sigterm_when_readable(int(pidfd))
        return
    try:
        if sigterm_on_parent_death()() != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:  # not Linux
        log.warning("cannot ask to die with the supervisor: %s", exc)
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if supervisor and os.getppid() != int(supervisor):
        sys.exit("gpuprov image worker: its supervisor exited before it started")


def _sigterm_when_readable(pidfd: int) -> None:
    """Send this process SIGTERM, from a daemon thread, once ``pidfd`` is readable (its process has exited)."""
    os.set_inheritable(pidfd, False)

    def watch() -> None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="run-watch", daemon=True).start()


def read_config(stream: TextIO) -> WorkerConfig:
    """The :class:`WorkerConfig` on the first line of ``stream`` (JSON, as the supervisor writes it). A worker
    started by hand without one exits 2 (a restart would read the same), naming what it needs."""
    if stream.isatty():
        print(json.dumps({"event": "error", "error": "a worker reads its configuration from its supervisor: "
                                                      "run `gpuprov images run`"}), flush=True)
        sys.exit(EXIT_USAGE)
    line = stream.readline()
    try:
        raw = json.loads(line)
        return WorkerConfig(**{**raw, "slot": Slot(**raw["slot"])})
    except (ValueError, TypeError, KeyError) as exc:
        error = f"no worker configuration on stdin ({type(exc).__name__}: {exc}); run `gpuprov images run`"
        print(json.dumps({"event": "error", "error": error}), flush=True)
        sys.exit(EXIT_USAGE)


def child_main() -> None:
    """A worker process's main: read the configuration, run :func:`worker_main`, exit with a code its supervisor
    reads (:mod:`gpuprov.images.supervisor`). ``python -m gpuprov.images.worker`` and the fork server's children run
    it."""
    startup = Startup()
    logging.basicConfig(level=os.environ.get("GPUPROV_LOG", "WARNING"), stream=sys.stderr)
    die_with_supervisor()
    cfg = read_config(sys.stdin)
    startup.mark("process")

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        if profile_dir := os.environ.get(PROFILE_ENV):
            import cProfile

            with cProfile.Profile() as prof:
                worker_main(cfg, emit, startup)
            prof.dump_stats(str(Path(profile_dir) / f"worker-{os.getpid()}.prof"))
            return
        worker_main(cfg, emit, startup)
    except GpuprovError as exc:
        print(json.dumps({"event": "error", "error": exc.message}), flush=True)
        if isinstance(exc, QueueUnavailable):  # may come back: the supervisor restarts this worker after a pause
            sys.exit(EXIT_QUEUE_DOWN)
        if exc.exit_code == EXIT_USAGE:  # a bad model, option or queue URL: a restart would fail the same way
            sys.exit(EXIT_USAGE)
        if isinstance(exc, EnvironmentMissing):
            # the wrong device, a missing package (onnxruntime for an .onnx model): a restart fails the same way
            sys.exit(EXIT_ENVIRONMENT)
        raise
    # Every result is committed, the queue closed and the exit event written: end without the interpreter's
    # shutdown, which with torch and a CUDA context loaded runs module and CUDA teardown for seconds and does
    # nothing the job needs (the run waits for it; docs/benchmarks.md has the measurement).
    sys.stdout.flush()
    sys.stderr.flush()
    say_exit(0)  # a forked worker's run has its code even where the fork server is gone
    os._exit(0)


if __name__ == "__main__":
    child_main()
