"""Run gpuprov's playbooks through ansible-runner's Python API: the request, the run and its result.

One run = one private data directory under ``<state_dir>/runs/<UTC time>-<playbook>-<id>/``, kept as the
run's record: ``inventory/`` (the rendered fleet), ``artifacts/<id>/`` (ansible-runner's job events,
stdout and status) and ``summary.json`` (the per-host summary that ``--json`` also writes). Environment
files are suppressed (``suppress_env_files``) so nothing secret is written to the run directory; the one env
file gpuprov writes is ``env/settings`` (ansible-runner's polling interval, no secret).

SIGINT/SIGTERM during a run are forwarded to ansible-playbook as SIGINT, then whatever it started is ended
(:class:`gpuprov.interrupt.SignalStop`), and :class:`~gpuprov.exceptions.Interrupted` (exit 130 / 143) is
raised.

Per-host accounting comes from ansible-runner's events and final stats, never from ansible-playbook's stdout
(:mod:`gpuprov.accounting`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from gpuprov.accounting import EventCallback, EventCollector, HostResult
from gpuprov.ansible_settings import BASE_ENV, strategy_env
from gpuprov.exceptions import (
    EXIT_DRIFT,
    EXIT_HOSTS_FAILED,
    EXIT_OK,
    ConfigError,
    EnvironmentMissing,
    GpuprovError,
)
from gpuprov.interrupt import SignalStop
from gpuprov.resources import collections_path

log = logging.getLogger(__name__)

def run_env() -> dict[str, str]:
    """Return :data:`BASE_ENV`, the strategy (:func:`gpuprov.ansible_settings.strategy_env`), the collections
    path that holds ``gpuprov.gpu``, and a ``PATH`` that finds the ``ansible-playbook`` installed beside this
    Python (a virtual environment need not be activated).

    Raises:
        ConfigError: ``GPUPROV_STRATEGY`` names no strategy (exit 2).
    """
    env = {**BASE_ENV, **strategy_env(), "ANSIBLE_COLLECTIONS_PATH": str(collections_path())}
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
class RunResult:
    """A finished run: ansible-runner's status and rc, and every host's :class:`HostResult`.

    ``run_dir`` is the run record (:func:`new_run_dir`), ``artifact_dir`` ansible-runner's
    ``artifacts/<id>/`` in it; ``started`` and ``finished`` are UTC (timezone-aware); ``hosts`` maps
    inventory host name to its result.
    """

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


def new_run_dir(state: Path, name: str) -> Path:
    """Create and return ``<state>/runs/<UTC time>-<name>-<random id>/`` (mode 0700).

    Raises:
        EnvironmentMissing: the folder cannot be created (a file in the way, no permission, a full disk).
    """
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = state / "runs" / f"{stamp}-{name}-{secrets.token_hex(3)}"
    try:
        run_dir.mkdir(parents=True, mode=0o700)
    except OSError as exc:
        raise EnvironmentMissing(
            f"cannot create the run record {run_dir}: {exc.strerror or exc} - make {state} a folder gpuprov may "
            "write, or point GPUPROV_STATE_DIR at one"
        ) from None
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

    The run blocks until ansible-playbook ends; ``on_event`` (optional) receives every ansible-runner event
    as it comes. Per-host counts come from ``runner.stats`` (hosts that never produced a task event still
    appear when the stats name them).

    Raises:
        PlaybookError: ansible-playbook ended with an error before any host ran a task, or its plays matched
            no host of the inventory.
        Interrupted: SIGINT or SIGTERM came during the run (exit code 130 or 143); ansible-playbook and
            every process it started have been ended.
    """
    collector = EventCollector(on_event)
    stop = SignalStop()
    cmdline = " ".join(flag for flag, on in (("--check", request.check), ("--diff", request.diff)) if on)
    ident = request.run_dir.name
    started = dt.datetime.now(dt.timezone.utc)
    log.debug("running %s in %s", request.playbook, request.run_dir)
    # ansible-runner polls the cancel callback whenever ansible-playbook is silent this long (seconds;
    # default 5); it reads the setting only from env/settings, which holds no secret
    settings = request.run_dir / "env" / "settings"
    settings.parent.mkdir(mode=0o700, exist_ok=True)
    settings.write_text(json.dumps({"pexpect_timeout": 1}), encoding="utf-8")

    unmatched: list[str] = []  # plays whose host pattern matched no host of the inventory

    def handle_event(event: dict[str, Any]) -> bool:
        stop.watch(event)
        if event.get("event") == "playbook_on_no_hosts_matched":
            unmatched.append(str((event.get("event_data") or {}).get("play") or "?"))
        return collector(event)

    stop.install()
    try:
        runner = ansible_runner.run(
            # absolute: ansible-playbook runs in the run directory, where relative paths would name nothing
            private_data_dir=str(request.run_dir.absolute()),
            ident=ident,
            playbook=str(request.playbook.absolute()),
            inventory=str(request.inventory.absolute()),
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
    stop.raise_if_stopped(request.run_dir)
    stats: dict[str, dict[str, int]] = runner.stats or {}
    if runner.rc != 0 and not any(stats.get(key) for key in ("ok", "failures", "dark", "skipped")):
        stdout = Path(runner.config.artifact_dir) / "stdout"
        text = stdout.read_text(encoding="utf-8", errors="replace") if stdout.is_file() else ""
        tail = text.strip().splitlines()[-5:]
        raise PlaybookError(
            f"ansible-playbook could not run {request.playbook.name} (rc={runner.rc}, status={runner.status})"
            + ("".join(f"\n  {line}" for line in tail)) + f"\nrun record: {request.run_dir}"
        )
    if not any(stats.get(key) for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")):
        raise PlaybookError(_why_no_host_ran(request, unmatched))
    collector.add_stats(stats)
    return RunResult(
        status=str(runner.status),
        rc=int(runner.rc),
        run_dir=request.run_dir,
        artifact_dir=Path(runner.config.artifact_dir),
        hosts=collector.hosts,
        started=started,
        finished=finished,
    )


def _why_no_host_ran(request: RunRequest, unmatched: list[str]) -> str:
    """The message of a run that reached no host: no success, "nothing to do" or drift can be read from it."""
    if unmatched:
        # every gpuprov play targets the inventory's hosts: none matched means the inventory gave Ansible no
        # host (unreadable or empty)
        why = (f"play {unmatched[0]!r} matched no host of the inventory {request.inventory.absolute()} - check that "
               "it lists the hosts (gpuprov render FILE -o DIR shows what gpuprov writes)")
    elif request.tags or request.skip_tags:
        chosen = " ".join(f"{flag} {value}" for flag, value in (("--tags", request.tags),
                                                                 ("--skip-tags", request.skip_tags)) if value)
        why = f"{chosen} selected none of its tasks - choose tags of the roles it runs (gpuprov roles)"
    else:
        why = "no task ran on any host"
    return f"ansible-playbook ran {request.playbook.name} on no host: {why}\nrun record: {request.run_dir}"


def exit_code(result: RunResult, check: bool) -> int:
    """3 if any host failed or was unreachable, else 1 for drift under ``--check``, else 0."""
    if result.failed_hosts or (result.rc != 0 and not result.hosts):
        return EXIT_HOSTS_FAILED
    if check and result.changed_hosts:
        return EXIT_DRIFT
    return EXIT_OK
