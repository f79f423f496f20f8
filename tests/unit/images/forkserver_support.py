"""What the fork server's tests share: the stub server (tests/forkserver_stub.py), a private runtime folder and
waiting on a condition. The fixtures are registered in this folder's conftest.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.images.forkserver import serving

__all__ = ["ROOT", "STUB", "gone", "runtime", "stub_server", "wait_for"]

ROOT = Path(__file__).resolve().parents[3]
STUB = ROOT / "tests" / "forkserver_stub.py"


def wait_for(check: object, within_s: float = 60.0) -> bool:
    """Whether ``check()`` came true within ``within_s`` seconds (asked every 0.05 s)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no longer listed, or a zombie nobody reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private runtime folder of this test's (``XDG_RUNTIME_DIR``), with a short path: a Unix socket's path has
    at most 107 bytes, which pytest's folders under xdist can pass."""
    base = Path(tempfile.mkdtemp(prefix="fs-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def stub_server(runtime: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """The stub server (tests/forkserver_stub.py) listening at a socket of this test's; stopped at the end."""
    path = runtime / "stub.sock"
    proc = subprocess.Popen([sys.executable, str(STUB), str(path), "60"], cwd=ROOT)
    assert wait_for(lambda: serving(path), 30), "the stub server did not listen"
    yield path, proc
    proc.kill()
    proc.wait()
