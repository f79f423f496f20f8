"""The multi-host queue: a Redis Stream read through a consumer group, driven by Lua scripts.

Submit is ``XADD`` (entry id ``<shard>-1``, idempotent through a hash of task ids); claim frees expired leases
and takes one of their tasks alone (``XCLAIM`` of its pending entry to the claiming consumer, ``RETRYCOUNT`` =
attempts), else retried tasks and then new entries (``XREADGROUP ... COUNT k``); complete writes the batch's
new result rows with one ``HSET`` and one ``XACK`` + ``XDEL`` of their entries; fail is ``XACK`` plus a failure
record, or, to retry, leaves the entry pending and the task in the retried set. Each operation is one Lua script,
so it is atomic and a client killed mid-call leaves nothing half done.

Leases are per claimed batch: a sorted set of lease expiry times in milliseconds of the *Redis server's* clock
(``TIME``), so hosts with skewed clocks agree; each task points at its lease, extending a lease is one ``ZADD``,
and an expired lease frees all its tasks at once (each is then claimed alone). ``XAUTOCLAIM`` is not used for
reclaiming, because its min-idle time is one value per call, while leases here are per claim
(``claim(..., lease_s)``) and renewable (``extend``): a worker with a short lease would steal a long-leased
task. Attempts are kept in a hash and mirrored into the PEL delivery counter. The key layout is versioned
(``<stream>:layout``); a queue of the per-task-lease layout of earlier gpuprov is converted when opened.

Needs Redis >= 6.2 (tested with Debian bookworm's 7.0); not Redis Cluster unless the
stream name contains a ``{hash tag}``, since every script touches all of the queue's keys.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import redis as redis_lib

from gpuprov.images.queue._redis_lua import CLAIM, COMPLETE, EXTEND, FAIL, KEY_NAMES, LAYOUT, OPEN, RETRY, SUBMIT
from gpuprov.images.queue.base import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    STATES,
    QueueError,
    QueueLost,
    QueueMissing,
    QueueStats,
    QueueUnavailable,
    QueueURLError,
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

DEFAULT_STREAM = "gpuprov:images"
GROUP = "gpuprov-workers"
_BATCH = 1000


class RedisQueue:
    """A :class:`gpuprov.images.queue.base.Queue` on a Redis server.

    ``client``: a ``redis.Redis`` (its responses must not be decoded; ``from_url`` defaults are
    right). ``stream``: the stream key; the queue's other keys are ``<stream>:<name>``.
    ``max_attempts`` and ``lease_s`` (default lease, seconds) as for the sqlite queue.
    Raises :class:`QueueUnavailable` when the server cannot be reached, here or in any later call.
    """

    def __init__(
        self,
        client: redis_lib.Redis,
        *,
        stream: str = DEFAULT_STREAM,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_s: float = DEFAULT_LEASE_S,
        create: bool = True,
    ) -> None:
        check_config(max_attempts, lease_s)
        self.stream = stream
        self.max_attempts = max_attempts
        self.lease_s = lease_s
        self._r = client
        self._keys = [stream] + [f"{stream}:{name}" for name in KEY_NAMES[1:]]
        self._k = dict(zip(KEY_NAMES, self._keys, strict=True))
        self._scripts = {
            name: client.register_script(src)
            for name, src in (
                ("open", OPEN),
                ("submit", SUBMIT),
                ("claim", CLAIM),
                ("extend", EXTEND),
                ("complete", COMPLETE),
                ("fail", FAIL),
                ("retry", RETRY),
            )
        }
        try:
            if not create and not client.exists(stream):
                raise QueueMissing(
                    f"redis stream {stream}: no such stream on that server (a mistyped ?stream= or "
                    "database?); `gpuprov images submit` creates it"
                )
            try:
                client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis_lib.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            old = [f"{stream}:{name}" for name in ("leases", "owner", "solo")]
            layout = int(self._scripts["open"](keys=self._keys + old, args=[GROUP, LAYOUT]))
        except redis_lib.ResponseError as exc:
            if "out of range" in str(exc):  # the database number: above the server's `databases` or 2**31
                raise QueueURLError(
                    f"redis stream {stream}: the database number is out of range ({exc}); use "
                    "0 to the server's `databases` - 1"
                ) from exc
            raise QueueUnavailable(f"redis stream {stream}: cannot open the queue: {exc}") from exc
        except redis_lib.RedisError as exc:
            raise QueueUnavailable(f"redis stream {stream}: {exc}") from exc
        if layout != LAYOUT:
            raise QueueUnavailable(
                f"redis stream {stream}: queue key layout {layout}, this gpuprov reads layouts 1 to {LAYOUT} (a queue "
                "made by a later gpuprov: use that version, or submit the images to a new stream)"
            )

    def _run(self, name: str, args: Sequence[str | int | float]) -> Any:
        try:
            return self._scripts[name](keys=self._keys, args=[GROUP, *args])
        except redis_lib.ResponseError as exc:
            text = str(exc)
            if "UNKNOWN " in text:
                raise UnknownTask(f"redis stream {self.stream}: no such task: {text.split('UNKNOWN ', 1)[1]}") from exc
            if "NOGROUP" in text:  # the stream key, and its consumer group with it, is gone
                raise QueueLost(
                    f"redis stream {self.stream}: the stream is gone while the queue was in use (a Redis server "
                    "restarted without persistence, or the key was deleted); its tasks are lost. Turn on "
                    "appendonly, submit the images again and run once more"
                ) from exc
            raise QueueError(f"redis stream {self.stream}: {name} failed: {text}") from exc
        except redis_lib.RedisError as exc:
            raise QueueUnavailable(f"redis stream {self.stream}: {name} failed: {exc}") from exc

    def submit(self, payloads: Iterable[dict[str, Any]]) -> int:
        """See :meth:`Queue.submit`. Sent in batches of 1000 payloads, one script call (transaction) each."""
        args: list[str] = []
        for p in payloads:
            args += [task_id(task_key(p)), dump_json(p, "task payload")]
        new = 0
        for start in range(0, len(args), 2 * _BATCH):
            new += int(self._run("submit", args[start : start + 2 * _BATCH]))
        return new

    def claim(self, worker: str, k: int, lease_s: float) -> list[Task]:
        """See :meth:`Queue.claim`. Expired leases are freed and one of their tasks is claimed alone; else retried
        tasks, then new entries. The claimed tasks share one lease."""
        check_claim_args(worker, k, lease_s)
        flat = self._run("claim", [worker, k, _ms(lease_s), self.max_attempts])
        records = json.loads(b"[" + b",".join(flat[1::3]) + b"]")  # one parse for the batch
        return [
            Task(tid.decode(), int(record["shard"]), record["payload"], int(attempts))
            for tid, record, attempts in zip(flat[0::3], records, flat[2::3], strict=True)
        ]

    def extend(self, worker: str, task_ids: Sequence[str], lease_s: float) -> None:
        """See :meth:`Queue.extend`."""
        check_claim_args(worker, 1, lease_s)
        if task_ids:
            self._run("extend", [worker, _ms(lease_s), *dict.fromkeys(task_ids)])

    def complete(self, worker: str, results: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """See :meth:`Queue.complete`."""
        args: list[str] = []
        for tid, row in results:
            args += [tid, dump_json(row, "result row")]
        return int(self._run("complete", args)) if args else 0

    def fail(self, worker: str, task_id: str, reason: str, *, retry: bool) -> None:
        """See :meth:`Queue.fail`."""
        if self._run("fail", [worker, task_id, reason, int(retry), self.max_attempts]) == 0:
            log.debug("worker %s does not hold task %s; fail ignored", worker, task_id)

    def retry(self, states: Sequence[str], task_ids: Sequence[str] | None = None) -> int:
        """See :meth:`Queue.retry`."""
        check_retry_states(states)
        if task_ids is not None and not task_ids:
            return 0
        return int(self._run("retry", [len(states), *states, *(task_ids or [])]))

    def stats(self) -> QueueStats:
        """See :meth:`Queue.stats`."""
        values = self._call(self._r.hmget, self._k["counts"], list(STATES))
        return QueueStats(*(int(v or 0) for v in values))

    def results(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """See :meth:`Queue.results`."""
        for shard, row in self.result_texts():
            yield shard, load_json(row)

    def result_texts(self) -> Iterator[tuple[int, str]]:
        """See :meth:`Queue.result_texts`. Reads in pages of 1000 by shard."""
        for page in self._pages("done"):
            rows = self._call(self._r.hmget, self._k["result"], [tid for _, tid in page])
            for (shard, _), row in zip(page, rows, strict=True):
                if row is not None:  # a done task always has its row
                    yield shard, row.decode()

    def failures(self) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
        """See :meth:`Queue.failures`."""
        for page in self._pages("failed"):
            ids = [tid for _, tid in page]
            states = self._call(self._r.hmget, self._k["state"], ids)
            reasons = self._call(self._r.hmget, self._k["failure"], ids)
            records = self._call(self._r.hmget, self._k["task"], ids)
            for (shard, _), state, reason, record in zip(page, states, reasons, records, strict=True):
                if state in (b"failed", b"dead"):
                    payload = load_json(record)["payload"] if record else {}
                    yield shard, state.decode(), (reason or b"").decode(), payload

    def _pages(self, zset: str) -> Iterator[list[tuple[int, bytes]]]:
        after = "-inf"
        while True:
            page = self._call(self._r.zrangebyscore, self._k[zset], after, "+inf", start=0, num=_BATCH, withscores=True)
            if page:
                yield [(int(score), tid) for tid, score in page]
            if len(page) < _BATCH:
                return
            after = f"({int(page[-1][1])}"

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis_lib.RedisError as exc:
            raise QueueUnavailable(f"redis stream {self.stream}: {exc}") from exc

    def durability_warning(self) -> str | None:
        """See :meth:`Queue.durability_warning`: from ``CONFIG GET appendonly`` and ``save``; None when
        ``CONFIG`` is refused (a managed Redis often renames it)."""
        try:
            config = self._r.config_get("appendonly") | self._r.config_get("save")
        except redis_lib.RedisError as exc:
            log.debug("redis stream %s: cannot read the persistence settings: %s", self.stream, exc)
            return None
        text = {_str(k): _str(v) for k, v in config.items()}
        if text.get("appendonly") == "yes" or text.get("save", "").strip():
            return None
        return (
            "the Redis server has neither appendonly nor RDB snapshots (save) on: a restart empties the queue "
            "and its results; set `appendonly yes` (docs/queues.md)"
        )

    def close(self) -> None:
        """See :meth:`Queue.close`."""
        self._r.close()


def _str(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
