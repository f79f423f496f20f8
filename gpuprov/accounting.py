"""Per-host results of a playbook run, counted from ansible-runner's job events and final stats.

``runner_on_*`` events give per-host, per-role task results and durations (:class:`EventCollector`);
``runner.stats`` gives the ok/changed/failures/dark/skipped counts that decide drift and failure
(:meth:`EventCollector.add_stats`). Nothing here reads ansible-playbook's stdout.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuprov.needs import failure_message, host_needs, item_label, truthy

#: ansible-runner event names that end a task on one host, and the state each one means.
RESULT_EVENTS: dict[str, str] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}

#: ``runner.stats`` keys and the :class:`HostResult` counts they set.
STATS_COUNTS: dict[str, str] = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}

#: A callback that receives every ansible-runner event (a job event dict, ``event`` and ``event_data`` keys).
EventCallback = Callable[[dict[str, Any]], None]


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
    ``failures`` holds ``{"role", "task", "msg", "action", "item", "state"}`` for each failed or unreachable
    task (``msg`` from :func:`gpuprov.needs.failure_message`: a loop's failed items, an HTTP status, a command's
    stderr; ``item`` the failed loop items' labels; ``state`` ``failed`` or ``unreachable``); ``findings`` the
    latest ``ansible_facts['gpuprov_findings']`` a role published (``{role, id, severity, subject, evidence,
    fix}`` each, e.g. from bios_check); ``reboot_required`` role -> the last value of its
    ``<role>_reboot_required`` fact and ``reported_needs`` the latest ``ansible_facts['gpuprov_needs']``:
    :attr:`needs` combines them (:func:`gpuprov.needs.host_needs`); ``upgrade`` the latest
    ``ansible_facts['gpuprov_upgrade']`` of playbooks/upgrade.yml (``{stage, units, containers, holders,
    modules, kill_holders}``).
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
    upgrade: dict[str, Any] = field(default_factory=dict)
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


def _parse_time(value: object) -> dt.datetime | None:
    """An event's ISO 8601 ``start``/``end`` as an aware datetime (UTC when it names no zone), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


class EventCollector:
    """ansible-runner event handler that builds per-host results from ``runner_on_*`` events.

    ``on_event`` (optional) receives every event too, for live progress display. ``hosts`` maps host name
    to its :class:`HostResult`.
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

    def add_stats(self, stats: Mapping[str, Mapping[str, int]]) -> None:
        """Take the counts of ansible-runner's final ``runner.stats`` (``{"ok": {host: n}, "dark": ...}``)
        and set each host's ``duration_s`` from its first task start to its last task end.

        A host that the stats name but that produced no task event gets a result too.
        """
        for key, attr in STATS_COUNTS.items():
            for name, count in (stats.get(key) or {}).items():
                setattr(self.host(name), attr, int(count))
        for result in self.hosts.values():
            if result.first_start and result.last_end:
                result.duration_s = (result.last_end - result.first_start).total_seconds()

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
            if isinstance(facts.get("gpuprov_upgrade"), dict):
                host.upgrade = facts["gpuprov_upgrade"]
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
