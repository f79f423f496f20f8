"""The stages of a worker's loop: claim and read, decode, run the task, commit; all but the task's run in
threads of their own beside the model.

The worker's main thread (:func:`gpuprov.images.worker.worker_main`) takes decoded batches from
:func:`prefetch` threads - :func:`claims` claims and reads the next batch, :func:`decode_ahead` decodes
it on a CUDA stream of its own - runs the task on each (:func:`process_batch`) and hands the result rows
to the :class:`Committer` thread, which writes them to the queue. A :class:`LeaseKeeper` thread renews
the leases of every task held meanwhile (one lease per claimed batch). With 8 processes per GPU the sqlite
queue's write lock was what limited them while the queue wrote a lease and a result row per task
(docs/benchmarks.md).

``timing`` dicts add up the seconds each stage spent, by key: ``claim_s``, ``read_s``, ``decode_s``,
``task_s``, ``commit_s`` (and ``wait_s``, the main thread waiting for a decoded batch).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Full
from queue import Queue as Channel
from typing import Any, TypeVar

from gpuprov.images.decode import DecodeError, Decoder, decode_split
from gpuprov.images.lazy_torch import torch_modules
from gpuprov.images.memory import Backoff, is_oom
from gpuprov.images.queue import Queue, QueueLost, Task, UnknownTask
from gpuprov.images.tasks import Item

T = TypeVar("T")
STAGE_KEYS = ("claim_s", "read_s", "decode_s", "task_s", "commit_s", "wait_s")
"""The keys of a worker's ``timing`` dict (see the module docstring), in the order of a batch's way through it."""
DRAIN_POLL_S = 0.1
"""Seconds between looks at the queue while it has nothing to claim but leased tasks (the run's last batches)."""


@dataclass
class Claimed:
    """A claimed batch with the bytes read: ``entries``, (task, bytes or read error) pairs in claim order, and
    ``digests``, the SHA-256 hex digest of each read task's bytes by task id (hashed in the prefetch
    thread, off the worker's main thread)."""

    entries: list[tuple[Task, bytes | OSError]]
    digests: dict[str, str] = field(default_factory=dict)


class LeaseKeeper(threading.Thread):
    """Renews the leases on every task this worker holds, for ``lease_s`` seconds every ``lease_s / 3`` seconds.
    It names whole batches (those claimed and not yet released), so the queue renews each batch's one lease.

    :meth:`hold` adds task ids when they are claimed, :meth:`release` removes them once their results are
    written; :attr:`stop` ends the thread."""

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

    def wait_release(self, timeout: float) -> None:
        """Block until this worker releases tasks (a batch committed) or ``timeout`` seconds pass."""
        with self.lock:
            self.released.wait(timeout)

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


def claims(
    queue: Queue,
    name: str,
    k: Callable[[], int],
    keeper: LeaseKeeper,
    follow: bool = False,
    poll_s: float = 1.0,
    timing: dict[str, float] | None = None,
) -> Iterator[Claimed]:
    """Claim and read batches of ``k()`` tasks (the current batch size) until the queue has nothing open
    (with ``follow``: forever, polling every ``poll_s`` seconds while it is drained), leased for
    ``keeper.lease_s`` seconds and held by ``keeper``. ``timing["claim_s"]`` adds up the seconds spent in
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
            # others hold leases (they finish, or expire and are claimed again), or this worker's own batches are
            # still on their way: look again once one of those is committed here, else after a short wait (a
            # drained queue then ends the worker within that wait of the last commit, not a second later)
            keeper.wait_release(DRAIN_POLL_S)
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


def _read_image(path: Path) -> bytes:
    """The bytes of a regular file; raises OSError for anything else (a FIFO or device would block the
    reading thread forever while the lease thread keeps the task's lease alive)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would wait for a writer
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return fh.read()


@dataclass
class Ready:
    """A claimed batch decoded on the device: the readable entries (``good``, (task, bytes) pairs) with
    their decoded images in the same order (``decoded``: :class:`~gpuprov.images.decode.Decoded` or
    :class:`DecodeError`), the unreadable ones (``unreadable``: (task id, reason) pairs), and the CUDA
    event the decode recorded (None on CPU)."""

    claimed: Claimed
    good: list[tuple[Task, bytes]]
    decoded: list[Any]
    unreadable: list[tuple[str, str]]
    event: Any = None


def decode_ahead(source: Iterator[Claimed], decoder: Decoder, timing: dict[str, float]) -> Iterator[Ready]:
    """Decode each claimed batch on a CUDA stream of its own (run in a :func:`prefetch` thread).

    nvJPEG's batched decode makes its caller wait until the batch is decoded (56-86 ms per 1024 images on
    an H200, docs/benchmarks.md); here that wait is in this thread, so the worker's main thread runs the
    model on batch n while batch n+1 decodes. The consumer makes its stream wait for :attr:`Ready.event`
    before it reads the pixels (:func:`process_batch`). ``timing["decode_s"]`` adds the seconds spent.
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


def prefetch(source: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Run ``source`` in a thread ``depth`` items ahead (claim + read, and decode, overlap compute); an
    exception in the thread is raised here, in the consumer."""
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


def _adopt(ready: Ready) -> None:
    """Let the current stream use what :func:`decode_ahead` decoded on its own stream: wait for its event
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


def process_batch(
    ready: Ready, task: Any, backoff: Backoff, timing: dict[str, float], label: str
) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    """Run ``task`` over a decoded batch in chunks of ``backoff.batch`` images, on the calling (the main)
    thread; returns ``(ok, bad)``.

    ``ok``: (task id, result row) pairs, the task's row with ``path``, ``sha256`` and ``task`` (``label``,
    see :func:`~gpuprov.images.worker.task_label`); ``bad``: (task id, reason) pairs for the unreadable
    and undecodable images and those the task fails on. A batch the task fails on with ``RuntimeError``
    or ``ValueError`` (not out of memory) runs again one image at a time, so an image it cannot handle
    fails alone. ``timing["task_s"]`` adds the seconds spent.
    """
    _adopt(ready)
    bad = list(ready.unreadable)
    t1 = time.perf_counter()
    items: list[Item] = []
    for (t, _), dec in zip(ready.good, ready.decoded, strict=True):
        if isinstance(dec, DecodeError):
            bad.append((t.id, f"decode error: {dec}"))
        else:
            items.append(Item(t.id, t.payload["path"], ready.claimed.digests[t.id], dec))
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


class Committer(threading.Thread):
    """Writes finished batches to the queue in a thread of its own, so the worker's main thread runs the
    next batch on the device meanwhile.

    :meth:`put` hands over one batch: its result rows (``queue.complete``), its failures
    (``queue.fail``) and the task ids whose leases the :class:`LeaseKeeper` renews until they are
    written. Then a ``progress`` event is emitted with the counts written so far. At most ``depth``
    batches wait (:meth:`put` blocks beyond that). With several workers on one sqlite file the write
    lock is contended: on one H200, 4 workers per GPU spent ~12 of their ~25 s in ``complete``, most
    of it waiting for the lock, while the queue still wrote per task (docs/benchmarks.md) - time in which
    the GPU had no next batch from that worker. A batch is acknowledged only once written: a worker killed
    before that loses nothing, its leases expire and the tasks run again (outputs are idempotent). The
    first error stops the writing and is raised by the next :meth:`put` or by :meth:`close`.
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
