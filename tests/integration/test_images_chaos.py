"""Image-level chaos: 20 random kill -9 of real ``gpuprov images run`` workers over 500 images (CPU),
on the sqlite queue and on a private redis-server (Redis Streams), the same suite for both.

Asserts 0 lost (every image has exactly one manifest row) and 0 duplicated outputs (one row per
shard, one thumbnail per content hash, no temporary files left).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image

N_IMAGES = 500
KILLS = 20


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The queue under test; 20 kills can hit the same early tasks repeatedly, so max_attempts keeps them
    out of the dead-letter state."""
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}?stream=images-chaos-{os.getpid()}&max_attempts={KILLS * 5}"
    return f"sqlite:///{tmp_path}/q.db?max_attempts={KILLS * 5}"


@pytest.mark.slow
def test_kill9_workers_lose_and_duplicate_nothing(queue_url: str, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    rnd = random.Random(7)
    for i in range(N_IMAGES):
        Image.new("RGB", (48 + i % 17, 32 + i % 11), (rnd.randrange(256), i % 256, 7)).save(src / f"{i:04d}.jpg")
    url = queue_url
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "gpuprov"]
    subprocess.run([*cli, "images", "submit", str(src), "--queue", url], check=True, capture_output=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.Popen(
        [*cli, "images", "run", "--queue", url, "--out", str(out), "--task", "thumbnail", "--size", "24",
         "--gpus", "cpu", "--cpu-workers", "2", "--batch", "4", "--lease", "2", "--threads", "1", "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    kills = 0
    deadline = time.monotonic() + 600
    while kills < KILLS and run.poll() is None and time.monotonic() < deadline:
        time.sleep(rnd.uniform(0.2, 1.2))
        workers = _children(run.pid)
        if workers:
            os.kill(rnd.choice(workers), signal.SIGKILL)
            kills += 1
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    assert kills == KILLS, f"the run ended after {kills} kills; make it longer"
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [r["shard"] for r in rows] == list(range(N_IMAGES))  # none lost, none duplicated
    assert len({r["path"] for r in rows}) == N_IMAGES
    thumbs = sorted(p.name for p in (out / "thumbs").rglob("*.jpg"))
    assert thumbs == sorted({f"{r['sha256']}.jpg" for r in rows})
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert (out / "failures.jsonl").read_text() == ""
    assert "restarts 0;" not in stdout and "restarts 0\n" not in stdout
