"""The job's manifest: one row per done task in shard order, and the failed and dead tasks beside it."""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from pathlib import Path

from gpuprov.exceptions import ConfigError
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
    without persistence, a queue file replaced), and the manifest is the only record left of that work;
    :class:`ConfigError` (exit 2) where ``out`` cannot be written (removed, replaced by a file, made read-only).
    """
    try:
        return _write(queue, out, total)
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: the manifest cannot be written there ({exc.strerror or exc}); keep --out a writable folder "
            "while the run lasts, then run again to write it"
        ) from None


def _write(queue: Queue, out: Path, total: int) -> tuple[int, int]:
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
    data = "".join(line + "\n" for line in lines).encode()
    atomic_write(out / "manifest.jsonl", data)
    atomic_write(out / "failures.jsonl", "".join(json.dumps(f, sort_keys=True) + "\n" for f in fails).encode())
    _write_parquet(out, lines, data)
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


def _write_parquet(out: Path, lines: list[str], data: bytes) -> None:
    """``out/manifest.parquet`` beside the JSON lines (``data``: them, as written), where pyarrow is installed:
    columns ``shard``, ``path``, ``sha256`` (read from ``data`` by pyarrow's JSON reader; "" where a row has none)
    and ``row`` (the line); written through a temporary file of its own, as :func:`atomic_write` writes."""
    try:
        pa, pc, pj, pq = (importlib.import_module(name) for name in PARQUET_MODULES)
    except ImportError:
        return
    wanted = pa.schema([("shard", pa.int64()), ("path", pa.string()), ("sha256", pa.string())])
    options = pj.ParseOptions(explicit_schema=wanted, unexpected_field_behavior="ignore")
    table = pj.read_json(pa.BufferReader(data), parse_options=options) if lines else wanted.empty_table()
    table = pa.table({
        "shard": table["shard"],
        "path": pc.fill_null(table["path"], ""),
        "sha256": pc.fill_null(table["sha256"], ""),
        "row": pa.array(lines, pa.string()),
    })  # fmt: skip
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write(out / "manifest.parquet", sink.getvalue().to_pybytes())


class RunManifest:
    """A run's manifest (:func:`write_manifest`): written as soon as every worker has committed its results
    (:meth:`early`, while their processes end), each time a ``--follow`` service's queue drains (:meth:`drained`),
    and at the end where the queue, or the manifest file, has changed since it was last written (:meth:`final`).
    Marks when it was last written in ``ending`` (``manifest_written``: ``time.monotonic()``). The counts its methods
    return are the run report's: ``rows``, ``failed`` (failed for good, dead ones apart) and ``dead``. The writes in
    the supervisor's threads never raise (the next write meets the error again, and :meth:`final` raises it);
    :meth:`close` waits for one in progress."""

    def __init__(self, queue: Queue, out: Path, total: int, ending: dict[str, float]) -> None:
        self.queue, self.out, self.total, self.ending = queue, out, total, ending
        self.lock = threading.Lock()
        self.counts: dict[str, int] | None = None
        self.stats: QueueStats | None = None  # the queue's counts it was last written from
        self.file: tuple[int, int, int] | None = None  # the manifest file as written: inode, size, mtime (ns)
        self.ended = False

    def early(self) -> None:
        """Write it now, unless :meth:`final` or :meth:`close` has begun."""
        with self.lock:
            if not self.ended:
                self._try_write()

    def drained(self) -> dict[str, int] | None:
        """Write it where the queue is drained (no task open) and has changed since it was last written; its counts,
        or None where it was not written."""
        with self.lock:
            stats = self.queue.stats()
            if self.ended or stats.open or stats == self.stats:
                return None
            return self.counts if self._try_write() else None

    def final(self) -> dict[str, int]:
        """Its counts, once it is written from the queue as it is now; raises what :func:`write_manifest` raises."""
        with self.lock:
            self.ended = True
            if self.counts is None or self.queue.stats() != self.stats or _identity(self.out) != self.file:
                self._write()  # a worker restarted after its exit event, another job wrote to the same --out
            assert self.counts is not None
            return self.counts

    def close(self) -> None:
        """No more writes; returns once a write in progress (in a supervisor's thread) has ended."""
        with self.lock:
            self.ended = True

    def _try_write(self) -> bool:
        try:
            self._write()
        except Exception as exc:  # a supervisor's thread: the next write, or final(), meets it again
            self.counts = None
            log.warning("manifest not written: %s", getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _write(self) -> None:
        stats = self.queue.stats()
        rows, fails = write_manifest(self.queue, self.out, self.total)
        self.ending["manifest_written"] = time.monotonic()
        self.stats, self.file = stats, _identity(self.out)
        self.counts = {"rows": rows, "failed": fails - stats.dead, "dead": stats.dead}


def _identity(out: Path) -> tuple[int, int, int] | None:
    """``out/manifest.jsonl``'s inode, size and modification time (ns), None where it cannot be read."""
    try:
        st = (out / "manifest.jsonl").stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
