"""The embedded queue: one sqlite file in WAL mode, shared by the worker processes of one host.

Every state change is one sqlite transaction, so ``kill -9`` of any process at any moment leaves
the file consistent: a claim either happened (the lease is in the file and expires) or did not.
Opening a queue never touches in-flight tasks; only leases past their expiry are reclaimable.

Lease expiry times are wall-clock seconds (``time.time()``), because several processes compare
them and a monotonic clock is per boot, not shared. A wall clock stepped forward expires leases
early (a task is then processed twice, with one result row); stepped back, it delays reclaiming a
dead worker's tasks by the step. Keep hosts on NTP.

One :class:`SqliteQueue` per process (never share one across ``fork``); it is safe to use from
several threads of that process. The file must be on a local filesystem (WAL needs shared memory).

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
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from gpuprov.images.queue.base import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    QueueError,
    QueueStats,
    QueueUnavailable,
    Task,
    UnknownTask,
    check_claim_args,
    check_config,
    check_retry_states,
    dump_json,
    load_json,
    task_id,
    task_key,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""2 added ``tasks.solo``; a version-1 file is upgraded in place when opened."""
BUSY_TIMEOUT_S = 30.0
_PAGE = 1000
_LEASE = "UPDATE tasks SET state = 'leased', attempts = ?, solo = ?, worker = ?, lease_expires = ? WHERE id = ?"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    shard INTEGER NOT NULL UNIQUE,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'leased', 'done', 'failed', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,
    solo INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    lease_expires REAL,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS tasks_state_shard ON tasks (state, shard);
CREATE INDEX IF NOT EXISTS tasks_state_lease ON tasks (state, lease_expires);
CREATE TABLE IF NOT EXISTS results (
    task_id TEXT PRIMARY KEY REFERENCES tasks (id),
    row TEXT NOT NULL
);
"""


class SqliteQueue:
    """A :class:`gpuprov.images.queue.base.Queue` in one sqlite file (created if missing).

    ``max_attempts``: claims before a task is dead-lettered. ``lease_s``: the default lease in
    seconds, for callers that have none of their own. ``busy_timeout_s``: how long a transaction
    waits for another process's write lock before :class:`QueueUnavailable` is raised.
    Raises :class:`QueueUnavailable` if the file cannot be opened or is not a gpuprov queue.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_s: float = DEFAULT_LEASE_S,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        check_config(max_attempts, lease_s)
        self.path = Path(path)
        self.max_attempts = max_attempts
        self.lease_s = lease_s
        self._lock = threading.Lock()
        self._busy_timeout_s = busy_timeout_s
        self._lock_file: BinaryIO | None = None  # opened once the file is known to be a queue
        folder = self.path.resolve().parent  # a missing "rel/.." is taken lexically, as sqlite takes it
        if not folder.is_dir():
            raise QueueUnavailable(
                f"{self.path}: the folder {folder} does not exist; create it first "
                "(the queue file is created, its folder is not)"
            )
        try:
            self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise QueueUnavailable(f"{self.path}: sqlite refused WAL mode (got {mode!r}); use a local filesystem")
            # NORMAL is durable against a killed process (the WAL is in the OS cache); a power
            # loss may drop the last transactions, which only means some tasks run again.
            self._db.execute("PRAGMA synchronous = NORMAL")
            with self._tx():
                for statement in _statements():
                    self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                (version,) = self._db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
                if version == "1":  # a queue of the previous gpuprov: its tasks were never claimed alone
                    self._db.execute("ALTER TABLE tasks ADD COLUMN solo INTEGER NOT NULL DEFAULT 0")
                    self._db.execute("UPDATE meta SET value = ? WHERE name = 'schema'", (str(SCHEMA_VERSION),))
                    version = str(SCHEMA_VERSION)
            if version != str(SCHEMA_VERSION):
                raise QueueUnavailable(f"{self.path}: queue schema {version}, this gpuprov reads {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise QueueUnavailable(f"{self.path}: cannot open the sqlite queue: {exc}") from exc
        self._lock_file = _open_lock_file(self.path)

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock, self.path, self._lock_file, self._busy_timeout_s)

    def submit(self, payloads: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Queue.submit`."""
        rows = [(task_id(task_key(p)), dump_json(p, "task payload")) for p in payloads]
        new = 0
        with self._tx():
            (shard,) = self._db.execute("SELECT COALESCE(MAX(shard) + 1, 0) FROM tasks").fetchone()
            for tid, payload in rows:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO tasks (id, shard, payload) VALUES (?, ?, ?)", (tid, shard, payload)
                )
                if cur.rowcount == 1:
                    shard += 1
                    new += 1
        log.debug("submitted %d new of %d tasks to %s", new, len(rows), self.path)
        return new

    def claim(self, worker: str, k: int, lease_s: float) -> list[Task]:
        """See :meth:`Queue.claim`. An expired lease is reclaimed alone, before any pending task; pending
        tasks go oldest shard first."""
        check_claim_args(worker, k, lease_s)
        raw: list[tuple[str, int, str, int]] = []
        with self._tx():
            now = time.time()
            expires = now + lease_s
            while True:
                row = self._db.execute(
                    "SELECT id, shard, payload, attempts, solo, worker FROM tasks"
                    " WHERE state = 'leased' AND lease_expires <= ? ORDER BY shard LIMIT 1",
                    (now,),
                ).fetchone()
                if row is None:
                    break
                tid, shard, payload, attempts, solo, holder = row
                if solo and attempts >= self.max_attempts:
                    self._bury(
                        tid,
                        f"lease of worker {holder} expired after {attempts} of {self.max_attempts} "
                        "attempts, the last one alone in its claim",
                    )
                    continue
                raw.append((tid, shard, payload, attempts + 1))
                break
            reclaimed = bool(raw)
            while not reclaimed and len(raw) < k:
                rows = self._db.execute(
                    "SELECT id, shard, payload, attempts FROM tasks WHERE state = 'pending' ORDER BY shard LIMIT ?",
                    (k - len(raw),),
                ).fetchall()
                if not rows:
                    break
                taken = []
                for tid, shard, payload, attempts in rows:
                    if attempts >= self.max_attempts:  # retried until its attempts ran out (max_attempts lowered)
                        self._bury(tid, f"retried after {attempts} of {self.max_attempts} attempts")
                    else:
                        taken.append((tid, shard, payload, attempts + 1))
                # one statement for the whole batch: the write lock is held for less time, which is what other
                # workers on the same file wait for
                self._db.executemany(_LEASE, [(n, 0, worker, expires, tid) for tid, _, _, n in taken])
                raw += taken
            if reclaimed or len(raw) == 1:  # alone in its claim: a crash of its worker is charged to it alone
                ((tid, _, _, n),) = raw
                self._db.execute(_LEASE, (n, 1, worker, expires, tid))
        # payloads are parsed after the commit, outside the write lock
        return [Task(id=tid, shard=shard, payload=load_json(payload), attempts=n) for tid, shard, payload, n in raw]

    def _bury(self, tid: str, reason: str) -> None:
        self._db.execute(
            "UPDATE tasks SET state = 'dead', worker = NULL, lease_expires = NULL, reason = ? WHERE id = ?",
            (reason, tid),
        )

    def extend(self, worker: str, task_ids: Sequence[str], lease_s: float) -> None:
        """See :meth:`Queue.extend`."""
        check_claim_args(worker, 1, lease_s)
        with self._tx():
            expires = time.time() + lease_s
            self._db.executemany(
                "UPDATE tasks SET lease_expires = ? WHERE id = ? AND state = 'leased' AND worker = ?",
                [(expires, tid, worker) for tid in task_ids],
            )

    def complete(self, worker: str, results: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """See :meth:`Queue.complete`."""
        rows = [(tid, dump_json(row, "result row")) for tid, row in results]
        with self._tx():
            self._require(tid for tid, _ in rows)
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO results (task_id, row) VALUES (?, ?)", rows)
            new = self._db.total_changes - before
            # a task with a result row is 'done' (both are written in one transaction), so marking every
            # task of the batch changes only those whose result was new
            self._db.executemany(
                "UPDATE tasks SET state = 'done', worker = NULL, lease_expires = NULL, reason = NULL"
                " WHERE id = ? AND state != 'done'",
                [(tid,) for tid, _ in rows],
            )
        if new < len(rows):
            log.debug("worker %s: %d of %d completions were already recorded", worker, len(rows) - new, len(rows))
        return new

    def fail(self, worker: str, task_id: str, reason: str, *, retry: bool) -> None:
        """See :meth:`Queue.fail`."""
        with self._tx():
            self._require([task_id])
            row = self._db.execute(
                "SELECT attempts FROM tasks WHERE id = ? AND state = 'leased' AND worker = ?", (task_id, worker)
            ).fetchone()
            if row is None:
                log.debug("worker %s does not hold task %s; fail ignored", worker, task_id)
                return
            if not retry:
                state = "failed"
            elif row[0] >= self.max_attempts:
                state, reason = "dead", f"{reason} (after {row[0]} of {self.max_attempts} attempts)"
            else:
                state = "pending"
            self._db.execute(
                "UPDATE tasks SET state = ?, reason = ?, worker = NULL, lease_expires = NULL WHERE id = ?",
                (state, reason, task_id),
            )

    def stats(self) -> QueueStats:
        """See :meth:`Queue.stats`."""
        with self._lock:
            counts = dict(self._db.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall())
        return QueueStats(**{s: counts.get(s, 0) for s in ("pending", "leased", "done", "failed", "dead")})

    def results(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """See :meth:`Queue.results`. Reads in pages of 1000 rows, so a long iteration holds no lock."""
        after = -1
        while True:
            with self._lock:
                page = self._db.execute(
                    "SELECT t.shard, r.row FROM results r JOIN tasks t ON t.id = r.task_id"
                    " WHERE t.shard > ? ORDER BY t.shard LIMIT ?",
                    (after, _PAGE),
                ).fetchall()
            for shard, row in page:
                yield shard, load_json(row)
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    def failures(self) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
        """See :meth:`Queue.failures`."""
        with self._lock:
            rows = self._db.execute(
                "SELECT shard, state, COALESCE(reason, ''), payload FROM tasks WHERE state IN ('failed', 'dead')"
                " ORDER BY shard"
            ).fetchall()
        yield from ((shard, state, reason, load_json(payload)) for shard, state, reason, payload in rows)

    def retry(self, states: Sequence[str], task_ids: Sequence[str] | None = None) -> int:
        """See :meth:`Queue.retry`."""
        check_retry_states(states)
        marks = ",".join("?" * len(states))
        reset = (
            "UPDATE tasks SET state = 'pending', attempts = 0, solo = 0, worker = NULL, lease_expires = NULL,"
            f" reason = NULL WHERE state IN ({marks})"
        )
        with self._tx():
            if task_ids is None:
                return self._db.execute(reset, tuple(states)).rowcount
            self._require(task_ids)
            before = self._db.total_changes
            self._db.executemany(reset + " AND id = ?", [(*states, tid) for tid in task_ids])
            return self._db.total_changes - before

    def durability_warning(self) -> str | None:
        """See :meth:`Queue.durability_warning`: None, a WAL file survives a restart."""
        return None

    def close(self) -> None:
        """See :meth:`Queue.close`."""
        with self._lock:
            self._db.close()
            if self._lock_file is not None:
                self._lock_file.close()
                self._lock_file = None

    def _require(self, task_ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(task_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found = {r[0] for r in self._db.execute(f"SELECT id FROM tasks WHERE id IN ({marks})", chunk)}
            missing = [tid for tid in chunk if tid not in found]
            if missing:
                raise UnknownTask(f"{self.path}: no such task: {', '.join(missing[:5])}")


def _open_lock_file(path: Path) -> BinaryIO | None:
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


def _flock(lock: BinaryIO, timeout_s: float, path: Path) -> None:
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


def _statements() -> list[str]:
    return [s.strip() for s in _SCHEMA.split(";") if s.strip()]


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) under the connection's thread lock
    and the queue's ``flock`` (see the module docstring).

    IMMEDIATE takes the write lock up front, so a claim's read and its updates see one state and k
    tasks are leased atomically; other processes wait up to the busy timeout.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.Lock,
        path: Path,
        lock_file: BinaryIO | None = None,
        timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self._db, self._lock, self._path, self._lock_file, self._timeout_s = db, lock, path, lock_file, timeout_s
        self._flocked = False

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            if self._lock_file is not None:
                _flock(self._lock_file, self._timeout_s, self._path)
                self._flocked = True
            self._db.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, OSError) as exc:
            self._unlock()
            raise QueueUnavailable(f"{self._path}: cannot lock the sqlite queue: {exc}") from exc
        except BaseException:  # QueueUnavailable from the flock wait, KeyboardInterrupt: never keep a lock
            self._unlock()
            raise

    def _unlock(self) -> None:
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
