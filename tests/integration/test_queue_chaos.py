"""Chaos test of the queues: 20 random ``kill -9`` of worker processes during a run over 500 tasks.

Each worker process (this file run as a script) loops: claim k tasks, "process" each (a short
sleep, then an output file written atomically: temp file + ``os.replace`` onto ``<task id>.out``),
complete the batch. The test kills a random worker at random moments 20 times, starting a
replacement each time, and then asserts: every task done exactly once in ``results()`` (no
missing shard, no duplicate row), every output file present once with the right content, no temp
file visible as an output. Runs on sqlite and on a private redis-server.

``GPUPROV_CHAOS_SEED`` replays a run (the seed is printed on failure).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

N_TASKS = 500
N_WORKERS = 3
N_KILLS = 20
K = 4  # tasks per claim
LEASE_S = 1.0  # short, so a killed worker's tasks come back quickly
WORK_S = 0.03  # per task
DEADLINE_S = 60.0


def worker_main(url: str, outdir: Path, name: str, log: Path) -> None:
    """The worker loop; exits when no task is pending or leased."""
    from gpuprov.images.queue import open_queue

    queue = open_queue(url)
    while True:
        tasks = queue.claim(name, K, LEASE_S)
        if not tasks:
            if queue.stats().open == 0:
                break
            time.sleep(0.02)
            continue
        rows = []
        for task in tasks:
            with log.open("a", encoding="utf-8") as fh:  # one short O_APPEND line: a processing record
                fh.write(f"{task.id} {name} {task.attempts}\n")
            time.sleep(WORK_S)
            out = outdir / f"{task.id}.out"
            tmp = outdir / f".{task.id}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(task.payload, sort_keys=True), encoding="utf-8")
            tmp.replace(out)  # atomic: readers see the old file or the whole new one
            rows.append((task.id, {"path": task.payload["path"], "out": out.name, "worker": name}))
        queue.complete(name, rows)
    queue.close()


if __name__ == "__main__":
    worker_main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
    sys.exit(0)

import pytest  # noqa: E402 - the worker processes above need only the queue

from gpuprov.images.queue import QueueStats, open_queue, task_id  # noqa: E402


def _payloads() -> list[dict[str, str]]:
    out = []
    for i in range(N_TASKS):
        path = f"/synthetic/img-{i:04d}.png"
        content = hashlib.sha256(f"pixels of {i}".encode()).hexdigest()
        out.append({"path": path, "key": f"{path}:{content}"})
    return out


class _Fleet:
    def __init__(self, url: str, outdir: Path, log: Path) -> None:
        self.url, self.outdir, self.log = url, outdir, log
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self) -> None:
        self.started += 1
        self.procs.append(subprocess.Popen(
            [sys.executable, __file__, self.url, str(self.outdir), f"w{self.started}", str(self.log)],
            stderr=subprocess.PIPE,
        ))

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill_all(self) -> None:
        for p in self.alive():
            p.kill()
        for p in self.procs:
            p.wait()


@pytest.fixture(params=["sqlite", "redis"])
def chaos_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}?stream=chaos-{os.getpid()}&max_attempts=50"
    return f"sqlite://{tmp_path / 'queue.db'}?max_attempts=50"


def _run(queue_url: str, rng: random.Random, seed: int, outdir: Path, log: Path) -> tuple[_Fleet, int, int]:
    """Run the fleet under the killer until every worker exits; returns (fleet, kills, done at last kill)."""
    queue = open_queue(queue_url)
    fleet = _Fleet(queue_url, outdir, log)
    t0 = time.monotonic()
    kills = done_at_last_kill = 0
    try:
        for _ in range(N_WORKERS):
            fleet.start()
        while kills < N_KILLS and time.monotonic() - t0 < DEADLINE_S:
            time.sleep(rng.uniform(0.05, 0.3))
            alive = fleet.alive()
            if not alive:
                break
            victim = rng.choice(alive)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            kills += 1
            done_at_last_kill = queue.stats().done
            fleet.start()
        for p in fleet.procs:
            p.wait(timeout=max(1.0, DEADLINE_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        pytest.fail(f"seed {seed}: run did not finish within {DEADLINE_S} s: {queue.stats()}")
    finally:
        fleet.kill_all()
        queue.close()
    return fleet, kills, done_at_last_kill


def test_kill_9_loses_and_duplicates_nothing(chaos_url: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("GPUPROV_CHAOS_SEED", random.randrange(2**32)))
    outdir, log = tmp_path / "out", tmp_path / "processed.log"
    outdir.mkdir()
    queue = open_queue(chaos_url)
    payloads = _payloads()
    assert queue.submit(payloads) == N_TASKS
    t0 = time.monotonic()
    fleet, kills, done_at_last_kill = _run(chaos_url, random.Random(seed), seed, outdir, log)
    elapsed = time.monotonic() - t0
    failed = [p for p in fleet.procs if p.returncode not in (0, -signal.SIGKILL)]
    assert not failed, f"seed {seed}: worker crashed: {failed[0].stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
    assert kills == N_KILLS, f"seed {seed}: all workers gone after {kills} kills"
    assert done_at_last_kill < N_TASKS, f"seed {seed}: the kills came after the run ended; slow the workers down"

    # 0 lost, 0 duplicated: one row per shard, each the right task's
    assert queue.stats() == QueueStats(pending=0, leased=0, done=N_TASKS, failed=0, dead=0), f"seed {seed}"
    rows = list(queue.results())
    assert [shard for shard, _ in rows] == list(range(N_TASKS)), f"seed {seed}: missing or duplicated shards"
    for (_, row), payload in zip(rows, payloads, strict=True):
        assert row["path"] == payload["path"]
        assert row["out"] == f"{task_id(payload['key'])}.out"
    assert list(queue.failures()) == []
    queue.close()

    # outputs: exactly one file per task, complete; temp files never carry the output name
    outputs = sorted(p.name for p in outdir.iterdir() if p.suffix == ".out" and not p.name.startswith("."))
    assert outputs == sorted(f"{task_id(p['key'])}.out" for p in payloads), f"seed {seed}: outputs differ"
    for payload in payloads:
        written = json.loads((outdir / f"{task_id(payload['key'])}.out").read_text(encoding="utf-8"))
        assert written == payload
    leftovers = [p.name for p in outdir.iterdir() if p.name.startswith(".")]
    assert all(name.endswith(".tmp") for name in leftovers)

    processed = log.read_text(encoding="utf-8").splitlines()
    assert len(processed) >= N_TASKS
    print(f"seed {seed}: {elapsed:.1f} s, {kills} kills, {fleet.started} workers started, "
          f"{len(processed) - N_TASKS} tasks processed again, {len(leftovers)} temp files left by killed workers")
    assert elapsed < DEADLINE_S
