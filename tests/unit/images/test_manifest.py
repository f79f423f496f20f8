"""The manifest: its guard (a queue that lost tasks never overwrites the manifest made from it) and when a run
writes it (:class:`RunManifest`)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.images import manifest
from gpuprov.images.manifest import PARQUET_MODULES, RunManifest, manifest_rows, preload_parquet, write_manifest
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


def test_the_manifest_has_each_result_once_in_shard_order_with_its_shard(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}")
    queue.submit([{"path": f"/img/{i}.jpg"} for i in range(4)])
    tasks = queue.claim("w", 4, 30)
    rows = {t.id: {"path": t.payload["path"], "top5": [[7, 0.5]], "task": "model:r.pt"} for t in tasks}
    queue.complete("w", [(t.id, rows[t.id]) for t in reversed(tasks[1:])])  # done out of order
    queue.fail("w", tasks[0].id, "corrupt JPEG", retry=False)
    assert write_manifest(queue, out) == (3, 1)
    lines = (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"shard": t.shard, **rows[t.id]} for t in tasks[1:]]
    assert all(line.startswith('{"shard":') for line in lines)
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text(encoding="utf-8").splitlines()]
    assert failures == [{"shard": tasks[0].shard, "path": "/img/0.jpg", "state": "failed", "reason": "corrupt JPEG"}]
    queue.close()


def test_the_parquet_manifest_holds_the_same_rows(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out"
    out.mkdir()
    queue = open_queue(f"sqlite:///{tmp_path / 'q.db'}")
    queue.submit([{"path": f"/img/{i}.jpg"} for i in range(3)])
    tasks = queue.claim("w", 3, 30)
    queue.complete("w", [(t.id, {"path": t.payload["path"], "sha256": f"{i:064x}", "top5": [[1, 0.25]]})
                         for i, t in enumerate(tasks[:2])] + [(tasks[2].id, {"note": "no path"})])  # fmt: skip
    write_manifest(queue, out)
    table = pq.read_table(out / "manifest.parquet").to_pydict()
    assert table["shard"] == [t.shard for t in tasks]
    assert table["path"] == ["/img/0.jpg", "/img/1.jpg", ""] and table["sha256"] == [f"{0:064x}", f"{1:064x}", ""]
    assert table["row"] == (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    queue.close()


def test_preloading_imports_what_writes_the_parquet_manifest() -> None:
    pytest.importorskip("pyarrow")
    preload_parquet().join(timeout=60)
    assert all(name in sys.modules for name in PARQUET_MODULES)


def test_preloading_without_pyarrow_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    thread = preload_parquet()
    thread.join(timeout=60)
    assert not thread.is_alive()


def _before_each_write(monkeypatch: pytest.MonkeyPatch, before: Callable[[Queue], object]) -> None:
    """Make each of :class:`RunManifest`'s writes call ``before(queue)`` first."""
    real_write = manifest.write_manifest

    def write(q: Queue, o: Path, total: int = 0) -> tuple[int, int]:
        before(q)
        return real_write(q, o, total)

    monkeypatch.setattr(manifest, "write_manifest", write)


def test_a_runs_manifest_is_written_once_unless_the_queue_changed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    queue = _done_queue(tmp_path / "q.db", 3)
    writes: list[int] = []
    _before_each_write(monkeypatch, lambda q: writes.append(q.stats().done))
    ending: dict[str, float] = {}
    run = RunManifest(queue, out, 3, ending)
    run.early()
    assert writes == [3] and manifest_rows(out) == 3 and "manifest_written" in ending
    assert run.final() == {"rows": 3, "failed": 0, "dead": 0} and writes == [3]  # the queue is as it was written
    run.early()  # after final(): nothing
    assert writes == [3]

    changed = RunManifest(queue, out, 3, {})
    changed.early()
    queue.submit([{"path": "/img/late.png"}])  # a restarted worker's leases, a late result: the queue moved on
    queue.complete("w", [(t.id, {"task": "stats"}) for t in queue.claim("w", 1, 30)])
    assert changed.final() == {"rows": 4, "failed": 0, "dead": 0} and writes == [3, 3, 4]
    queue.close()


def test_an_early_manifest_write_that_fails_is_raised_by_the_final_one(tmp_path: Path) -> None:
    queue = _done_queue(tmp_path / "q.db", 2)
    out = tmp_path / "out"
    out.write_text("")  # --out replaced by a file mid-run
    run = RunManifest(queue, out, 2, {})
    run.early()  # in the supervisor's reader thread: logged, never raised there
    with pytest.raises(ConfigError, match=r"^--out .*out: the manifest cannot be written there \(Not a directory\)"):
        run.final()
    queue.close()


def test_a_manifest_another_job_wrote_over_after_the_early_write_is_checked_again(tmp_path: Path) -> None:
    """Two jobs given the same --out: the second one's larger manifest must not pass for the first one's."""
    out = tmp_path / "out"
    out.mkdir()
    ours, theirs = _done_queue(tmp_path / "a.db", 2), _done_queue(tmp_path / "b.db", 3)
    run = RunManifest(ours, out, 2, {})
    run.early()
    write_manifest(theirs, out)  # while our workers' processes end
    with pytest.raises(QueueLost, match="has 3 rows but the queue has only 2 results"):
        run.final()
    assert manifest_rows(out) == 3  # theirs, left as it was
    ours.close()
    theirs.close()


def test_close_waits_for_an_early_write_in_progress_and_stops_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM or ^C as the early write runs in a reader thread: the run closes the queue only after it."""
    out = tmp_path / "out"
    out.mkdir()
    queue = _done_queue(tmp_path / "q.db", 2)
    started = threading.Event()
    _before_each_write(monkeypatch, lambda q: (started.set(), time.sleep(0.5)))
    run = RunManifest(queue, out, 2, {})
    writer = threading.Thread(target=run.early)
    writer.start()
    assert started.wait(10)
    run.close()
    assert manifest_rows(out) == 2 and not writer.is_alive()
    (out / "manifest.jsonl").unlink()
    run.early()
    assert run.drained() is None and not (out / "manifest.jsonl").exists()  # closed: no more writes
    queue.close()


def test_a_drain_write_that_fails_is_logged_and_done_at_the_next_drain(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``--follow`` service: the write runs in the supervisor's reader thread, which must go on reading."""
    out = tmp_path / "out"
    out.write_text("")  # not a folder
    queue = _done_queue(tmp_path / "q.db", 2)
    run = RunManifest(queue, out, 2, {})
    with caplog.at_level("WARNING", logger="gpuprov.images.manifest"):
        assert run.drained() is None
    assert "manifest not written: --out" in caplog.text and "Not a directory" in caplog.text
    out.unlink()
    out.mkdir()
    assert run.drained() == {"rows": 2, "failed": 0, "dead": 0} and manifest_rows(out) == 2
    queue.close()


def test_writers_of_one_out_at_once_each_leave_a_whole_manifest(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out"
    out.mkdir()
    queues = [_done_queue(tmp_path / f"{n}.db", 3) for n in range(2)]
    errors: list[BaseException] = []

    def write(queue: Queue) -> None:
        try:
            for _ in range(10):
                write_manifest(queue, out)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in out.iterdir()) == ["failures.jsonl", "manifest.jsonl", "manifest.parquet"]
    assert pq.read_table(out / "manifest.parquet").num_rows == manifest_rows(out) == 3
    for q in queues:
        q.close()


def test_a_services_manifest_is_written_each_time_its_queue_drains_with_new_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    queue = _done_queue(tmp_path / "q.db", 2)
    run = RunManifest(queue, out, 2, {})
    assert run.drained() == {"rows": 2, "failed": 0, "dead": 0}
    assert run.drained() is None  # nothing new since
    queue.submit([{"path": "/img/new.png"}])
    assert run.drained() is None  # a task open: not drained
    queue.complete("w", [(t.id, {"task": "stats"}) for t in queue.claim("w", 1, 30)])
    assert run.drained() == {"rows": 3, "failed": 0, "dead": 0} and manifest_rows(out) == 3
    queue.close()
