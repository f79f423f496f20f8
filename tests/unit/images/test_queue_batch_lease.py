"""Batch leases, on every backend: one lease record per claimed batch, partial completion, expiry, extend and the
failure of one item of a batch; and the upgrade of queues written with a lease per task."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
import redis

from gpuprov.images.queue import Queue, QueueStats, QueueUnavailable, open_queue, task_id
from gpuprov.images.queue.redis import RedisQueue
from gpuprov.images.queue.sqlite import SqliteQueue

SHORT = 0.5  # seconds: a lease the tests let expire


def _paths(n: int) -> list[dict[str, str]]:
    return [{"path": f"/img/{i:04d}.png"} for i in range(n)]


def _expire() -> None:
    time.sleep(SHORT + 0.15)


def _leases(queue: Queue) -> int:
    """How many lease records the queue holds."""
    if isinstance(queue, SqliteQueue):
        return int(queue._db.execute("SELECT COUNT(*) FROM leases").fetchone()[0])
    assert isinstance(queue, RedisQueue)
    return int(queue._r.zcard(queue._k["lease_exp"]))


def test_a_batch_has_one_lease_that_goes_with_its_last_task(queue: Queue) -> None:
    queue.submit(_paths(6))
    a, b = queue.claim("a", 4, 30), queue.claim("b", 2, 30)
    assert _leases(queue) == 2
    assert queue.complete("a", [(t.id, {"shard": t.shard}) for t in a[:2]]) == 2  # part of the batch
    queue.fail("a", a[2].id, "corrupt PNG header", retry=False)  # one item of it fails
    assert _leases(queue) == 2
    assert queue.stats() == QueueStats(pending=0, leased=3, done=2, failed=1, dead=0)
    assert queue.complete("a", [(a[3].id, {"shard": a[3].shard})]) == 1
    assert _leases(queue) == 1
    assert [s for s, _ in queue.results()] == [0, 1, 3]
    assert list(queue.failures()) == [(2, "failed", "corrupt PNG header", {"path": "/img/0002.png"})]
    assert queue.complete("b", [(t.id, {}) for t in b]) == 2
    assert _leases(queue) == 0


def test_a_batch_whose_lease_expires_midway_comes_back_task_by_task(queue: Queue) -> None:
    """The worker finished one task of four, then stalled: the other three come back alone, one per claim; its
    late completion of the whole batch adds rows only for tasks nobody finished, never a second row."""
    queue.submit(_paths(4))
    batch = queue.claim("a", 4, SHORT)
    queue.complete("a", [(batch[0].id, {"by": "a"})])
    _expire()
    again = [queue.claim("b", 4, 30) for _ in range(3)]
    assert [[(t.id, t.attempts) for t in got] for got in again] == [[(t.id, 2)] for t in batch[1:]]
    assert queue.claim("b", 4, 30) == []
    assert queue.complete("b", [(again[0][0].id, {"by": "b"})]) == 1
    assert queue.complete("a", [(t.id, {"by": "a"}) for t in batch]) == 2  # the two b has not finished
    assert queue.complete("b", [(got[0].id, {"by": "b"}) for got in again]) == 0
    assert [(s, row["by"]) for s, row in queue.results()] == [(0, "a"), (1, "b"), (2, "a"), (3, "a")]
    assert queue.stats() == QueueStats(pending=0, leased=0, done=4, failed=0, dead=0)
    assert _leases(queue) == 0


def test_an_expired_lease_frees_all_its_tasks_at_once(queue: Queue) -> None:
    """Once a claim saw the lease expired, its worker holds none of its tasks: extending or failing them is too late."""
    queue.submit(_paths(3))
    batch = queue.claim("a", 3, SHORT)
    _expire()
    assert [t.id for t in queue.claim("b", 3, 30)] == [batch[0].id]
    queue.extend("a", [t.id for t in batch], 30)
    queue.fail("a", batch[1].id, "CUDA OOM", retry=False)
    assert [[t.id for t in queue.claim("c", 3, 30)] for _ in range(2)] == [[batch[1].id], [batch[2].id]]
    assert queue.stats() == QueueStats(pending=0, leased=3, done=0, failed=0, dead=0)


def test_extend_renews_a_whole_batch_and_splits_off_a_part(queue: Queue) -> None:
    queue.submit(_paths(7))
    whole = queue.claim("a", 4, SHORT)
    part = queue.claim("a", 3, SHORT)
    queue.complete("a", [(whole[0].id, {})])
    queue.extend("a", [t.id for t in whole], 30)  # the done task is skipped; the lease is one record still
    queue.extend("a", [part[0].id, part[2].id], 30)  # two of three: they get a lease of their own
    assert _leases(queue) == 3
    _expire()
    assert [t.id for t in queue.claim("b", 7, 30)] == [part[1].id]
    assert queue.claim("b", 7, 30) == []
    assert queue.complete("a", [(t.id, {}) for t in [*whole[1:], part[0], part[2]]]) == 5
    assert _leases(queue) == 1  # b's


def test_a_failed_item_goes_back_while_the_rest_of_its_batch_stays_leased(queue: Queue) -> None:
    queue.submit(_paths(3))
    t0, t1, t2 = queue.claim("a", 3, SHORT)
    queue.fail("a", t1.id, "CUDA OOM", retry=True)
    queue.extend("a", [t0.id, t1.id, t2.id], 30)  # t1 is no longer a's
    _expire()
    (back,) = queue.claim("b", 3, 30)
    assert (back.id, back.attempts) == (t1.id, 2)
    assert queue.complete("a", [(t0.id, {}), (t2.id, {})]) == 2
    assert queue.complete("b", [(back.id, {})]) == 1
    assert queue.stats() == QueueStats(pending=0, leased=0, done=3, failed=0, dead=0)
    assert _leases(queue) == 0


_SCHEMA_2 = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema', '2');
CREATE TABLE tasks (id TEXT PRIMARY KEY, shard INTEGER NOT NULL UNIQUE, payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0, solo INTEGER NOT NULL DEFAULT 0,
    worker TEXT, lease_expires REAL, reason TEXT);
CREATE INDEX tasks_state_shard ON tasks (state, shard);
CREATE INDEX tasks_state_lease ON tasks (state, lease_expires);
CREATE TABLE results (task_id TEXT PRIMARY KEY REFERENCES tasks (id), row TEXT NOT NULL);
"""


def test_a_sqlite_queue_of_schema_2_is_upgraded_keeping_leases_results_and_failures(tmp_path: Path) -> None:
    path, ids = tmp_path / "old.db", [task_id(f"/img/{i}.png") for i in range(7)]
    later = time.time() + 60
    # shard: state, attempts, solo, worker, lease_expires, reason
    old = [
        ("done", 1, 0, None, None, None),
        ("leased", 1, 0, "w1", later, None),  # one batch of w1's
        ("leased", 1, 0, "w1", later, None),
        ("leased", 5, 1, "w2", time.time() - 1, None),  # claimed alone, out of attempts, expired
        ("failed", 1, 0, None, None, "corrupt PNG header"),
        ("pending", 0, 0, None, None, None),  # retried
        ("pending", 0, 0, None, None, None),  # never claimed
    ]
    with sqlite3.connect(path) as db:
        db.executescript(_SCHEMA_2)
        db.executemany(
            "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(ids[i], i, f'{{"path":"/img/{i}.png"}}', *row) for i, row in enumerate(old)],
        )
        db.execute("INSERT INTO results VALUES (?, ?)", (ids[0], '{"out":0}'))
    db.close()
    q = SqliteQueue(path)
    try:
        assert q.stats() == QueueStats(pending=2, leased=3, done=1, failed=1, dead=0)
        assert list(q.results()) == [(0, {"out": 0})]
        assert _leases(q) == 2
        assert [t.shard for t in q.claim("x", 10, 30)] == [5, 6]  # w2's task is dead; w1's lease holds
        assert [(s, state) for s, state, _, _ in q.failures()] == [(3, "dead"), (4, "failed")]
        q.extend("w1", ids[1:3], 30)
        assert q.complete("w1", [(ids[1], {"out": 1}), (ids[2], {"out": 2})]) == 2
        assert q.stats() == QueueStats(pending=0, leased=2, done=3, failed=1, dead=1)
    finally:
        q.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() == ("3",)
    db.close()


def test_a_sqlite_queue_of_a_later_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SqliteQueue(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '9' WHERE name = 'schema'")
    db.close()
    with pytest.raises(QueueUnavailable, match="queue schema 9, this gpuprov reads schemas 1 to 3"):
        SqliteQueue(path)


def test_a_redis_queue_with_a_lease_per_task_is_converted(redis_url: str) -> None:
    """Layout 1 (gpuprov before batch leases): each leased task had its own expiry in ``<stream>:leases`` (0: retried),
    its worker in ``<stream>:owner``. Opening converts it: the leases hold, the retried task is claimable."""
    stream = f"old-{uuid.uuid4().hex[:12]}"
    url = f"{redis_url}?stream={stream}"
    q = open_queue(url)
    q.submit(_paths(4))
    claimed = q.claim("w", 3, 30)
    q.close()
    r = redis.Redis.from_url(redis_url)
    ids = [t.id for t in claimed]
    r.delete(*(f"{stream}:{key}" for key in ("layout", "lease_exp", "lease_info", "lease_of", "lease_seq")))
    r.zadd(f"{stream}:leases", {ids[0]: int(time.time() * 1000) + 60_000, ids[1]: int(time.time() * 1000) + 60_000,
                                ids[2]: 0})  # fmt: skip
    r.hset(f"{stream}:owner", mapping={ids[0]: "w", ids[1]: "w"})
    r.hset(f"{stream}:state", ids[2], "pending")
    r.hincrby(f"{stream}:counts", "leased", -1)
    r.hincrby(f"{stream}:counts", "pending", 1)
    q = open_queue(url)
    try:
        assert r.get(f"{stream}:layout") == b"2"
        assert r.exists(f"{stream}:leases", f"{stream}:owner") == 0
        assert [t.shard for t in q.claim("x", 4, 30)] == [2, 3]
        q.extend("w", ids[:2], 30)
        assert q.complete("w", [(tid, {}) for tid in ids[:2]]) == 2
        assert q.stats() == QueueStats(pending=0, leased=2, done=2, failed=0, dead=0)
    finally:
        q.close()
    r.set(f"{stream}:layout", 9)
    with pytest.raises(QueueUnavailable, match="queue key layout 9, this gpuprov reads layouts 1 to 2"):
        open_queue(url)
    r.close()


def test_sqlite_submit_and_retry_are_synced_the_rest_is_not(tmp_path: Path) -> None:
    """``synchronous = FULL`` for the transactions a person waits on (a power loss must not take back a submit or a
    retry); NORMAL for the workers' claims and completions, which a power loss may only make run again."""
    q = SqliteQueue(tmp_path / "q.db")
    statements: list[str] = []
    q._db.set_trace_callback(statements.append)
    try:
        assert q.submit(_paths(2)) == 2
        (t, _) = q.claim("w", 2, 30)
        q.fail("w", t.id, "corrupt", retry=False)
        assert q.retry(["failed"]) == 1
        synced = [s for s in statements if s.startswith(("PRAGMA synchronous", "BEGIN"))]
        assert synced == ["PRAGMA synchronous = FULL", "BEGIN IMMEDIATE", "PRAGMA synchronous = NORMAL"] + [
            "BEGIN IMMEDIATE"
        ] * 2 + ["PRAGMA synchronous = FULL", "BEGIN IMMEDIATE", "PRAGMA synchronous = NORMAL"]
        assert q._db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    finally:
        q.close()


def test_a_task_completed_before_anyone_claimed_it_is_never_handed_out(queue: Queue) -> None:
    queue.submit(_paths(4))
    first = queue.claim("a", 1, 30)
    assert queue.complete("b", [(task_id("/img/0002.png"), {"by": "b"})]) == 1
    assert queue.stats() == QueueStats(pending=2, leased=1, done=1, failed=0, dead=0)
    assert [t.shard for t in queue.claim("a", 4, 30)] == [1, 3]
    assert queue.complete("a", [(t.id, {"by": "a"}) for t in first]) == 1
    assert queue.stats() == QueueStats(pending=0, leased=2, done=2, failed=0, dead=0)
    assert [s for s, _ in queue.results()] == [0, 2]
