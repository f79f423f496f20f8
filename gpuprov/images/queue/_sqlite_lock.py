"""The sqlite queue's write transactions: ``BEGIN IMMEDIATE`` under a ``flock`` on ``<file>-lock``.

Writers take ``flock(2)`` on ``<file>-lock`` before ``BEGIN IMMEDIATE``, trying again every 0.1-2 ms
until the busy timeout. sqlite's own busy handler sleeps up to 100 ms between tries, so a waiter slept
long after the lock was free: on one H200 with 8 workers per GPU (each claiming in one thread and
committing in another) the workers waited 3-18 s for their next batch with sqlite's handler alone and
2-4 s with a blocking flock (docs/benchmarks.md; this bounded form keeps the timeout and was measured
on the CPU only). The kernel drops the lock of a killed process; a stopped (SIGSTOP) writer, or a child
it forked that still holds the descriptor, makes the others give up after the busy timeout with
:class:`QueueUnavailable`. Where the lock file cannot be opened, sqlite's busy handler alone serves.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import BinaryIO

from gpuprov.images.queue.base import QueueError, QueueUnavailable

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's write lock, seconds, before :class:`QueueUnavailable`."""


def open_lock_file(path: Path) -> BinaryIO | None:
    """``<path>-lock`` beside the real queue file (symbolic links followed), created with the queue
    file's permissions and opened read-only (flock needs no more, so every user who can read the queue
    can queue for it); None where it cannot be opened. Closed on exec, and when collected."""
    real = Path(os.path.realpath(path))
    lock = real.with_name(real.name + "-lock")
    try:
        mode = real.stat().st_mode & 0o666
    except OSError:
        mode = 0o644
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, mode)
    except OSError as exc:
        log.debug("no write-lock file %s (%s): sqlite's busy handler alone orders writers", lock, exc)
        return None
    return os.fdopen(fd, "rb", buffering=0)


def flock(lock: BinaryIO, timeout_s: float, path: Path) -> None:
    """Take ``lock`` exclusively, trying every 0.1 ms doubling to 2 ms; :class:`QueueUnavailable` after
    ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    pause = 0.0001
    while True:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise QueueUnavailable(
                    f"{path}: another process has held the queue's write lock for {timeout_s:g} s "
                    "(a stopped or hung worker?)"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.002)


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) under the connection's thread lock
    and the queue's ``flock`` (see the module docstring).

    IMMEDIATE takes the write lock up front, so a claim's read and its updates see one state and k
    tasks are leased atomically; other processes wait up to the busy timeout. ``durable``: the commit is on disk
    when it returns (``synchronous = FULL`` for this transaction: the WAL is synced); otherwise the connection's
    ``NORMAL`` holds, under which a power loss may take back the transactions since the last checkpoint.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.Lock,
        path: Path,
        lock_file: BinaryIO | None = None,
        timeout_s: float = BUSY_TIMEOUT_S,
        durable: bool = False,
    ) -> None:
        self._db, self._lock, self._path, self._lock_file, self._timeout_s = db, lock, path, lock_file, timeout_s
        self._flocked = False
        self._durable = durable

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            if self._lock_file is not None:
                flock(self._lock_file, self._timeout_s, self._path)
                self._flocked = True
            if self._durable:
                self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, OSError) as exc:
            self._unlock()
            raise QueueUnavailable(f"{self._path}: cannot lock the sqlite queue: {exc}") from exc
        except BaseException:  # QueueUnavailable from the flock wait, KeyboardInterrupt: never keep a lock
            self._unlock()
            raise

    def _unlock(self) -> None:
        try:
            if self._durable:
                self._db.execute("PRAGMA synchronous = NORMAL")
        finally:
            self._release()

    def _release(self) -> None:
        try:
            if self._flocked and self._lock_file is not None:
                self._flocked = False
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
        finally:
            self._lock.release()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                try:
                    self._db.execute("COMMIT")
                except sqlite3.Error as err:
                    self._rollback()
                    raise QueueError(f"{self._path}: commit failed: {err}") from err
            else:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise QueueUnavailable(f"{self._path}: sqlite error: {exc}") from exc
        finally:
            self._unlock()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
