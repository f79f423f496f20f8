"""The queue contract, run on every backend (sqlite and redis) through the ``queue`` fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from gpuprov.images.queue import Queue, QueueError, QueueStats, UnknownTask, open_queue, task_id

SHORT = 0.5  # seconds: a lease the tests let expire


def _paths(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"path": f"/img/{i:04d}.png"} for i in range(start, start + n)]


def _expire() -> None:
    time.sleep(SHORT + 0.15)


def test_submit_is_idempotent_and_numbers_shards_in_order(queue: Queue) -> None:
    assert queue.submit(_paths(3)) == 3
    assert queue.submit(_paths(5)) == 2  # 0..2 again, 3 and 4 new
    assert queue.submit([{"path": "/img/0001.png", "extra": 1}]) == 0  # keyed by path
    assert queue.submit([{"path": "/img/0001.png", "key": "other"}]) == 1  # explicit key wins
    assert queue.stats() == QueueStats(pending=6, leased=0, done=0, failed=0, dead=0)
    tasks = queue.claim("w", 10, 30)
    assert [t.shard for t in tasks] == list(range(6))
    assert tasks[0].payload == {"path": "/img/0000.png"}
    assert tasks[0].id == task_id("/img/0000.png")
    assert tasks[5].id == task_id("other")
    assert all(t.attempts == 1 for t in tasks)


def test_a_file_name_that_is_not_utf8_round_trips(queue: Queue) -> None:
    """A Latin-1 name (bytes 0xE9 0xFF) as os.listdir returns it: surrogate escapes, the file's own bytes."""
    path = "/img/" + b"caf\xe9\xff.jpg".decode("utf-8", "surrogateescape")
    assert queue.submit([{"path": path}]) == 1
    (task,) = queue.claim("w", 10, 30)
    assert task.payload == {"path": path} and task.id == task_id(path) != task_id("/img/caf.jpg")
    assert task_id(path) == task_id(path.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape"))


def test_submit_rejects_payload_without_key_or_path(queue: Queue) -> None:
    with pytest.raises(QueueError):
        queue.submit([{"size": 3}])
    with pytest.raises(QueueError):
        queue.submit([{"path": "/a", "bad": object()}])
    assert queue.stats().total == 0


def test_claim_takes_at_most_k_and_never_hands_out_a_task_twice(queue: Queue) -> None:
    queue.submit(_paths(10))
    a, b, c = queue.claim("a", 4, 30), queue.claim("b", 4, 30), queue.claim("c", 4, 30)
    assert (len(a), len(b), len(c)) == (4, 4, 2)
    assert len({t.id for t in a + b + c}) == 10
    assert queue.claim("d", 4, 30) == []
    assert queue.stats() == QueueStats(pending=0, leased=10, done=0, failed=0, dead=0)


def test_claim_validates_arguments(queue: Queue) -> None:
    for worker, k, lease in (("", 1, 1.0), ("w", 0, 1.0), ("w", 1, 0.0), ("w", 1, 1e-9), ("w", 1, float("nan"))):
        with pytest.raises(QueueError):
            queue.claim(worker, k, lease)


def test_expired_leases_come_back_one_per_claim_with_attempt_count(queue: Queue) -> None:
    queue.submit(_paths(3))
    first = queue.claim("dead-worker", 2, SHORT)
    assert queue.claim("b", 1, 30)[0].shard == 2  # the others are still leased
    _expire()
    again = [queue.claim("b", 2, 30), queue.claim("b", 2, 30)]
    assert [[t.id for t in got] for got in again] == [[first[0].id], [first[1].id]]
    assert [got[0].attempts for got in again] == [2, 2]
    assert queue.claim("b", 2, 30) == []


def test_a_crash_is_charged_only_to_the_task_alone_in_its_claim(queue: Queue) -> None:
    """A worker dies with a batch of four because of one image (its lease keeps expiring): the other three
    come back alone and are done; only the one that also killed its worker alone goes dead."""
    queue.submit(_paths(4))
    first = queue.claim("w1", 4, SHORT)
    poison = first[1].id
    _expire()
    for _ in range(12):
        got = queue.claim("w2", 4, SHORT)
        if not got:
            if queue.stats().open == 0:
                break
            _expire()
            continue
        assert len(got) == 1, got  # an expired lease comes back alone
        if got[0].id != poison:
            queue.complete("w2", [(got[0].id, {"ok": 1})])
    assert queue.stats() == QueueStats(pending=0, leased=0, done=3, failed=0, dead=1)
    ((shard, state, reason, _),) = queue.failures()
    assert (shard, state) == (1, "dead")
    assert "3 of 3 attempts, the last one alone in its claim" in reason


def test_a_task_out_of_attempts_is_not_dead_for_a_crash_in_a_shared_claim(queue: Queue) -> None:
    queue.submit(_paths(2))
    for _ in range(2):  # the fixture's max_attempts=3: two retries leave one attempt
        for t in queue.claim("a", 1, 30):
            queue.fail("a", t.id, "CUDA OOM", retry=True)
    shared = queue.claim("a", 2, SHORT)
    assert [t.attempts for t in shared] == [3, 1]
    _expire()
    (alone,) = queue.claim("b", 2, 30)  # the crash was not its own: once more, alone
    assert (alone.shard, alone.attempts) == (0, 4)
    assert queue.stats().dead == 0


def test_extend_keeps_the_lease_only_for_its_holder(queue: Queue) -> None:
    queue.submit(_paths(2))
    held = queue.claim("a", 2, SHORT)
    queue.extend("a", [held[0].id], 30)
    queue.extend("intruder", [held[1].id], 30)  # not the holder: ignored
    _expire()
    stolen = queue.claim("b", 2, 30)
    assert [t.id for t in stolen] == [held[1].id]
    queue.extend("a", [held[1].id], 30)  # lost lease: silently skipped
    assert queue.claim("c", 2, 30) == []


def test_opening_again_leaves_in_flight_tasks_alone(queue: Queue, queue_url: str) -> None:
    queue.submit(_paths(3))
    queue.claim("a", 2, 30)
    other = open_queue(queue_url)
    try:
        assert other.stats() == QueueStats(pending=1, leased=2, done=0, failed=0, dead=0)
        assert [t.shard for t in other.claim("b", 5, 30)] == [2]
    finally:
        other.close()


def test_complete_records_one_row_per_task(queue: Queue) -> None:
    queue.submit(_paths(3))
    (t0, t1, t2) = queue.claim("a", 3, SHORT)
    assert queue.complete("a", [(t0.id, {"out": "a0"})]) == 1
    _expire()
    late = queue.claim("b", 3, 30) + queue.claim("b", 3, 30)  # t1, t2 reclaimed (one per claim); t0 is done
    assert [t.id for t in late] == [t1.id, t2.id]
    assert queue.complete("b", [(t1.id, {"out": "b1"}), (t0.id, {"out": "b0"})]) == 1
    assert queue.complete("a", [(t1.id, {"out": "a1"}), (t2.id, {"out": "a2"})]) == 1  # a's late t2 wins
    assert queue.complete("b", [(t2.id, {"out": "b2"})]) == 0
    assert list(queue.results()) == [(0, {"out": "a0"}), (1, {"out": "b1"}), (2, {"out": "a2"})]
    assert queue.stats() == QueueStats(pending=0, leased=0, done=3, failed=0, dead=0)
    assert queue.claim("c", 3, 30) == []


def test_complete_of_unknown_task_records_nothing(queue: Queue) -> None:
    queue.submit(_paths(1))
    (t,) = queue.claim("a", 1, 30)
    with pytest.raises(UnknownTask):
        queue.complete("a", [(t.id, {"ok": 1}), ("no-such-id", {"ok": 2})])
    assert list(queue.results()) == []
    assert queue.complete("a", []) == 0


def test_fail_without_retry_is_final(queue: Queue) -> None:
    queue.submit(_paths(2))
    t0, t1 = queue.claim("a", 2, 30)
    queue.fail("a", t0.id, "corrupt PNG header", retry=False)
    queue.fail("b", t1.id, "not the holder", retry=False)  # ignored
    assert queue.stats() == QueueStats(pending=0, leased=1, done=0, failed=1, dead=0)
    assert list(queue.failures()) == [(0, "failed", "corrupt PNG header", {"path": "/img/0000.png"})]
    with pytest.raises(UnknownTask):
        queue.fail("a", "no-such-id", "x", retry=False)


def test_fail_with_retry_goes_back_then_dead_after_max_attempts(queue: Queue) -> None:
    queue.submit(_paths(1))
    for attempt in (1, 2, 3):  # the fixture's max_attempts=3
        (t,) = queue.claim("a", 1, 30)
        assert t.attempts == attempt
        queue.fail("a", t.id, "CUDA OOM", retry=True)
    assert queue.claim("a", 1, 30) == []
    assert queue.stats() == QueueStats(pending=0, leased=0, done=0, failed=0, dead=1)
    ((shard, state, reason, _),) = queue.failures()
    assert (shard, state) == (0, "dead")
    assert "CUDA OOM" in reason


def test_expired_lease_past_max_attempts_is_dead_lettered(queue: Queue) -> None:
    queue.submit(_paths(2))
    for _ in range(3):
        assert len(queue.claim("crashy", 1, SHORT)) == 1
        _expire()
    # the one task used all 3 attempts; the next claim buries it and takes the other
    got = queue.claim("b", 2, 30)
    assert [t.shard for t in got] == [1]
    assert queue.stats() == QueueStats(pending=0, leased=1, done=0, failed=0, dead=1)
    ((shard, state, reason, _),) = queue.failures()
    assert (shard, state) == (0, "dead")
    assert "expired" in reason


def _one_failed_one_dead(queue: Queue) -> tuple[str, str]:
    queue.submit(_paths(2))
    bad, flaky = queue.claim("a", 2, 30)
    queue.fail("a", bad.id, "corrupt PNG header", retry=False)
    queue.fail("a", flaky.id, "CUDA OOM", retry=True)
    for _ in range(2):  # the fixture's max_attempts=3
        (t,) = queue.claim("a", 1, 30)
        queue.fail("a", t.id, "CUDA OOM", retry=True)
    assert queue.stats() == QueueStats(pending=0, leased=0, done=0, failed=1, dead=1)
    return bad.id, flaky.id


def test_retry_dead_puts_only_dead_tasks_back_with_fresh_attempts(queue: Queue) -> None:
    _, flaky = _one_failed_one_dead(queue)
    assert queue.retry(["dead"]) == 1
    assert queue.stats() == QueueStats(pending=1, leased=0, done=0, failed=1, dead=0)
    (t,) = queue.claim("b", 5, 30)
    assert (t.id, t.attempts) == (flaky, 1)
    assert queue.complete("b", [(t.id, {"out": 1})]) == 1
    assert [(state, reason) for _, state, reason, _ in queue.failures()] == [("failed", "corrupt PNG header")]
    assert queue.retry(["dead"]) == 0


def test_retry_by_id_moves_only_those_ids_in_the_given_states(queue: Queue) -> None:
    bad, _ = _one_failed_one_dead(queue)
    assert queue.retry(["dead"], [bad]) == 0  # bad is failed, not dead
    assert queue.retry(["failed", "dead"], []) == 0
    assert queue.retry(["failed"], [bad]) == 1
    assert queue.stats() == QueueStats(pending=1, leased=0, done=0, failed=0, dead=1)
    (t,) = queue.claim("b", 5, 30)
    assert t.id == bad
    queue.fail("b", t.id, "corrupt PNG header", retry=False)  # a retried task can fail again
    assert queue.stats() == QueueStats(pending=0, leased=0, done=0, failed=1, dead=1)


def test_retry_rejects_unknown_ids_and_other_states_moving_nothing(queue: Queue) -> None:
    bad, _ = _one_failed_one_dead(queue)
    with pytest.raises(UnknownTask):
        queue.retry(["failed", "dead"], [bad, "no-such-id"])
    for states in ([], ["pending"], ["dead", "done"]):
        with pytest.raises(QueueError):
            queue.retry(states)
    assert queue.stats() == QueueStats(pending=0, leased=0, done=0, failed=1, dead=1)


def test_late_completion_revives_a_dead_task(queue: Queue) -> None:
    queue.submit(_paths(1))
    for _ in range(3):
        (t,) = queue.claim("slow", 1, SHORT)
        _expire()
    assert queue.claim("b", 1, 30) == []
    assert queue.complete("slow", [(t.id, {"out": 1})]) == 1
    assert queue.stats() == QueueStats(pending=0, leased=0, done=1, failed=0, dead=0)
    assert list(queue.failures()) == []


def test_results_are_in_shard_order_across_pages(queue: Queue) -> None:
    n = 2100  # more than one page of 1000
    assert queue.submit(_paths(n)) == n
    tasks = []
    while batch := queue.claim("w", 500, 60):
        tasks += batch
    assert len(tasks) == n
    for chunk in range(0, n, 300):  # complete in reverse chunks
        part = tasks[n - chunk - 300 : n - chunk] if n - chunk >= 300 else tasks[: n - chunk]
        queue.complete("w", [(t.id, {"shard": t.shard}) for t in part])
    rows = list(queue.results())
    assert [s for s, _ in rows] == list(range(n))
    assert all(row == {"shard": s} for s, row in rows)


def test_options_from_the_url(make_url: Callable[[str], str]) -> None:
    q = open_queue(make_url("max_attempts=1&lease_s=7.5"))
    try:
        assert (q.max_attempts, q.lease_s) == (1, 7.5)  # type: ignore[attr-defined]
        q.submit(_paths(1))
        (t,) = q.claim("a", 1, 30)
        q.fail("a", t.id, "boom", retry=True)
        assert q.stats().dead == 1
    finally:
        q.close()


_CLAIMER = """
import json, sys
from gpuprov.images.queue import open_queue
q = open_queue(sys.argv[1])
got = []
while batch := q.claim(sys.argv[2], 3, 60):
    got += [t.id for t in batch]
print(json.dumps(got))
"""


def test_concurrent_processes_never_share_a_lease(queue: Queue, queue_url: str) -> None:
    n = 600
    queue.submit(_paths(n))
    procs = [
        subprocess.Popen([sys.executable, "-c", _CLAIMER, queue_url, f"p{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    claimed: list[str] = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        claimed += json.loads(out)
    assert len(claimed) == n
    assert len(set(claimed)) == n
