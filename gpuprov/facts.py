"""NVML facts: the local machine's (``gpuprov facts``) and a fleet's (``gpuprov facts FILE``), and their table.

There is one collector, the collection's ``plugins/module_utils/nvml.py``; the ``gpuprov.gpu.nvml_facts`` module
runs it on the hosts and :func:`local_facts` imports that same file here, so both report the same shape
(documented in :func:`collect` of that file and in ``docs/facts.md``).

Fleet facts come from ansible-runner's ``runner_on_ok`` events (``event_data.res.ansible_facts``) of a one-task
play, never from ansible-playbook's output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils import nvml as nvml_collector
from rich.table import Table

from gpuprov.exceptions import EnvironmentMissing, NVMLUnavailable
from gpuprov.hostplay import TaskResults

log = logging.getLogger(__name__)

GIB = 1024**3

#: The play ``gpuprov facts FILE`` runs: the collection's nvml_facts module and its action plugin.
FACTS_PLAY: list[dict[str, Any]] = [
    {
        "name": "Read NVML facts",
        "hosts": "gpuprov",
        "gather_facts": False,
        "tasks": [{"name": "Read NVML facts", "gpuprov.gpu.nvml_facts": {}, "check_mode": False}],
    }
]


def collector_path() -> Path:
    """Return the path of the shared collector, the collection's ``plugins/module_utils/nvml.py``."""
    return Path(nvml_collector.__file__)


def collect_with(nv: Any) -> dict[str, Any]:
    """Run the shared collector against ``nv`` (pynvml, or a stand-in with its API) and return the fact."""
    facts: dict[str, Any] = nvml_collector.collect(nv)
    return facts


def local_facts() -> dict[str, Any]:
    """Return this machine's ``gpuprov_gpus`` fact through the installed pynvml.

    NVML being unavailable is not an error here: the fact says ``available: false`` (see
    :func:`require_available`).

    Raises:
        EnvironmentMissing: pynvml (nvidia-ml-py) is not installed. Exit 4.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise EnvironmentMissing(f"pynvml is not installed ({exc}): pip install nvidia-ml-py") from exc
    return collect_with(pynvml)


def require_available(facts: dict[str, Any], where: str = "this machine") -> None:
    """Raise when NVML could not be initialised.

    Raises:
        NVMLUnavailable: ``facts['available']`` is false; carries the NVML error name. Exit 4.
    """
    if not facts.get("available"):
        name = str(facts.get("error_name") or "NVML_ERROR_UNKNOWN")
        raise NVMLUnavailable(f"NVML is unavailable on {where}: {name} ({facts.get('error')})", name)


@dataclass
class FleetFacts:
    """Facts of a fleet: ``hosts`` maps inventory name to its ``gpuprov_gpus`` fact, ``failed`` maps each
    failed or unreachable host to its error message; ``run_dir`` is the run record."""

    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None


class FactsEvents(TaskResults):
    """ansible-runner event handler keeping each host's ``gpuprov_gpus`` fact from ``runner_on_ok``
    (the shared :class:`gpuprov.hostplay.TaskResults`; ``facts`` maps host to that fact)."""

    @property
    def facts(self) -> dict[str, dict[str, Any]]:
        """Host -> its ``gpuprov_gpus`` fact (hosts whose results carry none are left out)."""
        return {h: f for h, f in self.fact("gpuprov_gpus").items() if isinstance(f, dict)}


def fleet_facts(fleet_path: Path, limit: str | None = None) -> FleetFacts:
    """Validate and render the fleet, run the ``nvml_facts`` play and return every host's fact.

    Raises:
        FleetValidationError / ConfigError: invalid fleet file or a ``--limit`` matching no host. Exit 2.
        PlaybookError: ansible-playbook could not run the play at all.
    """
    from gpuprov.hostplay import prepare_fleet, run_play, write_play

    run_dir, inventory = prepare_fleet(fleet_path, "facts", limit)
    playbook = write_play(run_dir, "facts", FACTS_PLAY)
    events = FactsEvents()
    run = run_play(run_dir, inventory, playbook, limit=limit, results=events)
    log.debug("facts from %d host(s), %d failed", len(events.facts), len(run.failed))
    return FleetFacts(hosts=dict(sorted(events.facts.items())), failed=run.failed, run_dir=run_dir)


def _yes_no(value: object) -> str:
    if value is None:
        return "n/a"
    return "on" if value else "off"


def _gib(value: object) -> str:
    return f"{value / GIB:.1f}" if isinstance(value, int) else "n/a"


def _pcie(pcie: dict[str, Any] | None) -> str:
    if not pcie:
        return "n/a"

    def link(gen: object, width: object) -> str:
        return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"

    now = link(pcie.get("gen_current"), pcie.get("width_current"))
    return f"{now} / {link(pcie.get('gen_max'), pcie.get('width_max'))}"


def _number(value: object, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value}{unit}"


def summary_line(facts: dict[str, Any]) -> str:
    """One line about the host: driver, NVML, CUDA, GPU count and CUDA_ARCH_BIN; or why NVML is unavailable."""
    if not facts.get("available"):
        return f"NVML unavailable: {facts.get('error_name')} ({facts.get('error')})"
    lost = facts.get("lost_gpus") or []
    return (
        f"driver {facts.get('driver_version')}, NVML {facts.get('nvml_version')}, "
        f"CUDA {facts.get('cuda_driver_version')}, {facts.get('count')} GPU(s), "
        f"CUDA_ARCH_BIN {facts.get('cuda_arch_bin')}, NVSwitch {_yes_no(facts.get('nvswitch_present'))}"
        + (f", LOST GPU(s): {', '.join(str(i) for i in lost)}" if lost else "")
    )


def gpu_table(facts: dict[str, Any], title: str | None = None) -> Table:
    """Return a rich table with one row per GPU: index, name, bus id, memory and BAR1 (GiB), PCIe current/max,
    persistence, MIG, ECC, power limit (W) and temperature (°C)."""
    table = Table(title=title, caption=summary_line(facts), caption_justify="left")
    for header in ("#", "name", "bus id", "memory GiB", "BAR1 GiB", "PCIe now / max", "persistence", "MIG", "ECC",
                   "power limit W", "temp C"):
        table.add_column(header, justify="right" if header.endswith(("GiB", "W", "C")) or header == "#" else "left")
    for gpu in facts.get("gpus") or []:
        name = f"LOST: {gpu.get('error_name')}" if gpu.get("lost") else str(gpu.get("name"))
        live = gpu.get("live") or {}
        table.add_row(
            str(gpu.get("index")),
            name,
            str(gpu.get("pci_bus_id_sysfs") or "n/a"),
            _gib(gpu.get("memory_total_bytes")),
            _gib(gpu.get("bar1_total_bytes")),
            _pcie(gpu.get("pcie")),
            _yes_no(gpu.get("persistence_mode")),
            _yes_no((gpu.get("mig") or {}).get("current")),
            _yes_no((gpu.get("ecc") or {}).get("current")),
            _number(gpu.get("power_limit_w")),
            _number(live.get("temperature_c")),
        )
    return table
