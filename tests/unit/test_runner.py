"""gpuprov.runner against real ansible-runner runs on local-connection hosts (no SSH, no containers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gpuprov.exceptions import ConfigError
from gpuprov.runner import EventCollector, RunRequest, exit_code, new_run_dir, parse_extravars, run_playbook

PLAY = [
    {
        "name": "Probe",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Write a marker", "ansible.builtin.copy": {"dest": "{{ marker }}", "content": "x\n",
                                                               "mode": "0644"}},
            {"name": "Fail on the broken host", "ansible.builtin.fail": {"msg": "broken on purpose"},
             "when": "inventory_hostname == 'broken'"},
        ],
    }
]


def _request(tmp_path: Path, hosts: dict[str, dict[str, str]], *, check: bool = False) -> RunRequest:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}), encoding="utf-8")
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY, sort_keys=False), encoding="utf-8")
    run_dir = new_run_dir(tmp_path / "state", "test")
    return RunRequest(inventory=inventory, playbook=playbook, roles_path=tmp_path, run_dir=run_dir, check=check)


def _host(tmp_path: Path, name: str) -> dict[str, str]:
    return {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "marker": str(tmp_path / f"{name}.marker")}


def test_counts_come_from_stats_and_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "not-in-any-record-" + os.urandom(4).hex()
    monkeypatch.setenv("GPUPROV_TEST_SECRET", secret)
    request = _request(tmp_path, {"good": _host(tmp_path, "good"), "broken": _host(tmp_path, "broken")})
    request.extravars = {"some_token": secret}
    result = run_playbook(request)
    leaks = [p for p in request.run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == [], "a secret from the environment or -e reached the run record"
    assert result.hosts["good"].changed == 1
    assert result.hosts["good"].failed == 0
    assert result.hosts["broken"].failed == 1
    assert result.failed_hosts == ["broken"]
    assert result.hosts["broken"].failures[0]["msg"] == "broken on purpose"
    assert result.hosts["good"].duration_s > 0
    assert exit_code(result, check=False) == 3
    # the run record keeps ansible-runner's artifacts, and no env files (suppress_env_files)
    assert (result.artifact_dir / "job_events").is_dir()
    assert not (request.run_dir / "env" / "envvars").exists()


def test_command_record_is_scrubbed_while_the_play_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill during the run must not leave the environment (secrets) in ``artifacts/<id>/command``: the
    play itself reads the record and finds only variable names there."""
    secret = "not-in-the-record-" + os.urandom(4).hex()
    monkeypatch.setenv("GPUPROV_TEST_SECRET", secret)
    request = _request(tmp_path, {"good": _host(tmp_path, "good")})
    record = request.run_dir / "artifacts" / request.run_dir.name / "command"
    play = [{"name": "Read the record", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Read it", "ansible.builtin.slurp": {"src": str(record)}, "register": "record"},
        {"name": "Only names", "ansible.builtin.assert": {
            "that": ["(record.content | b64decode | from_json)['env'] is not mapping",
                     "'GPUPROV_TEST_SECRET' in (record.content | b64decode | from_json)['env']"]}},
    ]}]
    request.playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = run_playbook(request)
    assert result.hosts["good"].failed == 0, result.hosts["good"].failures
    assert result.hosts["good"].ok == 2
    leaks = [p for p in request.run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == []


def test_second_run_has_no_changes_and_check_mode_reports_drift(tmp_path: Path) -> None:
    hosts = {"good": _host(tmp_path, "good")}
    drift = run_playbook(_request(tmp_path, hosts, check=True))
    assert drift.changed_hosts == ["good"]
    assert exit_code(drift, check=True) == 1
    assert not (tmp_path / "good.marker").exists(), "check mode must not write"
    first = run_playbook(_request(tmp_path, hosts))
    assert first.hosts["good"].changed == 1
    second = run_playbook(_request(tmp_path, hosts))
    assert second.hosts["good"].changed == 0
    assert exit_code(second, check=False) == 0
    in_sync = run_playbook(_request(tmp_path, hosts, check=True))
    assert exit_code(in_sync, check=True) == 0


def test_unreachable_host_is_counted(tmp_path: Path) -> None:
    hosts = {
        "good": _host(tmp_path, "good"),
        # nothing listens on port 1 of loopback: the connection is refused at once
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": "1", "ansible_connection": "ssh",
                 "marker": str(tmp_path / "gone.marker")},
    }
    result = run_playbook(_request(tmp_path, hosts))
    assert result.hosts["gone"].unreachable == 1
    assert result.hosts["gone"].status == "unreachable"
    assert result.failed_hosts == ["gone"]
    assert result.hosts["good"].changed == 1


def test_collector_ignores_events_without_host() -> None:
    collector = EventCollector()
    assert collector({"event": "playbook_on_start", "event_data": {}}) is True
    collector({"event": "runner_on_ok", "event_data": {"host": "a", "role": "nouveau", "duration": 1.5,
                                                       "res": {"changed": True}}})
    collector({"event": "runner_on_skipped", "event_data": {"host": "a", "role": "nouveau", "duration": 0.5}})
    timing = collector.hosts["a"].roles["nouveau"]
    assert (timing.tasks, timing.changed, timing.duration_s) == (2, 1, 2.0)


@pytest.mark.parametrize("pair", ["novalue", "=x", "1abc=2", "a-b=c"])
def test_bad_extravars_are_config_errors(pair: str) -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_extravars([pair])


def test_extravars_keep_values_verbatim() -> None:
    assert parse_extravars(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}


def test_sigint_cancels_the_run_and_kills_ansible(tmp_path: Path) -> None:
    """Ctrl-C stops ansible-playbook's whole process group (its workers and connections) and exits 130.

    The module already running on a host may finish there (Ansible's own Ctrl-C behaves the same): with
    the local connection it runs in a session of its own, so the test ends it itself.
    """
    import signal
    import subprocess
    import threading

    from gpuprov.exceptions import Interrupted

    marker = f"gpuprov-sleep-{os.urandom(4).hex()}"
    play = [{"name": "Hang", "hosts": "all", "gather_facts": False,
             "tasks": [{"name": "Sleep", "ansible.builtin.command": "",
                        "changed_when": False}]}]
    request = _request(tmp_path, {"good": _host(tmp_path, "good")})
    play[0]["tasks"][0]["ansible.builtin.command"] = f"sh -c 'sleep 120; : {marker}'"
    request.playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    timer = threading.Timer(6.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(Interrupted) as info:
            run_playbook(request)
    finally:
        timer.cancel()
    assert info.value.exit_code == 130
    subprocess.run(["pkill", "-f", marker], check=False)
    left = subprocess.run(["pgrep", "-f", str(request.run_dir)], capture_output=True, text=True,
                          check=False).stdout.split()
    assert left == [], f"ansible processes left running after the interrupt: {left}"
