"""Image-level chaos: 20 random kill -9 of real ``gpuprov images run`` workers and 3 of the ``run`` process
itself over 500 images (CPU), each killed run started again as a user would, on the sqlite queue and on a
private redis-server with ``appendonly yes`` (Redis Streams), with the queue's default ``max_attempts``; on sqlite
also with the workers forked by a fork server (gpuprov.images.forkserver), as a user's second run starts them.

Asserts 0 good images dead, 0 lost (every image has exactly one manifest row), 0 duplicated outputs (one
row per shard, one thumbnail per content hash), no temporary file left, and no worker outliving a killed
``run`` (they die with their supervisor).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image

N_IMAGES = 500
#: forked workers start in milliseconds, not seconds, so a run restarted after each kill gets through 500 images
#: before the 20 kills are done: the forked case has more images and kills more often (seconds between kills)
N_IMAGES_FORKED = 6000
PAUSE_S, PAUSE_FORKED_S = (0.2, 1.2), (0.05, 0.4)
KILLS = 20
RUN_KILLS = 3


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pids: list[int], within_s: float) -> list[int]:
    """The pids still running (zombies count as gone) after waiting up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The queue under test, with its default max_attempts."""
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_aof_url')}?stream=images-chaos-{os.getpid()}"
    return f"sqlite:///{tmp_path}/q.db"


@pytest.fixture
def workers_of(request: pytest.FixtureRequest, queue_url: str) -> Iterator[tuple[dict[str, str], Any]]:
    """The runs' environment and a function giving the pids of a run's workers: the run's children, or with the
    ``forked`` parameter the children of a fork server started for the runs (stopped at the end)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if request.param == "spawned":
        yield env, _children
        return
    if not queue_url.startswith("sqlite"):
        pytest.skip("the forked case runs on sqlite only (the queue does not change what a fork server does)")
    from gpuprov.images.forkserver import serving
    from gpuprov.images.forkserver_socket import socket_path

    runtime = Path(tempfile.mkdtemp(prefix="fs-"))  # short: a Unix socket's path has at most 107 bytes
    env.update(XDG_RUNTIME_DIR=str(runtime), GPUPROV_IMAGES_KEEP_WARM="600")
    path = socket_path(env)
    assert path is not None
    server = subprocess.Popen([sys.executable, "-m", "gpuprov.images.forkserver_serve", str(path), "600"], env=env)
    try:
        deadline = time.monotonic() + 180
        while not serving(path):
            assert server.poll() is None and time.monotonic() < deadline, "the fork server did not start"
            time.sleep(0.2)
        yield env, lambda _run_pid: _children(server.pid)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("workers_of", ["spawned", "forked"], indirect=True)
def test_kill9_workers_and_runs_lose_nothing_dead_letter_nothing(
    queue_url: str, tmp_path: Path, workers_of: tuple[dict[str, str], Any]
) -> None:
    env, find_workers = workers_of
    src = tmp_path / "in"
    src.mkdir()
    rnd = random.Random(7)
    n_images, pause = (N_IMAGES, PAUSE_S) if find_workers is _children else (N_IMAGES_FORKED, PAUSE_FORKED_S)
    for i in range(n_images):
        Image.new("RGB", (48 + i % 17, 32 + i % 11), (rnd.randrange(256), i % 256, 7)).save(src / f"{i:05d}.jpg")
    url = queue_url
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "gpuprov"]
    subprocess.run([*cli, "images", "submit", str(src), "--queue", url], check=True, capture_output=True)
    argv = [
        *cli,
        "images",
        "run",
        "--queue",
        url,
        "--out",
        str(out),
        "--task",
        "thumbnail",
        "--size",
        "24",
        "--gpus",
        "cpu",
        "--cpu-workers",
        "2",
        "--batch",
        "4",
        "--lease",
        "2",
        "--threads",
        "1",
        "--quiet",
    ]
    kills = run_kills = 0
    deadline = time.monotonic() + 600
    while True:
        run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while kills < KILLS and run.poll() is None and time.monotonic() < deadline:
            time.sleep(rnd.uniform(*pause))
            workers = find_workers(run.pid)
            if not workers:
                continue
            if run_kills < RUN_KILLS and kills in (4, 9, 14):
                run.kill()  # the supervisor itself, with its workers in the middle of batches
                run.communicate(timeout=60)
                run_kills += 1
                kills += 1
                assert _alive(workers, within_s=10) == [], "workers outlived their killed supervisor"
                break
            os.kill(rnd.choice(workers), signal.SIGKILL)
            kills += 1
        if run.returncode is None or run.returncode >= 0:
            break
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    assert (kills, run_kills) == (KILLS, RUN_KILLS), f"the run ended after {kills} kills; make it longer"
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert (out / "failures.jsonl").read_text() == ""  # no good image dead
    assert [r["shard"] for r in rows] == list(range(n_images))  # none lost, none duplicated
    assert len({r["path"] for r in rows}) == n_images
    thumbs = sorted(p.name for p in (out / "thumbs").rglob("*.jpg"))
    assert thumbs == sorted({f"{r['sha256']}.jpg" for r in rows})
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert "restarts 0;" not in stdout and "restarts 0\n" not in stdout
