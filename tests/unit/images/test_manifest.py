"""The manifest guard: a queue that lost tasks never overwrites the manifest made from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.images.manifest import manifest_rows, write_manifest
from gpuprov.images.queue import Queue, QueueLost, open_queue


def _done_queue(path: Path, n: int) -> Queue:
    queue = open_queue(f"sqlite:///{path}")
    queue.submit([{"path": f"/img/{i}.png"} for i in range(n)])
    queue.complete("w", [(t.id, {"task": "stats"}) for t in queue.claim("w", n, 30)])
    return queue


def test_a_queue_with_fewer_results_than_the_manifest_leaves_it_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    big = _done_queue(tmp_path / "a.db", 3)
    assert write_manifest(big, out) == (3, 0)
    before = (out / "manifest.jsonl").read_bytes()
    small = _done_queue(tmp_path / "b.db", 1)  # the queue file replaced by a smaller one
    with pytest.raises(QueueLost, match="has 3 rows but the queue has only 1 results"):
        write_manifest(small, out)
    assert (out / "manifest.jsonl").read_bytes() == before and manifest_rows(out) == 3
    big.close()
    small.close()


def test_a_queue_that_shrank_since_the_run_started_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    queue = _done_queue(tmp_path / "q.db", 2)
    with pytest.raises(QueueLost, match="held 5 tasks when the run started and holds 2 now"):
        write_manifest(queue, out, total=5)
    assert not (out / "manifest.jsonl").exists()
    assert write_manifest(queue, out, total=2) == (2, 0)
    queue.close()
