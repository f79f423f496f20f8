"""The supervisor of ``gpuprov images run``: starts one worker process per slot and restarts those that die.

A worker that dies is restarted at once, as long as its slot has had fewer than :data:`MAX_RESTARTS`
restarts in the last :data:`RESTART_WINDOW_S` seconds: a ``--follow`` service that loses a worker now
and then over days keeps running, a worker that dies on every start ends the run. Exit codes of a worker
that a restart cannot mend end the run at once: 2 (bad configuration) and 4 (the wrong device, a missing
package). A worker that exits with :data:`~gpuprov.images.worker.EXIT_QUEUE_DOWN` could not reach the
queue's store (a Redis server restarting): it is restarted after a back-off that doubles from 1 s to
:data:`QUEUE_RETRY_MAX_S`, one line logged each time, and the run ends with exit 4 naming the store once
no worker has reached it for ``queue_timeout_s`` seconds.

Workers die with the supervisor: each one asks the kernel for SIGTERM when the thread that started it
ends (``PR_SET_PDEATHSIG``, :func:`gpuprov.images.worker.die_with_supervisor`), so a ``kill -9`` of
``gpuprov images run`` leaves no worker holding leases. :func:`supervise` must therefore run in a thread
that lives as long as the run (the CLI's main thread).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuprov.exceptions import EXIT_ENVIRONMENT, EXIT_USAGE, ConfigError, EnvironmentMissing
from gpuprov.images.forkserver import ForkedWorker, spawn
from gpuprov.images.queue import QueueUnavailable
from gpuprov.images.slots import Slot, replicate
from gpuprov.images.stages import STAGE_KEYS
from gpuprov.images.tasks import sweep_temp_files
from gpuprov.images.worker import EXIT_QUEUE_DOWN, SUPERVISOR_ENV, WorkerConfig

log = logging.getLogger(__name__)

MAX_RESTARTS = 100
"""Restarts of one slot's worker within :data:`RESTART_WINDOW_S` that end the run."""
RESTART_WINDOW_S = 600.0
"""Seconds over which :data:`MAX_RESTARTS` is counted."""
QUEUE_RETRY_MAX_S = 30.0
"""Longest wait, seconds, before restarting a worker that could not reach the queue."""
DEFAULT_QUEUE_TIMEOUT_S = 300.0
"""Seconds without any worker reaching the queue after which the run ends (exit 4)."""


@dataclass
class SlotState:
    """What the supervisor knows about one slot's worker."""

    slot: Slot
    proc: subprocess.Popen[str] | ForkedWorker | None = None
    forked: bool = False  # the current process came from the fork server (gpuprov.images.forkserver)
    done_before: int = 0
    done: int = 0
    failed: int = 0
    batch: int = 0
    device: str | None = None  # the worker's device as its "start" event names it: cuda or cpu
    restarts: int = 0
    finished: bool = False
    error: str | None = None  # the message of the worker's last "error" event
    reader: threading.Thread | None = None  # reads the worker's events
    recent: collections.deque[float] = field(default_factory=collections.deque)  # monotonic restart times
    restart_at: float | None = None  # monotonic time of a delayed restart
    queue_down_since: float | None = None  # monotonic time of the first of consecutive queue-down exits
    queue_backoff_s: float = 0.0
    spawned: float | None = None  # monotonic time the current process was started
    startup: dict[str, float] = field(default_factory=dict)  # its start-up marks (gpuprov.images.startup)
    compile: dict[str, Any] | None = None  # its "start" event's compile choice (gpuprov.images.worker.compile_report)
    first_result: float | None = None  # monotonic time of the current process's first "progress" event (results)
    first_done: int = 0  # images the slot had done then (its earlier processes' included)
    first_batch: dict[str, float] = field(default_factory=dict)  # its first "progress" event's stage seconds
    last_result: float | None = None  # monotonic time of its latest "progress" event
    exited: bool = False  # the current process sent its "exit" event: all its results are committed

    def note(self, event: dict[str, Any]) -> None:
        """Take in one of the worker's events (``start``, ``progress``, ``error``, ``exit``; see
        :mod:`gpuprov.images.worker`). A count or time that is not a number (a line that only looks like an event)
        is left out."""
        kind = event.get("event")
        if kind == "exit":
            self.exited = True
        elif kind == "error":
            self.error = str(event.get("error"))
        elif kind in ("start", "progress"):
            self.queue_down_since, self.queue_backoff_s = None, 0.0  # it reached the queue
        if kind == "start":
            self.device, self.startup = event.get("device"), dict(event.get("startup") or {})
            self.compile = event.get("compile")
        self.done = _count(event.get("done"), self.done)
        if kind == "progress":
            self.last_result = time.monotonic()
            if self.first_result is None:
                self.first_result, self.first_done = self.last_result, self.total_done
                self.first_batch = {k: float(v) for k, v in event.items() if k in STAGE_KEYS and _seconds(v)}
        self.failed = max(self.failed, _count(event.get("failed"), 0))
        self.batch = _count(event.get("batch"), self.batch)

    def begin_process(self) -> None:
        """Start the record of a new process of this slot (its first, or a restart) as it is spawned now: the
        counts so far move to :attr:`done_before`; the start-up, compile choice and first result are the new
        process's, not a mix of its predecessor's and its own."""
        self.done_before += self.done
        self.done = 0
        self.exited = False
        self.restart_at = None
        self.startup, self.compile = {}, None
        self.first_result, self.first_done, self.first_batch = None, 0, {}
        self.spawned = time.monotonic()

    def last_error(self, default: str) -> str:
        """The worker's last "error" event once its output is read to the end (it has exited), else ``default``."""
        if self.reader is not None:
            self.reader.join(timeout=5)
        return self.error or default

    @property
    def total_done(self) -> int:
        return self.done_before + self.done


def _count(value: Any, default: int) -> int:
    """``value`` where it is a count (an int, not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _seconds(value: Any) -> bool:
    """Whether ``value`` is a number of seconds (finite, not negative, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < float("inf")


def worker_env(slot: Slot, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment pinning a worker to ``slot`` by UUID (not by index: CUDA and NVML number GPUs
    differently), and naming its supervisor (:data:`SUPERVISOR_ENV`), with ``extra`` (the run's MPS daemon,
    :func:`gpuprov.images.mps.run_mps`) on a GPU slot."""
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
    if slot.uuid and extra:
        env.update(extra)
    env["CUDA_VISIBLE_DEVICES"] = slot.uuid or ""
    env[SUPERVISOR_ENV] = str(os.getpid())
    return env


def supervise(
    base: WorkerConfig,
    slots: list[Slot],
    on_event: Callable[[SlotState, dict[str, Any]], None],
    procs_per_gpu: int | None = None,
    stop: threading.Event | None = None,
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    forkserver: Path | None = None,
    on_all_exited: Callable[[], None] | None = None,
) -> list[SlotState]:
    """Run one worker per slot (``procs_per_gpu`` per GPU slot, see :func:`replicate`) until the queue is
    drained (``base.follow``: until ``stop`` is set), restarting workers that die (see the module docstring).
    Setting ``stop`` sends every worker SIGTERM and returns once they have exited (a worker stopped
    mid-batch leaves its tasks to lease expiry). GPU workers get ``env`` too (:func:`worker_env`). With
    ``forkserver`` (a socket path) each worker is asked of the fork server there first, and started as a new
    interpreter where none answers (:func:`gpuprov.images.forkserver.spawn`). ``on_all_exited`` is called, from the
    thread that read the last of them, when every worker has sent its ``exit`` event (all results committed) while
    their processes may still be ending (a CUDA context's teardown takes about a second), and again should a
    restarted worker send it again: the run writes its manifest then. Returns one state per worker process slot.

    Raises :class:`ConfigError` (a worker exited with 2), :class:`EnvironmentMissing` (exit 4, a slot out
    of restarts) and :class:`QueueUnavailable` (no worker reached the queue for ``queue_timeout_s``)."""
    states = [SlotState(s) for s in replicate(slots, procs_per_gpu)]
    lock = threading.Lock()

    def start(st: SlotState) -> None:
        cfg = json.dumps(asdict(WorkerConfig(**{**asdict(base), "slot": st.slot})))
        st.begin_process()
        child_env = worker_env(st.slot, env)
        forked = spawn(forkserver, child_env) if forkserver is not None else None
        st.forked = forked is not None
        # the config goes through a pipe, not argv: `ps` shows argv to every user, and the queue URL may
        # carry a password
        st.proc = forked or subprocess.Popen(
            [sys.executable, "-m", "gpuprov.images.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env,
        )  # fmt: skip
        assert st.proc.stdin is not None
        try:
            st.proc.stdin.write(cfg + "\n")
            st.proc.stdin.close()
        except BrokenPipeError:  # it died at start-up; the exit code says why, as for any other death
            pass
        st.reader = threading.Thread(target=read, args=(st, st.proc), daemon=True)
        st.reader.start()

    def read(st: SlotState, proc: subprocess.Popen[str] | ForkedWorker) -> None:
        assert proc.stdout is not None
        failed: set[type[Exception]] = set()  # what was logged: once per kind, so a later, other failure shows too
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):  # a line a model printed (TorchScript's print goes to stdout): `42`
                continue
            with lock:
                st.note(event)
                # each handled apart, and the worker's output still read whatever they raise (a pipe left full
                # would stop it): a failed progress line must not keep the manifest from being written early
                try:
                    on_event(st, event)
                except Exception as exc:  # handled: logged once per kind
                    if type(exc) not in failed:
                        log.exception("%s: handling the worker's events failed; its output is still read",
                                      st.slot.name)
                    failed.add(type(exc))
                if on_all_exited is not None and st.exited and all(s.exited for s in states):
                    try:
                        on_all_exited()
                    except Exception:  # handled: the run's end writes the manifest again
                        log.exception("%s: handling every worker's exit failed", st.slot.name)

    try:
        _run_slots(states, start, base, stop, queue_timeout_s)
    except BaseException:  # SIGTERM (SystemExit from the CLI's handler), ^C, errors: no orphaned workers
        _stop(states)
        raise
    return states


def _run_slots(
    states: list[SlotState],
    start: Callable[[SlotState], None],
    base: WorkerConfig,
    stop: threading.Event | None,
    queue_timeout_s: float,
) -> None:
    sweep_temp_files(Path(base.out))  # what the workers of a killed earlier run left mid-write
    for st in states:
        start(st)
    while not all(st.finished for st in states):
        if stop is not None and stop.wait(0.2):
            _stop(states)
            for st in states:
                if st.proc is not None:
                    st.proc.wait()
                st.finished = True
            return
        if stop is None:
            time.sleep(0.2)
        now = time.monotonic()
        for st in states:
            if st.restart_at is not None:
                if now >= st.restart_at:
                    start(st)
                continue
            if st.finished or st.proc is None or (rc := st.proc.poll()) is None:
                continue
            if rc == 0:
                st.finished = True
            elif rc == EXIT_ENVIRONMENT:
                _stop(states)
                raise EnvironmentMissing(f"{st.slot.name}: {st.last_error('worker exited with 4 (see its log)')}")
            elif rc == EXIT_USAGE:
                _stop(states)
                raise ConfigError(f"{st.slot.name}: {st.last_error('worker exited with 2 (bad configuration)')}")
            elif rc == EXIT_QUEUE_DOWN:
                _queue_down(states, st, now, queue_timeout_s)
            else:
                while st.recent and st.recent[0] < now - RESTART_WINDOW_S:
                    st.recent.popleft()
                if len(st.recent) >= MAX_RESTARTS:
                    _stop(states)
                    raise EnvironmentMissing(
                        f"{st.slot.name}: worker exited with {rc} ({len(st.recent)} restarts in the last "
                        f"{RESTART_WINDOW_S:g} s): {st.last_error('see its log')}"
                    )
                log.warning("%s: worker exited with %s; restarting", st.slot.name, rc)
                sweep_temp_files(Path(base.out), st.proc.pid)  # what a kill -9 mid-write left
                st.restarts += 1
                st.recent.append(now)
                start(st)


def _queue_down(states: list[SlotState], st: SlotState, now: float, timeout_s: float) -> None:
    """A worker could not reach the queue: restart it after a back-off, or end the run after ``timeout_s``."""
    message = st.last_error("the queue's store is unreachable")
    if st.queue_down_since is None:
        st.queue_down_since = now
    down_s = now - min(s.queue_down_since for s in states if s.queue_down_since is not None)
    if all(s.queue_down_since is not None or s.finished for s in states) and down_s >= timeout_s:
        _stop(states)
        raise QueueUnavailable(f"no worker has reached the queue for {down_s:.0f} s (limit {timeout_s:g} s): {message}")
    st.queue_backoff_s = min(QUEUE_RETRY_MAX_S, max(1.0, st.queue_backoff_s * 2))
    log.warning("%s: %s; restarting in %g s", st.slot.name, message, st.queue_backoff_s)
    st.restarts += 1
    st.restart_at = now + st.queue_backoff_s


def _stop(states: list[SlotState]) -> None:
    for st in states:
        st.restart_at = None
        if st.proc is not None and st.proc.poll() is None:
            st.proc.send_signal(signal.SIGTERM)
