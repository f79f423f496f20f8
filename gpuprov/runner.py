"""Run gpuprov's playbooks through ansible-runner's Python API and account for the result.

One run = one private data directory under ``<state_dir>/runs/<UTC time>-<playbook>-<id>/``, kept as the
run's record: ``inventory/`` (the rendered fleet), ``artifacts/<id>/`` (ansible-runner's job events,
stdout and status) and ``summary.json`` (the per-host summary that ``--json`` also writes). Environment
files are suppressed (``suppress_env_files``) so nothing secret is written to the run directory; the one env
file gpuprov writes is ``env/settings`` (ansible-runner's polling interval, no secret).

SIGINT/SIGTERM during a run are forwarded to ansible-playbook as SIGINT, then whatever it started is ended
(see :class:`_SignalStop`), and :class:`~gpuprov.exceptions.Interrupted` (exit 130 / 143) is raised.

Accounting comes from ansible-runner's events and final stats, never from ansible-playbook's stdout:
``runner_on_*`` events give per-host, per-role task results and durations; ``runner.stats`` gives the
ok/changed/failures/dark/skipped counts that decide drift and failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from gpuprov.ansible_settings import BASE_ENV
from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED, EXIT_OK, ConfigError, GpuprovError, Interrupted
from gpuprov.needs import failure_message, host_needs, item_label, truthy
from gpuprov.resources import collections_path

log = logging.getLogger(__name__)

#: ansible-runner event names that end a task on one host, and the state each one means.
RESULT_EVENTS: dict[str, str] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}

def run_env() -> dict[str, str]:
    """Return :data:`BASE_ENV`, the collections path that holds ``gpuprov.gpu``, and a ``PATH`` that finds
    the ``ansible-playbook`` installed beside this Python (a virtual environment need not be activated)."""
    env = {**BASE_ENV, "ANSIBLE_COLLECTIONS_PATH": str(collections_path())}
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    env["PATH"] = path if bindir in path.split(os.pathsep) else os.pathsep.join(p for p in (bindir, path) if p)
    return env


@dataclass
class RunRequest:
    """What to run.

    Attributes:
        inventory: rendered inventory directory (:func:`gpuprov.render.render_inventory`).
        playbook: absolute path of the playbook (``site.yml`` or ``<role>.yml``).
        run_dir: private data directory for this run (created by :func:`new_run_dir`).
        check / diff: ansible's ``--check`` / ``--diff``.
        tags / skip_tags: comma-separated tag lists, or None.
        limit: host pattern, or None.
        extravars: ``-e`` variables.
        forks: parallel hosts (ansible ``--forks``), >= 1.
        verbosity: 0-4 (``-v`` count).
        env: extra environment for ansible-playbook over :func:`run_env` (``ANSIBLE_*`` settings; the
            provisioning benchmark compares tunings with it).
    """

    inventory: Path
    playbook: Path
    run_dir: Path
    check: bool = False
    diff: bool = False
    tags: str | None = None
    skip_tags: str | None = None
    limit: str | None = None
    extravars: dict[str, str] = field(default_factory=dict)
    forks: int = 10
    verbosity: int = 0
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RoleTiming:
    """Per role on one host: task results and wall time in seconds (sum of task durations)."""

    tasks: int = 0
    changed: int = 0
    failed: int = 0
    duration_s: float = 0.0


@dataclass
class HostResult:
    """One host's outcome: counts from ansible-runner's stats, duration and failures from its events.

    ``duration_s`` runs from the host's first task start to its last task end (seconds);
    ``failures`` holds ``{"role", "task", "msg", "action", "item"}`` for each failed or unreachable task (``msg``
    from :func:`gpuprov.needs.failure_message`: a loop's failed items, an HTTP status, a command's stderr;
    ``item`` the failed loop items' labels); ``findings`` the latest ``ansible_facts['gpuprov_findings']`` a role
    published (``{role, id, severity, subject, evidence, fix}`` each, e.g. from bios_check);
    ``reboot_required`` role -> the last value of its ``<role>_reboot_required`` fact and ``reported_needs`` the
    latest ``ansible_facts['gpuprov_needs']``: :attr:`needs` combines them (:func:`gpuprov.needs.host_needs`).
    """

    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    duration_s: float = 0.0
    roles: dict[str, RoleTiming] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    reboot_required: dict[str, bool] = field(default_factory=dict)
    reported_needs: list[dict[str, Any]] = field(default_factory=list)
    first_start: dt.datetime | None = None
    last_end: dt.datetime | None = None

    @property
    def needs(self) -> list[dict[str, Any]]:
        """What the admin must act on for this host (``{kind, role, subject, detail}`` each)."""
        return host_needs(self.reboot_required, self.reported_needs, self.failures, self.findings)

    @property
    def status(self) -> str:
        """``unreachable``, ``failed``, ``changed`` or ``ok``, worst first."""
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


@dataclass
class RunResult:
    """A finished run: ansible-runner's status and rc, and every host's :class:`HostResult`."""

    status: str
    rc: int
    run_dir: Path
    artifact_dir: Path
    hosts: dict[str, HostResult]
    started: dt.datetime
    finished: dt.datetime

    @property
    def failed_hosts(self) -> list[str]:
        """Hosts with a failed task or unreachable, sorted."""
        return sorted(h.name for h in self.hosts.values() if h.status in ("failed", "unreachable"))

    @property
    def changed_hosts(self) -> list[str]:
        """Hosts with at least one changed task (under ``--check``: drift), sorted."""
        return sorted(h.name for h in self.hosts.values() if h.changed)


class PlaybookError(GpuprovError):
    """ansible-playbook ended before any host ran a task (syntax error, bad inventory). Exit 2."""


EventCallback = Callable[[dict[str, Any]], None]


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


class EventCollector:
    """ansible-runner event handler that builds per-host results from ``runner_on_*`` events.

    ``on_event`` (optional) receives every event too, for live progress display.
    """

    def __init__(self, on_event: EventCallback | None = None) -> None:
        self.hosts: dict[str, HostResult] = {}
        self._on_event = on_event

    def host(self, name: str) -> HostResult:
        """Return (creating) the result for host ``name``."""
        return self.hosts.setdefault(name, HostResult(name=name))

    def __call__(self, event: dict[str, Any]) -> bool:
        """Record one event; returns True so ansible-runner keeps it in the artifacts."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        state = RESULT_EVENTS.get(kind)
        if state and data.get("host"):
            self._record(data, state)
        if self._on_event is not None:
            self._on_event(event)
        return True

    def _record(self, data: dict[str, Any], state: str) -> None:
        host = self.host(str(data["host"]))
        role = str(data.get("role") or "(play)")
        timing = host.roles.setdefault(role, RoleTiming())
        timing.tasks += 1
        duration = data.get("duration")
        if isinstance(duration, (int, float)):
            timing.duration_s += float(duration)
        start, end = _parse_time(data.get("start")), _parse_time(data.get("end"))
        if start and (host.first_start is None or start < host.first_start):
            host.first_start = start
        if end and (host.last_end is None or end > host.last_end):
            host.last_end = end
        res = data.get("res") or {}
        if isinstance(res, dict) and res.get("changed"):
            timing.changed += 1
        facts = res.get("ansible_facts") if isinstance(res, dict) else None
        if isinstance(facts, dict):
            if isinstance(facts.get("gpuprov_findings"), list):
                host.findings = [f for f in facts["gpuprov_findings"] if isinstance(f, dict)]
            if isinstance(facts.get("gpuprov_needs"), list):
                host.reported_needs = [n for n in facts["gpuprov_needs"] if isinstance(n, dict)]
            for key, value in facts.items():
                if key.endswith("_reboot_required") and not key.startswith("_"):  # a role's output, not internal
                    host.reboot_required[key.removesuffix("_reboot_required")] = truthy(value)
        if state in ("failed", "unreachable") and not data.get("ignore_errors"):
            timing.failed += 1
            result = res if isinstance(res, dict) else {}
            items = [item_label(r) for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed")]
            host.failures.append({"role": role, "task": str(data.get("task", "")), "msg": failure_message(result),
                                  "action": str(data.get("task_action", "")), "item": ", ".join(items),
                                  "state": state})


def new_run_dir(state: Path, name: str) -> Path:
    """Create and return ``<state>/runs/<UTC time>-<name>-<random id>/`` (mode 0700)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = state / "runs" / f"{stamp}-{name}-{secrets.token_hex(3)}"
    run_dir.mkdir(parents=True, mode=0o700)
    return run_dir


def parse_extravars(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Turn ``-e KEY=VALUE`` pairs into a dict.

    Raises:
        ConfigError: a pair has no ``=`` or an empty or non-identifier key.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(
                f"-e {pair!r}: expected KEY=VALUE with KEY a variable name - e.g. -e nouveau_reboot_ok=true"
            )
        out[key] = value
    return out


#: Seconds ansible-playbook gets, after gpuprov forwards SIGINT to it, to stop its workers (and through them
#: the modules and ssh connections they started) before ansible-runner kills its process group.
CANCEL_GRACE_S = 10.0
#: Seconds a process left over after the run gets between SIGTERM and SIGKILL.
STRAY_GRACE_S = 2.0


def _process_table() -> dict[int, tuple[int, int]]:
    """Return ``{pid: (parent pid, start time in clock ticks since boot)}`` of the live processes, from
    ``/proc/<pid>/stat``.

    Empty where there is no ``/proc`` (not Linux): gpuprov then relies on the forwarded SIGINT alone.
    """
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return table
    for entry in entries:
        stat = _stat(entry)
        if stat is not None:
            table[int(entry.name)] = stat
    return table


def _stat(proc: Path) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) from ``<proc>/stat``; None once the process has ended (zombies
    included)."""
    try:
        stat = (proc / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):  # a zombie has ended already; only its parent can reap it
        return None
    return int(fields[1]), int(fields[19])


def _command(pid: int) -> str:
    """The command line of ``pid`` (first 200 characters; arguments joined by spaces), or ``?``."""
    try:
        raw = Path("/proc", str(pid), "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200] or "?"


def _descendants(root: int) -> dict[int, int]:
    """Return ``{pid: start time}`` of every live descendant of ``root`` (children in new sessions too)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _start) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = table[pid][1]
            todo.extend(children.get(pid, []))
    return found


class _SignalStop:
    """Stops a run on SIGINT/SIGTERM so that nothing it started outlives gpuprov.

    ansible-core's workers call ``setsid`` (and the ssh connection plugin starts ssh in a new session), so
    the ``killpg`` that ansible-runner sends to ansible-playbook's process group on cancel misses them.
    On the first signal this forwards SIGINT to ansible-playbook (its TaskQueueManager then signals every
    worker, which signals its own process group and exits) and gives it :data:`CANCEL_GRACE_S` seconds;
    only then does ansible-runner's cancel callback return True (a second signal shortens the wait).
    Every descendant of ansible-playbook seen meanwhile is remembered and ended by :meth:`end_strays`.

    ansible-playbook's process id comes from ansible-runner's events (``pid``: the callback plugin runs in
    ansible-playbook's main process), checked against ``/proc`` to be a child of this process.
    """

    def __init__(self, grace_s: float = CANCEL_GRACE_S) -> None:
        self.signal: int | None = None
        self.count = 0
        self.playbook_pid: int | None = None
        self.forwarded = False
        self._grace_s = grace_s
        self._deadline: float | None = None
        self._seen: dict[int, int] = {}
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.signal = signum
        self.count += 1

    def watch(self, event: dict[str, Any]) -> None:
        """ansible-runner event (before the collector): learn ansible-playbook's process id."""
        pid = event.get("pid")
        if self.playbook_pid is None and isinstance(pid, int) and pid > 0:
            stat = _stat(Path("/proc", str(pid))) if Path("/proc/self").exists() else (os.getpid(), 0)
            if stat is not None and stat[0] == os.getpid():
                self.playbook_pid = pid

    def requested(self) -> bool:
        """ansible-runner's cancel callback (polled about once a second): True once ansible-runner should
        kill ansible-playbook's process group."""
        if self.signal is None:
            return False
        pid = self.playbook_pid
        if pid is None:
            return True
        self._seen.update(_descendants(pid))
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
        """SIGTERM, then after :data:`STRAY_GRACE_S` SIGKILL, every remembered descendant of ansible-playbook
        still alive (same pid and start time); return their pids."""
        if not self._seen:
            return []
        table = _process_table()
        strays = [pid for pid, start in self._seen.items() if table.get(pid, (0, -1))[1] == start]
        names = {pid: _command(pid) for pid in strays}
        left = list(strays)
        signals_before = self.count
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + (STRAY_GRACE_S if sig == signal.SIGTERM else 0.0)
            while left and time.monotonic() < deadline and self.count == signals_before:
                time.sleep(0.1)
                table = _process_table()
                left = [pid for pid in left if table.get(pid, (0, -1))[1] == self._seen[pid]]
        if strays:
            log.warning("ended %d process(es) left over by ansible-playbook: %s", len(strays),
                        ", ".join(f"{pid} ({names[pid]})" for pid in strays))
        return strays

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


def _scrub_command_file(artifact_dir: Path) -> None:
    """Drop the environment and ``-e`` values from ansible-runner's ``artifacts/<id>/command`` record.

    ansible-runner writes the whole process environment there, which holds the secrets the fleet file
    names as ``{env: NAME}``; the run record keeps the variable names only.
    """
    path = artifact_dir / "command"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    argv = [str(a) for a in data.get("command") or []]
    for i, arg in enumerate(argv[:-1]):
        if arg in ("-e", "--extra-vars"):
            argv[i + 1] = "(hidden)"
    data["command"] = argv
    data["env"] = sorted(data.get("env") or {})
    path.write_text(json.dumps(data), encoding="utf-8")


def _scrub_when_running(status: dict[str, Any], runner_config: Any) -> None:
    """ansible-runner status handler: scrub the ``command`` record as soon as ansible-playbook runs.

    ansible-runner writes that file (environment included) just before it reports ``running``; scrubbing
    here, and again when the run ends, keeps a secret out of the run record even when gpuprov is killed
    (SIGKILL) during the run, not only when it returns.
    """
    if status.get("status") == "running":
        _scrub_command_file(Path(runner_config.artifact_dir))


def run_playbook(request: RunRequest, on_event: EventCallback | None = None) -> RunResult:
    """Run ``request.playbook`` through ansible-runner and return the accounted result.

    The run blocks until ansible-playbook ends. Per-host counts come from ``runner.stats`` (hosts that
    never produced a task event still appear when the stats name them).

    Raises:
        PlaybookError: ansible-playbook ended with an error before any host ran a task.
    """
    collector = EventCollector(on_event)
    stop = _SignalStop()
    cmdline = " ".join(flag for flag, on in (("--check", request.check), ("--diff", request.diff)) if on)
    ident = request.run_dir.name
    started = dt.datetime.now(dt.timezone.utc)
    log.debug("running %s in %s", request.playbook, request.run_dir)
    # ansible-runner polls the cancel callback whenever ansible-playbook is silent this long (seconds;
    # default 5); it reads the setting only from env/settings, which holds no secret
    settings = request.run_dir / "env" / "settings"
    settings.parent.mkdir(mode=0o700, exist_ok=True)
    settings.write_text(json.dumps({"pexpect_timeout": 1}), encoding="utf-8")

    def handle_event(event: dict[str, Any]) -> bool:
        stop.watch(event)
        return collector(event)

    stop.install()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(request.run_dir),
            ident=ident,
            playbook=str(request.playbook),
            inventory=str(request.inventory),
            envvars={**run_env(), **request.env},
            extravars=request.extravars or None,
            cmdline=cmdline or None,
            tags=request.tags,
            skip_tags=request.skip_tags,
            limit=request.limit,
            forks=request.forks,
            verbosity=request.verbosity or None,
            event_handler=handle_event,
            status_handler=_scrub_when_running,
            cancel_callback=stop.requested,
            suppress_env_files=True,
            quiet=True,
        )
    finally:
        # gpuprov's handlers stay in place until the strays are gone: a second Ctrl-C during the clean-up only
        # shortens it (SIGKILL at once) instead of killing gpuprov and leaving them behind
        try:
            _scrub_command_file(request.run_dir / "artifacts" / ident)
            stop.end_strays()
        finally:
            stop.restore()
    finished = dt.datetime.now(dt.timezone.utc)
    if stop.signal is not None:  # also a signal that came after ansible-playbook ended: the user asked to stop
        code = 143 if stop.signal == signal.SIGTERM else 130
        raise Interrupted(f"interrupted by {signal.Signals(stop.signal or signal.SIGINT).name}: ansible-playbook "
                          f"and its connections were stopped; run record: {request.run_dir}", exit_code=code)
    stats: dict[str, dict[str, int]] = runner.stats or {}
    if runner.rc != 0 and not any(stats.get(key) for key in ("ok", "failures", "dark", "skipped")):
        stdout = Path(runner.config.artifact_dir) / "stdout"
        text = stdout.read_text(encoding="utf-8", errors="replace") if stdout.is_file() else ""
        tail = text.strip().splitlines()[-5:]
        raise PlaybookError(
            f"ansible-playbook could not run {request.playbook.name} (rc={runner.rc}, status={runner.status})"
            + ("".join(f"\n  {line}" for line in tail)) + f"\nrun record: {request.run_dir}"
        )
    for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                      ("skipped", "skipped"), ("rescued", "rescued"), ("ignored", "ignored")):
        for name, count in (stats.get(key) or {}).items():
            setattr(collector.host(name), attr, int(count))
    for result in collector.hosts.values():
        if result.first_start and result.last_end:
            result.duration_s = (result.last_end - result.first_start).total_seconds()
    return RunResult(
        status=str(runner.status),
        rc=int(runner.rc),
        run_dir=request.run_dir,
        artifact_dir=Path(runner.config.artifact_dir),
        hosts=collector.hosts,
        started=started,
        finished=finished,
    )


def exit_code(result: RunResult, check: bool) -> int:
    """3 if any host failed or was unreachable, else 1 for drift under ``--check``, else 0."""
    if result.failed_hosts or (result.rc != 0 and not result.hosts):
        return EXIT_HOSTS_FAILED
    if check and result.changed_hosts:
        return EXIT_DRIFT
    return EXIT_OK
