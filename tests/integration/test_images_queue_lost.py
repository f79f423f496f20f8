"""A Redis server that restarts without persistence empties the queue: ``gpuprov images run`` must exit 4
naming the cause and leave the manifest it made before as it was, between runs and in the middle of one.
``FLUSHALL`` stands in for the restart: it leaves the server as a restart without AOF or RDB does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

pytest.importorskip("torch")
from PIL import Image

CLI = [sys.executable, "-m", "gpuprov", "images"]


def _images(folder: Path, n: int) -> Path:
    folder.mkdir()
    for i in range(n):
        Image.new("RGB", (40 + i % 9, 30 + i % 7), (i % 256, 80, 20)).save(folder / f"{i:04d}.png")
    return folder


def _gpuprov(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False, env=env, timeout=600)


def _run(url: str, out: Path) -> list[str]:
    return ["run", "--queue", url, "--out", str(out), "--task", "stats", "--gpus", "cpu", "--batch", "4", "--quiet"]


def test_a_queue_lost_between_runs_exits_4_and_keeps_the_manifest(redis_url: str, tmp_path: Path) -> None:
    url = f"{redis_url}?stream=lost-between-{os.getpid()}"
    out = tmp_path / "out"
    assert _gpuprov("submit", str(_images(tmp_path / "in", 12)), "--queue", url).returncode == 0
    first = _gpuprov(*_run(url, out))
    assert first.returncode == 0, first.stderr
    assert "neither appendonly nor RDB" in first.stderr  # the server of the fixture keeps nothing
    manifest = (out / "manifest.jsonl").read_bytes()
    assert manifest.count(b"\n") == 12

    redis.Redis.from_url(redis_url).flushall()
    again = _gpuprov(*_run(url, out))
    assert again.returncode == 4, again.stderr
    assert "has 12 rows made from it: the queue was lost" in again.stderr and "Traceback" not in again.stderr
    assert (out / "manifest.jsonl").read_bytes() == manifest

    # resubmitting some of the images makes a smaller queue: still refused, the manifest kept
    assert _gpuprov("submit", str(tmp_path / "in" / "0000.png"), "--queue", url).returncode == 0
    smaller = _gpuprov(*_run(url, out))
    assert smaller.returncode == 4, smaller.stderr
    assert "has 12 rows but the queue has only 1 results" in smaller.stderr
    assert (out / "manifest.jsonl").read_bytes() == manifest


def test_a_queue_lost_during_a_run_exits_4_naming_the_cause(redis_url: str, tmp_path: Path) -> None:
    url = f"{redis_url}?stream=lost-during-{os.getpid()}"
    out = tmp_path / "out"
    assert _gpuprov("submit", str(_images(tmp_path / "in", 400)), "--queue", url).returncode == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.Popen([*CLI, *_run(url, out), "--threads", "1"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    stream = url.rsplit("stream=", 1)[1]
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline and int(client.hget(f"{stream}:counts", "done") or 0) < 8:
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before the restart could be simulated"
    client.flushall()
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 4, stderr
    error = stderr.split("gpuprov: error: ", 1)[1]
    assert "restarted without persistence" in error and ("lost its tasks" in error or "are lost" in error), error
    assert "Traceback" not in stderr, stderr
    assert not (out / "manifest.jsonl").exists()


def test_status_warns_only_when_the_server_keeps_nothing(redis_url: str, redis_aof_url: str, tmp_path: Path) -> None:
    image = _images(tmp_path / "in", 1) / "0000.png"
    for base, warned in ((redis_url, True), (redis_aof_url, False)):
        url = f"{base}?stream=durability-{os.getpid()}"
        assert _gpuprov("submit", str(image), "--queue", url).returncode == 0
        status = _gpuprov("status", "--queue", url)
        assert status.returncode == 0, status.stderr
        assert ("neither appendonly nor RDB snapshots" in status.stderr) is warned, status.stderr
