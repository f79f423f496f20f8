"""gpuprov.recap: retry command and the --json summary layout."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from pathlib import Path

from gpuprov.accounting import HostResult
from gpuprov.recap import retry_command, summary, write_summary
from gpuprov.runner import RunResult


def test_retry_command_replaces_limit_and_keeps_the_rest() -> None:
    argv = ["apply", "fleet.yml", "--role", "nouveau", "--limit", "all", "-e", "a=b c"]
    cmd = retry_command(argv, ["gpu02", "gpu07"])
    assert shlex.split(cmd) == ["gpuprov", "apply", "fleet.yml", "--role", "nouveau", "-e", "a=b c",
                                "--limit", "gpu02,gpu07"]
    assert shlex.split(retry_command(["check", "f.yml", "--limit=x"], ["h"]))[-2:] == ["--limit", "h"]


def test_summary_layout(tmp_path: Path) -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    hosts = {"a": HostResult(name="a", ok=3, changed=1), "b": HostResult(name="b", ok=1, unreachable=1)}
    result = RunResult(status="failed", rc=4, run_dir=tmp_path, artifact_dir=tmp_path, hosts=hosts,
                       started=t0, finished=t0 + dt.timedelta(seconds=12))
    data = summary(result, fleet=Path("f.yml"), playbook="site", check=True, exit_code=3)
    assert data["failed_hosts"] == ["b"]
    assert data["drift_hosts"] == ["a"]
    assert data["hosts"]["b"]["status"] == "unreachable"
    assert data["duration_s"] == 12.0
    out = tmp_path / "s.json"
    write_summary(out, data)
    assert json.loads(out.read_text())["hosts"]["a"]["changed"] == 1


def test_findings_reach_the_summary_and_table(tmp_path: Path) -> None:
    from gpuprov.accounting import EventCollector
    from gpuprov.recap import findings_table

    collector = EventCollector()
    finding = {"role": "bios_check", "id": "pcie_downtrained", "severity": "fail", "subject": "0000:17:00.0",
               "evidence": "Gen3 x4 of Gen4 x16", "fix": "reseat the card"}
    collector({"event": "runner_on_ok", "event_data": {"host": "a", "role": "bios_check",
                                                       "res": {"ansible_facts": {"gpuprov_findings": [finding]}}}})
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    result = RunResult(status="failed", rc=2, run_dir=tmp_path, artifact_dir=tmp_path, hosts=collector.hosts,
                       started=t0, finished=t0)
    assert summary(result, fleet=Path("f"), playbook="site", check=False, exit_code=3)["hosts"]["a"]["findings"] == [
        finding]
    table = findings_table(result)
    assert table is not None and table.row_count == 1
    assert findings_table(RunResult(status="successful", rc=0, run_dir=tmp_path, artifact_dir=tmp_path, hosts={},
                                    started=t0, finished=t0)) is None


def test_retry_command_hides_secret_extra_vars() -> None:
    argv = ["check", "f.yml", "-e", "ansible_become_password=LEAKME", "-e", "verify_expected_gpu_count=8",
            "--extra-vars", "api_token=T0K", "--limit", "a"]
    cmd = retry_command(argv, ["b"])
    assert "LEAKME" not in cmd and "T0K" not in cmd
    assert "ansible_become_password=(hidden)" in cmd and "api_token=(hidden)" in cmd
    assert "verify_expected_gpu_count=8" in cmd and cmd.endswith("--limit b")


def test_retry_command_hides_secrets_in_every_extra_vars_form() -> None:
    argv = ["upgrade", "f.yml", "--extra-vars=ansible_become_password=LEAK1", "-eapi_token=LEAK2", "-e",
            "gpuprov_proxy_https=https://u:LEAK3@proxy:3128", "-e", "mirror_key=LEAK4", "-e", "x=https://m/f?sig=LEAK5"]
    cmd = retry_command(argv, ["b"])
    assert "LEAK" not in cmd
    assert shlex.split(cmd)[3:7] == ["--extra-vars=ansible_become_password=(hidden)", "-eapi_token=(hidden)", "-e",
                                     "gpuprov_proxy_https=https://u:***@proxy:3128"]
