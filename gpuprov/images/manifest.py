"""The job's manifest: one row per done task in shard order, and the failed and dead tasks beside it."""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from pathlib import Path

from gpuprov.images.queue import Queue, QueueLost, QueueStats
from gpuprov.images.tasks import atomic_write

log = logging.getLogger(__name__)


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
    # each line is the stored result's compact JSON text with "shard" put first: copied, not parsed and
    # dumped again (a parse and a dump per row were most of a large run's last seconds: docs/benchmarks.md)
    lines = [_with_shard(shard, row) for shard, row in queue.result_texts()]
    had = _rows_in(out / "manifest.jsonl")
    if had > len(lines):
        raise QueueLost(
            f"{out / 'manifest.jsonl'} has {had} rows but the queue has only {len(lines)} results: the queue lost "
            "tasks (a Redis server restarted without persistence?); the manifest is left as it was. For another "
            "job, use another --out (or move that manifest away)"
        )
    fails = [{"shard": s, "path": p.get("path"), "state": st, "reason": r} for s, st, r, p in queue.failures()]
    atomic_write(out / "manifest.jsonl", "".join(line + "\n" for line in lines).encode())
    atomic_write(out / "failures.jsonl", "".join(json.dumps(f, sort_keys=True) + "\n" for f in fails).encode())
    _write_parquet(out, lines)
    return len(lines), len(fails)


def _with_shard(shard: int, row: str) -> str:
    """The manifest line of a stored result row (a JSON object's text): ``{"shard":N,`` and the row's keys."""
    return f'{{"shard":{shard}}}' if row == "{}" else f'{{"shard":{shard},{row[1:]}'


PARQUET_MODULES = ("pyarrow", "pyarrow.compute", "pyarrow.json", "pyarrow.parquet")
"""What ``manifest.parquet`` is written with, where installed (pyarrow is not a dependency)."""


def preload_parquet() -> threading.Thread:
    """Import :data:`PARQUET_MODULES` in a daemon thread, started now: a run calls it at its start, so the manifest
    written at its end does not wait for pyarrow's import (most of a second, in the run's last seconds); a later
    import of them waits for this one. A missing pyarrow is left to :func:`write_manifest` to notice."""

    def load() -> None:
        for name in PARQUET_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                return

    thread = threading.Thread(target=load, name="preload-pyarrow", daemon=True)
    thread.start()
    return thread


def _write_parquet(out: Path, lines: list[str]) -> None:
    """``out/manifest.parquet`` beside the JSON lines, where pyarrow is installed: columns ``shard``, ``path``,
    ``sha256`` (read from the lines by pyarrow's JSON reader; "" where a row has none) and ``row`` (the line)."""
    try:
        pa, pc, pj, pq = (importlib.import_module(name) for name in PARQUET_MODULES)
    except ImportError:
        return
    wanted = pa.schema([("shard", pa.int64()), ("path", pa.string()), ("sha256", pa.string())])
    options = pj.ParseOptions(explicit_schema=wanted, unexpected_field_behavior="ignore")
    table = pj.read_json(out / "manifest.jsonl", parse_options=options) if lines else wanted.empty_table()
    table = pa.table({
        "shard": table["shard"],
        "path": pc.fill_null(table["path"], ""),
        "sha256": pc.fill_null(table["sha256"], ""),
        "row": pa.array(lines, pa.string()),
    })  # fmt: skip
    tmp = out / ".manifest.parquet.tmp"
    pq.write_table(table, tmp)
    tmp.replace(out / "manifest.parquet")


class RunManifest:
    """A run's manifest (:func:`write_manifest`): written as soon as every worker has committed its results
    (:meth:`early`, while their processes end), each time a ``--follow`` service's queue drains (:meth:`drained`),
    and at the end where the queue has changed since it was last written (:meth:`final`). Marks when it was last
    written in ``ending`` (``manifest_written``: ``time.monotonic()``). The counts its methods return are the run
    report's: ``rows``, ``failed`` (failed for good, dead ones apart) and ``dead``."""

    def __init__(self, queue: Queue, out: Path, total: int, ending: dict[str, float]) -> None:
        self.queue, self.out, self.total, self.ending = queue, out, total, ending
        self.lock = threading.Lock()
        self.counts: dict[str, int] | None = None
        self.stats: QueueStats | None = None  # the queue's counts it was written from
        self.ended = False

    def early(self) -> None:
        """Write it now, unless :meth:`final` has begun; a failure is left to :meth:`final`, which reports it."""
        with self.lock:
            if self.ended:
                return
            try:
                self._write()
            except Exception:  # final() writes it again, and the error is raised there
                self.counts = None
                log.debug("manifest: the early write failed; written again at the end", exc_info=True)

    def drained(self) -> dict[str, int] | None:
        """Write it where the queue is drained (no task open) and has changed since it was last written; its counts,
        or None where it was not written."""
        with self.lock:
            stats = self.queue.stats()
            if stats.open or stats == self.stats:
                return None
            self._write()
            return self.counts

    def final(self) -> dict[str, int]:
        """Its counts, once it is written from the queue as it is now (no more early writes after this)."""
        with self.lock:
            self.ended = True
            if self.counts is None or self.queue.stats() != self.stats:  # a worker restarted after its exit event
                self._write()
            assert self.counts is not None
            return self.counts

    def _write(self) -> None:
        self.stats = self.queue.stats()
        rows, fails = write_manifest(self.queue, self.out, self.total)
        self.ending["manifest_written"] = time.monotonic()
        self.counts = {"rows": rows, "failed": fails - self.stats.dead, "dead": self.stats.dead}
