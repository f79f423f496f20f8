"""``gpuprov upgrade``: option checks, the per-host report and the resume command, the upgrade facts the event
collector keeps, and the canary group in the rendered inventory (the rollout itself runs in the lab's main job,
tests/integration/test_lab.py)."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from gpuprov.accounting import EventCollector, HostResult
from gpuprov.cli import cli
from gpuprov.cli.upgrade import report
from gpuprov.engine import ApplyOptions
from gpuprov.exceptions import EXIT_DRIFT, EXIT_HOSTS_FAILED
from gpuprov.fleet import FleetValidationError, load_fleet
from gpuprov.render import CANARY_GROUP, inventory_files
from gpuprov.runner import RunResult

ROOT = Path(__file__).resolve().parents[3]

FLEET = """\
version: 1
settings: {os: debian12, gpus: {model: H200, count: 2}}
hosts:
  gpu01: {address: 10.0.0.11, canary: true}
  gpu02: {address: 10.0.0.12}
  gpu03: {address: 10.0.0.13}
"""


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--serial", "0", "not a host count or a percentage"),
    ("--serial", "150%", "not a host count or a percentage"),
    ("--serial", "two", "not a host count or a percentage"),
    ("--max-fail", "101", "not a percentage from 0 to 100"),
    ("--max-fail", "-5%", "not a percentage from 0 to 100"),
    ("--serial", "\u0663", "not a host count or a percentage"),  # ARABIC-INDIC DIGIT THREE: Ansible reads no count
    ("--max-fail", "\u0663", "not a percentage from 0 to 100"),
])
def test_bad_batch_options_exit_2_before_anything_runs(tmp_path: Path, option: str, value: str, says: str) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(FLEET)
    result = CliRunner().invoke(cli, ["upgrade", str(fleet), option, value])
    assert result.exit_code == 2
    assert says in result.output and option in result.output


@pytest.mark.parametrize(("fleet_text", "args", "says"), [
    (FLEET.replace("{os: debian12,", "{os: debian12, proxy: {https: {env: GPUPROV_TEST_UNSET_PROXY}},"), [],
     "settings.proxy.https: environment variable GPUPROV_TEST_UNSET_PROXY is not set"),
    (FLEET, ["--forks", "0"], "--forks 0: must be at least 1"),
])
def test_input_that_needs_no_host_exits_2_before_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], fleet_text: str,
                                                           args: list[str], says: str) -> None:
    from gpuprov import drift_report
    from gpuprov.cli.__main__ import main

    def probe(*_args: object) -> None:
        raise AssertionError("the drift probe ran")

    monkeypatch.delenv("GPUPROV_TEST_UNSET_PROXY", raising=False)
    monkeypatch.setattr(drift_report, "fleet_drift", probe)
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(fleet_text)
    assert main(["upgrade", str(fleet), "--check", *args]) == 2
    assert says in capsys.readouterr().err


def test_canaries_are_a_group_of_the_rendered_inventory(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(FLEET)
    files = inventory_files(load_fleet(fleet))
    children = files["hosts.yml"]["all"]["children"]
    assert children[CANARY_GROUP] == {"hosts": {"gpu01": {}}}


def test_a_fleet_group_may_not_take_the_canary_group_name(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yml"
    document = yaml.safe_load(FLEET)
    document["groups"] = {CANARY_GROUP: {}}
    fleet.write_text(yaml.safe_dump(document))
    with pytest.raises(FleetValidationError, match=f"group name '{CANARY_GROUP}' is reserved"):
        load_fleet(fleet)


def _host(name: str, *, failed: int = 0, changed: int = 0, stage: str = "verified") -> HostResult:
    host = HostResult(name=name, ok=5, failed=failed, changed=changed)
    host.upgrade = {"stage": stage, "units": ["nvidia-persistenced.service"],
                    "containers": [{"id": "c1", "name": "trainer"}],
                    "holders": [{"pid": 4242, "command": "python3"}] if failed else []}
    if failed:
        host.failures = [{"role": "(play)", "task": "Upgrade | Check that nothing else holds the GPUs",
                          "msg": "1 process(es) hold the GPU device files: pid 4242", "action": "", "item": "",
                          "state": "failed"}]
    return host


def _result(tmp_path: Path, *hosts: HostResult) -> RunResult:
    t0 = dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc)
    return RunResult(status="failed", rc=2, run_dir=tmp_path, artifact_dir=tmp_path,
                     hosts={h.name: h for h in hosts}, started=t0, finished=t0)


def _report(result: RunResult, check: bool = False, unread: list[str] | None = None) -> tuple[int, str]:
    out = io.StringIO()
    options = ApplyOptions(fleet=Path("fleet.yml"), check=check, argv=["upgrade", "fleet.yml", "--serial", "1"],
                           playbook="upgrade")
    code = report(result, 0, options, ["gpu01", "gpu02", "gpu03"], unread or [],
                  Console(file=out, width=200, color_system=None))
    return code, out.getvalue()


def test_a_failed_host_stops_the_rollout_and_the_resume_command_names_it_and_the_untouched(tmp_path: Path) -> None:
    code, text = _report(_result(tmp_path, _host("gpu01"), _host("gpu02", failed=1, stage="planned")))
    assert code == EXIT_HOSTS_FAILED
    assert "rollout stopped: 1 host(s) failed (gpu02); 1 left untouched (gpu03)" in text
    assert "pid 4242" in text and "stopped before any change" in text
    assert text.rstrip().endswith("gpuprov upgrade fleet.yml --serial 1 --limit gpu02,gpu03")


def test_every_host_moved_exits_0(tmp_path: Path) -> None:
    code, text = _report(_result(tmp_path, _host("gpu01"), _host("gpu02"), _host("gpu03")))
    assert code == 0 and text.count("upgraded and verified") == 3 and "resume" not in text


def test_check_reports_the_plan_and_exits_1(tmp_path: Path) -> None:
    hosts = [_host(n, changed=3, stage="planned") for n in ("gpu01", "gpu02", "gpu03")]
    code, text = _report(_result(tmp_path, *hosts), check=True)
    assert code == EXIT_DRIFT and text.count("would change") == 3 and "nvidia-persistenced.service" in text


def test_hosts_whose_stack_could_not_be_read_join_the_resume_command(tmp_path: Path) -> None:
    code, text = _report(_result(tmp_path, _host("gpu01"), _host("gpu02"), _host("gpu03")), unread=["gpu04"])
    assert code == EXIT_HOSTS_FAILED and text.rstrip().endswith("--limit gpu04")


def test_the_collector_keeps_the_latest_upgrade_fact() -> None:
    collector = EventCollector()
    for stage in ("planned", "stopped"):
        collector({"event": "runner_on_ok", "event_data": {
            "host": "gpu01", "task": "Upgrade | Record the stage",
            "res": {"ansible_facts": {"gpuprov_upgrade": {"stage": stage}}}}})
    assert collector.hosts["gpu01"].upgrade == {"stage": "stopped"}


def _always_tasks_run(stage: str, unfinished: str | None) -> tuple[list[str], dict[str, Any]]:
    """The always tasks of playbooks/tasks/upgrade_host.yml that run for a host whose block ended at ``stage``
    (an earlier run's marker stage ``unfinished``), by their own when conditions templated by Ansible; set_fact
    tasks that run update the variables. Returns (task names, gpuprov_upgrade afterwards)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "upgrade_host.yml").read_text(encoding="utf-8"))
    (block,) = [t for t in tasks if "always" in t]
    variables: dict[str, Any] = {"ansible_check_mode": False, "__upgrade_marker": "/var/lib/gpuprov/upgrade.json",
                                 "gpuprov_upgrade": {"stage": stage, "unfinished": unfinished, "units": ["a.service"],
                                                     "containers": [], "modules": ["nvidia"]}}
    ran = []
    for task in block["always"]:
        templar = Templar(loader=DataLoader(), variables=variables)
        when = task.get("when", "true")
        if not templar.template(trust_as_template("{{ (" + when + ") | bool }}")):
            continue
        ran.append(task["name"])
        for key, value in (task.get("ansible.builtin.set_fact") or {}).items():
            variables[key] = templar.template(trust_as_template(value)) if isinstance(value, str) else value
    return ran, variables["gpuprov_upgrade"]


@pytest.mark.parametrize(("stage", "unfinished", "starts", "marker"), [
    ("planned", None, True, "removed"),  # refused before any change: given back
    ("planned", "stopping", True, "removed"),  # an earlier run stopped only services (interrupted before unloading)
    ("planned", "stopped", False, "rewritten"),  # an earlier run unloaded the driver: left as it left the host
    ("stopped", None, False, "kept"),  # this run unloaded the driver and failed
    ("verified", "stopped", False, "removed"),  # this run finished what the earlier one left
])
def test_a_refused_rerun_keeps_what_an_unfinished_upgrade_left(stage: str, unfinished: str | None, starts: bool,
                                                                marker: str) -> None:
    ran, plan = _always_tasks_run(stage, unfinished)
    assert any(name.startswith("Upgrade | Start the GPU services") for name in ran) == starts
    effect = ("removed" if "Upgrade | Remove the marker" in ran
              else "rewritten" if "Upgrade | Record the earlier stage in the marker" in ran else "kept")
    assert effect == marker
    if marker == "rewritten":
        assert plan["stage"] == unfinished  # the report and the marker name the stage the host is really at


def _fails(task_name: str, result: dict[str, Any]) -> bool:
    """Whether the task ``task_name`` of playbooks/tasks/upgrade_host.yml fails on the item ``result``, by its own
    failed_when (templated by Ansible, the registered variable bound to ``result``)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def walk(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for task in tasks for t in [task, *walk(task.get("block", []) + task.get("always", []))]]

    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "upgrade_host.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in walk(tasks) if t.get("name") == task_name]
    conditions = task["failed_when"] if isinstance(task["failed_when"], list) else [task["failed_when"]]
    templar = Templar(loader=DataLoader(), variables={task["register"]: result})
    return all(templar.template(trust_as_template("{{ (" + c + ") | bool }}")) for c in conditions)


@pytest.mark.parametrize("name", ["Upgrade | Stop the GPU services", "Upgrade | Start the GPU services again",
                                  "Upgrade | Start the GPU services of a host refused before any change"])
def test_a_unit_gone_since_an_earlier_run_does_not_fail_the_host(name: str) -> None:
    # the marker of an unfinished run names units: one whose unit file was removed since must not fail every re-run
    gone = {"failed": True, "msg": "Could not find the requested service nvidia-dcgm.service: host"}
    assert not _fails(name, gone)
    assert _fails(name, {"failed": True, "msg": "Unable to start service nvidia-dcgm.service: Job failed"})
    assert not _fails(name, {"changed": True, "state": "started"})


@pytest.mark.parametrize("name", ["Upgrade | Start the containers again",
                                  "Upgrade | Start the containers of a host refused before any change"])
def test_a_container_gone_since_an_earlier_run_does_not_fail_the_host(name: str) -> None:
    # docker compose up recreates containers under new ids: the marker's old id is gone
    assert not _fails(name, {"rc": 1, "stderr": "Error response from daemon: No such container: 3f2a"})
    assert _fails(name, {"rc": 1, "stderr": "Error response from daemon: cannot start: device busy"})
    assert not _fails(name, {"rc": 0, "stderr": ""})


@pytest.mark.parametrize(("unfinished", "stage"),
                         [(None, "stopping"), ("stopping", "stopping"), ("stopped", "stopped")])
def test_the_first_marker_of_a_run_keeps_an_earlier_unloaded_stage(unfinished: str | None, stage: str) -> None:
    # interrupted right after it is written, the marker must still say the driver is unloaded
    import json

    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "upgrade_host.yml").read_text(encoding="utf-8"))
    (block,) = [t for t in tasks if "always" in t]
    (task,) = [t for t in block["block"] if t["name"] == "Upgrade | Leave the marker of an upgrade under way"]
    variables: dict[str, Any] = {"gpuprov_upgrade": {"stage": "planned", "unfinished": unfinished, "units": []}}
    templar = Templar(loader=DataLoader(), variables=variables)
    variables.update({k: templar.template(trust_as_template(v)) for k, v in task.get("vars", {}).items()})
    content = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(task["ansible.builtin.copy"]["content"]))
    assert json.loads(content)["stage"] == stage


def test_a_damaged_marker_refuses_its_host_with_the_manual_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The upgrade play cannot read a damaged marker (no list of what the earlier upgrade stopped): the host is not
    planned but reported with the fix and in the resume command, exit 3; a host in sync is left alone."""
    from gpuprov import drift, drift_report
    from gpuprov.cli import upgrade
    from gpuprov.cli.__main__ import main

    def run_fleet(*_args: object) -> None:
        raise AssertionError("the upgrade play ran")

    in_sync = {c: {"desired": None, "installed": None, "in_sync": True, "note": None} for c in drift.COMPONENTS}
    damaged = drift.compare({"desired": {}, "installed": {"upgrade_marker": "{truncated"}})["upgrade"]
    probe = drift_report.FleetDrift(hosts={"gpu01": {**in_sync, "upgrade": damaged}, "gpu02": in_sync})
    monkeypatch.setattr(drift_report, "fleet_drift", lambda *_args: probe)
    monkeypatch.setattr(upgrade, "run_fleet", run_fleet)
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(FLEET)
    assert main(["upgrade", str(fleet)]) == EXIT_HOSTS_FAILED
    out = " ".join(capsys.readouterr().out.split())
    assert "gpu01: /var/lib/gpuprov/upgrade.json, the marker of an unfinished upgrade, is damaged" in out
    assert "gpu02: runs the fleet file's driver and CUDA stack: nothing to upgrade" in out
    assert out.endswith("--limit gpu01")
