"""Processes that end with the one that started them: Linux's ``prctl(PR_SET_PDEATHSIG)``; and whether a process
still exists.

Public API::

    sigterm_on_parent_death() -> Callable[[], int]   # the call; 0 on success, -1 with errno set
    process_exists(pid) -> bool                      # a process of that pid exists (of any user)

The image workers make the call in themselves (:func:`gpuprov.images.worker.die_with_supervisor`); the run's MPS
daemon, a program of NVIDIA's, gets it between fork and exec (:func:`gpuprov.images.mps.run_mps`), which is why it
is looked up first and called later: the child then makes one C call and takes no lock another thread may hold.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal the kernel sends a process when the thread that started it ends (linux/prctl.h)."""


def sigterm_on_parent_death() -> Callable[[], int]:
    """The call that asks the kernel for SIGTERM when the calling process's parent thread ends. Raises
    OSError or AttributeError where the C library has no ``prctl`` (not Linux)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return functools.partial(prctl, PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts; a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
