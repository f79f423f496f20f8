"""Run a one-off play on a fleet's hosts (or on this machine) and collect each host's task results.

One collector for the read-only commands (``gpuprov facts FILE``, ``gpuprov doctor FILE``, ``gpuprov verify``,
the drift report): the play is written into the run's private directory, run through
:func:`gpuprov.runner.run_playbook`, and every ``runner_on_ok`` event's ``event_data.res`` is kept per host and
task name by :class:`TaskResults`; nothing is parsed from ansible-playbook's output.

``--local`` runs use :func:`local_inventory` (one host, ``ansible_connection: local``) or, with a fleet file,
:data:`local_extravars` on the rendered inventory, so the host keeps its fleet settings but is reached locally.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuprov.exceptions import ConfigError

if TYPE_CHECKING:  # ansible-runner is imported only when a play runs
    from gpuprov.runner import RunResult

log = logging.getLogger(__name__)

#: Inventory name of the host a ``--local`` run without a fleet file creates.
LOCAL_HOST = "localhost"


class TaskResults:
    """ansible-runner event handler keeping ``results[host][task name] = res`` of every ``runner_on_ok`` event.

    A later result of the same task name on the same host replaces the earlier one (a loop's result arrives
    once, with its ``results`` list).
    """

    def __init__(self) -> None:
        self.results: dict[str, dict[str, dict[str, Any]]] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        """Record one event (anything but ``runner_on_ok`` with a host and a dict result is ignored)."""
        if event.get("event") != "runner_on_ok":
            return
        data = event.get("event_data") or {}
        res = data.get("res")
        host = data.get("host")
        if host and isinstance(res, dict):
            self.results.setdefault(str(host), {})[str(data.get("task") or "")] = res

    def fact(self, name: str) -> dict[str, Any]:
        """Host -> the latest ``ansible_facts[name]`` any task of that host returned (hosts without it left out)."""
        out: dict[str, Any] = {}
        for host, tasks in self.results.items():
            for res in tasks.values():
                value = (res.get("ansible_facts") or {}).get(name)
                if value is not None:
                    out[host] = value
        return out


@dataclass
class PlayRun:
    """A finished one-off play: its :class:`TaskResults`, failed/unreachable hosts -> message, the run record."""

    results: TaskResults
    failed: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None
    result: RunResult | None = None


def check_limit(inventory: Path, limit: str | None) -> list[str] | None:
    """``--limit``: a host pattern Ansible can read that matches a host of ``inventory``, each plain name in it
    naming a host or group. Returns the names of the hosts it selects (None without a limit: every host).
    Raises ConfigError naming the fleet's hosts otherwise (exit 2)."""
    if not limit:
        return None
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
    names = ", ".join(sorted(h.name for h in manager.get_hosts()))
    try:
        matched = manager.get_hosts(pattern=limit)
    except (AnsibleError, IndexError, ValueError) as exc:  # Ansible's pattern parser: "~(", "h[9999...]"
        raise ConfigError(f"--limit {limit}: not a host pattern Ansible can read ({exc}) - use host or group "
                          f"names ({names}), globs or ~regex") from exc
    if not matched:
        raise ConfigError(f"--limit {limit}: matches no host in the fleet - use a host or group name ({names})")
    # Ansible skips a misspelt name in a list with a warning; a plain name that matches nothing is an error
    plain = [p for p in re.split(r"[,:]", limit) if p and not p.startswith(("!", "&", "~", "@")) and
             not any(c in p for c in "*?[")]
    unknown = [p for p in plain if not manager.get_hosts(pattern=p)]
    if unknown:
        raise ConfigError(f"--limit {limit}: {', '.join(unknown)} matches no host or group in the fleet - "
                          f"use host or group names ({names})")
    return sorted(h.name for h in matched)


def prepare_fleet(fleet_path: Path, name: str, limit: str | None, *, one_host: bool = False) -> tuple[Path, Path]:
    """Validate and render ``fleet_path`` into a new run directory; return ``(run_dir, inventory)``. With
    ``one_host`` (``--local`` on a fleet file), the fleet and ``limit`` must select exactly one host. Last, every
    ``{env: NAME}`` secret of the fleet file must be set, as for ``apply``.

    Raises:
        ConfigError: no such file, ``limit`` matches no host, not one host where ``one_host`` wants it, or an
            ``{env: NAME}`` secret is unset. Exit 2; no run record is left.
        FleetValidationError: the fleet file is invalid. Exit 2.
    """
    from gpuprov.fleet import load_fleet
    from gpuprov.fleet.environment import check_env_refs
    from gpuprov.render import render_inventory
    from gpuprov.resources import state_dir
    from gpuprov.runner import new_run_dir

    if not fleet_path.is_file():
        raise ConfigError(f"{fleet_path}: no such fleet file - pass the path of a fleet file (see docs/design.md)")
    fleet = load_fleet(fleet_path)
    run_dir = new_run_dir(state_dir(), name)
    inventory = render_inventory(fleet, run_dir / "inventory")
    try:
        selected = check_limit(inventory, limit)
        if one_host:
            _one_host(fleet.hosts, selected)
        # an unset become password or URL secret stops here, before any host is probed
        check_env_refs(fleet)
    except ConfigError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: no run record to keep
        raise
    return run_dir, inventory


def _one_host(hosts: Mapping[str, Any], selected: list[str] | None) -> None:
    """``selected`` (every host of the fleet when None) must be one host; ConfigError (exit 2) for any other count."""
    names = sorted(hosts) if selected is None else selected
    if len(names) != 1:
        raise ConfigError(f"--local runs on this machine as one host, but {len(names)} hosts are selected "
                          f"({', '.join(names)}) - add --limit HOST")


def local_extravars(python: str | None = None) -> dict[str, str]:
    """Extra variables that make every targeted host a local connection run by ``python`` (default: this
    interpreter), with ``become`` only when gpuprov does not already run as root."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": python or sys.executable,
        "ansible_become": "false" if os.geteuid() == 0 else "true",
    }


def local_inventory(out_dir: Path, python: str | None = None) -> Path:
    """Write a one-host inventory (``localhost`` in group ``gpuprov``, local connection) under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    hosts = {"all": {"children": {"gpuprov": {"hosts": {LOCAL_HOST: local_extravars(python)}}}}}
    (out_dir / "hosts.yml").write_text("---\n" + yaml.safe_dump(hosts, sort_keys=True), encoding="utf-8")
    return out_dir


def prepare_local(name: str) -> tuple[Path, Path]:
    """New run directory with a :func:`local_inventory`; returns ``(run_dir, inventory)``."""
    from gpuprov.resources import state_dir
    from gpuprov.runner import new_run_dir

    run_dir = new_run_dir(state_dir(), name)
    return run_dir, local_inventory(run_dir / "inventory")


def write_play(run_dir: Path, name: str, play: list[dict[str, Any]]) -> Path:
    """Write ``play`` as ``<run_dir>/project/<name>.yml`` and return its path."""
    path = run_dir / "project" / f"{name}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    return path


def run_play(run_dir: Path, inventory: Path, playbook: Path, limit: str | None = None,
             extravars: dict[str, str] | None = None, results: TaskResults | None = None,
             check: bool = False) -> PlayRun:
    """Run ``playbook`` on ``inventory`` and collect the task results.

    ``extravars`` may name fleet variables (``gpuprov_*``); the role variables they map onto go with them
    (:func:`gpuprov.rolevars.with_role_variables`). ``failed`` maps each failed or unreachable host to its
    failure messages joined by ``"; "`` (or its status).

    Raises:
        PlaybookError: ansible-playbook could not run the play at all.
    """
    from gpuprov.rolevars import with_role_variables
    from gpuprov.runner import RunRequest, run_playbook

    collector = results if results is not None else TaskResults()
    request = RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir,
                         limit=limit, extravars=with_role_variables(extravars or {}), check=check)
    result = run_playbook(request, on_event=collector)
    failed = {name: "; ".join(f["msg"] for f in result.hosts[name].failures) or result.hosts[name].status
              for name in result.failed_hosts}
    log.debug("%s: results from %d host(s), %d failed", playbook.name, len(collector.results), len(failed))
    return PlayRun(results=collector, failed=failed, run_dir=run_dir, result=result)
