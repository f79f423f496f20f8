"""The committer thread of a worker: batches written to the queue in order, their leases released, progress reported;
a write error or a report that cannot be sent stops the worker instead of hanging it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuprov.images.stages import Committer


class _RecordingQueue:
    """Queue stand-in for the committer: records writes; ``complete`` fails on the batch named ``boom``."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def complete(self, worker: str, results: list[tuple[str, dict[str, Any]]]) -> int:
        if any(tid == "boom" for tid, _ in results):
            raise RuntimeError("database is locked")
        self.log.append(("complete", [tid for tid, _ in results]))
        return len(results)

    def fail(self, worker: str, tid: str, reason: str, *, retry: bool) -> None:
        self.log.append(("fail", tid))


class _Keeper:
    def __init__(self, queue: _RecordingQueue) -> None:
        self.queue = queue

    def release(self, ids: list[str]) -> None:
        self.queue.log.append(("release", ids))


def test_committer_writes_in_order_then_releases_and_reports() -> None:
    queue = _RecordingQueue()
    events: list[dict[str, Any]] = []
    timing = {"commit_s": 0.0}
    committer = Committer(queue, "w", _Keeper(queue), events.append, timing)  # type: ignore[arg-type]
    committer.start()
    committer.put([("a", {}), ("b", {})], [("c", "decode error: truncated")], ["a", "b", "c"], 4)
    committer.put([("d", {})], [], ["d"], 4)
    committer.close()
    # leases are released only after the batch is written: a kill before that re-runs the tasks
    assert queue.log == [
        ("complete", ["a", "b"]), ("fail", "c"), ("release", ["a", "b", "c"]),
        ("complete", ["d"]), ("release", ["d"]),
    ]  # fmt: skip
    assert [(e["done"], e["failed"]) for e in events] == [(2, 1), (3, 1)]
    assert (committer.done, committer.failed) == (3, 1) and timing["commit_s"] > 0
    assert not committer.is_alive()


def test_committer_error_reaches_the_main_thread_and_stops_writing() -> None:
    queue = _RecordingQueue()
    committer = Committer(queue, "w", _Keeper(queue), lambda e: None, {"commit_s": 0.0})  # type: ignore[arg-type]
    committer.start()
    committer.put([("boom", {})], [], ["boom"], 1)
    committer.put([("later", {})], [], ["later"], 1)
    with pytest.raises(RuntimeError, match="database is locked"):
        committer.close()
    assert queue.log == [], "nothing after the failed batch is written and no lease is released"
    with pytest.raises(RuntimeError, match="database is locked"):
        committer.put([("x", {})], [], ["x"], 1)


def test_committer_that_cannot_report_stops_the_worker_instead_of_hanging() -> None:
    """A broken pipe to the supervisor (its emit) must reach the main thread, not kill the thread
    silently while the lease keeper renews the batch's leases forever."""
    queue = _RecordingQueue()

    def emit(event: dict[str, Any]) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    committer = Committer(queue, "w", _Keeper(queue), emit, {"commit_s": 0.0})  # type: ignore[arg-type]
    committer.start()
    committer.put([("a", {})], [], ["a"], 1)
    with pytest.raises(BrokenPipeError):
        for i in range(10):  # within a few puts the error is raised; none blocks
            committer.put([(f"t{i}", {})], [], [f"t{i}"], 1)
    with pytest.raises(BrokenPipeError):
        committer.close()
    assert not committer.is_alive()
    # the first batch was written (then its report failed); nothing after it is written
    assert queue.log == [("complete", ["a"]), ("release", ["a"])]


def test_committer_refuses_batches_once_closed() -> None:
    queue = _RecordingQueue()
    committer = Committer(queue, "w", _Keeper(queue), lambda e: None, {"commit_s": 0.0})  # type: ignore[arg-type]
    committer.start()
    committer.close()
    committer.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        committer.put([("z", {})], [], ["z"], 1)
    assert queue.log == []
