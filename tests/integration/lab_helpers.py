"""What the lab tests share: running gpuprov as a user does, SSH to a lab host as the fleet file says, and
reading package state inside a lab container (plain functions, no fixtures)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from nvml_fake import fixture_dir

GPUPROV = str(Path(sys.executable).parent / "gpuprov")


def gpuprov(*args: str, env: dict[str, str], cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    """``gpuprov ARGS`` in ``cwd`` with ``env``, output captured, never raising on its exit code."""
    return subprocess.run([GPUPROV, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=timeout)


def ssh(fleet: dict[str, Any], host: str, command: str, known_hosts: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on lab ``host`` as in the (parsed) fleet file, with strict host-key checking; with
    ``check`` a non-zero exit fails the test."""
    spec = fleet["hosts"][host]
    argv = [
        "ssh", "-F", "none", "-i", fleet["ssh"]["key"], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts or fleet['ssh']['known_hosts']}",
        "-p", str(spec["port"]), f"{fleet['ssh']['user']}@{spec['address']}", command,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if check:
        assert proc.returncode == 0, f"{host}: {command}: {proc.stderr}"
    return proc


def os_release(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {key: value.strip('"') for key, value in pairs}


def summary(path: Path) -> dict[str, dict[str, Any]]:
    """``hosts`` of a ``--json`` run summary."""
    hosts: dict[str, dict[str, Any]] = json.loads(path.read_text())["hosts"]
    return hosts


def drift(path: Path) -> dict[str, Any]:
    """``drift`` of a ``check --json`` summary."""
    report: dict[str, Any] = json.loads(path.read_text())["drift"]
    return report


def installed_packages(container: str, prefixes: tuple[str, ...]) -> dict[str, tuple[str, bool]]:
    """``{package: (version, held)}`` of the installed packages in ``container`` whose names start with one of
    ``prefixes`` (dpkg's own view)."""
    listed = subprocess.run(["docker", "exec", container, "dpkg-query", "-W", "-f",
                             "${Package} ${Version} ${db:Status-Abbrev}\n"],
                            capture_output=True, text=True, check=True).stdout
    holds = set(subprocess.run(["docker", "exec", container, "apt-mark", "showhold"],
                               capture_output=True, text=True, check=True).stdout.split())
    return {name: (version, name in holds) for name, version, status in
            (line.split(maxsplit=2) for line in listed.splitlines())
            if status[1:2] == "i" and name.startswith(prefixes)}  # "ii", or "hi" when held


def driver_packages(container: str) -> dict[str, tuple[str, bool]]:
    """:func:`installed_packages` of the NVIDIA driver set."""
    return installed_packages(container, ("nvidia-", "libnvidia-"))


def csv_rows(text: str) -> list[dict[str, str]]:
    """``nvidia-smi --format=csv`` output as column -> value per row."""
    return [{k.strip(): v.strip() for k, v in row.items()}
            for row in csv.DictReader(io.StringIO(text), skipinitialspace=True)]


def captured_rows() -> list[dict[str, str]]:
    """The --query-gpu rows of the real H200 capture (probe.txt), as column -> value."""
    lines = (fixture_dir() / "probe.txt").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("index, name, uuid"))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line[:1].isdigit():
            break
        block.append(line)
    return csv_rows("\n".join(block))
