"""Find the processes a process started, and end them: SIGTERM, a grace period, then SIGKILL.

Processes are :class:`psutil.Process` objects. Each remembers the pid and the start time it was made with,
so a pid that the kernel has since given to another process is neither reported alive nor signalled. A
zombie counts as ended: it has exited already, and only its parent can reap it.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterable

import psutil

from gpuprov.redact import redact_argv

#: Seconds between two looks at whether signalled processes have ended.
POLL_S = 0.1


def is_child_of(pid: int, parent: int) -> bool:
    """Whether process ``pid`` is alive and a child of process ``parent``."""
    try:
        return psutil.Process(pid).ppid() == parent
    except psutil.Error:  # ended, or not ours to look at
        return False


def is_alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` (same pid, same start time) still runs; False once it has ended or is a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(root: int) -> list[psutil.Process]:
    """Every live descendant of process ``root``: its children, theirs and so on.

    They are found through their parent pids, so a descendant that started a process group or a session of
    its own (``setsid``) is found too. Empty once ``root`` has ended.
    """
    try:
        found = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [proc for proc in found if is_alive(proc)]


def command_line(proc: psutil.Process) -> str:
    """The command line of ``proc`` (arguments joined by spaces, credentials replaced by ``***``:
    :func:`gpuprov.redact.redact_argv`; first 200 characters), or ``?``."""
    try:
        args = proc.cmdline()
    except psutil.Error:
        return "?"
    return " ".join(redact_argv(args)).strip()[:200] or "?"


def _send(procs: Iterable[psutil.Process], signum: int) -> None:
    for proc in procs:
        # psutil.Error: ended meanwhile (its pid may be another process's now), or not ours to signal
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signum)


def terminate(procs: Iterable[psutil.Process], grace_s: float, hurry: Callable[[], bool] = lambda: False) -> None:
    """End ``procs``: SIGTERM, up to ``grace_s`` seconds for them to exit, then SIGKILL to those left.

    The wait is checked every :data:`POLL_S` seconds and ends early once all have exited or ``hurry()``
    returns True (the SIGKILL then follows at once). Processes that have ended already are skipped; a
    process that is not ours to signal is left alone. Raises nothing.
    """
    left = [proc for proc in procs if is_alive(proc)]
    _send(left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline and not hurry():
        time.sleep(POLL_S)
        left = [proc for proc in left if is_alive(proc)]
    _send(left, signal.SIGKILL)
