"""A private redis-server for the queue tests: started on 127.0.0.1 at a free port, killed after.

Imported by tests/unit/images/conftest.py and tests/integration/test_queue_chaos.py (``tests/`` is
on sys.path through the root conftest). Skips when redis-server is missing, except under CI
(``CI`` set), where .ci/setup must have installed it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(workdir: Path, *, appendonly: bool = False) -> Iterator[str]:
    """Run redis-server in ``workdir``, without persistence unless ``appendonly`` (AOF, fsync every
    second); yields ``redis://127.0.0.1:PORT/0``."""
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the Redis queue tests, but redis-server is missing (bash .ci/setup installs it)")
        pytest.skip("redis-server is not installed (apt-get install redis-server, or bash .ci/setup)")
    for _ in range(5):  # another process may take the port between probe and bind
        port = _free_port()
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if appendonly else "no",
             "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _ping(port):
            time.sleep(0.05)
        if proc.poll() is None and _ping(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"redis-server did not start; see {workdir / 'redis.log'}")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a redis-server private to this test session."""
    yield from start_redis(tmp_path_factory.mktemp("redis"))


@pytest.fixture(scope="session")
def redis_aof_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a private redis-server with ``appendonly yes``, as production runs it."""
    yield from start_redis(tmp_path_factory.mktemp("redis-aof"), appendonly=True)
