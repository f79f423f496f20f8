"""Lab hosts carry their GPU "hardware": the mock NVML profile plus Debian's real nvidia-smi, reached over
SSH like a real server, and `gpuprov facts FILE` reads it through the nvml_facts module."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nvml_fake import fixture_dir
from test_facts_parity import EXCLUDED, differences

pytestmark = [pytest.mark.lab]

GPUPROV = str(Path(sys.executable).parent / "gpuprov")
ROOT = Path(__file__).resolve().parents[2]
QUERY = ("index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,pcie.link.gen.max,"
         "pcie.link.width.current")


def _captured_rows() -> list[dict[str, str]]:
    """The --query-gpu rows of the real H200 capture (probe.txt), as column -> value."""
    lines = (fixture_dir() / "probe.txt").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("index, name, uuid"))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line[:1].isdigit():
            break
        block.append(line)
    return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(block, skipinitialspace=True)]


def _rows(text: str) -> list[dict[str, str]]:
    return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(io.StringIO(text),
                                                                                      skipinitialspace=True)]


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUPROV, *args], env=env, capture_output=True, text=True, check=False, timeout=900)


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[dict[str, str]]:
    work = tmp_path_factory.mktemp("labhw")
    env = dict(os.environ, GPUPROV_STATE_DIR=str(work / "state"), NO_COLOR="1", COLUMNS="200")
    env["FLEET"] = str(work / "lab.yml")
    run("lab", "down", env=env)
    yield env
    run("lab", "down", "--purge", env=env)


def _ssh(env: dict[str, str], port: int, command: str) -> subprocess.CompletedProcess[str]:
    lab = Path(env["GPUPROV_STATE_DIR"]) / "lab"
    argv = ["ssh", "-i", str(lab / "id_ed25519"), "-o", f"UserKnownHostsFile={lab / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(port), "admin@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _ports(env: dict[str, str]) -> dict[str, int]:
    status = json.loads(run("lab", "status", "--json", env=env).stdout)
    return {h["container"]: int(h["port"]) for h in status["hosts"]}


def test_h200x2_hosts_answer_like_the_real_capture(lab_env: dict[str, str]) -> None:
    up = run("lab", "up", "--hosts", "2", "--profile", "h200x2", "--fleet-file", lab_env["FLEET"], env=lab_env)
    assert up.returncode == 0, up.stdout + up.stderr
    expected = _captured_rows()
    for port in _ports(lab_env).values():
        for flags in ("", "-L", "-q", "-q -x"):
            proc = _ssh(lab_env, port, f"nvidia-smi {flags}")
            assert proc.returncode == 0, (flags, proc.stdout, proc.stderr)
        xml = ET.fromstring(_ssh(lab_env, port, "nvidia-smi -q -x").stdout)
        assert xml.findtext("driver_version") == "580.159.04"
        assert xml.findtext("attached_gpus") == "2"
        got = _rows(_ssh(lab_env, port, f"nvidia-smi --query-gpu={QUERY} --format=csv").stdout)
        assert len(got) == len(expected) == 2
        for mine, real in zip(got, expected, strict=True):
            assert mine == {k: real[k] for k in mine}


def test_fleet_facts_through_the_module_match_the_real_host(lab_env: dict[str, str]) -> None:
    proc = run("facts", lab_env["FLEET"], "--json", env=lab_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts: dict[str, Any] = json.loads(proc.stdout)["hosts"]
    real = json.loads((ROOT / "tests" / "data" / "real-h200" / "facts.json").read_text())
    assert len(hosts) == 2
    for name, facts in hosts.items():
        gpus = facts.get("gpuprov_gpus", facts)
        diff = differences(real, gpus, (*EXCLUDED, "kernel_module_version"))
        assert not diff, f"{name}: mock over SSH vs real H200:\n" + "\n".join(diff)


def test_fault_profiles_show_through_nvidia_smi_and_facts(lab_env: dict[str, str]) -> None:
    up = run("lab", "up", "--hosts", "2", "--os", "debian12", "--profile", "xid79,no-devices",
             "--fleet-file", lab_env["FLEET"], env=lab_env)
    assert up.returncode == 0, up.stdout + up.stderr
    ports = _ports(lab_env)
    lost, empty = ports["gpuprov-lab-1"], ports["gpuprov-lab-2"]
    smi = _ssh(lab_env, lost, "nvidia-smi")
    assert smi.returncode == 15 and "GPU is lost" in smi.stdout + smi.stderr
    smi = _ssh(lab_env, empty, "nvidia-smi")
    assert smi.returncode == 6 and "No devices were found" in smi.stdout + smi.stderr
    proc = run("facts", lab_env["FLEET"], "--json", env=lab_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts: dict[str, Any] = json.loads(proc.stdout)["hosts"]
    by_profile = {name: facts.get("gpuprov_gpus", facts) for name, facts in hosts.items()}
    xid = by_profile["lab-debian12-1"]
    assert xid["available"] is True and xid["lost_gpus"]
    assert any(g["lost"] and g["error_name"] == "NVML_ERROR_GPU_IS_LOST" for g in xid["gpus"])
    nodev = by_profile["lab-debian12-2"]
    assert nodev["available"] is True and nodev["count"] == 0
