"""The image workers' fork server (:mod:`gpuprov.images.forkserver` says what it is for and what keeps it to its
user): ``python -m gpuprov.images.forkserver_serve SOCKET KEEP_WARM_S``.

Public API::

    serve(path, keep_warm_s, preload, child_main)   # import, listen, fork a worker per request until idle
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuprov.images import forkserver
from gpuprov.images.forkserver import FDS, PIDFD_ENV, REPLY_TIMEOUT_S, serving
from gpuprov.images.forkserver_socket import own_scope

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 << 20
"""Bytes of one request's JSON line past which the server drops it (an environment is a few hundred kB at most)."""


def serve(path: Path, keep_warm_s: float, preload: Callable[[], None], child_main: Callable[[], None]) -> None:
    """Import with ``preload``, listen at ``path`` and fork a worker (``child_main`` in the child) per request until
    ``keep_warm_s`` seconds pass with no worker and no request. Returns at once where another server listens at
    ``path``, without the imports (two runs ending together each start one), or after them where one started
    listening meanwhile."""
    if serving(path):
        return
    # `kill PID` from here on: one log line, and the socket removed once there is one (the default action, before
    # the server's loop began, left a killed server's socket file behind)
    signal.signal(signal.SIGTERM, _end_on_signal)
    preload()
    with _bound(path) as listener:
        if listener is None:
            return
        _Server(listener, keep_warm_s, child_main).loop()


@contextlib.contextmanager
def _bound(path: Path) -> Any:
    """A socket listening at ``path`` (a stale socket file there replaced), or None where a server listens there;
    the file is removed on the way out if it is still this server's."""
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if serving(path):
            yield None
            return
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        path.chmod(0o600)
        listener.listen(64)
        inode = path.stat().st_ino
    try:
        yield listener
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:
                path.unlink()


class _Server:
    """The server's loop: one selector for the listening socket, the request connections and SIGCHLD's wake-up
    pipe; no threads (it forks)."""

    def __init__(self, listener: socket.socket, keep_warm_s: float, child_main: Callable[[], None]) -> None:
        self.listener = listener
        self.keep_warm_s = keep_warm_s
        self.child_main = child_main
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}
        self.idle_since = time.monotonic()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def loop(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        while self.children or time.monotonic() - self.idle_since < self.keep_warm_s:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    conn, _ = self.listener.accept()
                    self.selector.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 512)
                else:
                    self.selector.unregister(key.fileobj)
                    self._request(key.fileobj)  # type: ignore[arg-type]
            self._reap()
        log.info("no worker and no request for %.0f s: ending", self.keep_warm_s)

    def _request(self, conn: socket.socket) -> None:
        """Read one request (a JSON line and :data:`FDS` file descriptors) from ``conn`` and fork its worker, or
        answer a refusal. The request must arrive whole within :data:`REPLY_TIMEOUT_S` seconds and
        :data:`MAX_REQUEST_BYTES`; one that does not, or is not JSON, is dropped and the server goes on. Only a
        forked worker counts as work for the idle time: a refused request, a bad one or a probe does not."""
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        fds: list[int] = []
        try:
            conn.settimeout(REPLY_TIMEOUT_S)
            data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, FDS)
            while data and not data.endswith(b"\n"):  # the rest of a long environment
                left = deadline - time.monotonic()
                if left <= 0 or len(data) > MAX_REQUEST_BYTES:
                    raise ValueError(f"no whole request within {REPLY_TIMEOUT_S:g} s and {MAX_REQUEST_BYTES} bytes")
                conn.settimeout(left)
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            if not data:  # a probe (serving()): connected and closed
                conn.close()
                return
            request = json.loads(data)
            refused = self._refusal(conn, request, fds)
            if refused:
                conn.sendall(json.dumps({"refused": refused}).encode() + b"\n")
                conn.close()
                return
            self.idle_since = time.monotonic()
            pid = os.fork()
            if pid == 0:
                self._child(conn, request, fds)  # never returns
            self.children[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested past Python's limit
            log.warning("a request failed: %s", exc)
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _refusal(self, conn: socket.socket, request: Any, fds: list[int]) -> str:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            return f"uid {uid} is not the server's"
        if not isinstance(request, dict) or len(fds) != FDS:
            return "not a worker request"
        if request.get("scope") != own_scope():
            return "another cgroup or namespace"
        return ""

    def _child(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """In the forked child: become the worker the request describes, then exit."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig, handler in ((signal.SIGCHLD, signal.SIG_DFL), (signal.SIGTERM, signal.SIG_DFL),
                                 (signal.SIGINT, signal.default_int_handler)):  # fmt: skip
                signal.signal(sig, handler)
            self.selector.close()
            self.listener.close()
            for other in self.children.values():
                other.close()
            conn.settimeout(REPLY_TIMEOUT_S)  # kept: the exit code goes there too (the server may be gone by then)
            forkserver._exit_conn = conn
            os.close(self.wake_r)
            os.close(self.wake_w)
            stdin, stdout, stderr, pidfd = fds
            for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
                os.dup2(fd, target)
                os.close(fd)
            logging.root.handlers.clear()  # the worker logs to its own stderr, as a worker started by the run does
            os.environ.clear()
            os.environ.update({**request["env"], PIDFD_ENV: str(pidfd)})
            os.chdir(request["cwd"])
            os.umask(int(request["umask"]))
            with contextlib.suppress(OSError, ValueError):
                os.sched_setaffinity(0, request["affinity"])
            sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stdin
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
            self.child_main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # the child must not return into the server's loop
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            forkserver.say_exit(code)
            os._exit(code)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                conn.close()
            if not self.children:
                self.idle_since = time.monotonic()


def _end_on_signal(signum: int, frame: Any) -> None:
    """End the server on ``signum`` (SIGTERM) as on its idle time: say so in its log, then leave through
    :func:`_bound`'s clean-up, which removes the socket (exit status 128 + the signal's number)."""
    log.info("%s: ending", signal.Signals(signum).name)
    sys.exit(128 + signum)


def _main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s forkserver %(process)d: %(message)s")
    from gpuprov.images.worker import child_main, preload

    serve(Path(argv[0]), float(argv[1]), preload, child_main)


if __name__ == "__main__":
    _main(sys.argv[1:])
