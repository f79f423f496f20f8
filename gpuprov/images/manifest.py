"""The job's manifest: one row per done task in shard order, and the failed and dead tasks beside it."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from gpuprov.images.queue import Queue, QueueLost
from gpuprov.images.tasks import atomic_write


def _rows_in(path: Path) -> int:
    """Lines of ``path``; 0 when it does not exist."""
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def manifest_rows(out: Path) -> int:
    """Rows of ``out``'s ``manifest.jsonl``; 0 when there is none."""
    return _rows_in(out / "manifest.jsonl")


def write_manifest(queue: Queue, out: Path, total: int = 0) -> tuple[int, int]:
    """Write ``manifest.jsonl`` (and ``.parquet`` if pyarrow is there) and ``failures.jsonl`` in shard order;
    returns ``(rows, failures)``. ``total``: the tasks the queue held when the run started.

    Raises :class:`QueueLost` (exit 4), writing nothing, when the queue holds fewer than ``total`` tasks,
    or fewer results than ``out``'s manifest has rows: the queue lost tasks (a Redis server restarted
    without persistence, a queue file replaced), and the manifest is the only record left of that work.
    """
    now = queue.stats().total
    if now < total:
        raise QueueLost(
            f"the queue held {total} tasks when the run started and holds {now} now: it lost tasks (a Redis server "
            f"restarted without persistence?); {out / 'manifest.jsonl'} is left as it was"
        )
    rows = [{"shard": shard, **row} for shard, row in queue.results()]
    had = _rows_in(out / "manifest.jsonl")
    if had > len(rows):
        raise QueueLost(
            f"{out / 'manifest.jsonl'} has {had} rows but the queue has only {len(rows)} results: the queue lost "
            "tasks (a Redis server restarted without persistence?); the manifest is left as it was. For another "
            "job, use another --out (or move that manifest away)"
        )
    fails = [{"shard": s, "path": p.get("path"), "state": st, "reason": r} for s, st, r, p in queue.failures()]
    atomic_write(out / "manifest.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())
    atomic_write(out / "failures.jsonl", "".join(json.dumps(f, sort_keys=True) + "\n" for f in fails).encode())
    try:
        pa = importlib.import_module("pyarrow")
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        return len(rows), len(fails)
    tmp = out / ".manifest.parquet.tmp"
    table = pa.table(
        {
            "shard": pa.array([r["shard"] for r in rows], pa.int64()),
            "path": pa.array([r.get("path", "") for r in rows], pa.string()),
            "sha256": pa.array([r.get("sha256", "") for r in rows], pa.string()),
            "row": pa.array([json.dumps(r, sort_keys=True) for r in rows], pa.string()),
        }
    )
    pq.write_table(table, tmp)
    tmp.replace(out / "manifest.parquet")
    return len(rows), len(fails)
