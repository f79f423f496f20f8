"""How many tasks per second a queue moves with nothing else running: the embedded sqlite queue, or a Redis one.

``--procs`` processes (a comma list: one run each) claim ``--batch`` tasks and complete them with a
result row shaped like the model task's (path, sha256, size, top-5) until ``--tasks`` submitted tasks
are done. Prints tasks/s over the whole run (process start included, submit not), the seconds the submit
of the tasks took, and each process's seconds in ``claim`` and ``complete`` (lock waits included). The
sqlite queue file is made under ``--dir`` (a local filesystem) and removed; with ``--redis
redis://host:port/db`` each run uses a stream of its own on that server and deletes its keys after.

    python benchmarks/queue_bench.py --tasks 200000 --procs 1,4,8 --json queue.json
    python benchmarks/queue_bench.py --tasks 100000 --procs 2 --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuprov.images.queue import open_queue


def _worker(url: str, batch: int, out: Any) -> None:
    queue = open_queue(url, create=False)
    name = f"bench:{os.getpid()}"
    spent = {"claim_s": 0.0, "complete_s": 0.0, "tasks": 0}
    while True:
        t0 = time.perf_counter()
        tasks = queue.claim(name, batch, 300.0)
        spent["claim_s"] += time.perf_counter() - t0
        if not tasks:
            break
        rows = [
            (t.id, {"path": t.payload["path"], "sha256": "0" * 64, "width": 500, "height": 375,
                    "top5": [[c, 0.123456] for c in range(5)]})
            for t in tasks
        ]  # fmt: skip
        t0 = time.perf_counter()
        queue.complete(name, rows)
        spent["complete_s"] += time.perf_counter() - t0
        spent["tasks"] += len(tasks)
    queue.close()
    out.put(spent)


def run(url: str, tasks: int, procs: int, batch: int) -> dict[str, Any]:
    """One run on the new, empty queue at ``url``: tasks/s and per-process seconds (dict)."""
    queue = open_queue(url)
    t0 = time.perf_counter()
    queue.submit({"path": f"/data/images/img-{i:07d}.jpg"} for i in range(tasks))
    submit_s = time.perf_counter() - t0
    queue.close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(url, batch, out)) for _ in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    spent = [out.get() for _ in workers]
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    done = sum(s["tasks"] for s in spent)
    return {"procs": procs, "batch": batch, "tasks": done, "wall_s": round(wall, 2), "tasks_per_s": round(done / wall),
            "submit_s": round(submit_s, 2),
            "workers": [{k: round(v, 2) for k, v in s.items()} for s in spent]}  # fmt: skip


def _drop_stream(server: str, stream: str) -> None:
    """Delete a run's Redis queue: the stream and its ``<stream>:*`` keys."""
    import redis

    client = redis.Redis.from_url(server)
    keys = [stream, *client.scan_iter(match=f"{stream}:*")]
    client.delete(*keys)
    client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--procs", default="1,4")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=None, help="folder for the queue file (default: a temporary one)")
    ap.add_argument("--redis", default=None, help="a Redis server's URL (redis://host:port/db): bench its queue")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    try:
        procs = [int(p) for p in args.procs.split(",") if p.strip()]
    except ValueError:
        ap.error(f"--procs {args.procs}: expected a comma list of process counts")
    if args.tasks < 1 or args.batch < 1 or not procs or min(procs) < 1:
        ap.error("--tasks, --batch and every --procs value must be >= 1")
    if args.redis and "?" in args.redis:
        ap.error(f"--redis {args.redis}: give the server's URL without options; each run names its own stream")
    results = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in procs:
            stream = f"gpuprov-bench-{os.getpid()}-{n}"
            url = f"{args.redis}?stream={stream}" if args.redis else f"sqlite://{Path(tmp).resolve() / f'bench-{n}.db'}"
            try:
                res = run(url, args.tasks, n, args.batch)
            finally:
                if args.redis:
                    _drop_stream(args.redis, stream)
            results.append(res)
            print(f"{n} process(es): {res['tasks_per_s']} tasks/s ({res['wall_s']} s; submit {res['submit_s']} s) "
                  f"{res['workers']}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "runs": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
