"""gpu_holders: the /proc scan for processes holding GPU device files, ending them, and the Docker containers that
use the GPUs (a real child process holds a stand-in device file under a temporary prefix)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuprov.gpu.plugins.module_utils import gpu_holders
from ansible_collections.gpuprov.gpu.plugins.modules.gpu_holders import uses_gpus

HOLD = "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(600)"
# ignores SIGTERM: only SIGKILL ends it
STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); f = open(sys.argv[1]); "
            "print('ready', flush=True); time.sleep(600)")


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "nvidia0"
    path.write_text("")
    return path


def _start(code: str, path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def holder(device: Path) -> Iterator[subprocess.Popen[str]]:
    proc = _start(HOLD, device)
    yield proc
    proc.kill()
    proc.wait()


def test_a_process_holding_a_device_file_is_listed_with_its_command_user_and_file(
        device: Path, holder: subprocess.Popen[str]) -> None:
    found = gpu_holders.device_holders(prefix=str(device.parent / "nvidia"))
    assert [h["pid"] for h in found] == [holder.pid]
    entry = found[0]
    assert entry["devices"] == [str(device)]
    assert entry["command"].startswith("python")
    assert HOLD[:20] in entry["cmdline"]
    assert entry["user"] not in ("", "?")
    assert f"pid {holder.pid} (" in gpu_holders.describe(entry)


def test_excluded_pids_and_other_files_are_not_listed(device: Path, holder: subprocess.Popen[str]) -> None:
    assert gpu_holders.device_holders(prefix=str(device.parent / "nvidia"), exclude={holder.pid}) == []
    assert gpu_holders.device_holders(prefix=str(device.parent / "nvidiactl")) == []


def test_end_processes_terminates_then_kills_what_ignores_sigterm(device: Path) -> None:
    polite, stubborn = _start(HOLD, device), _start(STUBBORN, device)
    try:
        ended, remaining = gpu_holders.end_processes([polite.pid, stubborn.pid], timeout_s=1.0)
        assert (ended, remaining) == (sorted([polite.pid, stubborn.pid]), [])
        assert polite.wait(5) == -15 and stubborn.wait(5) == -9
        assert gpu_holders.device_holders(prefix=str(device.parent / "nvidia")) == []
    finally:
        for proc in (polite, stubborn):
            proc.kill()
            proc.wait()


def test_end_processes_never_signals_pid_1() -> None:
    assert gpu_holders.end_processes([1], timeout_s=0.1) == ([], [])


def test_ancestors_run_from_the_process_up_to_init() -> None:
    chain = gpu_holders.ancestors(os.getpid())
    assert chain[:2] == [os.getpid(), os.getppid()]
    assert len(chain) == len(set(chain))


def test_an_unreadable_proc_root_lists_nothing() -> None:
    assert gpu_holders.device_holders(proc_root="/nonexistent") == []


@pytest.mark.parametrize(("config", "expected"), [
    ({"HostConfig": {"Runtime": "nvidia"}}, True),
    ({"HostConfig": {"Runtime": "runc", "DeviceRequests": [{"Driver": "", "Count": -1,
                                                            "Capabilities": [["gpu"]]}]}}, True),
    ({"HostConfig": {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]}}, True),
    ({"HostConfig": {"Devices": [{"PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0"},
                                 {"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl"}]}}, True),
    ({"HostConfig": {"Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse"}]}}, False),
    ({"HostConfig": {"Runtime": "runc", "DeviceRequests": None}}, False),
    ({}, False),
])
def test_containers_using_the_gpus(config: dict[str, Any], expected: bool) -> None:
    assert uses_gpus(config) is expected


def test_loaded_nvidia_modules_come_from_proc_modules(tmp_path: Path) -> None:
    (tmp_path / "modules").write_text(
        "nvidia_uvm 1916928 0 - Live 0x0000000000000000 (OE)\n"
        "nvidia_drm 135168 2 - Live 0x0000000000000000 (OE)\n"
        "nvme 61440 3 - Live 0x0000000000000000\n"
        "nvidia 104091648 2 nvidia_uvm,nvidia_drm, Live 0x0000000000000000 (OE)\n")
    assert gpu_holders.loaded_modules(str(tmp_path)) == ["nvidia_uvm", "nvidia_drm", "nvidia"]
    assert gpu_holders.loaded_modules(str(tmp_path / "absent")) == []


def test_the_mig_engine_finds_what_holds_one_gpu_by_its_device_node(device: Path,
                                                                      holder: subprocess.Popen[str]) -> None:
    """mig_layout's check before a MIG mode change: the process with GPU 0's node open, matched by device and
    inode through the same /proc scan."""
    from ansible_collections.gpuprov.gpu.plugins.module_utils.mig import holders

    name = gpu_holders.command_name("/proc", str(holder.pid))
    assert name.startswith("python") and holders(0, dev_dir=str(device.parent)) == [f"pid {holder.pid} ({name})"]
    assert holders(1, dev_dir=str(device.parent)) == []


def _fake_proc(root: Path, pid: int, files: dict[str, str], device: str = "/dev/nvidia0") -> None:
    """A ``<root>/<pid>`` folder as /proc has it: an fd link to ``device`` and the text files in ``files``."""
    (root / str(pid) / "fd").mkdir(parents=True)
    (root / str(pid) / "fd" / "3").symlink_to(device)
    for name, text in files.items():
        (root / str(pid) / name).write_text(text, encoding="utf-8")


def test_control_characters_in_a_holders_name_and_arguments_are_escaped(tmp_path: Path) -> None:
    # a process names itself (prctl PR_SET_NAME, argv): a terminal escape must not reach the report raw
    _fake_proc(tmp_path, 4242, {"comm": "\x1b[2Jevil\n", "cmdline": "run\0\x1b]0;title\x07\0", "status":
                                "Name:\tevil\nState:\tS (sleeping)\nUid:\t0\t0\t0\t0\n"})
    (entry,) = gpu_holders.device_holders(str(tmp_path))
    assert (entry["command"], entry["cmdline"]) == ("\\x1b[2Jevil", "run \\x1b]0;title\\x07")
    assert "\x1b" not in gpu_holders.describe(entry)


def test_a_holder_that_ends_while_it_is_read_is_not_listed(tmp_path: Path) -> None:
    # its fd links were read, then it exited: status is gone (or it is a zombie, which holds no file)
    _fake_proc(tmp_path, 10, {})
    _fake_proc(tmp_path, 11, {"comm": "zombie\n", "status": "Name:\tzombie\nState:\tZ (zombie)\nUid:\t0\t0\t0\t0\n"})
    _fake_proc(tmp_path, 12, {"comm": "live\n", "status": "Name:\tlive\nState:\tR (running)\nUid:\tx\n"})
    assert [(h["pid"], h["user"]) for h in gpu_holders.device_holders(str(tmp_path))] == [(12, "?")]


def test_ancestors_stop_at_a_garbled_stat(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (truncated", encoding="utf-8")
    assert gpu_holders.ancestors(7, str(tmp_path)) == [7]


def test_a_process_that_took_a_holders_pid_is_never_signalled(device: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the holder exited between the scan and the signals, and the kernel gave its pid to this process: the start
    # time recorded for the pid is not this process's
    other = _start(HOLD, device)
    try:
        monkeypatch.setattr(gpu_holders, "_started", lambda _pid: "1")
        assert gpu_holders.end_processes([other.pid], timeout_s=0.2) == ([other.pid], [])
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


# a launcher that starts the holder again whenever it exits (as a unit with Restart=always would) and prints the
# pid of each holder once it holds the file
RESPAWN = ("import subprocess, sys\n"
           "while True:\n"
           "    child = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]], stdout=subprocess.PIPE)\n"
           "    child.stdout.readline(); print(child.pid, flush=True); child.wait()\n")


def test_a_holder_started_again_meanwhile_is_left_after_the_end(device: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", RESPAWN, str(device), HOLD], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    pids = [int(launcher.stdout.readline())]
    end_processes = gpu_holders.end_processes

    def end_then_respawned(*args: Any, **kwargs: Any) -> tuple[list[int], list[int]]:
        done = end_processes(*args, **kwargs)
        pids.append(int(launcher.stdout.readline()))  # the launcher's next holder holds the file
        return done

    monkeypatch.setattr(gpu_holders, "end_processes", end_then_respawned)
    try:
        ended, left = gpu_holders.end_holders(pids[:1], prefix=str(device.parent / "nvidia"), timeout_s=2.0)
        assert ended == pids[:1]
        assert [h["pid"] for h in left] == pids[1:] and pids[1] != pids[0]
    finally:
        launcher.kill()
        launcher.wait()
        for pid in pids:  # the holders the launcher started (the first one too, where ending it failed)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
