"""The monitoring role's Prometheus alert rules: valid (``promtool check rules``), every unit test in
roles/monitoring/tests/prometheus passing (``promtool test rules``), and every alert covered by a case that
fires and one that must stay silent. Every DCGM field a rule reads must be one the role's collectors file
makes dcgm-exporter serve.

promtool comes from Debian's ``prometheus`` package. It is required, not optional: without it these tests
fail (CI installs it in .ci/setup), so an untested rule file cannot pass CI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "monitoring"
RULES = ROLE / "files" / "prometheus" / "gpuprov-gpu.rules.yml"
TESTS = ROLE / "tests" / "prometheus" / "gpuprov-gpu.test.yml"
COLLECTORS = ROLE / "templates" / "etc" / "dcgm-exporter" / "gpuprov-counters.csv.j2"
# The clock-event field is templated by DCGM version (vars/main.yml __monitoring_clock_field).
CLOCK_FIELDS = {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: install Debian's prometheus package (apt-get install prometheus)")
    return found


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _alerts() -> list[dict[str, Any]]:
    return [rule for group in _load(RULES)["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules() -> None:
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in proc.stdout


def test_promtool_test_rules() -> None:
    proc = subprocess.run([_promtool(), "test", "rules", TESTS.name], cwd=TESTS.parent, capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_fires_and_stays_silent_in_some_case() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in _load(TESTS)["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in _alerts()}
    assert names - fired == set(), "alerts without a firing case"
    assert names - silent == set(), "alerts without a not-firing case"
    assert (fired | silent) - names == set(), "tests for alerts that do not exist"


def test_alerts_have_severity_and_text() -> None:
    for rule in _alerts():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_rules_read_only_fields_the_exporter_serves() -> None:
    served = set(re.findall(r"^(DCGM_FI_[A-Z0-9_]+),", COLLECTORS.read_text(encoding="utf-8"), re.MULTILINE))
    served |= CLOCK_FIELDS if "__monitoring_clock_field" in COLLECTORS.read_text(encoding="utf-8") else set()
    used = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", RULES.read_text(encoding="utf-8").split("groups:", 1)[1]))
    # names inside annotations are prose, not queries
    queried = {name for rule in _alerts() for name in re.findall(r"DCGM_FI_[A-Z0-9_]+", rule["expr"])}
    assert queried <= used
    assert queried - served == set()


def test_grafana_dashboard_queries_served_fields() -> None:
    import json

    dashboard = json.loads((ROLE / "files" / "grafana" / "gpuprov-gpus.json").read_text(encoding="utf-8"))
    served = set(re.findall(r"^(DCGM_FI_[A-Z0-9_]+),", COLLECTORS.read_text(encoding="utf-8"), re.MULTILINE))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    assert {n for e in exprs for n in re.findall(r"DCGM_FI_[A-Z0-9_]+", e)} - served - CLOCK_FIELDS == set()
