"""The README's main job on one two-host lab, from ``gpuprov lab up`` to ``gpuprov lab down``: a Debian 12 host
with the real H200 pair's capture as its hardware and the Ubuntu 24.04 stand-in (a Debian 13 userland dressed as
noble) with eight NVSwitch-connected A100s, reached over SSH with the generated key and host-key checking on.
Ubuntu 20.04 is covered by the Molecule scenarios' platforms (tests/integration/test_molecule.py).

One lab serves the whole file (booting one costs minutes); the tests run in file order and each leaves it as
the next expects:

1. the hosts as ``lab up`` made them: fleet file, OS identity, systemd, kernel, sudo, host keys, and the
   simulated hardware answering ``nvidia-smi`` and the facts module like the real capture;
2. the main job: check on fresh hosts reports drift (1), apply converges (0), a second apply changes nothing,
   check is then clean (0);
3. day-2 cases on the converged lab: a package removed by hand shows in check's drift report and is gone after
   a re-apply; one host stopped: ``lab status`` exits 3, apply finishes the other and exits 3 with the retry
   command, ``lab up`` brings it back on the same port; a become password never reaches a file or a log; a
   driver branch change in the fleet file rolls out host by host with ``gpuprov upgrade``, stopping at a host
   whose GPUs a stray process holds;
4. fault profiles swapped in by ``lab up`` show through nvidia-smi and facts; ``lab down`` removes the lab.

Needs Docker and root (the base images are built on demand, a few minutes the first time). The lab is named
(``GPUPROV_LAB_NAME``, containers ``gpuprov-lab-<name>-<n>``): another lab on the same Docker engine is left alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_helpers import (
    captured_rows,
    csv_rows,
    drift,
    driver_packages,
    gpuprov,
    installed_packages,
    os_release,
    ssh,
    summary,
)
from test_facts_parity import EXCLUDED, NOT_IN_CAPTURE, differences

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: the README's main job: an H200 pair and an NVSwitch A100 system (Fabric Manager at the driver's version)
PROFILES = "h200x2,a100x8-nvswitch"
DEBIAN, UBUNTU = "lab-debian12-1", "lab-ubuntu2404-2"
#: the lab this file runs, apart from any other lab on the Docker engine
LAB_NAME = "testlab"
QUERY = ("index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,pcie.link.gen.max,"
         "pcie.link.width.current")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The lab under a private state dir, made as the README does (``inventory/lab.yml`` in the working
    directory); yields {cwd, env, path (the fleet file), fleet (parsed)}."""
    work = tmp_path_factory.mktemp("lab")
    env = dict(os.environ, GPUPROV_STATE_DIR=str(work / "state"), GPUPROV_LAB_NAME=LAB_NAME, NO_COLOR="1",
               COLUMNS="200")
    gpuprov("lab", "down", env=env, cwd=work)
    up = gpuprov("lab", "up", "--hosts", "2", "--profile", PROFILES, env=env, cwd=work)
    assert up.returncode == 0, up.stdout + up.stderr
    path = work / "inventory" / "lab.yml"
    try:
        yield {"cwd": work, "env": env, "path": path, "fleet": yaml.safe_load(path.read_text())}
    finally:
        gpuprov("lab", "down", "--purge", env=env, cwd=work)


def _status(lab: dict[str, Any]) -> list[dict[str, Any]]:
    hosts: list[dict[str, Any]] = json.loads(gpuprov("lab", "status", "--json", env=lab["env"], cwd=lab["cwd"]).stdout)[
        "hosts"]
    return hosts


# -- 1. the hosts as lab up made them ---------------------------------------------------------------------


def test_fleet_file_shape(lab: dict[str, Any]) -> None:
    fleet = lab["fleet"]
    assert fleet["version"] == 1 and fleet["name"] == "lab"
    assert fleet["ssh"]["user"] == "admin" and fleet["ssh"]["become"] is True
    assert {h: spec["settings"]["os"] for h, spec in fleet["hosts"].items()} == {DEBIAN: "debian12",
                                                                                 UBUNTU: "ubuntu2404"}
    assert all(spec["address"] == "127.0.0.1" for spec in fleet["hosts"].values())
    lab_dir = Path(lab["env"]["GPUPROV_STATE_DIR"]) / "lab"
    assert (lab_dir.stat().st_mode & 0o777) == 0o700


def test_os_release_per_host(lab: dict[str, Any]) -> None:
    fleet = lab["fleet"]
    debian = os_release(ssh(fleet, DEBIAN, "cat /etc/os-release").stdout)
    assert (debian["ID"], debian["VERSION_ID"]) == ("debian", "12")
    ubuntu = os_release(ssh(fleet, UBUNTU, "cat /etc/os-release").stdout)
    assert (ubuntu["ID"], ubuntu["ID_LIKE"], ubuntu["VERSION_ID"], ubuntu["VERSION_CODENAME"]) == (
        "ubuntu", "debian", "24.04", "noble")
    assert "Debian 13 (trixie)" in ssh(fleet, UBUNTU, "cat /etc/gpuprov-standin").stdout
    assert "DISTRIB_RELEASE=24.04" in ssh(fleet, UBUNTU, "cat /etc/lsb-release").stdout
    # apt sources where 24.04 keeps them (deb822 ubuntu.sources), and the stand-in Ubuntu archive beside them
    assert "Types: deb" in ssh(fleet, UBUNTU, "cat /etc/apt/sources.list.d/ubuntu.sources").stdout
    assert "ubuntu2404-archive" in ssh(fleet, UBUNTU, "cat /etc/apt/sources.list.d/gpuprov-lab-archive.sources").stdout
    served = ssh(fleet, UBUNTU, "cat /srv/gpuprov-standin/ubuntu2404-archive/Packages").stdout
    assert {"linux-generic-hwe-24.04", "nvidia-driver-580-server"} <= set(re.findall(r"^Package: (\S+)$", served, re.M))


@pytest.mark.parametrize("host", [DEBIAN, UBUNTU])
def test_systemd_kernel_and_sudo(lab: dict[str, Any], host: str) -> None:
    fleet = lab["fleet"]
    assert ssh(fleet, host, "cat /proc/1/comm").stdout.strip() == "systemd"
    # is-system-running exits 1 when degraded: read its output, not its status
    assert ssh(fleet, host, "systemctl is-system-running || true").stdout.strip() in {"running", "degraded"}
    assert ssh(fleet, host, "ls /boot/initrd.img-*").stdout.strip()
    assert "nouveau.ko" in ssh(fleet, host, "ls /lib/modules/*/kernel/drivers/gpu/drm/nouveau/nouveau.ko*").stdout
    assert ssh(fleet, host, "sudo -n id -u").stdout.strip() == "0"
    assert ssh(fleet, host, "systemctl is-active ssh").stdout.strip() == "active"


def test_host_key_checking_is_on(lab: dict[str, Any], tmp_path: Path) -> None:
    """With an empty known_hosts the same ssh command is refused: the check really happens."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    refused = ssh(lab["fleet"], DEBIAN, "true", known_hosts=str(empty), check=False)
    assert refused.returncode != 0 and "Host key verification failed" in refused.stderr


def test_h200x2_host_answers_like_the_real_capture(lab: dict[str, Any]) -> None:
    """Debian's real nvidia-smi on the mock NVML: every common form works, and ``--query-gpu`` gives the real
    H200 pair's rows."""
    fleet = lab["fleet"]
    for flags in ("", "-L", "-q", "-q -x"):
        ssh(fleet, DEBIAN, f"nvidia-smi {flags}")
    xml = ET.fromstring(ssh(fleet, DEBIAN, "nvidia-smi -q -x").stdout)
    assert xml.findtext("driver_version") == "580.159.04"
    assert xml.findtext("attached_gpus") == "2"
    got = csv_rows(ssh(fleet, DEBIAN, f"nvidia-smi --query-gpu={QUERY} --format=csv").stdout)
    expected = captured_rows()
    assert len(got) == len(expected) == 2
    for mine, real in zip(got, expected, strict=True):
        assert mine == {k: real[k] for k in mine}


def test_fleet_facts_through_the_module(lab: dict[str, Any]) -> None:
    """``gpuprov facts FILE`` over SSH: the H200 host's fact equals the real host's; the A100 host's names
    eight GPUs behind NVSwitches."""
    proc = gpuprov("facts", str(lab["path"]), "--json", env=lab["env"], cwd=lab["cwd"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts: dict[str, Any] = json.loads(proc.stdout)["hosts"]
    assert set(hosts) == {DEBIAN, UBUNTU}
    real = json.loads((ROOT / "tests" / "data" / "real-h200" / "facts.json").read_text())
    h200 = hosts[DEBIAN].get("gpuprov_gpus", hosts[DEBIAN])
    diff = differences(real, h200, (*EXCLUDED, *NOT_IN_CAPTURE, "kernel_module_version"))
    assert not diff, "mock over SSH vs real H200:\n" + "\n".join(diff)
    a100 = hosts[UBUNTU].get("gpuprov_gpus", hosts[UBUNTU])
    assert a100["count"] == 8 and a100["nvswitch_present"] is True


# -- 2. the main job ----------------------------------------------------------------------------------------


def test_main_job(lab: dict[str, Any]) -> None:
    path, env, cwd = str(lab["path"]), lab["env"], lab["cwd"]
    fresh = gpuprov("check", path, "--json", str(cwd / "fresh.json"), env=env, cwd=cwd)
    assert fresh.returncode == 1, fresh.stdout + fresh.stderr
    assert all(h["changed"] > 0 for h in summary(cwd / "fresh.json").values())

    first = gpuprov("apply", path, "--json", str(cwd / "first.json"), env=env, cwd=cwd)
    assert first.returncode == 0, first.stdout + first.stderr
    hosts = summary(cwd / "first.json")
    assert len(hosts) == 2 and all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values())

    second = gpuprov("apply", path, "--json", str(cwd / "second.json"), env=env, cwd=cwd)
    assert second.returncode == 0, second.stdout + second.stderr
    assert {name: h["changed"] for name, h in summary(cwd / "second.json").items()} == dict.fromkeys(hosts, 0)

    in_sync = gpuprov("check", path, "--json", str(cwd / "clean.json"), env=env, cwd=cwd)  # read by the drift test
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr

    # the simulated hardware follows what was installed: NVML reports the driver package's version
    for host in _status(lab):
        installed = {v.split("-")[0] for n, (v, _) in driver_packages(host["container"]).items()
                     if n.startswith("libnvidia-compute-")}
        reported = ssh(lab["fleet"], host["name"], "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        assert set(reported.stdout.split()) == installed and len(installed) == 1, (host["name"], reported.stdout)

    for host in _status(lab):
        _assert_stack(lab, host["container"], host["name"])

    # verify and doctor tell the same truth about the converged hosts: ready, nothing to fix
    verified = gpuprov("verify", path, "--json", str(cwd / "verify.json"), env=env, cwd=cwd)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for name, report in json.loads((cwd / "verify.json").read_text())["hosts"].items():
        steps = {s["name"]: s for s in report["steps"]}
        assert {n for n, s in steps.items() if s["status"] == "pass"} >= {
            "gpus", "nvidia_smi", "driver_version", "persistence", "fabric_manager", "services", "p2p"}, (name, steps)
        assert steps["services"]["evidence"]["services"]["nvidia-persistenced.service"]["active"] == "active"
        # the fleet file's verify.skip: the simulated GPUs run no CUDA kernel and no DCGM diagnostic
        assert steps["cuda_sample"]["reason"] == steps["dcgm_diag"]["reason"] == (
            "not selected (fleet file: verify.skip; role variable verify_steps)")
        # the lab fleet asks for no MIG layout
        assert steps["mig"]["status"] == "skip" and "not managed" in steps["mig"]["reason"], steps["mig"]
        # Docker runs, but the lab has no registry to pull the CUDA smoke-test image from
        assert steps["container"]["status"] == "skip", steps["container"]
        assert "is not present and pulling is off (fleet file: verify.container_pull" in steps["container"]["reason"]
        running = {u for u, s in steps["services"]["evidence"]["services"].items() if s["active"] == "active"}
        assert running >= {"docker.service", "nvidia-dcgm.service", "dcgm-exporter.service"}, (name, running)
    doctor = gpuprov("doctor", path, "--json", "--window", "2", "--samples", "2", env=env, cwd=cwd)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def _assert_stack(lab: dict[str, Any], container: str, name: str) -> None:
    """The stack on one converged host, as the lab fleet file asks for it: CUDA 12.8 with cuDNN 9.10.2 and NCCL
    2.26.2 built for it, each held, nvcc answering as 12.8; the container toolkit and DCGM held at their versions,
    Docker with the nvidia runtime, dcgm-exporter serving the host's GPUs."""
    packages = installed_packages(container, ("cuda-toolkit-", "libcudnn", "libnccl"))
    versions = {package: version for package, (version, _) in packages.items()}
    assert versions.get("cuda-toolkit-12-8", "").startswith("12.8."), (name, versions)
    assert versions.get("libcudnn9-cuda-12", "").startswith("9.10.2."), (name, versions)
    assert versions.get("libnccl2", "").startswith("2.26.2-1+cuda12.8"), (name, versions)
    # what each role installs by name is held (a dependency such as cuda-toolkit-12-8-config-common is not)
    assert all(packages[package][1] for package in ("cuda-toolkit-12-8", "libcudnn9-cuda-12", "libnccl2")), \
        (name, packages)
    nvcc = ssh(lab["fleet"], name, "/usr/local/cuda-12.8/bin/nvcc --version")
    assert "release 12.8" in nvcc.stdout, nvcc.stdout
    # the rest of the stack: Docker with the nvidia runtime registered by the toolkit, DCGM and its exporter
    # serving the simulated GPUs' readings
    stack = installed_packages(container, ("nvidia-container-toolkit", "datacenter-gpu-manager"))
    assert stack.get("nvidia-container-toolkit", ("", False)) == ("1.17.8-1", True), (name, stack)
    assert stack.get("datacenter-gpu-manager", ("", False)) == ("1:3.3.5", True), (name, stack)
    runtimes = subprocess.run(["docker", "exec", container, "docker", "info", "--format", "{{json .Runtimes}}"],
                              capture_output=True, text=True, check=True).stdout
    assert json.loads(runtimes)["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime", runtimes
    metrics = subprocess.run(["docker", "exec", container, "python3", "-c", "import urllib.request; print(urllib"
                              ".request.urlopen('http://127.0.0.1:9400/metrics', timeout=30).read().decode())"],
                             capture_output=True, text=True, check=True).stdout
    assert f'Hostname="{name}"' in metrics and "DCGM_FI_DEV_GPU_TEMP{" in metrics, metrics[-2000:]
    # one series per GPU the host has (eight A100s on the a100x8 host, not a fixed pair)
    listed = ssh(lab["fleet"], name, "nvidia-smi -L").stdout.count("GPU ")
    temps = [line for line in metrics.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == listed > 0, (name, listed, temps)


# -- 3. day-2 cases on the converged lab --------------------------------------------------------------------


def test_a_stopped_service_fails_verify_and_doctor_alike(lab: dict[str, Any]) -> None:
    """The persistence daemon stopped by hand while the mock GPUs keep persistence mode on: verify's services step
    fails naming the unit, doctor's service_stopped says the same; started again, both are clean."""
    path, env, cwd = str(lab["path"]), lab["env"], lab["cwd"]
    victim = _status(lab)[0]
    unit = "nvidia-persistenced.service"
    subprocess.run(["docker", "exec", victim["container"], "systemctl", "stop", unit], check=True,
                   capture_output=True)
    try:
        verified = gpuprov("verify", path, "--limit", victim["name"], "--json", str(cwd / "stopped.json"), env=env,
                           cwd=cwd)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        steps = {s["name"]: s for s in json.loads((cwd / "stopped.json").read_text())["hosts"][victim["name"]]["steps"]}
        assert [n for n, s in steps.items() if s["status"] == "fail"] == ["services"], steps
        assert f"{unit} is enabled but inactive" in steps["services"]["reason"]
        doctor = gpuprov("doctor", path, "--limit", victim["name"], "--json", "--window", "1", "--samples", "1",
                         env=env, cwd=cwd)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        diagnoses = json.loads(doctor.stdout)["hosts"][victim["name"]]["diagnoses"]
        assert [(d["id"], d["subject"]) for d in diagnoses if d["severity"] == "fail"] == [("service_stopped", unit)]
    finally:
        subprocess.run(["docker", "exec", victim["container"], "systemctl", "start", unit], check=True,
                       capture_output=True)
    again = gpuprov("doctor", path, "--limit", victim["name"], "--window", "1", "--samples", "1", env=env, cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr


def test_drift_after_a_hand_change_and_none_after_reapply(lab: dict[str, Any]) -> None:
    """``check --json`` names the component a hand change broke, and nothing after a re-apply."""
    path, env, cwd = str(lab["path"]), lab["env"], lab["cwd"]
    report = drift(cwd / "clean.json")  # test_main_job's last check of the converged site
    assert report["drifted"] == {} and report["failed"] == {}, report
    assert len(report["hosts"]) == 2
    # both profiles are NVSwitch systems (the real H200 pair's capture and the HGX A100): each runs Fabric Manager
    # at its driver's version (in sync above)
    assert all(h["fabric_manager"]["installed"] for h in report["hosts"].values()), report["hosts"]

    victim = _status(lab)[0]
    driver = report["hosts"][victim["name"]]["driver"]
    package = next(p for p in driver["installed"]["packages"] if p.startswith("nvidia-driver-"))
    removed = subprocess.run(["docker", "exec", victim["container"], "dpkg", "--remove", "--force-depends",
                              "--force-hold", package], capture_output=True, text=True, check=False)
    assert removed.returncode == 0, removed.stdout + removed.stderr

    # the drift probe reads every component of every host whatever roles the check runs; the role that owns the
    # package is enough for the run's part (the whole site was checked clean above)
    drifted = gpuprov("check", path, "--role", "nvidia_driver", "--json", str(cwd / "drifted.json"), env=env, cwd=cwd)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    report = drift(cwd / "drifted.json")
    assert report["drifted"] == {victim["name"]: ["driver"]}, report["drifted"]
    assert f"{package} is not installed" in report["hosts"][victim["name"]]["driver"]["note"]

    # the role that owns the package repairs it (the whole site converged in test_main_job)
    repaired = gpuprov("apply", path, "--role", "nvidia_driver", "--json", str(cwd / "repaired.json"),
                       env=env, cwd=cwd)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert summary(cwd / "repaired.json")[victim["name"]]["changed"] > 0
    after = gpuprov("check", path, "--role", "nvidia_driver", "--json", str(cwd / "after.json"), env=env, cwd=cwd)
    assert after.returncode == 0, after.stdout + after.stderr
    assert drift(cwd / "after.json")["drifted"] == {}


def test_stopped_host(lab: dict[str, Any]) -> None:
    """A stopped host: ``lab status`` exits 3 and says so; apply finishes the other host and exits 3 with the
    command that retries the one left; ``lab up`` brings it back with the same name and port."""
    path, env, cwd = str(lab["path"]), lab["env"], lab["cwd"]
    ok = gpuprov("lab", "status", env=env, cwd=cwd)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    victim = _status(lab)[-1]
    subprocess.run(["docker", "stop", "-t", "1", victim["container"]], check=True, capture_output=True)
    try:
        down = gpuprov("lab", "status", env=env, cwd=cwd)
        assert down.returncode == 3, down.stdout + down.stderr
        assert "exited" in down.stdout
        # one role is enough to meet the stopped host: exit 3 and the retry command are the run's, not a role's
        run = gpuprov("apply", path, "--role", "nouveau", "--json", str(cwd / "partial.json"), env=env, cwd=cwd)
        assert run.returncode == 3, run.stdout + run.stderr
        hosts = summary(cwd / "partial.json")
        assert hosts[victim["name"]]["unreachable"] == 1
        others = [h for name, h in hosts.items() if name != victim["name"]]
        assert others and all(h["failed"] == 0 and h["unreachable"] == 0 for h in others)
        assert f"gpuprov apply {path} --role nouveau --json {cwd / 'partial.json'} --limit {victim['name']}" \
            in run.stdout
    finally:
        up = gpuprov("lab", "up", "--hosts", "2", "--profile", PROFILES, env=env, cwd=cwd)
        assert up.returncode == 0, up.stdout + up.stderr
    assert yaml.safe_load(lab["path"].read_text())["hosts"] == lab["fleet"]["hosts"]  # same hosts, same ports
    assert gpuprov("lab", "status", env=env, cwd=cwd).returncode == 0


def test_no_secret_in_run_records(lab: dict[str, Any]) -> None:
    """A become password given as {env: NAME} reaches Ansible through a lookup, never a file or a log."""
    env, cwd = lab["env"], lab["cwd"]
    secret = "s3cr3t-Pa55-" + os.urandom(6).hex()
    text = lab["path"].read_text()
    assert "ssh:" in text
    secret_fleet = cwd / "lab-secret.yml"
    secret_fleet.write_text(text.replace("ssh:\n", "ssh:\n  become_password: {env: GPUPROV_TEST_BECOME}\n", 1))
    # every task of every role becomes root with it: one role's run shows whether it leaks
    run = gpuprov("apply", str(secret_fleet), "--role", "nouveau", "-v", env=dict(env, GPUPROV_TEST_BECOME=secret),
                  cwd=cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    assert secret not in run.stdout + run.stderr
    state = Path(env["GPUPROV_STATE_DIR"])
    leaks = [p for p in state.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == []


def test_branch_change_rolls_out_host_by_host_with_a_health_gate(lab: dict[str, Any]) -> None:
    """``driver.branch: "550"`` (the lab's ``auto`` is 580 on Debian 12 and the 24.04 stand-in): ``apply`` stops
    with the plan until the change is confirmed. ``gpuprov upgrade --serial 1`` confirms it: a process that holds
    the first host's GPUs and ignores SIGTERM stops the rollout there before anything changed (its services
    started again), the second host is left untouched and the resume command is printed; the resume command with
    ``--kill-holders`` moves both hosts, one after the other, to 550 with the whole driver set (Fabric Manager
    included) held at that version, each passing the verify ladder; a re-run of the role changes nothing."""
    env, cwd, fleet = lab["env"], lab["cwd"], lab["fleet"]
    hosts = _status(lab)
    first, second = (h["name"] for h in hosts)
    before = {h["name"]: driver_packages(h["container"]) for h in hosts}
    assert all(pkgs and not any(v.startswith("550.") for v, _ in pkgs.values()) for pkgs in before.values()), before

    document = yaml.safe_load(lab["path"].read_text())
    document["settings"]["driver"] = dict(document["settings"].get("driver") or {}, branch="550")
    moved_fleet = cwd / "lab-550.yml"
    moved_fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    refused = gpuprov("apply", str(moved_fleet), "--role", "nvidia_driver", env=env, cwd=cwd)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "allow_branch_change" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert {h["name"]: driver_packages(h["container"]) for h in hosts} == before

    # a holder the GPU services do not own, that SIGTERM does not end (a device file of the lab's own)
    # setsid --fork returns at once: nothing keeps the SSH session's output open; 3599 s, as the stand-in daemons
    # sleep 3600
    ssh(fleet, first, "sudo touch /dev/nvidia-upgrade-test && sudo setsid --fork sh -c "
                      "'trap \"\" TERM; exec 3</dev/nvidia-upgrade-test; sleep 3599' </dev/null >/dev/null 2>&1")
    stopped = gpuprov("upgrade", str(moved_fleet), "--serial", "1", env=env, cwd=cwd)
    out = stopped.stdout + stopped.stderr
    assert stopped.returncode == 3, out
    assert "hold the GPU device files" in out and "/dev/nvidia-upgrade-test" in out, out
    assert f"left untouched ({second})" in out, out
    resume = out.split("resume with:", 1)[1].split()
    assert resume[:3] == ["gpuprov", "upgrade", str(moved_fleet)] and resume[-2:] == ["--limit", f"{first},{second}"]
    assert {h["name"]: driver_packages(h["container"]) for h in hosts} == before
    assert ssh(fleet, first, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"

    moved = gpuprov(*resume[1:], "--kill-holders", "--json", str(cwd / "moved.json"), env=env, cwd=cwd)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert ssh(fleet, first, "pgrep -f 'slee[p] 3599'", check=False).returncode == 1  # the holder was ended
    for host in hosts:
        packages = driver_packages(host["container"])
        assert any(name.startswith("nvidia-driver-550") for name in packages), packages
        assert any(name.startswith("nvidia-fabricmanager-550") for name in packages), packages
        coupled = {name: value for name, value in packages.items()
                   if name.startswith(("nvidia-driver-", "nvidia-dkms-", "libnvidia-compute-",
                                       "nvidia-fabricmanager-", "nvidia-utils-"))}
        assert coupled and all(v.startswith("550.") and held for v, held in coupled.values()), coupled
    report = summary(cwd / "moved.json")
    assert set(report) == {first, second} and all(not h["failed"] for h in report.values()), report

    again = gpuprov("apply", str(moved_fleet), "--role", "nvidia_driver", "--json", str(cwd / "again.json"),
                    env=env, cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {name: h["changed"] for name, h in summary(cwd / "again.json").items()} == {h["name"]: 0 for h in hosts}


# -- 4. fault profiles, then down ---------------------------------------------------------------------------


def test_fault_profiles_show_through_nvidia_smi_and_facts(lab: dict[str, Any]) -> None:
    """``lab up`` with other profiles swaps the hardware of the running hosts: a lost GPU (Xid 79) and a driver
    that finds no devices, as nvidia-smi and the facts module report them."""
    env, cwd, fleet = lab["env"], lab["cwd"], lab["fleet"]
    up = gpuprov("lab", "up", "--hosts", "2", "--profile", "xid79,no-devices", env=env, cwd=cwd)
    assert up.returncode == 0, up.stdout + up.stderr
    smi = ssh(fleet, DEBIAN, "nvidia-smi", check=False)
    assert smi.returncode == 15 and "GPU is lost" in smi.stdout + smi.stderr
    smi = ssh(fleet, UBUNTU, "nvidia-smi", check=False)
    assert smi.returncode == 6 and "No devices were found" in smi.stdout + smi.stderr
    proc = gpuprov("facts", str(lab["path"]), "--json", env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts: dict[str, Any] = json.loads(proc.stdout)["hosts"]
    by_host = {name: facts.get("gpuprov_gpus", facts) for name, facts in hosts.items()}
    xid = by_host[DEBIAN]
    assert xid["available"] is True and xid["lost_gpus"]
    assert any(g["lost"] and g["error_name"] == "NVML_ERROR_GPU_IS_LOST" for g in xid["gpus"])
    nodev = by_host[UBUNTU]
    assert nodev["available"] is True and nodev["count"] == 0


def test_down_removes_the_lab(lab: dict[str, Any]) -> None:
    env, cwd = lab["env"], lab["cwd"]
    gone = gpuprov("lab", "down", env=env, cwd=cwd)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    names = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=org.gpuprov.lab.name={LAB_NAME}", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert names == []
    assert gpuprov("lab", "status", env=env, cwd=cwd).returncode == 3
