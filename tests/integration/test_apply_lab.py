"""The main job end to end on a two-host lab (Debian 12 with an H200 pair, the Ubuntu 20.04 stand-in with
eight NVSwitch-connected A100s), reached over SSH
with host-key checking on: check on fresh hosts reports drift (1), apply converges (0), a second apply
changes nothing, check is then clean (0), a package removed by hand shows in check's drift report and is
gone after a re-apply, with one host stopped apply finishes the other and exits 3 with the retry command, and
(last) a driver branch change made in the fleet file moves both hosts once it is confirmed there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GPUPROV = str(Path(sys.executable).parent / "gpuprov")
#: the README's main job: an H200 pair and an NVSwitch A100 system (Fabric Manager at the driver's version)
PROFILES = "h200x2,a100x8-nvswitch"


def gpuprov(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUPROV, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=1200)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[tuple[Path, dict[str, str]]]:
    work = tmp_path_factory.mktemp("lab")
    env = dict(os.environ, GPUPROV_STATE_DIR=str(work / "state"), NO_COLOR="1", COLUMNS="200")
    fleet = work / "lab.yml"
    gpuprov("lab", "down", env=env, cwd=work)
    up = gpuprov("lab", "up", "--hosts", "2", "--profile", PROFILES, "--fleet-file", str(fleet), env=env, cwd=work)
    assert up.returncode == 0, up.stdout + up.stderr
    yield fleet, env
    gpuprov("lab", "down", "--purge", env=env, cwd=work)


def _summary(path: Path) -> dict[str, dict[str, int]]:
    hosts: dict[str, dict[str, int]] = json.loads(path.read_text())["hosts"]
    return hosts


def test_main_job(lab: tuple[Path, dict[str, str]]) -> None:
    fleet, env = lab
    cwd = fleet.parent
    fresh = gpuprov("check", str(fleet), "--json", str(cwd / "fresh.json"), env=env, cwd=cwd)
    assert fresh.returncode == 1, fresh.stdout + fresh.stderr
    assert all(h["changed"] > 0 for h in _summary(cwd / "fresh.json").values())

    first = gpuprov("apply", str(fleet), "--json", str(cwd / "first.json"), env=env, cwd=cwd)
    assert first.returncode == 0, first.stdout + first.stderr
    hosts = _summary(cwd / "first.json")
    assert len(hosts) == 2 and all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values())

    second = gpuprov("apply", str(fleet), "--json", str(cwd / "second.json"), env=env, cwd=cwd)
    assert second.returncode == 0, second.stdout + second.stderr
    assert {name: h["changed"] for name, h in _summary(cwd / "second.json").items()} == dict.fromkeys(hosts, 0)

    in_sync = gpuprov("check", str(fleet), env=env, cwd=cwd)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr

    again = gpuprov("apply", str(fleet), "--role", "nouveau", env=env, cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr


def _drift(path: Path) -> dict[str, Any]:
    drift: dict[str, Any] = json.loads(path.read_text())["drift"]
    return drift


def test_drift_after_a_hand_change_and_none_after_reapply(lab: tuple[Path, dict[str, str]]) -> None:
    """Issue #7: ``check --json`` names the component a hand change broke, and nothing after a re-apply."""
    fleet, env = lab
    cwd = fleet.parent
    clean = gpuprov("check", str(fleet), "--json", str(cwd / "clean.json"), env=env, cwd=cwd)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    report = _drift(cwd / "clean.json")
    assert report["drifted"] == {} and report["failed"] == {}, report
    assert len(report["hosts"]) == 2
    # both profiles are NVSwitch systems (the real H200 pair's capture and the HGX A100): each runs Fabric Manager
    # at its driver's version (in sync above)
    assert all(h["fabric_manager"]["installed"] for h in report["hosts"].values()), report["hosts"]

    status = json.loads(gpuprov("lab", "status", "--json", env=env, cwd=cwd).stdout)
    victim = status["hosts"][0]
    driver = report["hosts"][victim["name"]]["driver"]
    package = next(p for p in driver["installed"]["packages"] if p.startswith("nvidia-driver-"))
    removed = subprocess.run(["docker", "exec", victim["container"], "dpkg", "--remove", "--force-depends",
                              "--force-hold", package], capture_output=True, text=True, check=False)
    assert removed.returncode == 0, removed.stdout + removed.stderr

    drifted = gpuprov("check", str(fleet), "--json", str(cwd / "drifted.json"), env=env, cwd=cwd)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    report = _drift(cwd / "drifted.json")
    assert report["drifted"] == {victim["name"]: ["driver"]}, report["drifted"]
    assert f"{package} is not installed" in report["hosts"][victim["name"]]["driver"]["note"]

    # the role that owns the package repairs it (the whole site converged in test_main_job); check below reads all
    repaired = gpuprov("apply", str(fleet), "--role", "nvidia_driver", "--json", str(cwd / "repaired.json"),
                       env=env, cwd=cwd)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert _summary(cwd / "repaired.json")[victim["name"]]["changed"] > 0
    after = gpuprov("check", str(fleet), "--json", str(cwd / "after.json"), env=env, cwd=cwd)
    assert after.returncode == 0, after.stdout + after.stderr
    assert _drift(cwd / "after.json")["drifted"] == {}


def test_stopped_host_gives_exit_3_and_retry_command(lab: tuple[Path, dict[str, str]]) -> None:
    fleet, env = lab
    cwd = fleet.parent
    status = json.loads(gpuprov("lab", "status", "--json", env=env, cwd=cwd).stdout)
    victim = status["hosts"][-1]
    subprocess.run(["docker", "stop", "-t", "1", victim["container"]], check=True, capture_output=True)
    try:
        # one role is enough to meet the stopped host: exit 3 and the retry command are the run's, not a role's
        run = gpuprov("apply", str(fleet), "--role", "nouveau", "--json", str(cwd / "partial.json"), env=env, cwd=cwd)
        assert run.returncode == 3, run.stdout + run.stderr
        hosts = _summary(cwd / "partial.json")
        assert hosts[victim["name"]]["unreachable"] == 1
        others = [h for name, h in hosts.items() if name != victim["name"]]
        assert others and all(h["failed"] == 0 and h["unreachable"] == 0 for h in others)
        assert (f"gpuprov apply {fleet} --role nouveau --json {cwd / 'partial.json'} --limit {victim['name']}"
                in run.stdout)
    finally:
        up = gpuprov("lab", "up", "--hosts", "2", "--profile", PROFILES, "--fleet-file", str(fleet), env=env,
                     cwd=cwd)
        assert up.returncode == 0, up.stdout + up.stderr


def test_no_secret_in_run_records(lab: tuple[Path, dict[str, str]]) -> None:
    """A become password given as {env: NAME} reaches Ansible through a lookup, never a file or a log."""
    fleet, env = lab
    secret = "s3cr3t-Pa55-" + os.urandom(6).hex()
    text = fleet.read_text()
    assert "ssh:" in text
    secret_fleet = fleet.with_name("lab-secret.yml")
    secret_fleet.write_text(text.replace("ssh:\n", "ssh:\n  become_password: {env: GPUPROV_TEST_BECOME}\n", 1))
    # every task of every role becomes root with it: one role's run shows whether it leaks
    run = gpuprov("apply", str(secret_fleet), "--role", "nouveau", "-v", env=dict(env, GPUPROV_TEST_BECOME=secret),
                  cwd=fleet.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert secret not in run.stdout + run.stderr
    state = Path(env["GPUPROV_STATE_DIR"])
    leaks = [p for p in state.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == []


def _driver_packages(container: str) -> dict[str, tuple[str, bool]]:
    """``{package: (version, held)}`` of the installed NVIDIA driver set in ``container`` (dpkg's own view)."""
    listed = subprocess.run(["docker", "exec", container, "dpkg-query", "-W", "-f",
                             "${Package} ${Version} ${db:Status-Abbrev}\n"],
                            capture_output=True, text=True, check=True).stdout
    holds = set(subprocess.run(["docker", "exec", container, "apt-mark", "showhold"],
                               capture_output=True, text=True, check=True).stdout.split())
    return {name: (version, name in holds) for name, version, status in
            (line.split(maxsplit=2) for line in listed.splitlines())
            if status[1:2] == "i" and name.startswith(("nvidia-", "libnvidia-"))}  # "ii", or "hi" when held


def test_branch_change_from_the_fleet_file(lab: tuple[Path, dict[str, str]]) -> None:
    """Issue #5 and case B08 through the fleet file: ``driver.branch: "550"`` (the lab's ``auto`` is 580 on
    Debian 12, 570 on the 20.04 stand-in) stops with the plan until ``driver.allow_branch_change`` confirms it;
    then apply moves both hosts to 550 with the whole driver set (Fabric Manager included) held at that version,
    and a re-run changes nothing.

    Runs last: the lab is left on branch 550."""
    fleet, env = lab
    cwd = fleet.parent
    hosts = json.loads(gpuprov("lab", "status", "--json", env=env, cwd=cwd).stdout)["hosts"]
    before = {h["name"]: _driver_packages(h["container"]) for h in hosts}
    assert all(pkgs and not any(v.startswith("550.") for v, _ in pkgs.values()) for pkgs in before.values()), before

    document = yaml.safe_load(fleet.read_text())
    document["settings"]["driver"] = dict(document["settings"].get("driver") or {}, branch="550")
    moved_fleet = fleet.with_name("lab-550.yml")
    moved_fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    refused = gpuprov("apply", str(moved_fleet), "--role", "nvidia_driver", env=env, cwd=cwd)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "allow_branch_change" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert {h["name"]: _driver_packages(h["container"]) for h in hosts} == before

    document["settings"]["driver"]["allow_branch_change"] = True
    moved_fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    # the driver role owns the whole driver set, Fabric Manager included
    moved = gpuprov("apply", str(moved_fleet), "--role", "nvidia_driver", "--json", str(cwd / "moved.json"), env=env,
                    cwd=cwd)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    for host in hosts:
        packages = _driver_packages(host["container"])
        assert any(name.startswith("nvidia-driver-550") for name in packages), packages
        assert any(name.startswith("nvidia-fabricmanager-550") for name in packages), packages
        coupled = {name: value for name, value in packages.items()
                   if name.startswith(("nvidia-driver-", "nvidia-dkms-", "libnvidia-compute-",
                                       "nvidia-fabricmanager-", "nvidia-utils-"))}
        assert coupled and all(v.startswith("550.") and held for v, held in coupled.values()), coupled

    again = gpuprov("apply", str(moved_fleet), "--role", "nvidia_driver", "--json", str(cwd / "again.json"),
                    env=env, cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {name: h["changed"] for name, h in _summary(cwd / "again.json").items()} == {h["name"]: 0 for h in hosts}
