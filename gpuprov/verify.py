"""``gpuprov verify``: run the ``verify`` role on a fleet's hosts (or on this machine) and account for its reports.

The role (``roles/verify``) does the work on each host and publishes ``ansible_facts['verify_report']``:
``{host, report_version, status, summary {pass, fail, skip}, steps [{name, status, evidence, reason,
duration_s}], nvml_summary}``. This module runs ``playbooks/verify.yml`` through :mod:`gpuprov.hostplay`,
takes each host's report from the runner events, and builds the fleet summary and the exit code (0 every step
passed or skipped, 1 a step failed, 3 a host failed or was unreachable).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED, EXIT_OK, ConfigError

log = logging.getLogger(__name__)

#: Name of the role task whose ``ansible_facts`` carry the report.
REPORT_FACT = "verify_report"
STYLE = {"pass": "green", "fail": "red", "skip": "yellow"}


@dataclass
class FleetVerify:
    """Per host: its report; ``failed`` maps failed or unreachable hosts (or hosts without a report) to why."""

    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None

    @property
    def exit_code(self) -> int:
        """3 when any host failed or gave no report, else 1 when a step failed, else 0."""
        if self.failed:
            return EXIT_HOSTS_FAILED
        if any(r.get("status") == "fail" for r in self.reports.values()):
            return EXIT_DRIFT
        return EXIT_OK

    def summary(self) -> dict[str, Any]:
        """``{hosts, passed, failed_steps {host: [step]}, unreachable [host], steps {name: {pass, fail, skip}}}``."""
        steps: dict[str, dict[str, int]] = {}
        failed_steps: dict[str, list[str]] = {}
        for host, report in sorted(self.reports.items()):
            for entry in report.get("steps") or []:
                counts = steps.setdefault(str(entry.get("name")), {"pass": 0, "fail": 0, "skip": 0})
                status = str(entry.get("status"))
                counts[status] = counts.get(status, 0) + 1
                if status == "fail":
                    failed_steps.setdefault(host, []).append(str(entry.get("name")))
        return {
            "hosts": len(self.reports) + len(self.failed),
            "passed": sorted(h for h in self.reports if h not in failed_steps),
            "failed_steps": failed_steps,
            "unreachable": sorted(self.failed),
            "steps": steps,
        }

    def to_json(self) -> dict[str, Any]:
        """The document ``--json`` writes: reports, failed hosts, summary, exit code and run record."""
        return {"hosts": self.reports, "failed": self.failed, "summary": self.summary(),
                "exit_code": self.exit_code, "run_dir": str(self.run_dir) if self.run_dir else None}


def extravars_for(local: bool, report_path: str | None = None) -> dict[str, str]:
    """Variables every verify run passes: the CLI reads the report instead of failing the host; ``--local``
    also makes the connection local (see :func:`gpuprov.hostplay.local_extravars`). When gpuprov runs as a
    normal user locally, the report goes to ``report_path`` (it cannot write /var/lib/gpuprov)."""
    from gpuprov.hostplay import local_extravars

    out = {"verify_fail_on_failed_step": "false"}
    if local:
        out.update(local_extravars())
        if os.geteuid() != 0 and report_path:
            out["ansible_become"] = "false"
            out["verify_report_path"] = report_path
    return out


def verify(fleet_path: Path | None, local: bool = False, limit: str | None = None,
           extravars: dict[str, str] | None = None) -> FleetVerify:
    """Run ``playbooks/verify.yml`` and collect every host's report.

    Without ``fleet_path`` (``local`` must be true) the run targets this machine as ``localhost`` with no fleet
    settings (no expected model or count). With both, the fleet's hosts keep their settings but are reached
    through a local connection; ``limit`` must then select exactly one host unless the fleet has only one.

    Raises:
        ConfigError / FleetValidationError: bad fleet file, ``--limit`` or combination. Exit 2.
        PlaybookError: ansible-playbook could not run the play.
    """
    from gpuprov.hostplay import LOCAL_HOST, prepare_fleet, prepare_local, run_play
    from gpuprov.resources import playbooks_dir, state_dir

    if fleet_path is None and not local:
        raise ConfigError("give a fleet file or --local: gpuprov verify FLEET | gpuprov verify --local")
    if fleet_path is None:
        if limit:
            raise ConfigError("--limit needs a fleet file: gpuprov verify FLEET --limit PATTERN")
        run_dir, inventory = prepare_local("verify")
    else:
        run_dir, inventory = prepare_fleet(fleet_path, "verify", limit, one_host=local)
    variables = extravars_for(local, str(state_dir() / "verify-local.json"))
    variables.update(extravars or {})
    run = run_play(run_dir, inventory, playbooks_dir() / "verify.yml", limit=limit, extravars=variables)
    reports = run.results.fact(REPORT_FACT)
    out = FleetVerify(failed=dict(run.failed), run_dir=run_dir)
    for host, report in sorted(reports.items()):
        if host not in out.failed and isinstance(report, dict):
            out.reports[host] = report
    seen = set(run.result.hosts) if run.result else set()
    for host in sorted(seen - set(out.reports) - set(out.failed)):
        out.failed[host] = "the verify role published no report"
    if fleet_path is None and not out.reports and not out.failed:
        out.failed[LOCAL_HOST] = "the verify role published no report"
    log.debug("verify: %d report(s), %d failed", len(out.reports), len(out.failed))
    return out


def _evidence_text(entry: dict[str, Any]) -> str:
    """A short line of the evidence that matters most for each step."""
    ev = entry.get("evidence") or {}
    name = entry.get("name")
    if name == "gpus" and ev.get("names"):
        return f"{ev.get('count')} x {', '.join(sorted({str(n) for n in ev['names']}))}"
    if name == "driver_version" and (ev.get("driver_version") or ev.get("nvml_version")):
        return f"driver {ev.get('driver_version')}, NVML {ev.get('nvml_version')}"
    if name == "nccl_allreduce" and isinstance(ev.get("result"), dict) and ev["result"].get("available"):
        result = ev["result"]
        return (f"busbw {result.get('busbw_gbps')} GB/s over {result.get('world_size')} GPUs "
                f"(min {ev.get('min_busbw_gbps')})")
    if name == "cuda_sample" and ev.get("output"):
        return str(ev["output"]).splitlines()[-1]
    if name == "p2p" and isinstance(ev.get("p2p"), dict):
        return ", ".join(f"{k} {len(v)} pair(s)" for k, v in ev["p2p"].items() if isinstance(v, dict))
    return ""


def host_table(host: str, report: dict[str, Any]) -> Table:
    """A rich table of one host's steps: step, status, reason and the key evidence."""
    summary = report.get("summary") or {}
    table = Table(title=f"{host}: {str(report.get('status')).upper()}", title_justify="left",
                  caption=f"pass {summary.get('pass', 0)}, fail {summary.get('fail', 0)}, "
                          f"skip {summary.get('skip', 0)}", caption_justify="left")
    for header in ("step", "status", "seconds", "reason / evidence"):
        table.add_column(header, justify="right" if header == "seconds" else "left", overflow="fold")
    for entry in report.get("steps") or []:
        status = str(entry.get("status"))
        detail = " | ".join(t for t in (str(entry.get("reason") or ""), _evidence_text(entry)) if t)
        table.add_row(str(entry.get("name")), f"[{STYLE.get(status, '')}]{status}[/]",
                      str(entry.get("duration_s") if entry.get("duration_s") is not None else ""), detail)
    return table


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON (atomically: a temporary file renamed over ``path``).

    Raises:
        ConfigError: the file cannot be written. Exit 2.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write: {exc.strerror or exc}") from None
