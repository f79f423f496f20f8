"""gpuprov.proctree on real processes: descendants in sessions of their own are found, SIGTERM then SIGKILL
ends them, and a hurry cuts the grace period short."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from gpuprov.proctree import command_line, descendants, is_alive, is_child_of, terminate


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Started processes; each is killed and reaped after the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _ready(procs: list[subprocess.Popen[bytes]], script: str) -> subprocess.Popen[bytes]:
    """Start ``sh -c script``; return once it has printed its first line (its traps are set by then)."""
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE)
    procs.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_descendants_include_a_new_session(spawn: list[subprocess.Popen[bytes]]) -> None:
    root = _ready(spawn, "setsid sleep 301 & sleep 302 & echo ready; wait")
    deadline = time.monotonic() + 10
    found = descendants(root.pid)
    while sorted(command_line(p) for p in found) != ["sleep 301", "sleep 302"]:  # until both have exec'd
        assert time.monotonic() < deadline, [command_line(p) for p in found]
        time.sleep(0.05)
        found = descendants(root.pid)
    sessions = {command_line(p): os.getsid(p.pid) for p in found}
    assert sessions["sleep 301"] != os.getsid(root.pid) == sessions["sleep 302"]  # setsid: a session of its own
    assert all(is_child_of(p.pid, root.pid) for p in found)
    terminate(found, grace_s=5)
    assert not any(is_alive(p) for p in found)
    assert descendants(root.pid) == []


def test_sigterm_that_is_obeyed_ends_the_wait_early(spawn: list[subprocess.Popen[bytes]]) -> None:
    proc = _ready(spawn, "echo ready; exec sleep 300")
    started = time.monotonic()
    terminate([psutil.Process(proc.pid)], grace_s=30)
    assert time.monotonic() - started < 5
    assert proc.wait(timeout=5) == -15  # SIGTERM


def test_sigkill_follows_the_grace_period(spawn: list[subprocess.Popen[bytes]]) -> None:
    proc = _ready(spawn, "trap '' TERM; echo ready; exec sleep 300")  # sleep inherits the ignored SIGTERM
    started = time.monotonic()
    terminate([psutil.Process(proc.pid)], grace_s=0.5)
    assert time.monotonic() - started >= 0.5
    assert proc.wait(timeout=5) == -9  # SIGKILL


def test_hurry_sends_sigkill_at_once(spawn: list[subprocess.Popen[bytes]]) -> None:
    proc = _ready(spawn, "trap '' TERM; echo ready; exec sleep 300")
    started = time.monotonic()
    terminate([psutil.Process(proc.pid)], grace_s=30, hurry=lambda: True)
    assert time.monotonic() - started < 5
    assert proc.wait(timeout=5) == -9


def test_ended_processes_are_neither_alive_nor_signalled(spawn: list[subprocess.Popen[bytes]]) -> None:
    proc = _ready(spawn, "echo ready")
    handle = psutil.Process(proc.pid)
    proc.wait(timeout=5)
    assert not is_alive(handle)
    assert command_line(handle) == "?"
    assert descendants(proc.pid) == []
    assert not is_child_of(proc.pid, os.getpid())
    terminate([handle], grace_s=30)  # returns at once and raises nothing
