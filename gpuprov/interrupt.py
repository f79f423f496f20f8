"""Stop a playbook run on SIGINT/SIGTERM so that nothing it started outlives gpuprov.

:class:`SignalStop` holds gpuprov's signal handlers for the length of one run, is ansible-runner's cancel
callback, and afterwards ends whatever ansible-playbook left behind (:mod:`gpuprov.proctree`) and raises
:class:`~gpuprov.exceptions.Interrupted` (exit 130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from gpuprov.exceptions import Interrupted
from gpuprov.proctree import command_line, descendants, is_alive, is_child_of, terminate

log = logging.getLogger(__name__)

#: Seconds ansible-playbook gets, after gpuprov forwards SIGINT to it, to stop its workers (and through them
#: the modules and ssh connections they started) before ansible-runner kills its process group.
CANCEL_GRACE_S = 10.0
#: Seconds a process left over after the run gets between SIGTERM and SIGKILL.
STRAY_GRACE_S = 2.0


class SignalStop:
    """Stops a run on SIGINT/SIGTERM so that nothing it started outlives gpuprov.

    ansible-core's workers call ``setsid`` (and the ssh connection plugin starts ssh in a new session), so
    the ``killpg`` that ansible-runner sends to ansible-playbook's process group on cancel misses them.
    On the first signal this forwards SIGINT to ansible-playbook (its TaskQueueManager then signals every
    worker, which signals its own process group and exits) and gives it ``grace_s`` seconds
    (:data:`CANCEL_GRACE_S`); only then does ansible-runner's cancel callback return True (a second signal
    shortens the wait). Every descendant of ansible-playbook seen meanwhile is remembered and ended by
    :meth:`end_strays`.

    ansible-playbook's process id comes from ansible-runner's events (``pid``: the callback plugin runs in
    ansible-playbook's main process), checked to be a child of this process.

    Attributes:
        signal: the last signal received (``signal.SIGINT`` or ``signal.SIGTERM``), or None.
        count: how many signals were received.
        playbook_pid: ansible-playbook's process id, once an event has named it.
        forwarded: whether SIGINT was forwarded to ansible-playbook.
    """

    def __init__(self, grace_s: float = CANCEL_GRACE_S) -> None:
        self.signal: int | None = None
        self.count = 0
        self.playbook_pid: int | None = None
        self.forwarded = False
        self._grace_s = grace_s
        self._deadline: float | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.signal = signum
        self.count += 1

    def watch(self, event: dict[str, Any]) -> None:
        """ansible-runner event (before the collector): learn ansible-playbook's process id."""
        pid = event.get("pid")
        if self.playbook_pid is None and isinstance(pid, int) and pid > 0 and is_child_of(pid, os.getpid()):
            self.playbook_pid = pid

    def requested(self) -> bool:
        """ansible-runner's cancel callback (polled about once a second): True once ansible-runner should
        kill ansible-playbook's process group."""
        if self.signal is None:
            return False
        pid = self.playbook_pid
        if pid is None:
            return True
        self._seen.update((proc.pid, proc) for proc in descendants(pid))
        if self.count > 1:
            return True
        if self._deadline is None:
            self._deadline = time.monotonic() + self._grace_s
            log.info("stopping ansible-playbook (pid %d): SIGINT, then SIGKILL after %.0f s", pid, self._grace_s)
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                return True
            self.forwarded = True
            return False
        return time.monotonic() >= self._deadline

    def end_strays(self) -> list[int]:
        """SIGTERM, then after :data:`STRAY_GRACE_S` seconds SIGKILL, every remembered descendant of
        ansible-playbook still alive; return their pids. A signal that arrives meanwhile sends the SIGKILL
        at once."""
        strays = [proc for _pid, proc in sorted(self._seen.items()) if is_alive(proc)]
        if not strays:
            return []
        names = {proc.pid: command_line(proc) for proc in strays}
        signals_before = self.count
        terminate(strays, STRAY_GRACE_S, hurry=lambda: self.count != signals_before)
        log.warning("ended %d process(es) left over by ansible-playbook: %s", len(strays),
                    ", ".join(f"{pid} ({name})" for pid, name in names.items()))
        return list(names)

    def raise_if_stopped(self, run_dir: Path) -> None:
        """Raise :class:`~gpuprov.exceptions.Interrupted` (exit 143 after SIGTERM, else 130) if a signal came,
        also one that came after ansible-playbook had ended: the user asked to stop. ``run_dir`` is the run
        record the message names."""
        if self.signal is None:
            return
        code = 143 if self.signal == signal.SIGTERM else 130
        raise Interrupted(f"interrupted by {signal.Signals(self.signal).name}: ansible-playbook and its "
                          f"connections were stopped; run record: {run_dir}", exit_code=code)

    def install(self) -> None:
        """Install the handlers (main thread only; elsewhere signals keep their handlers)."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
