r"""The queue interface that image workers code against, and what every backend shares.

A queue holds one task per input image. A task moves through these states::

    pending --claim--> leased --complete--> done
       ^                 |  \--fail(retry=False)--> failed
       |                 |---fail(retry=True)--> pending, or dead once attempts >= max_attempts
       \--lease expired--/  (reclaimed alone by the next claim; dead instead once attempts >= max_attempts
                            and the expired lease was one the task held alone)

Guarantee: at-least-once processing with exactly-once visible results. A worker may be killed
(``kill -9``) at any moment; its leased tasks become claimable again when their lease expires, so
no task is lost, and :meth:`Queue.complete` records at most one result row per task, so a task that
was processed twice still has one row. Outputs written outside the queue must be idempotent too
(write to a temporary file, then ``os.replace`` onto a name derived from :attr:`Task.id`).

Times are seconds (floats). Errors are :class:`QueueError` subclasses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuprov.exceptions import ConfigError, EnvironmentMissing, GpuprovError

DEFAULT_MAX_ATTEMPTS = 5
"""Claims a task may get before it is dead-lettered (see :meth:`Queue.claim` for which expired leases count)."""
DEFAULT_LEASE_S = 60.0
"""Default lease (visibility timeout) in seconds."""

STATES = ("pending", "leased", "done", "failed", "dead")


class QueueError(GpuprovError):
    """A queue operation failed (exit 2: a usage error unless a subclass says otherwise)."""


class QueueURLError(QueueError, ConfigError):
    """A queue URL or option is invalid: unknown scheme, bad query value. Exit 2."""


class QueueUnavailable(QueueError, EnvironmentMissing):
    """The queue's store cannot be opened or reached (sqlite file, Redis server). Exit 4."""


class QueueLost(QueueError, EnvironmentMissing):
    """The queue lost tasks it held: it shrank or vanished while a run used it, or holds fewer results
    than the manifest made from it (a Redis server restarted without persistence, a queue file
    replaced). Exit 4; a restart of the worker cannot bring the tasks back."""


class QueueMissing(QueueError, ConfigError):
    """A command that only reads a queue (``status``) was pointed at one that does not exist. Exit 2."""


class UnknownTask(QueueError):
    """An operation named a task id that the queue does not hold. Exit 2."""


@dataclass(frozen=True)
class Task:
    """One claimed unit of work."""

    id: str
    """Stable task id: the queue's key for this input (see :func:`task_id`)."""
    shard: int
    """Submission order number (0..n-1); results are merged in shard order."""
    payload: dict[str, Any]
    """The JSON-able payload given at submit: ``{"path": str, ...}``."""
    attempts: int
    """Times claimed so far, including this claim."""


@dataclass(frozen=True)
class QueueStats:
    """Task counts per state. ``leased`` includes leases that expired but are not yet reclaimed."""

    pending: int
    leased: int
    done: int
    failed: int
    dead: int

    @property
    def total(self) -> int:
        """All tasks ever submitted."""
        return self.pending + self.leased + self.done + self.failed + self.dead

    @property
    def open(self) -> int:
        """Tasks that still need a worker (pending or leased)."""
        return self.pending + self.leased


class Queue(Protocol):
    """A durable work queue with leases, attempts and a dead-letter state; see the module docstring."""

    def submit(self, payloads: Iterable[dict[str, Any]]) -> int:
        """Add tasks; returns the number of NEW tasks.

        Idempotent: a payload whose key (``payload["key"]`` if given, else ``payload["path"]``) is
        already queued, in any state, is ignored. New tasks get the next shard numbers in order.
        Raises :class:`QueueError` for a payload without a string key or path, or that is not JSON-able.
        """
        ...

    def claim(self, worker: str, k: int, lease_s: float) -> list[Task]:
        """Lease up to ``k`` tasks to ``worker`` for ``lease_s`` seconds, atomically (one transaction).

        Pending tasks and tasks whose lease expired (their worker died or stalled) are claimable;
        each claim increments :attr:`Task.attempts`. A task whose lease expired is returned alone
        (a one-task claim, before any pending task), so a crash that one image causes is charged
        to it and not to the healthy images that shared its batch. A task goes ``dead`` instead of
        being returned when a lease it held alone in its claim expired and it already had
        ``max_attempts`` claims (or when it was retried that often). Returns ``[]`` when nothing is
        claimable now (other tasks may still be leased).
        """
        ...

    def extend(self, worker: str, task_ids: Sequence[str], lease_s: float) -> None:
        """Renew ``worker``'s leases on ``task_ids`` to ``lease_s`` seconds from now.

        Ids that ``worker`` no longer holds (reclaimed by another worker, completed, failed) are
        skipped silently: completing them later is still safe.
        """
        ...

    def complete(self, worker: str, results: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Record ``(task_id, result row)`` pairs and mark the tasks done; returns rows newly recorded.

        Idempotent: a task gets at most one row; a second completion (another worker that
        processed the same task after a lease expiry) is ignored. A completion is accepted from any
        state but ``done``, whoever holds the lease: the work was done. Raises :class:`UnknownTask`
        (recording nothing) if an id is not in the queue.
        """
        ...

    def fail(self, worker: str, task_id: str, reason: str, *, retry: bool) -> None:
        """Give up ``worker``'s lease on ``task_id``.

        ``retry=False``: the task is ``failed`` with ``reason`` (e.g. a corrupt image), for good.
        ``retry=True``: back to ``pending``, unless it had ``max_attempts`` claims: then ``dead``.
        A no-op when ``worker`` does not hold the lease (it expired and another worker has the
        task, or it is done). Raises :class:`UnknownTask` if the id is not in the queue.
        """
        ...

    def stats(self) -> QueueStats:
        """Current counts per state."""
        ...

    def results(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(shard, row)`` for each done task, in shard order, exactly one per task."""
        ...

    def result_texts(self) -> Iterator[tuple[int, str]]:
        """:meth:`results` as stored: ``(shard, row)`` with ``row`` the result's compact, key-sorted JSON text
        (:func:`dump_json`), for writers that copy rows without parsing them (the run's manifest)."""
        ...

    def failures(self) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
        """``(shard, state, reason, payload)`` for each failed or dead task, in shard order (the payload
        names the input, e.g. its ``path``)."""
        ...

    def retry(self, states: Sequence[str], task_ids: Sequence[str] | None = None) -> int:
        """Put failed or dead tasks back to ``pending`` with their attempts reset; returns how many moved.

        ``states``: a subset of ``("failed", "dead")``. ``task_ids``: only these (ids in another state
        are left as they are); None: every task in ``states``. Raises :class:`QueueError` for another
        state and :class:`UnknownTask` (moving nothing) for an id the queue does not hold.
        """
        ...

    def durability_warning(self) -> str | None:
        """Why the store may lose the queue on a restart (Redis with neither AOF nor RDB snapshots), or
        None when it keeps it or cannot tell."""
        ...

    def close(self) -> None:
        """Release the connection; the queue object must not be used afterwards."""
        ...


def task_key(payload: dict[str, Any]) -> str:
    """The idempotence key of a payload: ``payload["key"]`` if given, else ``payload["path"]``.

    Raises :class:`QueueError` when neither is a non-empty string.
    """
    key = payload.get("key", payload.get("path"))
    if not isinstance(key, str) or not key:
        raise QueueError(f"task payload needs a non-empty string 'key' or 'path': {payload!r}")
    return key


def task_id(key: str) -> str:
    """The stable task id for an idempotence key: hex sha256 of the key's bytes (UTF-8; a file name that is not
    UTF-8 keeps its own bytes, as Python's surrogate escapes hold them)."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


# one for all (it keeps no state); a value that holds itself raises RecursionError instead of ValueError
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False, check_circular=False)


def dump_json(value: dict[str, Any], what: str) -> str:
    """Compact, key-sorted JSON for a payload or row; raises :class:`QueueError` if it is not JSON-able."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise QueueError(f"{what} is not JSON-able: {exc}") from exc


def load_json(text: str | bytes) -> dict[str, Any]:
    """Parse a stored payload or row."""
    value: dict[str, Any] = json.loads(text)
    return value


MIN_LEASE_S = 0.001
"""Shortest lease, seconds: a lease must end after the claim that takes it (with a lease below the clock's
resolution a claim saw its own leases as expired and handed the same task out twice)."""
MAX_LEASE_S = 86400.0
"""Longest lease, seconds (a day): a lease is renewed while its worker works, so a longer one only delays the
reclaim of a dead worker's tasks."""


RETRY_STATES = ("failed", "dead")


def check_retry_states(states: Sequence[str]) -> None:
    """Raise :class:`QueueError` unless ``states`` is a non-empty subset of :data:`RETRY_STATES`."""
    wrong = [s for s in states if s not in RETRY_STATES]
    if wrong or not states:
        raise QueueError(f"retry takes tasks in states {' or '.join(RETRY_STATES)}, not {', '.join(wrong) or 'none'}")


def check_claim_args(worker: str, k: int, lease_s: float) -> None:
    """Validate the arguments shared by claim and extend; raises :class:`QueueError`."""
    if not worker:
        raise QueueError("worker name must be non-empty")
    if k < 1:
        raise QueueError(f"k must be >= 1, got {k}")
    if not lease_s >= MIN_LEASE_S:  # NaN fails too
        raise QueueError(f"lease_s must be at least {MIN_LEASE_S} seconds, got {lease_s}")


def check_config(max_attempts: int, lease_s: float) -> None:
    """Validate queue options; raises :class:`QueueURLError`."""
    if max_attempts < 1:
        raise QueueURLError(f"max_attempts must be >= 1, got {max_attempts}")
    if not MIN_LEASE_S <= lease_s <= MAX_LEASE_S:  # NaN and inf fail too
        raise QueueURLError(f"lease_s must be {MIN_LEASE_S} to {MAX_LEASE_S} seconds, got {lease_s}")
