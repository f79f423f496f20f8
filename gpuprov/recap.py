"""Show a run: live progress per host and role, the final recap table, the ``--json`` summary.

Everything here reads :class:`gpuprov.runner.RunResult` and ansible-runner events; nothing parses
ansible-playbook's stdout.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuprov.accounting import RESULT_EVENTS
from gpuprov.exceptions import ConfigError
from gpuprov.needs import failure_message
from gpuprov.redact import is_secret_name, redact_credentials
from gpuprov.runner import RunResult

#: Version of the ``--json`` summary layout (documented in README.md, "Run summary (--json)").
SUMMARY_VERSION = 1

_STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold magenta",
          "skipped": "cyan"}


class ProgressPrinter:
    """ansible-runner event callback printing progress: one line when a host enters a role, one per
    changed, failed or unreachable task. Quiet for ok and skipped tasks so a 100-host run stays readable."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._role: dict[str, str] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        """Print what ``event`` changes in the progress view."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.console.print(f"[bold]play[/bold] {escape(str(data.get('play', '')))}")
            return
        state = RESULT_EVENTS.get(kind)
        host = data.get("host")
        if not state or not host:
            return
        role = str(data.get("role") or "(play)")
        if self._role.get(host) != role:
            self._role[host] = role
            self.console.print(f"  {escape(host):<24} [bold]{escape(role)}[/bold]")
        res: dict[str, Any] = data["res"] if isinstance(data.get("res"), dict) else {}
        if state == "ok" and res.get("changed"):
            state = "changed"
        if state in ("changed", "failed", "unreachable"):
            line = f"  {host:<24}   {state}: {data.get('task', '')}"
            msg = failure_message(res) if state != "changed" else None
            self.console.print(line + (f" - {msg}" if msg else ""), style=_STYLE[state], markup=False,
                               highlight=False)


def recap_table(result: RunResult, check: bool) -> Table:
    """Build the per-host recap: ok/changed/failed/unreachable/skipped and duration (seconds)."""
    title = "gpuprov recap" + (" (check mode: changed = drift)" if check else "")
    table = Table(title=title, title_justify="left")
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped", "duration"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for name in sorted(result.hosts):
        host = result.hosts[name]
        table.add_row(
            f"[{_STYLE.get(host.status, 'white')}]{escape(name)}[/]",
            str(host.ok), str(host.changed), str(host.failed), str(host.unreachable), str(host.skipped),
            f"{host.duration_s:.1f}s",
        )
    return table


def findings_table(result: RunResult) -> Table | None:
    """The findings roles published (``gpuprov_findings``), worst first; None when there are none."""
    rank = {"fail": 0, "warn": 1, "info": 2}
    rows = [(name, f) for name in sorted(result.hosts) for f in result.hosts[name].findings]
    if not rows:
        return None
    rows.sort(key=lambda item: (rank.get(str(item[1].get("severity")), 3), item[0]))
    table = Table(title="findings", title_justify="left")
    for column in ("host", "severity", "check", "subject", "evidence", "fix"):
        table.add_column(column)
    style = {"fail": "bold red", "warn": "yellow", "info": "cyan"}
    for name, f in rows:
        severity = str(f.get("severity", ""))
        table.add_row(escape(name), f"[{style.get(severity, 'white')}]{escape(severity)}[/]",
                      escape(f"{f.get('role', '')}/{f.get('id', '')}"), escape(str(f.get("subject", ""))),
                      escape(str(f.get("evidence", ""))), escape(str(f.get("fix", ""))))
    return table


def needs_table(result: RunResult) -> Table | None:
    """What each host needs from the admin (pending reboots, services that failed, findings at warn or worse);
    None when no host needs anything."""
    rows = [(name, need) for name in sorted(result.hosts) for need in result.hosts[name].needs]
    if not rows:
        return None
    table = Table(title="needs the admin", title_justify="left")
    for column in ("host", "need", "role", "subject", "detail"):
        table.add_column(column)
    style = {"reboot": "bold yellow", "service": "bold red", "finding": "yellow"}
    for name, need in rows:
        kind = str(need.get("kind", ""))
        table.add_row(escape(name), f"[{style.get(kind, 'white')}]{escape(kind)}[/]", escape(str(need.get("role", ""))),
                      escape(str(need.get("subject", ""))), escape(str(need.get("detail", ""))))
    return table


def _shown_extravar(pair: str) -> str:
    key, sep, _value = pair.partition("=")
    return f"{key}=(hidden)" if sep and is_secret_name(key) else redact_credentials(pair) if sep else pair


def _shown_arg(arg: str) -> str:
    """``arg`` as :func:`retry_command` prints it: an attached extra variable (``-eKEY=VALUE``,
    ``--extra-vars=KEY=VALUE``) shown by :func:`_shown_extravar`."""
    for prefix in ("--extra-vars=", "-e"):
        if arg.startswith(prefix) and len(arg) > len(prefix):
            return prefix + _shown_extravar(arg[len(prefix):])
    return arg


def retry_command(argv: list[str], hosts: list[str]) -> str:
    """Return the command line that re-runs ``argv`` on ``hosts`` only.

    Any ``--limit``/``-l`` in ``argv`` is replaced; ``argv`` starts after the program name. An extra variable
    (``-e KEY=VALUE``, ``-eKEY=VALUE``, ``--extra-vars=KEY=VALUE``) whose key names a secret
    (:func:`gpuprov.redact.is_secret_name`: password, token, secret, key, ...) is shown as ``KEY=(hidden)``, and
    a URL's password or credential query value in any other is ``***`` (:func:`gpuprov.redact.redact_credentials`):
    the recap is printed and often kept in CI logs; give such values as ``{env: NAME}`` in the fleet file instead.
    """
    kept: list[str] = []
    skip = False
    extra = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if extra:
            extra = False
            kept.append(_shown_extravar(arg))
            continue
        if arg in ("-e", "--extra-vars"):
            extra = True
        if arg in ("--limit", "-l"):
            skip = True
            continue
        if arg.startswith("--limit="):
            continue
        kept.append(_shown_arg(arg))
    return shlex.join(["gpuprov", *kept, "--limit", ",".join(hosts)])


def summary(result: RunResult, *, fleet: Path, playbook: str, check: bool, exit_code: int) -> dict[str, Any]:
    """Return the ``--json`` summary (layout version :data:`SUMMARY_VERSION`, see README.md).

    Durations are seconds; times are UTC ISO 8601.
    """
    hosts: dict[str, Any] = {}
    for name in sorted(result.hosts):
        h = result.hosts[name]
        hosts[name] = {
            "status": h.status, "ok": h.ok, "changed": h.changed, "failed": h.failed,
            "unreachable": h.unreachable, "skipped": h.skipped, "rescued": h.rescued, "ignored": h.ignored,
            "duration_s": round(h.duration_s, 3),
            "roles": {r: {"tasks": t.tasks, "changed": t.changed, "failed": t.failed,
                          "duration_s": round(t.duration_s, 3)} for r, t in sorted(h.roles.items())},
            "failures": h.failures,
            "findings": h.findings,
            "needs": h.needs,
        }
    return {
        "version": SUMMARY_VERSION,
        "fleet": str(fleet),
        "playbook": playbook,
        "check": check,
        "status": result.status,
        "ansible_rc": result.rc,
        "exit_code": exit_code,
        "started": result.started.isoformat(),
        "finished": result.finished.isoformat(),
        "duration_s": round((result.finished - result.started).total_seconds(), 3),
        "run_dir": str(result.run_dir),
        "drift_hosts": result.changed_hosts if check else [],
        "failed_hosts": result.failed_hosts,
        "hosts": hosts,
    }


def write_summary(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON to ``path``.

    A regular file (or a new path) is replaced atomically (a unique temp file + rename); a symlink,
    device or FIFO (``/dev/stdout``) is written through, never replaced.

    Raises:
        ConfigError: the path cannot be written.
    """
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            with path.open("w", encoding="utf-8") as handle:
                handle.write(text)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write the summary to {path}: {exc.strerror or exc}") from None
