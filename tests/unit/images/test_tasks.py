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


def test_sweep_without_pid_removes_every_dead_writers_files_of_this_host(tmp_path: Path) -> None:
    dead = tmp_path / "ab" / ".y.jpg.{}.k.tmp"
    procs = [subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                            capture_output=True, text=True) for _ in range(2)]  # fmt: skip
    for proc in procs:
        Path(str(dead).format(writer_tag(int(proc.stdout)))).parent.mkdir(parents=True, exist_ok=True)
        Path(str(dead).format(writer_tag(int(proc.stdout)))).write_bytes(b"left by a killed writer")
    alive = tmp_path / "ab" / f".z.jpg.{writer_tag(os.getpid())}.keep.tmp"
    alive.write_bytes(b"in progress")
    other_host = tmp_path / f".w.jpg.otherhost-{procs[0].stdout.strip()}.keep.tmp"
    other_host.write_bytes(b"another host's writer")

    assert sweep_temp_files(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.rglob("*.tmp")) == sorted([alive.name, other_host.name])


def test_atomic_write_gives_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    """The mode comes from the umask of a fresh process (it is read once per process)."""
    code = (
        "import sys; from pathlib import Path; from gpuprov.images.tasks import atomic_write; "
        "atomic_write(Path(sys.argv[1]), b'x')"
    )
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        target = tmp_path / f"{umask:o}.jpg"
        subprocess.run([sys.executable, "-c", code, str(target)], check=True, umask=umask)
        assert target.stat().st_mode & 0o777 == mode, f"umask {umask:o}"
