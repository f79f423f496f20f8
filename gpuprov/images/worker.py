"""One worker process per device, fed by the shared queue (its supervisor: :mod:`gpuprov.images.supervisor`).

Pinning: the supervisor resolves ``--gpus`` to NVML devices and starts each worker with
``CUDA_VISIBLE_DEVICES=GPU-<uuid>`` (never an index) and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Each worker
then reads the UUID and PCI bus id of the device CUDA actually opened and exits with code 4 on a
mismatch instead of running on the wrong GPU. Without NVML or GPUs the workers run on ``cpu``.

Several processes per GPU (:func:`replicate`, ``procs_per_gpu``): every process of a GPU gets the same
UUID pin and the same self-check; they share the queue like workers on different GPUs do (leases make
that safe) and split the GPU's free memory for ``--batch auto``. One worker's Python thread issued
every per-image operation (nvJPEG list decode, canvas copies, result rows) and was the limit on an
H200 (docs/benchmarks.md); :data:`DEFAULT_PROCS_PER_GPU` processes spread that work. Within a worker
the claim, the decode of the next batch and the writing of the last one's results run in threads
beside the model; with 8 processes per GPU the sqlite queue's write lock is what limits now.

Guarantees: a worker claims ``batch`` tasks with a lease, a thread renews the leases while it works,
output files are written atomically under names derived from the input's content hash, and result
rows go to the queue's idempotent :meth:`complete`. ``kill -9`` of a worker loses nothing (its
leases expire and another worker takes the tasks) and duplicates nothing (one row per task, one
file per content hash). The supervisor restarts a worker that died, and at the end the CLI writes the
manifest (:mod:`gpuprov.images.manifest`).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import importlib
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Full
from queue import Queue as Channel
from typing import Any, TypeVar

from gpuprov.exceptions import EXIT_ENVIRONMENT, EXIT_USAGE, ConfigError, EnvironmentMissing, GpuprovError
from gpuprov.images.decode import DecodeError, Decoder, decode_split
from gpuprov.images.formats import DEFAULT_MAX_PIXELS
from gpuprov.images.lazy_torch import torch_modules
from gpuprov.images.memory import Backoff, auto_batch, is_oom
from gpuprov.images.queue import Queue, QueueLost, QueueMissing, QueueUnavailable, Task, UnknownTask, open_queue
from gpuprov.images.tasks import Item, make_task, synthetic_items

log = logging.getLogger(__name__)
T = TypeVar("T")

EXIT_QUEUE_DOWN = 75
"""A worker's exit code when the queue's store cannot be reached (``EX_TEMPFAIL``): the supervisor restarts
it after a back-off (:mod:`gpuprov.images.supervisor`)."""
SUPERVISOR_ENV = "GPUPROV_SUPERVISOR_PID"
"""Environment variable with the supervisor's pid, which a worker checks once it has asked to die with it."""
PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal a process gets when the thread that created it ends (Linux)."""
DEFAULT_PROCS_PER_GPU = 4
"""Worker processes per GPU when not given. Measured on one H200 (docs/benchmarks.md, 2026-12-01, 200,000
images, ResNet-50 fp16): 1 process 3,113 img/s steady, 4 processes 8,119, 8 processes 8,828 (+9 % for twice
the processes, host memory and CPU, and 2 % less end to end), so 4."""


class DeviceMismatch(EnvironmentMissing):
    """The device CUDA opened is not the one this worker was assigned. Exit 4."""


@dataclass(frozen=True)
class Slot:
    """One device a worker is pinned to: ``uuid``/``bus_id`` from NVML, or ``cpu`` (uuid None)."""

    name: str
    uuid: str | None = None
    bus_id: str | None = None
    share: int = 1  # worker processes pinned to this device (they split its free memory)


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


def resolve_slots(gpus: str, cpu_workers: int = 1, nvml: Any = None) -> list[Slot]:
    """``--gpus all|cpu|0,1|GPU-uuid,...`` to slots; NVML indices are PCI bus order, as nvidia-smi's."""
    cpu = [Slot(f"cpu{i}") for i in range(cpu_workers)]
    if gpus == "cpu":
        return cpu
    try:
        nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError, ImportError: no GPU here
        if gpus != "all":
            raise EnvironmentMissing(
                f"--gpus {gpus}: NVML is unavailable ({exc}); is the NVIDIA driver loaded? (--gpus cpu runs on the CPU)"
            ) from exc
        log.warning("--gpus all: NVML is unavailable (%s); running on the CPU", exc)
        return cpu
    try:
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid, bus = nvml.nvmlDeviceGetUUID(h), nvml.nvmlDeviceGetPciInfo(h).busId
            found.append(Slot(f"gpu{i}", _text(uuid), _text(bus)))
    finally:
        nvml.nvmlShutdown()
    if not found:
        if gpus != "all":
            raise EnvironmentMissing(f"--gpus {gpus}: NVML sees no GPU (--gpus cpu runs on the CPU)")
        log.warning("--gpus all: NVML sees no GPU; running on the CPU")
        return cpu
    if gpus == "all":
        return found
    picked: list[Slot] = []
    for token in gpus.split(","):
        match = [s for s in found if token.strip() in (s.name[3:], s.uuid)]
        if not match:
            raise ConfigError(f"--gpus {gpus}: no GPU {token!r}; NVML sees {', '.join(s.name for s in found)}")
        # one GPU named twice (``0,0`` or its index and its UUID) is still one GPU: a second set of processes
        # on it would each assume they split its memory with --procs-per-gpu others only
        picked.extend(s for s in match if s not in picked)
    return picked


def replicate(slots: list[Slot], procs_per_gpu: int | None = None) -> list[Slot]:
    """Each GPU slot ``procs_per_gpu`` times (default :data:`DEFAULT_PROCS_PER_GPU`), CPU slots once.

    The copies of ``gpuN`` are named ``gpuN.0``, ``gpuN.1``, ... (plain ``gpuN`` when there is one) and
    keep the UUID and bus id, so every process is pinned to and checks the same device;
    ``share`` tells each how many processes split the device's memory. Raises :class:`ConfigError`
    for ``procs_per_gpu`` < 1.
    """
    n = DEFAULT_PROCS_PER_GPU if procs_per_gpu is None else procs_per_gpu
    if n < 1:
        raise ConfigError(f"--procs-per-gpu {n}: expected at least 1")
    out = []
    for s in slots:
        if s.uuid is None or n == 1:
            out.append(s)
        else:
            out.extend(Slot(f"{s.name}.{k}", s.uuid, s.bus_id, share=n) for k in range(n))
    return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def self_check(slot: Slot) -> str:
    """Open the pinned device and compare its UUID and bus id with ``slot``; returns the torch device."""
    if slot.uuid is None:
        return "cpu"
    torch, _ = torch_modules()
    if not torch.cuda.is_available() or torch.cuda.device_count() != 1:
        raise DeviceMismatch(f"{slot.name}: expected exactly one visible CUDA device ({slot.uuid})")
    props = torch.cuda.get_device_properties(0)
    uuid = f"GPU-{props.uuid}"
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    if uuid.lower() != slot.uuid.lower() or (slot.bus_id and bus.lower() != slot.bus_id.lower()):
        raise DeviceMismatch(f"{slot.name}: assigned {slot.uuid} at {slot.bus_id}, CUDA opened {uuid} at {bus}")
    log.info("%s: opened %s at %s as assigned", slot.name, uuid, bus)
    return "cuda"


# --- the worker process --------------------------------------------------------------------------


@dataclass
class Claimed:
    """A claimed batch with the bytes read: (task, bytes or read error) pairs, and the SHA-256 hex digest
    of each task's bytes by task id (hashed in the prefetch thread, off the worker's main thread)."""

    entries: list[tuple[Task, bytes | OSError]]
    digests: dict[str, str] = field(default_factory=dict)


class LeaseKeeper(threading.Thread):
    """Renews the leases on every task this worker holds, every third of the lease."""

    def __init__(self, queue: Queue, worker: str, lease_s: float) -> None:
        super().__init__(daemon=True, name="lease")
        self.queue, self.worker, self.lease_s = queue, worker, lease_s
        self.held: set[str] = set()
        self.lock = threading.Lock()
        self.released = threading.Condition(self.lock)
        self.stop = threading.Event()

    def hold(self, ids: list[str]) -> None:
        with self.lock:
            self.held.update(ids)

    def release(self, ids: list[str]) -> None:
        with self.lock:
            self.held.difference_update(ids)
            self.released.notify_all()

    def wait_released(self, task_id: str) -> None:
        """Block until ``task_id`` is released (completed or failed) or the keeper is stopped."""
        with self.lock:
            while task_id in self.held and not self.stop.is_set():
                self.released.wait(0.5)

    def run(self) -> None:
        while not self.stop.wait(self.lease_s / 3):
            with self.lock:
                ids = sorted(self.held)
            if ids:
                self.queue.extend(self.worker, ids, self.lease_s)


def _claims(
    queue: Queue,
    name: str,
    k: Callable[[], int],
    keeper: LeaseKeeper,
    follow: bool = False,
    poll_s: float = 1.0,
    timing: dict[str, float] | None = None,
) -> Iterator[Claimed]:
    """Claim and read batches until the queue has nothing open (with ``follow``: forever, polling every
    ``poll_s`` seconds while it is drained). ``timing["claim_s"]`` adds up the seconds spent in
    ``queue.claim`` (lock waits included), ``timing["read_s"]`` those reading and hashing the files.

    A task claimed again and alone (its earlier lease expired: a worker died or stalled with it) is
    finished before the next claim, so a crash while it is in this worker is charged to it alone
    (the queue dead-letters a task only after crashes of that kind, see :meth:`Queue.claim`)."""
    timing = {} if timing is None else timing
    while True:
        t0 = time.perf_counter()
        tasks = queue.claim(name, k(), keeper.lease_s)
        timing["claim_s"] = timing.get("claim_s", 0.0) + time.perf_counter() - t0
        if not tasks:
            if queue.stats().open == 0:
                if not follow:
                    return
                time.sleep(poll_s)
                continue
            time.sleep(min(1.0, keeper.lease_s / 4))  # others hold leases; they finish or expire
            continue
        keeper.hold([t.id for t in tasks])
        t0 = time.perf_counter()
        entries: list[tuple[Task, bytes | OSError]] = []
        digests: dict[str, str] = {}
        for t in tasks:
            try:
                data = _read_image(Path(t.payload["path"]))
            except OSError as exc:
                entries.append((t, exc))
                continue
            entries.append((t, data))
            digests[t.id] = hashlib.sha256(data).hexdigest()
        timing["read_s"] = timing.get("read_s", 0.0) + time.perf_counter() - t0
        yield Claimed(entries, digests)
        if len(tasks) == 1 and tasks[0].attempts > 1:
            keeper.wait_released(tasks[0].id)


@dataclass
class Ready:
    """A claimed batch decoded on the device: the readable entries with their decoded image (or
    :class:`DecodeError`) and the unreadable ones, plus the CUDA event the decode recorded (None on CPU)."""

    claimed: Claimed
    good: list[tuple[Task, bytes]]
    decoded: list[Any]
    unreadable: list[tuple[str, str]]
    event: Any = None


def _decode_ahead(source: Iterator[Claimed], decoder: Decoder, timing: dict[str, float]) -> Iterator[Ready]:
    """Decode each claimed batch on a CUDA stream of its own (run in a :func:`_prefetch` thread).

    nvJPEG's batched decode makes its caller wait until the batch is decoded (56-86 ms per 1024 images on
    an H200, docs/benchmarks.md); here that wait is in this thread, so the worker's main thread runs the
    model on batch n while batch n+1 decodes. The consumer makes its stream wait for :attr:`Ready.event`
    before it reads the pixels (:func:`_adopt`).
    """
    torch = torch_modules()[0] if decoder.device != "cpu" else None
    stream = torch.cuda.Stream() if torch is not None else None
    for claimed in source:
        good: list[tuple[Task, bytes]] = []
        unreadable: list[tuple[str, str]] = []
        for t, data in claimed.entries:
            if isinstance(data, OSError):
                unreadable.append((t.id, f"read error: {data}"))
            else:
                good.append((t, data))
        t0 = time.perf_counter()
        event = None
        if stream is not None and torch is not None:
            with torch.cuda.stream(stream):
                decoded: list[Any] = decode_split(decoder, [d for _, d in good])
                event = torch.cuda.Event()
                event.record(stream)
        else:
            decoded = decode_split(decoder, [d for _, d in good])
        timing["decode_s"] += time.perf_counter() - t0
        yield Ready(claimed, good, decoded, unreadable, event)


def _adopt(ready: Ready) -> None:
    """Let the current stream use what :func:`_decode_ahead` decoded on its own stream: wait for its event
    and tell the caching allocator the pixels are in use on this stream too (``record_stream``), so
    their memory is not handed out again while this stream may still read it."""
    if ready.event is None:
        return
    torch, _ = torch_modules()
    current = torch.cuda.current_stream()
    current.wait_event(ready.event)
    for dec in ready.decoded:
        if not isinstance(dec, DecodeError) and dec.pixels.is_cuda:
            dec.pixels.record_stream(current)


def _read_image(path: Path) -> bytes:
    """The bytes of a regular file; raises OSError for anything else (a FIFO or device would block the
    reading thread forever while the lease thread keeps the task's lease alive)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would wait for a writer
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return fh.read()


def _prefetch(source: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Run ``source`` in a thread ``depth`` items ahead (claim + read, and decode, overlap compute)."""
    chan: Channel[T | BaseException | None] = Channel(maxsize=depth)

    def pump() -> None:
        try:
            for c in source:
                chan.put(c)
            chan.put(None)
        except BaseException as exc:
            chan.put(exc)

    threading.Thread(target=pump, daemon=True, name="prefetch").start()
    while (got := chan.get()) is not None:
        if isinstance(got, BaseException):
            raise got
        yield got


class Committer(threading.Thread):
    """Writes finished batches to the queue in a thread of its own, so the worker's main thread runs the
    next batch on the device meanwhile.

    :meth:`put` hands over one batch: its result rows (``queue.complete``), its failures
    (``queue.fail``) and the task ids whose leases the :class:`LeaseKeeper` renews until they are
    written. Then a ``progress`` event is emitted with the counts written so far. At most ``depth``
    batches wait (:meth:`put` blocks beyond that). With several workers on one sqlite file the write
    lock is contended: on one H200, 4 workers per GPU spent ~12 of their ~25 s in ``complete``, most
    of it waiting for the lock (docs/benchmarks.md) - time in which the GPU had no next batch from
    that worker. A batch is acknowledged only once written: a worker killed before that loses nothing,
    its leases expire and the tasks run again (outputs are idempotent). The first error stops the
    writing and is raised by the next :meth:`put` or by :meth:`close`.
    """

    def __init__(
        self, queue: Queue, worker: str, keeper: LeaseKeeper, emit: Callable[[dict[str, Any]], None],
        timing: dict[str, float], depth: int = 2,
    ) -> None:  # fmt: skip
        super().__init__(daemon=True, name="commit")
        self.queue, self.worker, self.keeper, self.emit, self.timing = queue, worker, keeper, emit, timing
        self.chan: Channel[tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]], list[str], int] | None]
        self.chan = Channel(maxsize=depth)
        self.done = self.failed = 0
        self.error: BaseException | None = None
        self._closed = False

    def put(
        self, ok: list[tuple[str, dict[str, Any]]], bad: list[tuple[str, str]], held: list[str], batch: int
    ) -> None:
        """Queue one batch for writing; raises the writer's first error, if any (else ``RuntimeError``
        once closed)."""
        if self.error is not None:
            raise self.error
        if self._closed:
            raise RuntimeError("the committer is closed")
        if not self._hand_over((ok, bad, held, batch)):
            raise self.error or RuntimeError("the commit thread is gone")

    def _hand_over(self, item: Any) -> bool:
        """Put ``item`` on the channel; False if the thread is not running (after an error it still
        drains the channel, so this does not block for long)."""
        while self.is_alive():
            try:
                self.chan.put(item, timeout=0.5)
                return True
            except Full:
                continue
        return False

    def run(self) -> None:
        while (item := self.chan.get()) is not None:
            if self.error is not None:
                continue  # drain without writing: the main thread raises the error
            ok, bad, held, batch = item
            try:
                t0 = time.perf_counter()
                if ok:
                    self.done += self.queue.complete(self.worker, ok)
                for tid, reason in bad:
                    self.queue.fail(self.worker, tid, reason, retry=False)
                self.failed += len(bad)
                self.timing["commit_s"] += time.perf_counter() - t0
                self.keeper.release(held)
                self.emit({"event": "progress", "done": self.done, "failed": self.failed, "batch": batch,
                           "t": time.time(), **self.timing})  # fmt: skip
            except UnknownTask as exc:  # a task this worker claimed: the queue was emptied under it
                self.error = QueueLost(
                    f"{exc.message}, a task this worker claimed: the queue lost its tasks (a Redis server "
                    "restarted without persistence?)"
                )
            except BaseException as exc:  # a queue error, a broken pipe to the supervisor: raised in the main thread
                self.error = exc

    def close(self, check: bool = True) -> None:
        """Write what was handed over, stop the thread; with ``check``, raise the writer's first error."""
        if not self._closed:
            self._closed = True
            if self._hand_over(None):
                self.join()
        if check and self.error is not None:
            raise self.error


WARMUP_SIDE = 256
"""Side in pixels of the synthetic images a GPU worker runs one full batch of before it reports ready."""


def worker_main(cfg: WorkerConfig, emit: Callable[[dict[str, Any]], None]) -> None:
    """Process tasks until the queue is drained; ``emit`` receives progress events."""
    device = self_check(cfg.slot)
    name = f"{os.uname().nodename}:{cfg.slot.name}:{os.getpid()}"
    out = Path(cfg.out)
    task = make_task(cfg.task, Path(cfg.model) if cfg.model else None, out, device, size=cfg.size)
    batch = cfg.batch or auto_batch(device, lambda n: task.process(synthetic_items(n, device)), share=cfg.slot.share)
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
    try:
        queue = open_queue(cfg.queue, create=False)  # the run opened (or made) it before starting workers
    except QueueMissing as exc:
        raise QueueLost(
            "the queue is gone since the run started (a Redis server restarted without persistence, or the queue "
            "file was removed); its tasks are lost"
        ) from exc
    keeper = LeaseKeeper(queue, name, cfg.lease_s)
    keeper.start()
    decoder = Decoder(device, cfg.threads, jpeg=cfg.jpeg, max_pixels=cfg.max_pixels)
    timing = {"wait_s": 0.0, "decode_s": 0.0, "task_s": 0.0, "claim_s": 0.0, "read_s": 0.0, "commit_s": 0.0}
    emit({"event": "start", "worker": name, "device": device, "uuid": cfg.slot.uuid, "batch": backoff.batch,
          "jpeg": decoder.jpeg})  # fmt: skip
    committer = Committer(queue, name, keeper, emit, timing)
    committer.start()
    try:
        claims = _prefetch(_claims(queue, name, lambda: backoff.batch, keeper, cfg.follow, cfg.poll_s, timing))
        batches = _prefetch(_decode_ahead(claims, decoder, timing), depth=1)
        while True:
            t0 = time.perf_counter()
            ready = next(batches, None)
            timing["wait_s"] += time.perf_counter() - t0
            if ready is None:
                break
            ok, bad = _process(ready, task, backoff, timing, task_label(cfg.task, cfg.model))
            committer.put(ok, bad, [t.id for t, _ in ready.claimed.entries], backoff.batch)
        committer.close()
    finally:
        committer.close(check=False)
        keeper.stop.set()
        decoder.close()
        queue.close()
    emit({"event": "exit", "done": committer.done, "failed": committer.failed})


def _process(
    ready: Ready, task: Any, backoff: Backoff, timing: dict[str, float], label: str
) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    _adopt(ready)
    bad = list(ready.unreadable)
    t1 = time.perf_counter()
    items: list[Item] = []
    for (t, data), dec in zip(ready.good, ready.decoded, strict=True):
        if isinstance(dec, DecodeError):
            bad.append((t.id, f"decode error: {dec}"))
        else:
            digest = ready.claimed.digests.get(t.id) or hashlib.sha256(data).hexdigest()
            items.append(Item(t.id, t.payload["path"], digest, dec))
    try:
        rows = backoff.run(items, task.process)
        pairs = list(zip(items, rows, strict=True))
    except (RuntimeError, ValueError, MemoryError) as exc:
        if is_oom(exc) or len(items) <= 1:
            raise
        pairs = []
        for item in items:  # isolate the image the task cannot handle
            try:
                pairs.append((item, backoff.run([item], task.process)[0]))
            except (RuntimeError, ValueError) as one:
                bad.append((item.task_id, f"task error: {one}"))
    timing["task_s"] += time.perf_counter() - t1
    ok = [(it.task_id, {"path": it.path, "sha256": it.sha256, "task": label, **row}) for it, row in pairs]
    return ok, bad


PROFILE_ENV = "GPUPROV_IMAGES_PROFILE"
"""A folder: each worker then runs under cProfile and writes ``<folder>/worker-<pid>.prof`` (benchmarks)."""


def die_with_supervisor() -> None:
    """Ask the kernel for SIGTERM when the supervisor's thread that started this process ends
    (``prctl(PR_SET_PDEATHSIG)``), then exit at once if the supervisor named in :data:`SUPERVISOR_ENV`
    already died before that request (this process's parent is then another one)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:  # not Linux
        log.warning("cannot ask to die with the supervisor: %s", exc)
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if supervisor and os.getppid() != int(supervisor):
        sys.exit("gpuprov image worker: its supervisor exited before it started")


def _child_main() -> None:
    logging.basicConfig(level=os.environ.get("GPUPROV_LOG", "WARNING"), stream=sys.stderr)
    die_with_supervisor()
    raw = json.loads(sys.argv[1])
    cfg = WorkerConfig(**{**raw, "slot": Slot(**raw["slot"])})

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        if profile_dir := os.environ.get(PROFILE_ENV):
            import cProfile

            with cProfile.Profile() as prof:
                worker_main(cfg, emit)
            prof.dump_stats(str(Path(profile_dir) / f"worker-{os.getpid()}.prof"))
            return
        worker_main(cfg, emit)
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


if __name__ == "__main__":
    _child_main()
