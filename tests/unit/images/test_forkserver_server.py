"""The image workers' fork server (gpuprov.images.forkserver) as a server: whom it refuses (other users, other
cgroups, bad requests), where its socket is and what names it, and when it ends (idle time, SIGTERM, another
server already listening)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from gpuprov.images import forkserver, forkserver_socket
from gpuprov.images.forkserver import serving, spawn
from gpuprov.images.forkserver_socket import runtime_dir, server_key, socket_path
from tests.unit.images.forkserver_support import ROOT, STUB, wait_for


def test_the_server_refuses_a_run_of_another_cgroup(
    stub_server: tuple[Path, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm job's or a unit's workers must stay in its cgroup: that run starts its workers itself."""
    path, _ = stub_server
    monkeypatch.setattr(forkserver, "own_scope", lambda: "0::/another.slice/job.scope\n")
    assert spawn(path, dict(os.environ)) is None


def test_refused_requests_do_not_keep_the_server_alive(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of another cgroup, asking again and again, are refused and the server still ends after its idle time
    (it counted each refusal as work, so a stale server outlived its time while refusing every run)."""
    path = runtime / "stub.sock"
    server = subprocess.Popen([sys.executable, str(STUB), str(path), "3"], cwd=ROOT)
    try:
        assert wait_for(lambda: serving(path), 30), "the stub server did not listen"
        monkeypatch.setattr(forkserver, "own_scope", lambda: "0::/user.slice/session-2.scope\n")
        deadline = time.monotonic() + 60  # 3 s idle; the rest is slack for a loaded machine
        while server.poll() is None and time.monotonic() < deadline:
            assert spawn(path, dict(os.environ)) is None
            time.sleep(0.2)
        assert server.poll() == 0, "the server outlived its idle time while refusing requests"
    finally:
        server.kill()
        server.wait()


def test_each_cgroup_has_a_server_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new login session, Slurm job or systemd unit gets its own socket, not one whose server refuses it."""
    env = {"PATH": "/usr/bin"}
    monkeypatch.setattr(forkserver_socket, "own_scope", lambda: "0::/user.slice/session-1.scope\n")
    first = server_key(env)
    monkeypatch.setattr(forkserver_socket, "own_scope", lambda: "0::/user.slice/session-2.scope\n")
    assert server_key(env) != first


def test_each_container_has_a_server_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a cgroup namespace every container's cgroup reads ``0::/``: its namespaces tell it apart, so two
    containers sharing a runtime folder do not share a server (whose workers would run in the other container)."""
    env = {"PATH": "/usr/bin"}
    namespaces = {name: f"{name}:[40265318{i}]" for i, name in enumerate(forkserver_socket.NAMESPACES)}
    monkeypatch.setattr(Path, "read_text", lambda self, **_: "0::/\n")
    monkeypatch.setattr(Path, "readlink", lambda self: Path(namespaces[self.name]))
    first = server_key(env)
    namespaces["mnt"] = "mnt:[4026532999]"  # another container's mount namespace
    assert server_key(env) != first and "mnt:[4026532999]" in forkserver_socket.own_scope()


def test_a_run_with_a_large_environment_gets_a_forked_worker(
    stub_server: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    """A request larger than the socket's buffer (an environment of megabytes) reaches the server whole."""
    path, _ = stub_server
    value = "x" * 3_000_000
    worker = spawn(path, {**os.environ, "STUB_VALUE": value})
    assert worker is not None and worker.stdin is not None and worker.stdout is not None
    worker.stdin.close()
    assert json.loads(worker.stdout.readline())["value"] == value
    assert worker.wait(timeout=30) == 0


def test_the_server_survives_bad_requests_and_goes_on_serving(
    stub_server: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    """Garbage, JSON nested past Python's recursion limit, a request without its end: each ends only itself."""
    path, server = stub_server
    for payload in (b"garbage\n", b"\xff\xfe\n", b"[" * 100_000 + b"\n", b'{"env": 5}\n'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(path))
            socket.send_fds(conn, [payload], [0, 1, 2])
            conn.recv(4096)  # a refusal, or closed
    # a client that sends a byte now and then, never the line's end, holds the server at most its reply time: a run
    # asking meanwhile gets its worker
    dripping = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dripping.connect(str(path))
    dripping.sendall(b'{"env": {')
    done = threading.Event()

    def drip() -> None:
        while not done.wait(0.5):
            with contextlib.suppress(OSError):
                dripping.sendall(b" ")

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        time.sleep(forkserver.REPLY_TIMEOUT_S / 2)
        worker = spawn(path, {**os.environ, "STUB_VALUE": "after"})
    finally:
        done.set()
        dripper.join()
        dripping.close()
    assert server.poll() is None
    assert worker is not None and worker.stdin is not None and worker.stdout is not None
    worker.stdin.close()
    assert json.loads(worker.stdout.readline())["value"] == "after"
    assert worker.wait(timeout=30) == 0


def test_spawn_from_a_removed_working_folder_gives_none(
    stub_server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child could not enter it: the run starts that worker itself (it raised FileNotFoundError in the run)."""
    path, _ = stub_server
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert spawn(path, dict(os.environ)) is None


def test_spawn_without_a_server_gives_none(runtime: Path) -> None:
    assert spawn(runtime / "nobody.sock", dict(os.environ)) is None


def test_the_server_ends_after_its_idle_time_and_a_second_one_gives_way(runtime: Path) -> None:
    path = runtime / "stub.sock"
    # 10 s idle: the second server's start and end must fit in it (on a loaded CI machine, 2 s did not)
    first = subprocess.Popen([sys.executable, str(STUB), str(path), "10"], cwd=ROOT)
    try:
        assert wait_for(lambda: serving(path), 30)
        second = subprocess.run([sys.executable, str(STUB), str(path), "60"], cwd=ROOT, timeout=60, check=False)
        assert second.returncode == 0 and first.poll() is None and serving(path)
        assert first.wait(timeout=60) == 0
        assert not path.exists()
    finally:
        first.kill()
        first.wait()


def test_a_server_ended_with_sigterm_says_so_and_removes_its_socket(runtime: Path) -> None:
    path = runtime / "stub.sock"
    server = subprocess.Popen([sys.executable, str(STUB), str(path), "60"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: serving(path), 30)
        server.terminate()
        _, err = server.communicate(timeout=30)
    finally:
        server.kill()
        server.wait()
    assert server.returncode == 128 + signal.SIGTERM
    assert "forkserver: SIGTERM: ending" in err and "Traceback" not in err
    assert not path.exists()


def test_sigterm_while_the_server_imports_ends_it_as_a_sigterm_later_does(runtime: Path) -> None:
    """`kill PID` is answered the same from the server's first instruction: during its imports (seconds of torch)
    it logs the signal and exits 143, not killed by the default action."""
    marker = runtime / "importing"
    script = (
        "import logging, sys, time; from pathlib import Path\n"
        "from gpuprov.images.forkserver_serve import serve\n"
        "logging.basicConfig(level=logging.INFO, format='forkserver: %(message)s')\n"
        "def preload():\n"
        "    Path(sys.argv[2]).touch(); time.sleep(60)\n"
        "serve(Path(sys.argv[1]), 60, preload, lambda: None)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", script, str(runtime / "stub.sock"), str(marker)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert wait_for(marker.exists, 30)
        server.terminate()
        _, err = server.communicate(timeout=30)
    finally:
        server.kill()
        server.wait()
    assert server.returncode == 128 + signal.SIGTERM, err
    assert "forkserver: SIGTERM: ending" in err and "Traceback" not in err
    assert not (runtime / "stub.sock").exists()


def test_a_second_server_gives_way_before_it_imports(stub_server: tuple[Path, subprocess.Popen[bytes]]) -> None:
    """Two runs that end together each start a server: the second must not import torch only to end."""
    from gpuprov.images.forkserver_serve import serve

    path, server = stub_server
    imported = []
    serve(path, 60, lambda: imported.append(True), lambda: None)
    assert not imported and server.poll() is None and serving(path)


def test_the_socket_folder_is_private_or_not_used(runtime: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = runtime_dir()
    assert folder == runtime / "gpuprov" and folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="gpuprov.images.forkserver"):
        assert runtime_dir() is None and socket_path() is None
    assert f"no fork server: {folder} is not a private folder" in caplog.text and "mode 755" in caplog.text
    folder.chmod(0o700)
    if os.getuid() == 0:  # another owner
        os.chown(folder, 1, 1)
        assert runtime_dir() is None


def test_another_users_runtime_folder_is_not_used(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``su``/``sudo`` may keep another user's XDG_RUNTIME_DIR: that user could swap the socket's folder in it."""
    runtime.chmod(0o755)
    assert runtime_dir() == Path(tempfile.gettempdir()) / f"gpuprov-{os.getuid()}"
    runtime.chmod(0o700)
    assert runtime_dir() == runtime / "gpuprov"
    if os.getuid() == 0:
        os.chown(runtime, 1, 1)
        assert runtime_dir() == Path(tempfile.gettempdir()) / f"gpuprov-{os.getuid()}"


@pytest.mark.skipif(os.getuid() != 0, reason="listens as another user")
def test_spawn_does_not_use_another_users_server(runtime: Path) -> None:
    """The run checks whom it talks to: another user's server would get the worker's pipes and configuration."""
    theirs = runtime / "theirs"
    theirs.mkdir()
    os.chown(theirs, 1, 1)
    runtime.chmod(0o755)
    path = theirs / "images.sock"
    server = subprocess.Popen(
        [sys.executable, "-c", "import os, socket, sys, time\nos.setgid(1); os.setuid(1)\n"
         "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('up', flush=True)\n"
         "c, _ = s.accept(); c.recv(1 << 20); c.sendall(b'{\"pid\": 1}\\n'); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline() == "up\n"
        assert spawn(path, dict(os.environ)) is None
    finally:
        server.kill()
        server.wait()


def test_the_server_key_follows_load_time_variables_not_per_worker_ones() -> None:
    env = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/a"}
    key = server_key(env)
    assert server_key({**env, "CUDA_VISIBLE_DEVICES": "GPU-1", "CUDA_MPS_PIPE_DIRECTORY": "/x", "HOME": "/h"}) == key
    assert server_key({**env, "LD_LIBRARY_PATH": "/opt/b"}) != key
    assert server_key({**env, "TRITON_CACHE_DIR": "/c"}) != key


def test_no_socket_where_its_path_is_too_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    assert runtime_dir() == deep / "gpuprov" and socket_path() is None
