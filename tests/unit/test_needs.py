"""gpuprov.needs: a failed task's real message, and what a run leaves for the admin (reboots, services,
findings), read from ansible-runner events the way a run delivers them."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpuprov.accounting import EventCollector
from gpuprov.needs import failure_message, host_needs
from gpuprov.recap import ProgressPrinter, needs_table, summary
from gpuprov.runner import RunResult

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _ok(host: str, role: str, facts: dict[str, Any]) -> dict[str, Any]:
    data = {"host": host, "role": role, "task_action": "ansible.builtin.set_fact",
            "res": {"ansible_facts": facts, "changed": False}}
    return {"event": "runner_on_ok", "event_data": data}


def _failed(host: str, role: str, action: str, res: dict[str, Any], task: str = "Start it") -> dict[str, Any]:
    return {"event": "runner_on_failed", "event_data": {"host": host, "role": role, "task": task,
                                                        "task_action": action, "res": {"failed": True, **res}}}


def _result(collector: EventCollector, tmp_path: Path) -> RunResult:
    return RunResult(status="failed", rc=2, run_dir=tmp_path, artifact_dir=tmp_path, hosts=collector.hosts,
                     started=T0, finished=T0)


@pytest.mark.parametrize(("res", "wanted"), [
    ({"msg": "One or more items failed", "results": [
        {"item": "nvidia-persistenced", "failed": False, "msg": ""},
        {"item": "nvidia-fabricmanager", "failed": True, "msg": "Unable to start service nvidia-fabricmanager: "
                                                                "Job failed. See journalctl -xeu"},
        {"_ansible_item_label": "dcgm", "item": {"name": "dcgm"}, "failed": True, "msg": "Could not find the unit"},
    ]}, "nvidia-fabricmanager: Unable to start service nvidia-fabricmanager: Job failed. See journalctl -xeu; "
        "dcgm: Could not find the unit"),
    ({"msg": "Request failed", "status_code": 404, "response": "HTTP Error 404: Not Found",
      "url": "https://mirror.example/cuda/3bf863cc.pub"},
     "Request failed (HTTP 404, HTTP Error 404: Not Found, https://mirror.example/cuda/3bf863cc.pub)"),
    ({"msg": "non-zero return code", "rc": 10, "stderr": "Error! Bad return status for module build\nsee make.log",
      "stdout": ""}, "non-zero return code (rc 10: Error! Bad return status for module build / see make.log)"),
    ({"msg": "MODULE FAILURE\nSee stdout/stderr", "module_stderr": "Traceback...\nImportError: No module named apt"},
     "MODULE FAILURE\nSee stdout/stderr (ImportError: No module named apt)"),
    ({"msg": "nvidia-driver-580 has no candidate"}, "nvidia-driver-580 has no candidate"),
])
def test_failure_message_names_the_real_reason(res: dict[str, Any], wanted: str) -> None:
    assert failure_message(res) == wanted


def test_failure_message_is_bounded() -> None:
    assert len(failure_message({"msg": "x" * 5000})) == 2000


def test_a_pending_reboot_names_the_kernel_and_the_module_in_table_and_json(tmp_path: Path) -> None:
    collector = EventCollector()
    need = {"role": "nvidia_driver", "kind": "reboot", "subject": "6.1.0-99-amd64", "running_kernel": "6.1.0-9-amd64",
            "module_built": True, "detail": "reboot into kernel 6.1.0-99-amd64 (running 6.1.0-9-amd64): the nvidia "
                                            "module for 6.1.0-99-amd64 is built and installed"}
    collector(_ok("gpu1", "nvidia_driver", {"nvidia_driver_reboot_required": True, "gpuprov_needs": [need]}))
    collector(_ok("gpu1", "nouveau", {"nouveau_reboot_required": False}))
    collector(_ok("gpu2", "nvidia_driver", {"nvidia_driver_reboot_required": False, "gpuprov_needs": []}))
    result = _result(collector, tmp_path)
    hosts = summary(result, fleet=Path("f"), playbook="nvidia_driver", check=False, exit_code=0)["hosts"]
    assert hosts["gpu1"]["needs"] == [need] and hosts["gpu2"]["needs"] == []
    table = needs_table(result)
    assert table is not None and table.row_count == 1
    out = io.StringIO()
    Console(file=out, width=300).print(table)
    assert "6.1.0-99-amd64" in out.getvalue() and "built and installed" in out.getvalue()


def test_a_reboot_a_role_did_later_clears_the_need(tmp_path: Path) -> None:
    collector = EventCollector()
    collector(_ok("gpu1", "nouveau", {"nouveau_reboot_required": True}))
    assert [n["role"] for n in collector.hosts["gpu1"].needs] == ["nouveau"]
    assert "nouveau_reboot_required" in collector.hosts["gpu1"].needs[0]["detail"]  # no entry of the role's own
    collector(_ok("gpu1", "nouveau", {"nouveau_reboot_required": "False"}))
    assert collector.hosts["gpu1"].needs == []
    assert needs_table(_result(collector, tmp_path)) is None


def test_a_failed_service_and_serious_findings_are_needs() -> None:
    collector = EventCollector()
    collector(_failed("gpu1", "nvidia_driver", "ansible.builtin.systemd_service", {
        "msg": "One or more items failed",
        "results": [{"item": "nvidia-fabricmanager", "failed": True, "msg": "Unable to start service"}]}))
    collector(_failed("gpu1", "cuda", "ansible.builtin.apt", {"msg": "No package matching 'cuda-toolkit-12-8'"}))
    findings = [{"role": "bios_check", "id": "pcie_link", "severity": sev, "subject": "0000:17:00.0",
                 "evidence": "x8", "fix": "reseat"} for sev in ("info", "warn", "fail")]
    collector(_ok("gpu1", "bios_check", {"gpuprov_findings": findings}))
    host = collector.hosts["gpu1"]
    assert host.failures[0]["item"] == "nvidia-fabricmanager"
    assert host.failures[0]["msg"] == "nvidia-fabricmanager: Unable to start service"
    assert [(n["kind"], n["subject"]) for n in host.needs] == [
        ("service", "nvidia-fabricmanager"), ("finding", "0000:17:00.0"), ("finding", "0000:17:00.0")]
    assert host.needs[1]["detail"] == "warn: pcie_link: x8 - fix: reseat"


def test_progress_shows_a_failed_loops_items() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(Console(file=out, width=300))
    printer(_failed("gpu1", "nvidia_driver", "ansible.builtin.systemd_service", {
        "msg": "One or more items failed",
        "results": [{"item": "nvidia-fabricmanager", "failed": True, "msg": "Unable to start service"}]}))
    assert "failed: Start it - nvidia-fabricmanager: Unable to start service" in out.getvalue()


def test_host_needs_orders_reboots_first() -> None:
    needs = host_needs({"mig": True}, [], [{"role": "x", "task": "t", "msg": "m", "action": "service", "item": ""}], [])
    assert [n["kind"] for n in needs] == ["reboot", "service"]
    assert needs[1]["subject"] == "t"


def test_internal_facts_are_not_a_roles_reboot() -> None:
    collector = EventCollector()
    collector(_ok("gpu1", "hwe_kernel", {"__hwe_kernel_reboot_required": True, "hwe_kernel_reboot_required": False}))
    assert collector.hosts["gpu1"].reboot_required == {"hwe_kernel": False}


def test_credentials_markup_and_empty_stderr_are_safe(tmp_path: Path) -> None:
    res = {"msg": "Request failed", "status_code": 401, "url": "https://user:s3cret@mirror.example/key"}
    assert "s3cret" not in failure_message(res) and "mirror.example" in failure_message(res)
    assert failure_message({"msg": "MODULE FAILURE\nSee stdout/stderr", "module_stderr": "  \n"}).startswith("MODULE")
    collector = EventCollector()
    collector(_failed("[/h]", "x", "ansible.builtin.systemd_service", {"msg": "See [/var/log/x] and [bold]"}))
    collector({"event": "runner_on_unreachable", "event_data": {"host": "[/h]", "role": "x", "task": "t",
               "task_action": "ansible.builtin.systemd_service", "res": {"msg": "Failed to connect"}}})
    result = _result(collector, tmp_path)
    out = io.StringIO()
    table = needs_table(result)
    assert table is not None and table.row_count == 1  # the unreachable one is not a service need
    Console(file=out, width=300).print(table)
    assert "See [/var/log/x] and [bold]" in out.getvalue()
