"""The image workers' fork server (gpuprov.images.forkserver): what a forked worker takes from its run, how its exit
reaches the run, that it dies with its run, and two `gpuprov images run`s of which the second starts its workers
from the server the first one left. The server's refusals, socket and lifetime: test_forkserver_server.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprov.images.forkserver import serving, spawn
from gpuprov.images.forkserver_socket import run_socket, socket_path
from tests.unit.images.forkserver_support import ROOT, STUB, gone, wait_for


def test_a_forked_child_takes_the_runs_environment_folder_umask_affinity_and_pipes(
    stub_server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, server = stub_server
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o027)
    try:
        worker = spawn(path, {**os.environ, "STUB_VALUE": "from the run"})
    finally:
        os.umask(old)
    assert worker is not None
    assert worker.stdin is not None and worker.stdout is not None
    assert worker.pid != server.pid and Path(f"/proc/{worker.pid}").exists()
    worker.stdin.write("config line\n")
    worker.stdin.close()
    got = json.loads(worker.stdout.readline())
    assert worker.wait(timeout=30) == 0 and worker.poll() == 0
    assert got == {"value": "from the run", "cwd": str(tmp_path), "umask": "0027",
                   "affinity": sorted(os.sched_getaffinity(0)), "stdin": "config line",
                   "pidfd_env_left": False}  # fmt: skip


def test_a_forked_childs_exit_code_and_death_by_signal_reach_the_run(
    stub_server: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    path, _ = stub_server
    exits = spawn(path, {**os.environ, "STUB_MODE": "exit3"})
    assert exits is not None and exits.stdin is not None
    exits.stdin.close()
    assert exits.wait(timeout=30) == 3
    waits = spawn(path, {**os.environ, "STUB_MODE": "wait"})
    assert waits is not None and waits.stdin is not None and waits.stdout is not None
    waits.stdin.close()
    waits.stdout.readline()  # it is running
    assert waits.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        waits.wait(timeout=0.2)
    waits.send_signal(signal.SIGKILL)
    assert waits.wait(timeout=30) == -signal.SIGKILL


def test_a_worker_that_dies_at_once_is_still_a_forked_worker_with_its_exit_code(
    stub_server: tuple[Path, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its exit (said by the child, told by the server) may reach the run with the server's answer, or before it."""
    path, _ = stub_server
    recv = socket.socket.recv

    def slow_recv(self: socket.socket, size: int, *args: int) -> bytes:
        time.sleep(0.3)  # a busy run: the child's and the server's lines are all there when it reads
        return recv(self, size, *args)

    monkeypatch.setattr(socket.socket, "recv", slow_recv)
    for _ in range(3):
        worker = spawn(path, {**os.environ, "STUB_MODE": "now3"})
        assert worker is not None
        assert worker.wait(timeout=30) == 3


def test_a_forked_worker_ends_when_its_run_is_killed(stub_server: tuple[Path, subprocess.Popen[bytes]]) -> None:
    """Its parent is the server, not the run: the run's pidfd tells it the run is gone (kill -9 included)."""
    path, server = stub_server
    run = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; from pathlib import Path; from gpuprov.images.forkserver import "
         "spawn; w = spawn(Path(sys.argv[1]), {**os.environ, 'STUB_MODE': 'wait'}); w.stdin.close(); "
         "w.stdout.readline(); print(w.pid, flush=True); time.sleep(120)", str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stdout is not None
    worker = int(run.stdout.readline())
    assert not gone(worker)
    run.kill()
    run.wait()
    assert wait_for(lambda: gone(worker), 10), "the forked worker outlived its killed run"
    assert server.poll() is None  # the server goes on


def test_a_forked_workers_exit_reaches_the_run_when_the_server_is_gone_and_nobody_reaps_it(runtime: Path) -> None:
    """Killed, the server cannot tell the exit: the run then looks at the worker itself. Orphaned, the worker is a
    child of the nearest subreaper (a container's init, a job manager), which may leave it a zombie: a zombie has
    exited (a signal 0 still reaches it, which made the run wait for it for ever)."""
    script = (
        "import ctypes, os, subprocess, sys, time; from pathlib import Path\n"
        "from gpuprov.images.forkserver import serving, spawn\n"
        "ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here\n"
        "path = Path(sys.argv[1])\n"
        "server = subprocess.Popen([sys.executable, sys.argv[2], str(path), '60'])\n"
        "while not serving(path): time.sleep(0.05)\n"
        "w = spawn(path, {**os.environ, 'STUB_MODE': 'wait'}); w.stdin.close(); w.stdout.readline()\n"
        "server.kill(); server.wait()\n"
        "os.kill(w.pid, 9)  # now a zombie of this process, which does not reap it\n"
        "print(w.wait(timeout=10), flush=True)\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(runtime / "stub.sock"), str(STUB)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "-1"


def test_a_forked_workers_exit_code_reaches_the_run_after_the_server_was_killed(
    stub_server: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    """The child says its code on the request's connection: a worker that ends with 2 or 4 after its server was
    killed ends the run as it should, and one that ends with 0 is not restarted as a crash (-1)."""
    path, server = stub_server
    workers = {code: spawn(path, {**os.environ, "STUB_MODE": f"later{code}"}) for code in (3, 0)}
    for worker in workers.values():
        assert worker is not None and worker.stdin is not None and worker.stdout is not None
        worker.stdin.write("config\n")
        worker.stdin.flush()
        worker.stdout.readline()  # it is running
    server.kill()
    server.wait()
    for code, worker in workers.items():
        assert worker is not None and worker.stdin is not None
        worker.stdin.close()  # now it exits
        assert worker.wait(timeout=30) == code


def test_runs_without_a_fork_server(runtime: Path) -> None:
    assert run_socket(600, follow=False, compiled=False) == socket_path()
    assert run_socket(0, follow=False, compiled=False) is None
    assert run_socket(600, follow=True, compiled=False) is None  # a service's workers stay in its unit
    assert run_socket(600, follow=False, compiled=True) is None  # torch.compile's caches are set before import


def _stop_servers(folder: Path) -> None:
    for sock in folder.glob("*.sock"):
        subprocess.run(["pkill", "-KILL", "-f", str(sock)], check=False)


def test_a_second_run_starts_its_workers_from_the_server_the_first_left(
    runtime: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from PIL import Image

    monkeypatch.delenv("GPUPROV_IMAGES_KEEP_WARM")  # the default, as a user runs it
    src = tmp_path / "in"
    src.mkdir()
    for i in range(12):
        Image.new("RGB", (40 + i, 30), (i * 20, 90, 30)).save(src / f"{i}.png")
    cli = [sys.executable, "-m", "gpuprov", "images"]
    reports = []
    try:
        for n in (1, 2):
            url = f"sqlite:///{tmp_path / f'q{n}.db'}"
            subprocess.run([*cli, "submit", str(src), "--queue", url], check=True, capture_output=True)
            run = subprocess.run([*cli, "run", "--queue", url, "--out", str(tmp_path / f"o{n}"), "--gpus", "cpu",
                                  "--cpu-workers", "2", "--task", "stats", "--json", str(tmp_path / f"r{n}.json")],
                                 capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
            assert run.returncode == 0, run.stderr
            reports.append(json.loads((tmp_path / f"r{n}.json").read_text()))
            assert (", forked; ready in" in run.stderr) == (n == 2), run.stderr  # each worker's ready line says
            if n == 1:
                assert "left a fork server" in run.stderr, run.stderr
                path = socket_path()
                assert path is not None and wait_for(lambda p=path: serving(p), 120), "no server after the first run"
        first, second = reports
        server = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True, check=False).stdout.split()
        assert len(server) == 1 and Path(f"/proc/{server[0]}/cwd").resolve() == Path("/")  # keeps no run's folder busy
        assert [w["forked"] for w in first["workers"]] == [False, False]
        assert [w["forked"] for w in second["workers"]] == [True, True]
        assert second["rows"] == first["rows"] == 12 and second["failed"] == 0
        # a forked worker's interpreter and imports were the server's
        assert all(w["startup_s"]["imports"] < 0.5 for w in second["workers"]), second["workers"]
        rows = [json.loads(line) for line in (tmp_path / "o2" / "manifest.jsonl").read_text().splitlines()]
        assert [r["shard"] for r in rows] == list(range(12)) and all(r["width"] >= 40 for r in rows)
    finally:
        _stop_servers(runtime / "gpuprov")


def test_keep_warm_0_leaves_no_server(runtime: Path, tmp_path: Path) -> None:
    from PIL import Image

    src = tmp_path / "in"
    src.mkdir()
    Image.new("RGB", (40, 30)).save(src / "a.png")
    url = f"sqlite:///{tmp_path / 'q.db'}"
    cli = [sys.executable, "-m", "gpuprov", "images"]
    subprocess.run([*cli, "submit", str(src), "--queue", url], check=True, capture_output=True)
    run = subprocess.run([*cli, "run", "--queue", url, "--out", str(tmp_path / "o"), "--gpus", "cpu", "--task", "stats",
                          "--keep-warm", "0"], capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "fork server" not in run.stderr
    assert not (runtime / "gpuprov").exists() or not list((runtime / "gpuprov").glob("*.sock"))
