"""The embedded queue: one sqlite file in WAL mode, shared by the worker processes of one host.

Every state change is one sqlite transaction, so ``kill -9`` of any process at any moment leaves
the file consistent: a claim either happened (the lease is in the file and expires) or did not.
Opening a queue never touches in-flight tasks; only leases past their expiry are reclaimable.

Claims, leases and results move per batch: a claim takes its tasks in one statement per run of
consecutive shards (new tasks are one run from the ``cursor``), writes one lease row that its tasks point
at, and renewing the lease is one update of that row. A completion writes its result rows with one
statement (``executemany``) and marks its tasks done by runs of shards. The tables are described in
:mod:`gpuprov.images.queue._sqlite_schema`, the write lock in :mod:`gpuprov.images.queue._sqlite_lock`.

Lease expiry times are wall-clock seconds (``time.time()``), because several processes compare
them and a monotonic clock is per boot, not shared. A wall clock stepped forward expires leases
early (a task is then processed twice, with one result row); stepped back, it delays reclaiming a
dead worker's tasks by the step. Keep hosts on NTP.

One :class:`SqliteQueue` per process (never share one across ``fork``); it is safe to use from
several threads of that process. The file must be on a local filesystem (WAL needs shared memory).
Written for sqlite 3.31 (Ubuntu 20.04's) and later, with its JSON functions (built in since sqlite 3.38;
Debian's and Ubuntu's older packages have them); tested with 3.40.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from gpuprov.images.queue._sqlite_lock import BUSY_TIMEOUT_S, Transaction, open_lock_file
from gpuprov.images.queue._sqlite_schema import prepare
from gpuprov.images.queue.base import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    QueueStats,
    QueueUnavailable,
    Task,
    UnknownTask,
    check_claim_args,
    check_config,
    check_retry_states,
    dump_json,
    task_id,
    task_key,
)

log = logging.getLogger(__name__)

_PAGE = 1000
# id -> shard, for ids that come as one JSON array
_BY_ID = "SELECT j.value, i.shard FROM json_each(?) j CROSS JOIN inputs i ON i.id = j.value"
_BY_SHARDS = (
    "SELECT t.shard, t.state, t.lease, l.worker FROM tasks t LEFT JOIN leases l ON l.lease = t.lease"
    " WHERE t.shard >= ? AND t.shard <= ?"
)
_DROP_EMPTY_LEASE = "DELETE FROM leases WHERE lease = ? AND NOT EXISTS (SELECT 1 FROM tasks WHERE lease = ?)"
MEMO_MAX = 1 << 17
"""Most task ids whose shard a queue object remembers from its claims (then it forgets them all and looks them
up in the file): more than the few batches a worker holds at once."""


class SqliteQueue:
    """A :class:`gpuprov.images.queue.base.Queue` in one sqlite file (created if missing).

    ``max_attempts``: claims before a task is dead-lettered. ``lease_s``: the default lease in
    seconds, for callers that have none of their own. ``busy_timeout_s``: how long a transaction
    waits for another process's write lock before :class:`QueueUnavailable` is raised.
    Raises :class:`QueueUnavailable` if the file cannot be opened, is not a gpuprov queue, or was written by a
    later gpuprov (an earlier one's file is upgraded in place).
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
        # id -> shard of the tasks this object claimed and has not completed or failed: shards never change, and a
        # completion finds its tasks by shard (an integer key) instead of by id
        self._memo: dict[str, int] = {}
        folder = self.path.resolve().parent  # a missing "rel/.." is taken lexically, as sqlite takes it
        if not folder.is_dir():
            raise QueueUnavailable(
                f"{self.path}: the folder {folder} does not exist; create it first "
                "(the queue file is created, its folder is not)"
            )
        try:
            self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            try:
                self._db.execute("SELECT json_array_length(?)", ("[]",))
            except sqlite3.OperationalError as exc:
                raise QueueUnavailable(
                    f"{self.path}: this sqlite ({sqlite3.sqlite_version}) has no JSON functions ({exc}); the queue "
                    "needs sqlite 3.38 or later, or an older one built with JSON1 (as Debian's and Ubuntu's are)"
                ) from exc
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise QueueUnavailable(f"{self.path}: sqlite refused WAL mode (got {mode!r}); use a local filesystem")
            # NORMAL is durable against a killed process (the WAL is in the OS cache); a power
            # loss may drop the last transactions, which only means some tasks run again (docs/queues.md).
            self._db.execute("PRAGMA synchronous = NORMAL")
            with self._tx():
                prepare(self._db)
        except ValueError as exc:
            raise QueueUnavailable(f"{self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise QueueUnavailable(f"{self.path}: cannot open the sqlite queue: {exc}") from exc
        self._lock_file = open_lock_file(self.path)

    def _tx(self, durable: bool = False) -> Transaction:
        return Transaction(self._db, self._lock, self.path, self._lock_file, self._busy_timeout_s, durable)

    def submit(self, payloads: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Queue.submit`. One statement for all the payloads; each new one takes the next shard. On disk
        when it returns (a power loss cannot take it back)."""
        rows = [(task_id(task_key(p)), dump_json(p, "task payload")) for p in payloads]
        with self._tx(durable=True):
            (first,) = self._db.execute("SELECT COALESCE(MAX(shard) + 1, 0) FROM inputs").fetchone()
            before = self._db.total_changes
            self._db.executemany(
                "INSERT OR IGNORE INTO inputs (shard, id, payload)"
                " SELECT (SELECT COALESCE(MAX(shard) + 1, 0) FROM inputs), ?, ?",
                rows,
            )
            new = self._db.total_changes - before
            self._db.execute("INSERT INTO tasks (shard) SELECT shard FROM inputs WHERE shard >= ?", (first,))
        log.debug("submitted %d new of %d tasks to %s", new, len(rows), self.path)
        return new

    def claim(self, worker: str, k: int, lease_s: float) -> list[Task]:
        """See :meth:`Queue.claim`. Expired leases are freed (all their tasks at once) and one of their tasks is
        claimed alone, before any other; else tasks put back (retried) and then new ones, lowest shard first.
        The claimed tasks share one lease row. Under the write lock only the task rows change; their ids and
        payloads, which never change, are read after the commit."""
        check_claim_args(worker, k, lease_s)
        with self._tx():
            now = time.time()
            self._free_expired(now)
            taken = self._db.execute(
                "SELECT shard, attempts FROM tasks WHERE state = 'expired' ORDER BY shard LIMIT 1"
            ).fetchall()
            if not taken:  # else the task of an expired lease goes alone
                taken = self._requeued(k)
                if len(taken) < k:
                    taken += self._new(k - len(taken))
            if taken:
                lease = self._db.execute(
                    "INSERT INTO leases (worker, expires, solo) VALUES (?, ?, ?)",
                    (worker, now + lease_s, int(len(taken) == 1)),
                ).lastrowid
                self._db.executemany(
                    "UPDATE tasks SET state = 'leased', attempts = attempts + 1, lease = ?"
                    " WHERE shard >= ? AND shard <= ?",
                    [(lease, lo, hi) for lo, hi in _runs([shard for shard, _ in taken])],
                )
        if not taken:
            return []
        with self._lock:
            rows = [
                row
                for lo, hi in _runs([shard for shard, _ in taken])
                for row in self._db.execute(
                    "SELECT shard, id, payload FROM inputs WHERE shard >= ? AND shard <= ?", (lo, hi)
                )
            ]
            if len(self._memo) + len(rows) > MEMO_MAX:
                self._memo.clear()
            self._memo.update((tid, shard) for shard, tid, _ in rows)
        payloads = json.loads(f"[{','.join(r[2] for r in rows)}]")  # one parse for the batch
        return [
            Task(tid, shard, payload, attempts + 1)  # positional: half the time of keywords, for 1000s of tasks
            for (shard, tid, _), (_, attempts), payload in zip(rows, taken, payloads, strict=True)
        ]

    def _free_expired(self, now: float) -> None:
        """Free every lease that expired by ``now``: its tasks wait to be claimed alone (``expired``), except
        one that was claimed alone and used its last attempt: that one is dead."""
        for lease, holder, solo in self._db.execute(
            "SELECT lease, worker, solo FROM leases WHERE expires <= ?", (now,)
        ).fetchall():
            if solo:
                self._db.execute(
                    "UPDATE tasks SET state = 'dead', lease = NULL, reason = 'lease of worker ' || ?"
                    " || ' expired after ' || attempts || ' of ' || ? || ' attempts, the last one alone in its claim'"
                    " WHERE lease = ? AND attempts >= ?",
                    (holder, self.max_attempts, lease, self.max_attempts),
                )
            self._db.execute("UPDATE tasks SET state = 'expired', lease = NULL WHERE lease = ?", (lease,))
            self._db.execute("DELETE FROM leases WHERE lease = ?", (lease,))

    def _requeued(self, k: int) -> list[tuple[int, int]]:
        """``(shard, attempts)`` of up to ``k`` tasks put back to pending (retried), lowest shard first; those that
        used their attempts (retried that often, or ``max_attempts`` lowered since) are dead instead."""
        taken: list[tuple[int, int]] = []
        after = -1
        while len(taken) < k:
            rows = self._db.execute(
                "SELECT shard, attempts FROM tasks WHERE state = 'pending' AND shard > ? ORDER BY shard LIMIT ?",
                (after, k - len(taken)),
            ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            for shard, attempts in rows:
                if attempts >= self.max_attempts:
                    self._db.execute(
                        "UPDATE tasks SET state = 'dead', reason = ? WHERE shard = ?",
                        (f"retried after {attempts} of {self.max_attempts} attempts", shard),
                    )
                else:
                    taken.append((shard, attempts))
        return taken

    def _new(self, k: int) -> list[tuple[int, int]]:
        """``(shard, 0)`` of up to ``k`` never-claimed tasks, lowest shard first: from the cursor on, every task is new
        but one completed unclaimed; moves the cursor past them."""
        (cursor,) = self._db.execute("SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'cursor'").fetchone()
        shards = self._db.execute(
            "SELECT shard FROM tasks WHERE shard >= ? AND state = 'new' ORDER BY shard LIMIT ?", (cursor, k)
        ).fetchall()
        if shards:
            self._db.execute("UPDATE meta SET value = ? WHERE name = 'cursor'", (str(shards[-1][0] + 1),))
        return [(shard, 0) for (shard,) in shards]

    def extend(self, worker: str, task_ids: Sequence[str], lease_s: float) -> None:
        """See :meth:`Queue.extend`. A lease all of whose tasks are named is renewed with one update of its row;
        tasks named from a lease whose other tasks are not move to a new lease of their own."""
        check_claim_args(worker, 1, lease_s)
        with self._tx():
            expires = time.time() + lease_s
            named: dict[int, list[int]] = {}
            for shard, _, lease, holder in self._find(task_ids, strict=False).values():
                if lease is not None and holder == worker:
                    named.setdefault(lease, []).append(shard)
            for lease, shards in named.items():
                (held,) = self._db.execute("SELECT COUNT(*) FROM tasks WHERE lease = ?", (lease,)).fetchone()
                if held == len(shards):
                    self._db.execute("UPDATE leases SET expires = ? WHERE lease = ?", (expires, lease))
                    continue
                part = self._db.execute(
                    "INSERT INTO leases (worker, expires, solo) SELECT worker, ?, solo FROM leases WHERE lease = ?",
                    (expires, lease),
                ).lastrowid
                self._db.executemany(
                    "UPDATE tasks SET lease = ? WHERE shard >= ? AND shard <= ? AND lease = ?",
                    [(part, lo, hi, lease) for lo, hi in _runs(sorted(shards))],
                )

    def complete(self, worker: str, results: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """See :meth:`Queue.complete`. The new rows are written with one statement; the tasks' shards, which never
        change, are looked up before the write lock is taken."""
        rows = [(tid, dump_json(row, "result row")) for tid, row in results]
        if not rows:
            return 0
        with self._lock:
            shards = self._shards([tid for tid, _ in rows])
        new: dict[int, str] = {}
        for tid, row in rows:
            new.setdefault(shards[tid], row)  # the first row of a task named twice
        runs = _runs(sorted(new))
        with self._tx():
            before = self._db.total_changes
            # a task that is done has its row (both are written in one transaction): it is ignored here
            self._db.executemany("INSERT OR IGNORE INTO results (shard, row) VALUES (?, ?)", new.items())
            added = self._db.total_changes - before
            leases = {
                lease
                for lo, hi in runs
                for (lease,) in self._db.execute(
                    "SELECT DISTINCT lease FROM tasks NOT INDEXED"  # by the range of shards, not all leased tasks
                    " WHERE shard >= ? AND shard <= ? AND lease IS NOT NULL",
                    (lo, hi),
                )
            }
            self._db.executemany(
                "UPDATE tasks SET state = 'done', lease = NULL, reason = NULL"
                " WHERE shard >= ? AND shard <= ? AND state != 'done'",
                runs,
            )
            self._db.executemany(_DROP_EMPTY_LEASE, [(lease, lease) for lease in leases])
            for tid in shards:
                self._memo.pop(tid, None)
        if added < len(rows):
            log.debug("worker %s: %d of %d completions were already recorded", worker, len(rows) - added, len(rows))
        return added

    def fail(self, worker: str, task_id: str, reason: str, *, retry: bool) -> None:
        """See :meth:`Queue.fail`. The task leaves its lease; the rest of its batch keeps it."""
        with self._tx():
            shard, _, lease, holder = self._find([task_id])[task_id]
            self._memo.pop(task_id, None)
            if lease is None or holder != worker:
                log.debug("worker %s does not hold task %s; fail ignored", worker, task_id)
                return
            (attempts,) = self._db.execute("SELECT attempts FROM tasks WHERE shard = ?", (shard,)).fetchone()
            if not retry:
                state = "failed"
            elif attempts >= self.max_attempts:
                state, reason = "dead", f"{reason} (after {attempts} of {self.max_attempts} attempts)"
            else:
                state = "pending"
            self._db.execute(
                "UPDATE tasks SET state = ?, reason = ?, lease = NULL WHERE shard = ?", (state, reason, shard)
            )
            self._db.execute(_DROP_EMPTY_LEASE, (lease, lease))

    def stats(self) -> QueueStats:
        """See :meth:`Queue.stats`. Counts from the partial indexes and the cursor (done is what is left), so the
        cost grows with the open and failed tasks, not with the queue."""
        with self._lock:
            # from the cursor on, a task is new or (completed unclaimed) done
            total, new, pending, leased, expired = self._db.execute(
                "SELECT top, top - c.at - (SELECT COUNT(*) FROM results WHERE shard >= c.at),"
                " (SELECT COUNT(*) FROM tasks WHERE state = 'pending'),"
                " (SELECT COUNT(*) FROM tasks WHERE lease IS NOT NULL),"
                " (SELECT COUNT(*) FROM tasks WHERE state = 'expired')"
                " FROM (SELECT CAST(value AS INTEGER) AS at FROM meta WHERE name = 'cursor') c,"
                " (SELECT COALESCE(MAX(shard) + 1, 0) AS top FROM tasks)"
            ).fetchone()
            ended = dict(
                self._db.execute(
                    "SELECT state, COUNT(*) FROM tasks WHERE state IN ('failed', 'dead') GROUP BY state"
                ).fetchall()
            )
        failed, dead = ended.get("failed", 0), ended.get("dead", 0)
        open_ = new + pending + leased + expired
        return QueueStats(new + pending, leased + expired, total - open_ - failed - dead, failed, dead)

    def results(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """See :meth:`Queue.results`. Parses a page of rows in one call."""
        for page in self._result_pages():
            rows = json.loads(f"[{','.join(row for _, row in page)}]")
            yield from zip((shard for shard, _ in page), rows, strict=True)

    def result_texts(self) -> Iterator[tuple[int, str]]:
        """See :meth:`Queue.result_texts`."""
        for page in self._result_pages():
            yield from page

    def _result_pages(self) -> Iterator[list[tuple[int, str]]]:
        """The results table in shard order, in pages of 1000 rows, so a long iteration holds no lock."""
        after = -1
        while True:
            with self._lock:
                page = self._db.execute(
                    "SELECT shard, row FROM results WHERE shard > ? ORDER BY shard LIMIT ?", (after, _PAGE)
                ).fetchall()
            yield page
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    def failures(self) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
        """See :meth:`Queue.failures`."""
        with self._lock:
            rows = self._db.execute(
                "SELECT t.shard, t.state, COALESCE(t.reason, ''), i.payload FROM tasks t JOIN inputs i"
                " ON i.shard = t.shard WHERE t.state IN ('failed', 'dead') ORDER BY t.shard"
            ).fetchall()
        yield from ((shard, state, reason, json.loads(payload)) for shard, state, reason, payload in rows)

    def retry(self, states: Sequence[str], task_ids: Sequence[str] | None = None) -> int:
        """See :meth:`Queue.retry`. On disk when it returns."""
        check_retry_states(states)
        reset = (
            "UPDATE tasks SET state = 'pending', attempts = 0, reason = NULL"
            f" WHERE state IN ({','.join('?' * len(states))})"
        )
        with self._tx(durable=True):
            if task_ids is None:
                return self._db.execute(reset, tuple(states)).rowcount
            found = self._find(task_ids)
            before = self._db.total_changes
            self._db.executemany(reset + " AND shard = ?", [(*states, shard) for shard, *_ in found.values()])
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

    def _shards(self, task_ids: Sequence[str], strict: bool = True) -> dict[str, int]:
        """``id -> shard`` for ``task_ids``: from the claims of this object, else looked up by id. With ``strict``,
        raises :class:`UnknownTask` (naming up to five) if the queue lacks any; else leaves them out."""
        ids = list(dict.fromkeys(task_ids))
        found = {tid: shard for tid in ids if (shard := self._memo.get(tid)) is not None}
        if len(found) < len(ids):
            found.update(self._db.execute(_BY_ID, (json.dumps([tid for tid in ids if tid not in found]),)))
            missing = [tid for tid in ids if tid not in found]
            if missing and strict:
                raise UnknownTask(f"{self.path}: no such task: {', '.join(missing[:5])}")
        return found

    def _find(self, task_ids: Sequence[str], strict: bool = True) -> dict[str, tuple[int, str, int | None, str | None]]:
        """``id -> (shard, state, lease, the lease's worker)`` for ``task_ids``; ``strict`` as for :meth:`_shards`."""
        by_shard = {shard: tid for tid, shard in self._shards(task_ids, strict).items()}
        return {
            by_shard[row[0]]: row
            for lo, hi in _runs(sorted(by_shard))
            for row in self._db.execute(_BY_SHARDS, (lo, hi))
        }


def _runs(shards: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending, distinct ``shards`` as runs of consecutive numbers, ``[(first, last), ...]``: a batch of new
    tasks is one run, so one statement execution updates it."""
    if not shards:
        return []
    if shards[-1] - shards[0] == len(shards) - 1:  # one run: the common case, found without a loop
        return [(shards[0], shards[-1])]
    runs: list[tuple[int, int]] = []
    first = last = shards[0]
    for shard in shards[1:]:
        if shard != last + 1:
            runs.append((first, last))
            first = shard
        last = shard
    runs.append((first, last))
    return runs
