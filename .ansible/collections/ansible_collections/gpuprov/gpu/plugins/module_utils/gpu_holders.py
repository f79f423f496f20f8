# Copyright: gpuprov contributors
# Apache-2.0
"""Processes holding the GPU device files (``/dev/nvidia*``), and ending them.

This is what ``fuser -v /dev/nvidia*`` reads: each ``/proc/<pid>/fd`` entry that links to a GPU device file.
The driver cannot be unloaded (``modprobe -r nvidia``: "Module nvidia is in use") and a new job cannot get the
memory such a process keeps while it lives, so ``gpuprov upgrade`` lists them before it unloads the driver and
``gpuprov doctor`` reports those no job or service owns. Pure Python 3.8, no Ansible imports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection, Iterable, Iterator
from typing import Any

#: Device files a GPU process opens: /dev/nvidia0..N, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps/*.
DEVICE_PREFIX = "/dev/nvidia"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _owner(status: str) -> str:
    """The user name of the real uid on the ``Uid:`` line of a ``/proc/<pid>/status`` text (the uid where no
    user has it, ``?`` where the line is missing or garbled)."""
    for line in status.splitlines():
        fields = line.split()
        if fields[:1] == ["Uid:"] and len(fields) > 1 and fields[1].isdigit():
            uid = int(fields[1])
            try:
                import pwd

                return pwd.getpwuid(uid).pw_name
            except (ImportError, KeyError):
                return str(uid)
    return "?"


def printable(text: str) -> str:
    """``text`` with each character that is not printable (control characters, such as the terminal escapes a
    process may put in its own name or arguments) written as a ``\\xNN`` / ``\\uNNNN`` escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def ancestors(pid: int, proc_root: str = "/proc") -> list[int]:
    """``pid`` and every parent up to pid 1, as ints (from ``<proc_root>/<pid>/stat``)."""
    chain = []
    while pid > 0 and pid not in chain:
        chain.append(pid)
        stat = _read(os.path.join(proc_root, str(pid), "stat"))
        if not stat:
            break
        # the command sits in parentheses and may hold spaces: the fields after its last ")" are fixed
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) < 2 or not fields[1].isdigit():
            break
        pid = int(fields[1])
    return chain


def open_files(proc_root: str = "/proc", exclude: Collection[int] = ()) -> Iterator[tuple[str, list[str]]]:
    """``(pid, [fd path, ...])`` for each process under ``proc_root`` whose ``fd`` folder can be read, by pid, except
    the pids in ``exclude``; each fd path (``/proc/<pid>/fd/<n>``) can be ``os.readlink``-ed or ``os.stat``-ed."""
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit() and int(p) not in exclude]
    except OSError:
        return
    for pid in sorted(pids, key=int):
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        yield pid, [os.path.join(fd_dir, fd) for fd in fds]


def command_name(proc_root: str, pid: str) -> str:
    """The kernel's short name of process ``pid`` (``comm``, non-printable characters escaped as
    :func:`printable` does), ``?`` when it cannot be read."""
    return printable((_read(os.path.join(proc_root, pid, "comm")) or "?").strip())


def device_holders(proc_root: str = "/proc", prefix: str = DEVICE_PREFIX,
                   exclude: Collection[int] = ()) -> list[dict[str, Any]]:
    """Processes with a file under ``prefix`` open, from a ``<proc_root>/*/fd`` scan, except the pids in
    ``exclude``.

    Returns:
        ``[{"pid": int, "command": str, "cmdline": str, "user": str, "devices": [str, ...]}]`` by pid;
        ``command`` is the kernel's short name (``comm``), ``cmdline`` the arguments joined by spaces (both with
        non-printable characters escaped, :func:`printable`). A process that ends while it is read is not listed.
    """
    found: list[dict[str, Any]] = []
    for pid, fds in open_files(proc_root, exclude):
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(prefix):
                devices.add(target)
        if not devices:
            continue
        cmdline = (_read(os.path.join(proc_root, pid, "cmdline")) or "").replace("\0", " ").strip()
        command = command_name(proc_root, pid)
        status = _read(os.path.join(proc_root, pid, "status"))
        if status is None or "\nState:\tZ" in status:  # ended meanwhile (gone, or a zombie that let go of its files)
            continue
        found.append({"pid": int(pid), "command": command, "cmdline": printable(cmdline), "user": _owner(status),
                      "devices": sorted(devices)})
    return found


def loaded_modules(proc_root: str = "/proc", prefix: str = "nvidia") -> list[str]:
    """Names of the loaded kernel modules that begin with ``prefix``, from ``<proc_root>/modules``, in its order
    (newest first); empty when the file cannot be read (a container without it)."""
    text = _read(os.path.join(proc_root, "modules")) or ""
    return [line.split(" ", 1)[0] for line in text.splitlines() if line.startswith(prefix)]


def describe(holder: dict[str, Any]) -> str:
    """One line naming a holder: ``pid 4242 (python3, user ml): python3 train.py - /dev/nvidia0``."""
    return "pid %d (%s, user %s): %s - %s" % (holder["pid"], holder["command"], holder["user"],
                                               holder["cmdline"] or holder["command"], ", ".join(holder["devices"]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has let go of its files; it only waits for its parent
    stat = _read("/proc/%d/stat" % pid)
    return not (stat and stat.rsplit(")", 1)[1].split()[0] == "Z")


def end_processes(pids: Iterable[int], timeout_s: float = 10.0, poll_s: float = 0.1) -> tuple[list[int], list[int]]:
    """SIGTERM each of ``pids``, wait up to ``timeout_s`` seconds for them to exit, then SIGKILL the rest and
    wait as long again. Never signals pid 1.

    Returns:
        ``(ended, remaining)``: sorted pid lists; ``remaining`` outlived SIGKILL (uninterruptible sleep in the
        driver, or another user's process without the permission to signal it).
    """
    pids = sorted({int(p) for p in pids if int(p) > 1})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(poll_s)
        if not any(_alive(p) for p in pids):
            break
    remaining = [p for p in pids if _alive(p)]
    return [p for p in pids if p not in remaining], remaining
