"""gpuprov.runner against real ansible-runner runs on local-connection hosts (no SSH, no containers)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuprov.accounting import EventCollector
from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.runner import PlaybookError, RunRequest, exit_code, new_run_dir, parse_extravars, run_playbook

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
    return RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir, check=check)


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


def _process_tree(root: int) -> dict[int, str]:
    """``{pid: command line}`` of every live descendant of ``root``, read with ``ps`` (not gpuprov's code)."""
    argv = ["ps", "-ww", "-e", "-o", "pid=,ppid=,args="]  # -ww: whole command lines, whatever $COLUMNS says
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        pid, ppid, args = [*line.split(None, 2), ""][:3]
        children.setdefault(int(ppid), []).append((int(pid), args))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            found[pid] = args
            todo.append(pid)
    return found


_CANCEL_SCRIPT = """
import logging
import sys
from pathlib import Path
from gpuprov.exceptions import Interrupted
from gpuprov.runner import RunRequest, run_playbook
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
tmp = Path(sys.argv[1])
request = RunRequest(inventory=tmp / "inventory.yml", playbook=tmp / "play.yml",
                     run_dir=Path(sys.argv[2]))
try:
    run_playbook(request)
except Interrupted as exc:
    sys.exit(exc.exit_code)
sys.exit(0)
"""


#: A task's process in a session of its own that ignores SIGINT, as ssh does (the ssh connection plugin starts
#: it with ``start_new_session``): the worker's SIGINT to its process group cannot reach it.
NEW_SESSION = "setsid sh -c 'trap \"\" INT; sleep 300'"


#: As :data:`NEW_SESSION`, ignoring SIGTERM too: gpuprov's clean-up has to wait for it, then SIGKILL it.
STUBBORN = "setsid sh -c 'trap \"\" INT TERM; sleep 300'"


@pytest.mark.parametrize(("signum", "code", "command", "second", "strategy"), [
    (signal.SIGINT, 130, "sleep 300", None, "linear"), (signal.SIGTERM, 143, "sleep 300", None, "linear"),
    (signal.SIGINT, 130, NEW_SESSION, None, "linear"), (signal.SIGINT, 143, STUBBORN, signal.SIGTERM, "linear"),
    (signal.SIGINT, 130, "sleep 300", None, "mitogen"), (signal.SIGTERM, 143, NEW_SESSION, None, "mitogen")])
def test_signal_ends_every_process_of_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int,
                                              code: int, command: str, second: int | None, strategy: str) -> None:
    """Ctrl-C / SIGTERM to gpuprov during ``sleep 300`` on a local-connection host: gpuprov exits 130 / 143
    and no process of the run is left - not ansible-playbook, not its workers (which run in sessions of
    their own, out of reach of ansible-runner's killpg), not the module nor its ``sleep 300``, nor a process
    in a new session that ignores the SIGINT; a ``second`` signal during gpuprov's clean-up of such a process
    only hastens it. Under mitogen the module runs in a host interpreter that outlives ansible-playbook's
    SIGINT: gpuprov's clean-up ends it."""
    monkeypatch.setenv("GPUPROV_STRATEGY", strategy)
    request = _request(tmp_path, {"good": _host(tmp_path, "good")})
    play = [{"name": "Hang", "hosts": "all", "gather_facts": False,
             "tasks": [{"name": "Sleep", "ansible.builtin.command": command, "changed_when": False}]}]
    request.playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    script = tmp_path / "cancel.py"
    script.write_text(_CANCEL_SCRIPT, encoding="utf-8")
    log = tmp_path / "gpuprov.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(request.run_dir)], stderr=stderr)
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 300  # ansible-playbook starts slowly beside the lint gates on 2 cores
        while not any(args == "sleep 300" for args in seen.values()):
            assert proc.poll() is None, f"the run ended (rc={proc.returncode}) before the task started"
            assert time.monotonic() < deadline, f"sleep 300 never started; processes: {seen}"
            time.sleep(0.5)
            seen.update(_process_tree(proc.pid))
        seen.update(_process_tree(proc.pid))
        proc.send_signal(signum)
        if second is not None:  # once ansible-playbook has gone, gpuprov is ending the strays
            while any("ansible-playbook" in args for args in _process_tree(proc.pid).values()):
                assert time.monotonic() < deadline + 60, "ansible-playbook did not stop"
                time.sleep(0.05)
            time.sleep(0.3)
            proc.send_signal(second)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == code
    live = _process_tree(0)  # every process: pid 1's parent is 0
    left = {pid: args for pid, args in seen.items() if pid in live and live[pid] == args}
    for pid in left:  # do not leak them into the rest of the session, then fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == {}, f"processes of the run outlived gpuprov: {left}"
    assert any("ansible-playbook" in args for args in seen.values()), seen
    # the forwarded SIGINT alone stopped them: ansible-playbook ended its workers, nothing was left to kill
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "stopping ansible-playbook" in text, text
    if command in (NEW_SESSION, STUBBORN) or strategy == "mitogen":  # ended by gpuprov after ansible-playbook
        assert "left over by ansible-playbook" in text and "sleep 300" in text, text
    else:
        assert "left over by ansible-playbook" not in text, text
    # the run record still holds no environment values
    record = json.loads((request.run_dir / "artifacts" / request.run_dir.name / "command").read_text())
    assert isinstance(record["env"], list)


def test_relative_paths_reach_the_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative run directory and inventory (a relative GPUPROV_STATE_DIR) still name the hosts:
    ansible-playbook runs in the run directory, so gpuprov hands ansible-runner absolute paths."""
    request = _request(tmp_path, {"good": _host(tmp_path, "good")})
    monkeypatch.chdir(tmp_path)
    relative = RunRequest(inventory=request.inventory.relative_to(tmp_path),
                          playbook=request.playbook.relative_to(tmp_path),
                          run_dir=request.run_dir.relative_to(tmp_path))
    result = run_playbook(relative)
    assert result.hosts["good"].changed == 1
    assert (tmp_path / "good.marker").read_text() == "x\n"


def test_a_run_that_matches_no_host_is_an_error_not_success(tmp_path: Path) -> None:
    request = _request(tmp_path, {})
    with pytest.raises(PlaybookError, match=r"on no host: play 'Probe' matched no host of the inventory") as raised:
        run_playbook(request)
    assert raised.value.exit_code == 2


def test_a_run_where_no_task_reaches_a_host_is_an_error_not_success(tmp_path: Path) -> None:
    """Tags that leave no task: the recap is empty and nothing was checked, so neither success nor drift."""
    request = _request(tmp_path, {"good": _host(tmp_path, "good")})
    request.skip_tags = "all"
    with pytest.raises(PlaybookError, match=r"on no host: --skip-tags all selected none of its tasks"):
        run_playbook(request)
    assert not (tmp_path / "good.marker").exists()


def test_a_run_record_that_cannot_be_created_is_an_environment_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EnvironmentMissing, match=r"cannot create the run record .*: Not a directory - make .*file a "
                                                 r"folder gpuprov may write, or point GPUPROV_STATE_DIR at one"):
        new_run_dir(blocker, "site")
