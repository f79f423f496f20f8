"""A fork server for image workers: one process per user and install that has torch imported, left behind by a run
so the next run's workers start without importing it.

A worker's first seconds go to ``import torch`` and torchvision (docs/benchmarks.md, "start-up phases apart"), the
same in every worker of every run. After a run, ``gpuprov images run`` leaves a server (``python -m
gpuprov.images.forkserver_serve``) that imports what a worker imports before it touches a device
(:func:`gpuprov.images.worker.preload`), then waits on a Unix socket. A later run asks it for each worker: the server
forks, and the child takes the run's environment, working folder, umask and CPU affinity and the pipes the run
passed (stdin, stdout, stderr, with ``SCM_RIGHTS``), then runs the worker as ``python -m gpuprov.images.worker``
would. CUDA is never initialised in the server (a forked child could not use it); each child opens its GPU itself.
The server ends after ``keep_warm_s`` seconds with no worker and no request.

What keeps it to its own user and install:

- its socket is in a folder of the user's own, mode 0700 (``$XDG_RUNTIME_DIR/gpuprov``, else ``gpuprov-<uid>`` in
  the temporary folder, ``$TMPDIR`` or /tmp; a folder another user owns or can enter is not used), and the server
  serves only peers of its own uid (``SO_PEERCRED``);
- the socket's name is a digest of what the server's imports depend on
  (:func:`~gpuprov.images.forkserver_socket.server_key`): the Python, gpuprov's code (its files' modification
  times), the installs of torch, torchvision, Triton, NumPy and Pillow, and the environment variables read when
  libraries load (``LD_*``, ``PYTHON*``, ``TORCH*``, ``TRITON*``, ``CUDA*``, thread counts), and the cgroup and
  namespaces of the run (a login session's scope, a Slurm job, a systemd unit, a container): each has a server of
  its own. A run whose key differs starts its own server; the old one ends when its time is up;
- a request from another cgroup or namespace is refused, so a worker is never moved out of a job's cgroup or a
  container (a run moved to another cgroup after it chose its socket): that run starts its workers itself. A
  refused request does not count as work, so it does not keep the server alive.

A forked worker's parent is the server, so ``PR_SET_PDEATHSIG`` cannot tie it to its run: the run passes a pidfd
of itself, and the worker ends when that pidfd reports the run's exit
(:func:`gpuprov.images.worker.die_with_supervisor`).
The server reports each child's exit status on the request's connection (:class:`ForkedWorker` reads it); the child
says its exit code there too before it exits, which is what the run goes by where the server was killed.

Public API (where the server listens: :mod:`gpuprov.images.forkserver_socket`)::

    spawn(path, env) -> ForkedWorker | None            # a worker forked by the server there; None: none serves
    say_exit(code) -> None                             # in a forked worker, last: tell the run its exit code
    serving(path) -> bool                              # whether a server listens there
    start_server(path, keep_warm_s) -> None            # leave a server behind (it gives up if one runs there)

The server itself: :mod:`gpuprov.images.forkserver_serve`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import site
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from gpuprov.images.forkserver_socket import own_scope

log = logging.getLogger(__name__)

KEEP_WARM_S = 600.0
"""Default seconds a fork server waits with no worker and no request before it ends."""
PIDFD_ENV = "GPUPROV_SUPERVISOR_PIDFD"
"""In a forked worker: the number of its file descriptor that is a pidfd of the run that asked for it."""
REPLY_TIMEOUT_S = 5.0
"""Seconds a run waits for the server's answer to a request before it starts the worker itself."""
FDS = 4  # passed with a request: the worker's stdin (read end), stdout and stderr (write ends), the run's pidfd


class ForkedWorker:
    """A worker the server forked, with the parts of :class:`subprocess.Popen` the supervisor uses: ``pid``,
    ``stdin`` (text, to write the configuration), ``stdout`` (text, its events), ``returncode``, :meth:`poll`,
    :meth:`wait` and :meth:`send_signal`. The exit status comes over the request's connection; where the server
    is gone before it tells, a worker that has exited has the code it said it was exiting with (the child sends
    ``{"exiting": code}`` on the same connection before it exits), or -1 (killed by a signal). Whether it has
    exited is read from ``pidfd``, a pidfd of the worker (None where it could not be opened: then from its pid): the
    server's orphans go to a subreaper that may leave them zombies, to which a signal 0 still gets through."""

    def __init__(self, pid: int, conn: socket.socket, stdin: IO[str], stdout: IO[str],
                 pidfd: int | None = None) -> None:  # fmt: skip
        self.pid = pid
        self.stdin: IO[str] | None = stdin
        self.stdout: IO[str] | None = stdout
        self.returncode: int | None = None
        self._conn = conn
        self._pidfd = pidfd
        self._exiting: int | None = None  # the code the worker said it exits with
        self._buffer = b""

    def poll(self) -> int | None:
        """The return code once the worker has exited, else None (without waiting)."""
        if self.returncode is None:
            self._read(timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker's exit; raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            self._read(timeout=0.5 if left is None else min(left, 0.5))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the worker unless it has exited."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, sig)  # not another process that took its pid
                else:
                    os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, timeout: float) -> None:
        if self._take_lines():  # read with the server's answer (spawn)
            return
        self._conn.settimeout(timeout)
        try:
            chunk = self._conn.recv(4096)
        except (TimeoutError, BlockingIOError):
            return
        except OSError:
            chunk = b""
        if chunk:
            self._buffer += chunk
            self._take_lines()
            return
        # the server is gone without telling: the worker's state is all there is to go on
        if not self._running():
            self._finish(-1 if self._exiting is None else self._exiting)
        else:
            time.sleep(timeout)

    def _take_lines(self) -> bool:
        """Act on the whole lines read so far (``exiting``: the code the child said; ``exit``: the server's word);
        whether the worker's exit is known now."""
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exiting" in message:
                self._exiting = int(message["exiting"])
            if "exit" in message:
                self._finish(int(message["exit"]))
                return True
        return False

    def _running(self) -> bool:
        """Whether the worker has not exited (a zombie has)."""
        if self._pidfd is not None:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            return not poller.poll(0)  # a pidfd is readable once its process has exited
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _finish(self, code: int) -> None:
        self.returncode = code
        self._conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


_exit_conn: socket.socket | None = None  # in a forked worker: its request's connection (the run reads it)


def say_exit(code: int) -> None:
    """In a forked worker: tell its run the code this process is about to exit with (the run goes by it where the
    server was killed before telling the exit); nothing in a worker the run started itself. Call it last, before
    ``os._exit``; errors are ignored (the run is gone)."""
    global _exit_conn
    conn, _exit_conn = _exit_conn, None
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"exiting": code}).encode() + b"\n")


def spawn(path: Path, env: Mapping[str, str]) -> ForkedWorker | None:
    """Ask the server listening at ``path`` for a worker with environment ``env`` (and this process's working
    folder, umask and CPU affinity); the worker's stderr is this process's. None when no server answers there or it
    refuses (another cgroup or namespace), or where this process's working folder was removed (a child could not
    enter it): the caller starts the worker itself."""
    try:
        cwd = str(Path.cwd())
    except OSError:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        conn.connect(str(path))
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        conn.close()
        return None
    if uid != os.getuid():  # not this user's server: it would get the worker's configuration (the queue's URL)
        log.warning("fork server at %s is uid %d's, not this user's: not used", path, uid)
        conn.close()
        return None
    try:
        pidfd = os.pidfd_open(os.getpid())
    except (OSError, AttributeError):  # Linux before 5.3
        conn.close()
        return None
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    request = {"env": dict(env), "cwd": cwd, "umask": _umask(), "affinity": sorted(os.sched_getaffinity(0)),
               "scope": own_scope()}  # fmt: skip
    try:
        payload = json.dumps(request).encode() + b"\n"
        # a stream socket takes what its buffer holds (some hundred kB): the rest of a large environment follows
        sent = socket.send_fds(conn, [payload], [stdin_r, stdout_w, 2, pidfd])
        conn.sendall(payload[sent:])
        reply, rest = _read_reply(conn)
    except (OSError, ValueError):
        reply, rest = {}, b""
    finally:
        for fd in (stdin_r, stdout_w, pidfd):
            os.close(fd)
    if not isinstance(reply.get("pid"), int):
        if reply.get("refused"):
            log.info("fork server at %s refused: %s", path, reply["refused"])
        conn.close()
        os.close(stdin_w)
        os.close(stdout_r)
        return None
    try:
        worker_pidfd: int | None = os.pidfd_open(reply["pid"])
    except OSError:  # it exited and the server reaped it already: the server tells its exit
        worker_pidfd = None
    worker = ForkedWorker(reply["pid"], conn, os.fdopen(stdin_w, "w"), os.fdopen(stdout_r, "r"), worker_pidfd)
    worker._buffer = rest
    return worker


def _read_reply(conn: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The server's answer to a request (``{"pid": N}`` or ``{"refused": why}``; ``{}`` where the connection ends
    first) and the lines read with it or before it: a child that exits at once may say so (``{"exiting": code}``)
    before the server answers, and the server may tell its exit in the same read. Raises :class:`OSError` (a
    timeout included) and :class:`ValueError` (not JSON)."""
    data, early = b"", b""
    while True:
        while b"\n" in data:
            line, data = data.split(b"\n", 1)
            value = json.loads(line)
            if not isinstance(value, dict):
                return {}, b""
            if "pid" in value or "refused" in value:
                return value, early + data
            early += line + b"\n"
        chunk = conn.recv(4096)
        if not chunk:
            return {}, b""
        data += chunk


def _umask() -> int:
    """This process's umask, from ``/proc/self/status`` (``os.umask`` can only read it by changing it)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def serving(path: Path) -> bool:
    """Whether a server listens at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def start_server(path: Path, keep_warm_s: float) -> None:
    """Start a server for ``path`` in the background, in a session of its own, its output in ``path`` with
    ``.log`` appended; it imports, then listens, or ends at once where one already listens there. It runs in ``/``,
    not in this run's folder, which it would keep busy for as long as it lives; where gpuprov is not imported from
    an installed package's folder (a source checkout), that folder goes first on its ``PYTHONPATH``."""
    log_path = path.with_suffix(".log")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the gpuprov package
    if root not in {*site.getsitepackages(), site.getusersitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        with log_path.open("ab") as out:
            subprocess.Popen(
                [sys.executable, "-m", "gpuprov.images.forkserver_serve", str(path), str(keep_warm_s)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
                cwd="/", env=env,
            )  # fmt: skip
    except OSError as exc:
        log.warning("cannot start the image workers' fork server: %s", exc)
