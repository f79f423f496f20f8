"""The image workers' fork server (gpuprov.images.forkserver): what a forked worker takes from its run, how its exit
reaches the run, that it dies with its run, whom the server refuses, when it ends, and two `gpuprov images run`s
of which the second starts its workers from the server the first one left."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprov.images import forkserver
from gpuprov.images.forkserver import run_socket, runtime_dir, server_key, serving, socket_path, spawn

ROOT = Path(__file__).resolve().parents[3]
STUB = ROOT / "tests" / "forkserver_stub.py"


def _wait_for(check: object, within_s: float = 60.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def _gone(pid: int) -> bool:
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
    assert _wait_for(lambda: serving(path), 30), "the stub server did not listen"
    yield path, proc
    proc.kill()
    proc.wait()


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
    assert not _gone(worker)
    run.kill()
    run.wait()
    assert _wait_for(lambda: _gone(worker), 10), "the forked worker outlived its killed run"
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


def test_the_server_refuses_a_run_of_another_cgroup(
    stub_server: tuple[Path, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm job's or a unit's workers must stay in its cgroup: that run starts its workers itself."""
    path, _ = stub_server
    monkeypatch.setattr(forkserver, "own_cgroup", lambda: "0::/another.slice/job.scope\n")
    assert spawn(path, dict(os.environ)) is None


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
        assert _wait_for(lambda: serving(path), 30)
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
        assert _wait_for(lambda: serving(path), 30)
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
        assert _wait_for(marker.exists, 30)
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
                assert path is not None and _wait_for(lambda p=path: serving(p), 120), "no server after the first run"
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
