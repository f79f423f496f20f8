"""The processes holding this machine's GPUs, which of them are left over, and ending those (``gpuprov doctor``).

A holder is a process with a device file matching ``device_glob`` open (a ``<proc_root>/*/fd`` scan, what
``fuser -v /dev/nvidia*`` reads) or one NVML lists with GPU memory (nvmlDeviceGetComputeRunningProcesses). A
holder is *left over* when its job has ended: the leader of its process group (the job, in POSIX job-control
terms: a shell job, a launcher and the workers it forked) has exited, as happens to DataLoader or
multiprocessing workers whose main process was killed. Known services (module_utils/doctor_workload.py
``known_service``: the NVIDIA daemons, DCGM and dcgm-exporter, gpuprov's image workers, containers), pid 1 and
the process tree of the caller itself are never left over.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from pathlib import Path
from typing import Any

import psutil
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_workload import known_service
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_holders import printable

from gpuprov.proctree import command_line, is_alive, terminate

#: The device files whose holders doctor lists (``--devices`` changes it).
DEVICE_GLOB = "/dev/nvidia*"

#: Seconds between SIGTERM and SIGKILL when ``--fix`` ends a leftover process.
GRACE_S = 10.0


def _fd_holders(proc_root: str, device_glob: str) -> dict[int, list[str]]:
    """pid -> the device files matching ``device_glob`` it has open."""
    out: dict[int, list[str]] = {}
    root = Path(proc_root)
    for pid_dir in root.iterdir() if root.is_dir() else []:
        if not pid_dir.name.isdigit():
            continue
        devices: set[str] = set()
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = str(fd.readlink())
                    if fnmatch.fnmatchcase(target, device_glob):
                        devices.add(target)
        if devices:
            out[int(pid_dir.name)] = sorted(devices)
    return out


def _own_tree() -> set[int]:
    """This process, its ancestors and its descendants: never candidates."""
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids |= {p.pid for p in me.parents()}
        pids |= {p.pid for p in me.children(recursive=True)}
    return pids


def _cgroup(pid: int) -> str:
    """``/proc/<pid>/cgroup`` (empty when unreadable)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
    except OSError:
        return ""


def _describe(pid: int, entry: dict[str, Any], mine: set[int]) -> None:
    """Add user, cmdline, pgid, create_time, allowed and job_ended from the live process (psutil); ``mine`` is
    this process's own tree (:func:`_own_tree`)."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            entry["command"] = printable(proc.name())
            entry["user"] = proc.username()
            entry["create_time"] = proc.create_time()
        entry["cmdline"] = printable(command_line(proc))
        pgid = os.getpgid(pid)
    except (psutil.Error, OSError):
        entry["job_ended"] = None  # ended meanwhile, or not ours to look at
        return
    cgroup = _cgroup(pid)
    entry["pgid"] = pgid
    # a process in doctor's own cgroup (doctor itself runs in that container or unit) is judged by name only
    entry["allowed"] = known_service(entry["command"], cgroup if cgroup != _cgroup(os.getpid()) else "")
    if pid == 1 or pid in mine:
        entry["allowed"] = entry["allowed"] or "pid 1 or gpuprov doctor itself"
    try:
        leader_alive = is_alive(psutil.Process(pgid))
    except psutil.Error:
        leader_alive = False
    entry["job_ended"] = pgid != pid and not leader_alive


def collect(proc_root: str = "/proc", device_glob: str = DEVICE_GLOB,
            gpu_memory: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The holders, sorted by pid: ``[{pid, command, devices}]`` read from ``proc_root`` (names and command lines
    with non-printable characters escaped); on the live ``/proc``
    also ``user``, ``cmdline``, ``pgid``, ``create_time`` (s since the epoch), ``allowed`` (why it holds the GPU
    by design, or None), ``job_ended`` (bool; None when the process could not be read) and ``gpu_memory_bytes``
    (from ``gpu_memory``: pid -> bytes NVML reports it using, summed over GPUs)."""
    found = _fd_holders(proc_root, device_glob)
    memory = gpu_memory or {}
    live = os.path.realpath(proc_root) == "/proc"
    mine = _own_tree() if live else set()
    out = []
    for pid in sorted(set(found) | (set(memory) if live else set())):
        entry: dict[str, Any] = {"pid": pid, "command": "?", "devices": found.get(pid, [])}
        if not live:
            with contextlib.suppress(OSError):
                entry["command"] = printable((Path(proc_root) / str(pid) / "comm").read_text(encoding="utf-8").strip())
            out.append(entry)
            continue
        if pid in memory:
            entry["gpu_memory_bytes"] = memory[pid]
        _describe(pid, entry, mine)
        out.append(entry)
    return out


def leftovers(holders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The holders ``--fix`` may end: job ended, no known service, not pid 1 or doctor's own tree."""
    return [h for h in holders if h.get("job_ended") and not h.get("allowed") and h.get("pid") != 1
            and not known_service(h.get("command"))]


def end(holders: list[dict[str, Any]], grace_s: float = GRACE_S) -> list[dict[str, Any]]:
    """End each holder (SIGTERM, up to ``grace_s`` seconds, then SIGKILL) that is still the same process (pid and
    start time); returns ``[{pid, command, ended}]``. Never signals pid 1 or this process's own tree."""
    mine = _own_tree()
    procs: dict[int, psutil.Process] = {}
    kept: set[int] = set()
    for holder in holders:
        pid = int(holder["pid"])
        if pid == 1 or pid in mine:
            kept.add(pid)
            continue
        with contextlib.suppress(psutil.Error):  # gone already (or its pid is another process's now): ended
            proc = psutil.Process(pid)
            if holder.get("create_time") is None or proc.create_time() == holder["create_time"]:
                procs[pid] = proc
    terminate(list(procs.values()), grace_s)
    return [{"pid": h["pid"], "command": h.get("cmdline") or h.get("command"),
             "ended": h["pid"] not in kept and not (h["pid"] in procs and is_alive(procs[h["pid"]]))}
            for h in holders]
