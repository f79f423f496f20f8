# Copyright: gpuprov contributors
# Apache-2.0
"""bios_check's result on one host, the one copy that the ``bios_findings`` and ``bios_probe`` modules return:
the findings of the rules (module_utils/findings.py), the failing ones, the facts and the JSON report.

Public API::

    result(platform, gpus, settings, previous_gpus, existing_findings, fail_on) -> dict
    report_text(report: dict) -> str          # the report file's content
    previous_gpus(text: str | None) -> list   # the ``gpus`` of the last report's text
    kernel_log_unavailable(reason: str) -> dict

Pure Python 3.8, no Ansible.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils.findings import evaluate, fail_message, failing, report_gpus

#: The role that owns these findings in ``ansible_facts['gpuprov_findings']``.
ROLE = "bios_check"


def result(platform: dict[str, Any], gpus: dict[str, Any], settings: dict[str, Any] | None,
           previous: list[dict[str, Any]] | None, existing_findings: list[dict[str, Any]] | None,
           fail_on: list[str]) -> dict[str, Any]:
    """``{findings, failing, fail_message, report_gpus, report, ansible_facts}`` of one host.

    ``platform`` is platform_info's report, ``gpus`` the ``gpuprov_gpus`` fact, ``previous`` the ``gpus`` of the
    last report (UUIDs of GPUs NVML may have lost since), ``existing_findings`` the ``gpuprov_findings`` fact
    before this run (other roles' entries are kept, earlier bios_check ones replaced). ``report`` has no
    timestamps or live readings, so an unchanged host gives an unchanged report."""
    findings = evaluate(platform, gpus, settings, previous)
    ours = [dict(finding, role=ROLE) for finding in findings]
    others = [f for f in existing_findings or [] if f.get("role") != ROLE]
    bad = failing(findings, fail_on)
    kept_gpus = report_gpus(gpus)
    return {
        "findings": findings,
        "failing": bad,
        "fail_message": fail_message(bad, fail_on),
        "report_gpus": kept_gpus,
        "report": {
            "report_version": 1,
            "role": ROLE,
            "fail_on": fail_on,
            "failed": bool(bad),
            "findings": findings,
            "platform": platform,
            # not the driver version: installing the driver is the site's own work after this preflight, and the
            # report of an unchanged platform must not change on the next run
            "nvml": {key: (gpus or {}).get(key) for key in ("available", "error_name", "count")},
            "gpus": kept_gpus,
        },
        "ansible_facts": {"bios_check_findings": findings, "gpuprov_findings": others + ours},
    }


def report_text(report: dict[str, Any]) -> str:
    """The report file's content: JSON, keys sorted, 4-space indent and a final newline (the form of Ansible's
    ``to_nice_json(sort_keys=true)``, which the role wrote before, so an unchanged report is not rewritten)."""
    return json.dumps(report, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def previous_gpus(text: str | None) -> list[dict[str, Any]]:
    """The ``gpus`` of the last report's ``text``; [] when there is none or it is not a report (it is rewritten)."""
    try:
        report = json.loads(text) if text else None
    except ValueError:
        return []
    gpus = report.get("gpus") if isinstance(report, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def kernel_log_unavailable(reason: str) -> dict[str, Any]:
    """The ``kernel_log`` entry of a platform whose kernel log is not scanned (no systemd journal), with why."""
    return {"source": None, "available": False, "events": [], "reason": reason}
