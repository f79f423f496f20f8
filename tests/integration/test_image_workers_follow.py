"""The command line the gpuprov-worker@ units run (roles/image_workers): ``gpuprov images run --follow`` with
the queue URL from ``GPUPROV_IMAGES_QUEUE`` keeps serving the queue after it drains, rewrites the manifest
each time, and stops on SIGTERM like systemd stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from PIL import Image  # torchvision depends on Pillow


def _images(folder: Path, start: int, n: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(start, start + n):
        Image.new("RGB", (60 + i, 40), (i * 20 % 256, 80, 120)).save(folder / f"{i:03d}.jpg", quality=90)


def _manifest_rows(out: Path, want: int, proc: subprocess.Popen[str], timeout: float = 90) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the --follow run exited with {proc.returncode}"
        path = out / "manifest.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if len(rows) >= want:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"manifest did not reach {want} rows")


def test_follow_serves_new_work_and_stops_on_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    env = dict(os.environ, GPUPROV_IMAGES_QUEUE=url)
    gpuprov = [sys.executable, "-m", "gpuprov"]
    _images(tmp_path / "in", 0, 4)
    subprocess.run([*gpuprov, "images", "submit", str(tmp_path / "in")], env=env, check=True, timeout=60)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*gpuprov, "images", "run", "--follow", "--quiet", "--out", str(out), "--task", "thumbnail", "--size", "32",
         "--gpus", "cpu", "--batch", "2", "--threads", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert len(_manifest_rows(out, 4, proc)) == 4
        time.sleep(1.5)
        assert proc.poll() is None, "a --follow run must not exit when the queue drains"
        _images(tmp_path / "in", 4, 3)
        subprocess.run([*gpuprov, "images", "submit", str(tmp_path / "in")], env=env, check=True, timeout=60)
        rows = _manifest_rows(out, 7, proc)
        assert [r["shard"] for r in rows] == list(range(7))
        assert all((out / str(r["thumb"])).is_file() for r in rows)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM  # the unit's SuccessExitStatus=143
    status = subprocess.run([*gpuprov, "images", "status", "--json"], env=env, check=True, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert json.loads(status.stdout)["done"] == 7


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(pid: int) -> list[int]:
    """Every live process whose parent chain reaches ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def test_a_one_off_run_stopped_by_sigterm_leaves_no_worker_behind(tmp_path: Path) -> None:
    """Not only services: ``kill`` of a plain ``images run`` stops its workers (exit 143) instead of leaving
    them to finish on their own, re-parented, and die on a broken pipe."""
    url = f"sqlite:///{tmp_path}/q.db"
    env = dict(os.environ, GPUPROV_IMAGES_QUEUE=url)
    gpuprov = [sys.executable, "-m", "gpuprov"]
    _images(tmp_path / "in", 0, 60)
    subprocess.run([*gpuprov, "images", "submit", str(tmp_path / "in")], env=env, check=True, timeout=60)
    proc = subprocess.Popen(
        [*gpuprov, "images", "run", "--quiet", "--out", str(tmp_path / "out"), "--task", "thumbnail", "--size", "32",
         "--gpus", "cpu", "--batch", "1", "--threads", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = _children(proc.pid)
    assert workers, "the run started no worker"
    time.sleep(2)  # the workers are importing or working
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    time.sleep(0.5)
    alive = [p for p in workers if _running(p)]
    assert alive == [], f"workers left running after the run was stopped: {alive}"
