"""Atomic writes and the sweep of a dead writer's temporary files (gpuprov.images.tasks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuprov.images.tasks import atomic_write, sweep_temp_files, writer_tag

# A child that opens a temporary file the way atomic_write does and is killed before the rename.
_KILLED_WRITER = """
import os, sys, tempfile
from pathlib import Path
from gpuprov.images.tasks import writer_tag
target = Path(sys.argv[1])
target.parent.mkdir(parents=True, exist_ok=True)
tempfile.mkstemp(prefix=f".{target.name}.{writer_tag()}.", suffix=".tmp", dir=target.parent)
print(os.getpid(), flush=True)
os.kill(os.getpid(), 9)
"""


def test_atomic_write_leaves_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "ab" / "x.jpg"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.jpg"]


def test_sweep_removes_only_the_dead_writers_files(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path / "ab" / "y.jpg")],
                          check=False, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == -9
    dead_pid = int(proc.stdout)
    assert [p.name for p in tmp_path.rglob("*.tmp")] == [
        next(p.name for p in tmp_path.rglob(f".y.jpg.{writer_tag(dead_pid)}.*.tmp"))
    ]
    alive = tmp_path / "ab" / f".z.jpg.{writer_tag(os.getpid())}.keep.tmp"
    alive.write_bytes(b"in progress")
    other_host = tmp_path / "ab" / f".w.jpg.otherhost-{dead_pid}.keep.tmp"
    other_host.write_bytes(b"another host's writer")

    assert sweep_temp_files(tmp_path, dead_pid) == 1
    assert sorted(p.name for p in tmp_path.rglob("*.tmp")) == sorted([alive.name, other_host.name])
