"""Running the drift report: the play that reads installed state on the hosts (the verify role's drift probe), the
per-host comparison of what it published (:func:`gpuprov.drift.compare`) and its table.

``gpuprov check --json`` runs :data:`DRIFT_PLAY` after the site's plays in the same run and reads the result with
:func:`drift_of`; ``gpuprov upgrade`` runs it alone first (:func:`fleet_drift`) to plan which hosts move.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from gpuprov.drift import compare

if TYPE_CHECKING:
    from gpuprov.hostplay import TaskResults

#: The play the drift report runs: the verify role's drift probe, nothing else of the role.
DRIFT_PLAY: list[dict[str, Any]] = [{
    "name": "Read installed GPU stack state",
    "hosts": "gpuprov",
    "gather_facts": False,
    "become": True,
    "tags": ["always"],  # after the site's plays in `gpuprov check --json`, whatever --tags selects there
    "tasks": [{"name": "Read the drift probe", "ansible.builtin.import_role": {"name": "gpuprov.gpu.verify",
                                                                              "tasks_from": "drift"}}],
}]


@dataclass
class FleetDrift:
    """Per host: its components; ``failed`` maps failed or unreachable hosts to the error; the run record."""

    hosts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None

    @property
    def drifted(self) -> dict[str, list[str]]:
        """Host -> components out of sync (hosts in sync left out)."""
        out = {h: [c for c, e in comps.items() if not e["in_sync"]] for h, comps in self.hosts.items()}
        return {h: c for h, c in sorted(out.items()) if c}

    def to_json(self) -> dict[str, Any]:
        """``{hosts, failed, drifted, run_dir}`` for the ``drift`` key of ``check --json``."""
        return {"hosts": self.hosts, "failed": self.failed, "drifted": self.drifted,
                "run_dir": str(self.run_dir) if self.run_dir else None}


def fleet_drift(fleet_path: Path, limit: str | None = None, extravars: dict[str, str] | None = None) -> FleetDrift:
    """Run the drift probe on the fleet's hosts and compare each.

    Raises:
        FleetValidationError / ConfigError: invalid fleet file or ``--limit``. Exit 2.
        PlaybookError: ansible-playbook could not run the play.
    """
    from gpuprov.hostplay import prepare_fleet, run_play, write_play

    run_dir, inventory = prepare_fleet(fleet_path, "drift", limit)
    playbook = write_play(run_dir, "drift", DRIFT_PLAY)
    run = run_play(run_dir, inventory, playbook, limit=limit, extravars=extravars)
    return drift_of(run.results, run.failed, run.result.hosts if run.result else (), run_dir)


def drift_of(results: TaskResults, failed: dict[str, str], seen: Iterable[str], run_dir: Path | None) -> FleetDrift:
    """The :class:`FleetDrift` of a run that ran :data:`DRIFT_PLAY` (alone, or after the site's plays):
    ``results`` its task results, ``failed`` its failed or unreachable hosts -> message, ``seen`` every host it
    ran on; a host seen but neither failed nor publishing ``verify_drift`` is failed with that reason."""
    out = FleetDrift(failed=dict(failed), run_dir=run_dir)
    for host, fact in sorted(results.fact("verify_drift").items()):
        if host not in out.failed and isinstance(fact, dict):
            out.hosts[host] = compare(fact)
    for host in sorted(set(seen) - set(out.hosts) - set(out.failed)):
        out.failed[host] = "the drift probe published nothing"
    return out


def drift_table(host: str, components: dict[str, dict[str, Any]]) -> Table:
    """A rich table of one host: component, in sync, desired, installed summary and note."""
    table = Table(title=f"{host}: drift", title_justify="left")
    for header in ("component", "state", "desired", "note"):
        table.add_column(header, overflow="fold")
    for name, entry in components.items():
        desired = entry["desired"]
        shown = json.dumps(desired, sort_keys=True) if isinstance(desired, (dict, list)) else str(desired or "-")
        table.add_row(name, "[green]in sync[/]" if entry["in_sync"] else "[red]DRIFT[/]", shown[:120],
                      str(entry.get("note") or ""))
    return table
