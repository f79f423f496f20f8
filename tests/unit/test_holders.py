"""Leftover GPU holders: real processes holding a stand-in device file (``--devices`` points doctor at it) whose
job has ended are listed by ``gpuprov doctor`` and ended by ``--fix --yes``; a known service's process is not."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import doctor as rules
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_workload import known_service

from gpuprov import doctor, holders
from gpuprov.cli.__main__ import main
from gpuprov.proctree import is_alive

#: Opens the device file argv[1], optionally renames itself (argv[3], as the kernel's comm), writes its pid to
#: argv[2] once the file is open, and waits.
HOLD = ("import os, sys, time\n"
        "if len(sys.argv) > 3: open('/proc/self/comm', 'w').write(sys.argv[3])\n"
        "f = open(sys.argv[1])\n"
        "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
        "time.sleep(600)\n")
#: Starts HOLD in the background and exits: the holder's process group leader (its job) is gone, as for the
#: workers of a killed training run.
LAUNCH = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1]] + sys.argv[2:])"


def _start_orphan(tmp_path: Path, device: Path, name: str, comm: str | None = None) -> psutil.Process:
    ready = tmp_path / f"{name}.pid"
    argv = [sys.executable, "-c", LAUNCH, HOLD, str(device), str(ready)] + ([comm] if comm else [])
    launcher = subprocess.Popen(argv, start_new_session=True)
    launcher.wait(timeout=60)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, f"{name} did not open {device}"
        time.sleep(0.05)
    return psutil.Process(int(ready.read_text()))


def _ended(proc: psutil.Process) -> bool:
    return not is_alive(proc)


@pytest.fixture
def device(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "nvidia-standin0"
    path.write_text("")
    yield path


@pytest.fixture
def orphans(tmp_path: Path, device: Path) -> Iterator[dict[str, psutil.Process]]:
    procs = {"leftover": _start_orphan(tmp_path, device, "leftover"),
             "service": _start_orphan(tmp_path, device, "service", comm="nv-hostengine")}
    yield procs
    for proc in procs.values():
        if not _ended(proc):
            proc.kill()


def _local_facts_with_real_holders(monkeypatch: pytest.MonkeyPatch, seen: list[str]) -> None:
    """doctor's local facts reduced to the holders (read for real, from the glob the CLI passes) and an NVML
    process list naming none of them; the rest of the machine is not under test here."""
    def fake(*_args: Any, device_glob: str = holders.DEVICE_GLOB, **_kw: Any) -> dict[str, Any]:
        seen.append(device_glob)
        return {"holders": holders.collect(device_glob=device_glob), "nvml_pids": []}

    monkeypatch.setattr(doctor, "local_facts", fake)


def test_leftover_is_listed_then_ended_by_fix_yes(device: Path, orphans: dict[str, psutil.Process],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    glob = str(device.parent / "nvidia-standin*")
    seen: list[str] = []
    _local_facts_with_real_holders(monkeypatch, seen)
    leftover, service = orphans["leftover"], orphans["service"]

    assert main(["doctor", "--devices", glob]) == 1
    out = capsys.readouterr().out
    assert f"leftover_gpu_process pid {leftover.pid}" in out
    assert f"pid {service.pid}" not in out  # nv-hostengine holds the GPU by design
    assert seen == [glob] and not _ended(leftover)

    assert main(["doctor", "--fix", "--yes", "--devices", glob]) == 0
    out = capsys.readouterr().out
    assert f"leftover GPU process {leftover.pid} (user " in out and str(device) in out
    assert f"fixed leftover_gpu_process: ran `end pid {leftover.pid} (SIGTERM, then SIGKILL)`: ok" in out
    assert _ended(leftover) and not _ended(service)
    assert "no problem found" in out


def test_fix_without_yes_and_without_a_terminal_ends_nothing(device: Path, orphans: dict[str, psutil.Process],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _local_facts_with_real_holders(monkeypatch, [])
    with Path("/dev/null").open() as null:
        monkeypatch.setattr(sys, "stdin", null)
        assert main(["doctor", "--fix", "--devices", str(device)]) == 1
    assert "not ended: confirm on a terminal, or pass --yes" in capsys.readouterr().out
    assert not _ended(orphans["leftover"])


def test_collect_describes_a_live_holder(device: Path, orphans: dict[str, psutil.Process]) -> None:
    found = {h["pid"]: h for h in holders.collect(device_glob=str(device), gpu_memory={})}
    leftover = found[orphans["leftover"].pid]
    assert leftover["devices"] == [str(device)] and leftover["job_ended"] is True and leftover["allowed"] is None
    assert leftover["user"] == psutil.Process().username() and HOLD.splitlines()[0][:20] in leftover["cmdline"]
    assert found[orphans["service"].pid]["allowed"] == "NVIDIA daemon nv-hostengine"
    assert holders.leftovers(list(found.values())) == [leftover]


def test_own_process_tree_is_never_a_leftover(device: Path) -> None:
    with device.open():
        (me,) = holders.collect(device_glob=str(device))
    assert me["allowed"] and holders.leftovers([me]) == []
    assert holders.end([dict(me, job_ended=True, allowed=None)], grace_s=0) == [
        {"pid": me["pid"], "command": me["cmdline"], "ended": False}]


def test_rule_names_memory_and_skips_services() -> None:
    holder = {"pid": 4242, "command": "python3", "user": "ml", "cmdline": "python3 train.py",
              "devices": ["/dev/nvidia0"], "gpu_memory_bytes": 3 * 2**30, "pgid": 4200, "job_ended": True}
    (found,) = rules.diagnose({"holders": [holder, dict(holder, pid=7, allowed="service dcgm-exporter.service")],
                               "nvml_pids": [4242]})
    assert found["id"] == "leftover_gpu_process" and found["severity"] == "warn"
    assert "process 4242 (user ml: python3 train.py) holds /dev/nvidia0 and 3072 MiB of GPU memory" in (
        found["evidence"])
    assert known_service("python3", "0::/system.slice/gpuprov-worker@0.service") == "service gpuprov-worker"
    assert known_service("python3", "0::/system.slice/docker-3f2a.scope") == "container (its runtime manages it)"
    assert known_service("python3", "0::/user.slice/user-1000.slice/session-4.scope") is None
